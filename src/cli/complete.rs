//! Job names for the shell's completion (`redcron trigger <TAB>`): those of the schedule files,
//! and those the leader published in Redis when it answers quickly.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgMatches, CommandFactory, FromArgMatches};
use clap_complete::engine::{ArgValueCandidates, CompletionCandidate};

use super::config::Settings;
use super::{Cli, RedisArgs, block_on, default_schedules};

/// How long completion waits for Redis: a shell that hangs on Tab is worse than one that offers
/// only the names in the schedule files.
const REDIS_PATIENCE: Duration = Duration::from_secs(1);

/// The completer of every argument that names a job.
pub(super) fn job_names() -> ArgValueCandidates {
    ArgValueCandidates::new(candidates)
}

/// The job names to offer. The line being completed is read as the command would read it
/// (`--schedules`, `--redis`, `--namespace`, `--config`, their environment variables and the
/// configuration files), so that the names are those the command would find. Whatever cannot be
/// read offers no names: a completion never prints an error into the shell's line.
fn candidates() -> Vec<CompletionCandidate> {
    // The shell calls `redcron -- redcron trigger ni`: the words after `--` are the line.
    let line: Vec<OsString> = std::env::args_os()
        .skip_while(|word| word != "--")
        .skip(1)
        .collect();
    let settings = Settings::load(&line).unwrap_or_default();
    let Ok(matches) = settings
        .apply(Cli::command())
        .ignore_errors(true)
        .try_get_matches_from(&line)
    else {
        return Vec::new();
    };
    let leaf = innermost(&matches);
    let schedules = leaf
        .try_get_one::<PathBuf>("schedules")
        .ok()
        .flatten()
        .cloned()
        .or_else(|| {
            settings
                .get("schedules")
                .map(|setting| PathBuf::from(&setting.value))
        })
        .unwrap_or_else(default_schedules);
    let mut names: Vec<String> = crate::schedule::load_dir(&schedules)
        .map(|jobs| jobs.into_iter().map(|job| job.name).collect())
        .unwrap_or_default();
    // Only the commands that talk to Redis have its options (`next --job` reads the files).
    if leaf.try_contains_id("redis").is_ok()
        && let Ok(redis) = RedisArgs::from_arg_matches(leaf)
    {
        names.extend(published(&redis));
    }
    names.sort();
    names.dedup();
    names.into_iter().map(CompletionCandidate::new).collect()
}

/// The matches of the subcommand the line ends in.
fn innermost(matches: &ArgMatches) -> &ArgMatches {
    matches
        .subcommand()
        .map_or(matches, |(_, sub)| innermost(sub))
}

/// The names the leader published in Redis, or none if it does not answer within
/// [`REDIS_PATIENCE`].
fn published(redis: &RedisArgs) -> Vec<String> {
    block_on(async {
        let read = async {
            let store = redis.connect().await?;
            Ok(store.published_names().await?.0)
        };
        tokio::time::timeout(REDIS_PATIENCE, read)
            .await
            .unwrap_or_else(|_| Ok(Vec::new()))
    })
    .unwrap_or_default()
}
