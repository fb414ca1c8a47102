//! `redcron import-crontab`: turn a crontab, or every crontab of a directory, into schedule
//! files.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use clap::Args;

use super::times::machine_zone;
use super::{CliError, parse_zone};
use crate::engine::heartbeat::host_name;
use crate::schedule::crontab::{
    HostLocal, ImportOptions, Importer, JobNames, user_exists_here, user_not_program_here,
};
use crate::schedule::file::schedule_files;
use crate::schedule::{Reach, Selector};

#[derive(Debug, Args)]
pub(super) struct ImportArgs {
    /// The crontab to read; - (the default) reads standard input.
    #[arg(value_name = "FILE|-", default_value = "-")]
    input: String,
    /// Read the system format (/etc/crontab, /etc/cron.d/*), with a user field after the
    /// schedule.
    #[arg(long)]
    system: bool,
    /// Import every crontab of this directory (/etc/cron.d) in the system format, each to
    /// <NAME>.toml in the -o directory; files cron skips (names with characters other than
    /// letters, digits, '_' and '-') are skipped.
    #[arg(long, value_name = "DIR", conflicts_with = "input")]
    dir: Option<PathBuf>,
    /// The time zone the crontab's machine runs in, for lines before any CRON_TZ [default: this
    /// machine's zone].
    #[arg(long, value_name = "ZONE")]
    tz: Option<String>,
    /// Write the schedule file here instead of to standard output (its directory created if
    /// missing); with --dir, the directory to write the schedule files in (created if missing).
    #[arg(short, long, value_name = "FILE|DIR")]
    output: Option<PathBuf>,
    /// Start every job name with NAME- (names are unique across the files written and the
    /// schedule files already beside them either way).
    #[arg(long, value_name = "NAME")]
    prefix: Option<String>,
    /// Exit 0 even when lines need attention; they are reported and marked in the files
    /// either way.
    #[arg(long)]
    keep_going: bool,
    /// Run the jobs only on replicas with this label: writes where = [...] into every job
    /// (--where host=$(hostname) keeps a machine's crontab on that machine). Repeatable.
    #[arg(long = "where", value_name = "KEY=VALUE")]
    where_terms: Vec<String>,
    /// Run each fire on every replica (that matches --where), as each machine's crontab ran
    /// its lines: writes on = "every" into every job.
    #[arg(long)]
    every_replica: bool,
    /// With --dir, for the crontab NAME of the directory alone: add KEY=VALUE to its jobs'
    /// where. Repeatable.
    #[arg(long, value_name = "NAME=KEY=VALUE")]
    where_file: Vec<String>,
    /// With --dir, for the crontab NAME of the directory alone: run each fire of its jobs on
    /// every replica (that matches their where). Repeatable.
    #[arg(long, value_name = "NAME")]
    every_replica_file: Vec<String>,
}

/// Where the jobs of each crontab run: `--where` and `--every-replica` for all, the `-file`
/// options for one crontab of `--dir` each.
struct Placements {
    /// The terms of `--where`.
    terms: Vec<String>,
    /// `--every-replica`.
    every: bool,
    /// The terms of `--where-file`, by crontab name.
    file_terms: BTreeMap<String, Vec<String>>,
    /// The names of `--every-replica-file`.
    every_files: BTreeSet<String>,
}

impl Placements {
    /// Reads the options, each term checked as a job's `where` is.
    fn parse(args: &ImportArgs) -> Result<Self, CliError> {
        // Checked here: clap's `requires = "dir"` let these through without --dir, and the
        // message can say what to use instead.
        let per_file = [
            ("--where-file", args.where_file.is_empty()),
            ("--every-replica-file", args.every_replica_file.is_empty()),
        ];
        if let (None, Some((option, _))) = (&args.dir, per_file.iter().find(|(_, none)| !none)) {
            return Err(CliError::Argument(format!(
                "{option} names a crontab of --dir DIR; for a single crontab, use --where or \
                 --every-replica"
            )));
        }
        Selector::parse(&args.where_terms)
            .map_err(|error| CliError::Argument(format!("--where: {error}")))?;
        let mut file_terms: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for given in &args.where_file {
            let Some((name, term)) = given.split_once('=') else {
                return Err(CliError::Argument(format!(
                    "--where-file: \"{given}\" is not NAME=KEY=VALUE (nginx=host=web1, say)"
                )));
            };
            Selector::parse(&[term.to_owned()])
                .map_err(|error| CliError::Argument(format!("--where-file {name}: {error}")))?;
            file_terms
                .entry(name.to_owned())
                .or_default()
                .push(term.to_owned());
        }
        Ok(Self {
            terms: args.where_terms.clone(),
            every: args.every_replica,
            file_terms,
            every_files: args.every_replica_file.iter().cloned().collect(),
        })
    }

    /// The crontab names the `-file` options give that are not among `crontabs`: a typo would
    /// otherwise leave a file's jobs where they were not meant to run.
    fn check_names(&self, crontabs: &[Crontab], dir: &Path) -> Result<(), CliError> {
        let read: BTreeSet<&str> = crontabs.iter().filter_map(|c| c.name.as_deref()).collect();
        let unknown = self
            .file_terms
            .keys()
            .map(|name| ("--where-file", name))
            .chain(
                self.every_files
                    .iter()
                    .map(|name| ("--every-replica-file", name)),
            )
            .find(|(_, name)| !read.contains(name.as_str()));
        match unknown {
            Some((option, name)) => Err(CliError::Argument(format!(
                "{option} {name}: {} holds no crontab named \"{name}\" that cron reads",
                dir.display()
            ))),
            None => Ok(()),
        }
    }

    /// The `where` terms of the jobs of `crontab`, each with the option that gave it
    /// (`--where host=web1`, `--where-file nginx=host=web1`).
    fn given(&self, crontab: &Crontab) -> Vec<(String, &str)> {
        let own = crontab.name.as_ref();
        let file_terms = own
            .and_then(|name| Some((name, self.file_terms.get(name)?)))
            .into_iter()
            .flat_map(|(name, terms)| {
                terms
                    .iter()
                    .map(move |term| (format!("--where-file {name}={term}"), term.as_str()))
            });
        self.terms
            .iter()
            .map(|term| (format!("--where {term}"), term.as_str()))
            .chain(file_terms)
            .collect()
    }

    /// The `where` and `on` of the jobs of `crontab`.
    fn of(&self, crontab: &Crontab) -> (Selector, Reach) {
        let terms: Vec<String> = self
            .given(crontab)
            .into_iter()
            .map(|(_, term)| term.to_owned())
            .collect();
        let selector = Selector::parse(&terms).expect("every term was checked as it was read");
        let own = crontab.name.as_ref();
        let every = self.every || own.is_some_and(|name| self.every_files.contains(name));
        (selector, if every { Reach::Every } else { Reach::One })
    }

    /// Refuses a placement of the jobs of `crontab` that `check` and `run` would refuse in the
    /// file written, by the rules the schedule file's reader applies, naming the options that
    /// made it: an import that exits 0 must leave files that load.
    fn check_loads(&self, crontab: &Crontab) -> Result<(), CliError> {
        let (selector, on) = self.of(crontab);
        let given = self.given(crontab);
        // The options that gave the terms `wanted`, each once, as the user typed them.
        let options = |wanted: &dyn Fn(&str) -> bool| {
            let mut named: Vec<&str> = Vec::new();
            for (option, _) in given.iter().filter(|(_, term)| wanted(term)) {
                if !named.contains(&option.as_str()) {
                    named.push(option);
                }
            }
            named.join(" and ")
        };
        let jobs = match &crontab.name {
            Some(_) => format!("the jobs of {}", crontab.label),
            None => "the jobs".to_owned(),
        };
        if let (Some((first, second)), Some(why)) = (selector.conflict(), selector.impossible()) {
            let (first, second) = (first.to_string(), second.to_string());
            return Err(CliError::Argument(format!(
                "{}: check and run would refuse the where of {jobs}: {why}. A job's where terms \
                 must all hold; to run a crontab on two hosts, give them a label they share \
                 (--label role=web on both, then --where role=web), or import it once per host",
                options(&|term| term == first || term == second),
            )));
        }
        // An imported job names no queue: its runs wait in the one the reader gives such a job.
        if let Some(why) = selector.other_queue("default").filter(|_| on == Reach::One) {
            return Err(CliError::Argument(format!(
                "{}: check and run would refuse the where of {jobs}, which run once per fire and \
                 name no queue: {why} (a queue goes into the written file's [defaults], once \
                 imported without this term)",
                options(&|term| term.starts_with("queue=")),
            )));
        }
        Ok(())
    }
}

/// One crontab to import, and where its schedule file goes.
struct Crontab {
    /// Where it came from, for the schedule file's header.
    source: String,
    /// How messages about its lines name it: its path, or `<stdin>`.
    label: String,
    /// Its text, as cron reads it.
    text: String,
    /// The schedule file to write; `None` for standard output.
    destination: Option<PathBuf>,
    /// Its name in `--dir`, which the `-file` options give; `None` for a single crontab.
    name: Option<String>,
}

pub(super) fn execute(args: &ImportArgs, out: &mut impl Write) -> Result<(), CliError> {
    let zone = args.tz.as_deref().map(parse_zone).transpose()?;
    let placements = Placements::parse(args)?;
    let mut names = JobNames::new(args.prefix.as_deref()).map_err(CliError::Argument)?;
    let (crontabs, schedule_dir) = match (&args.dir, &args.output) {
        // Written into a subdirectory of a schedule directory (the guide's `-o
        // schedules/cron.d`), the files load with those beside them: their names must not
        // clash with any.
        (Some(dir), Some(output)) => {
            let schedule_dir = output
                .parent()
                .filter(|parent| holds_schedule_files(parent))
                .unwrap_or(output);
            let schedule_dir = schedule_dir.to_owned();
            let crontabs = directory(dir, output)?;
            placements.check_names(&crontabs, dir)?;
            (crontabs, Some(schedule_dir))
        }
        (Some(_), None) => {
            return Err(CliError::Argument(
                "--dir needs -o DIR, the directory to write the schedule files in".to_owned(),
            ));
        }
        (None, output) => {
            let schedule_dir = output.as_ref().map(|path| match path.parent() {
                Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
                _ => PathBuf::from("."),
            });
            (vec![single(&args.input, output.clone())?], schedule_dir)
        }
    };
    // Before anything is written: a misspelt name or a where no replica would take leaves no
    // file or empty directory behind.
    for crontab in &crontabs {
        placements.check_loads(crontab)?;
    }
    // `-o DIR` with --dir, or the directory of `-o FILE` (`schedules/web.toml` into a new
    // checkout), is made as the user named it.
    let made = match (&args.dir, &args.output) {
        (Some(_), Some(output)) => Some(output.as_path()),
        (None, Some(output)) => output
            .parent()
            .filter(|parent| !parent.as_os_str().is_empty()),
        _ => None,
    };
    if let Some(made) = made {
        std::fs::create_dir_all(made)
            .map_err(CliError::io(format!("creating {}", made.display())))?;
    }
    if let Some(schedule_dir) = schedule_dir {
        // Compared as the files they are: `-o x.toml` is `./x.toml` in the directory's walk.
        // A destination not there yet is in no walk.
        let rewritten: HashSet<PathBuf> = crontabs
            .iter()
            .filter_map(|crontab| std::fs::canonicalize(crontab.destination.as_ref()?).ok())
            .collect();
        reserve_declared(&mut names, &schedule_dir, &rewritten);
    }

    // Said once the crontabs were read: an import that cannot start says only why.
    let zone = zone.unwrap_or_else(|| {
        let zone = machine_zone();
        eprintln!(
            "redcron: reading the crontab's times in {zone} (this machine's zone); pass --tz to \
             choose another"
        );
        zone
    });
    let system = args.system || args.dir.is_some();
    let mut importer = Importer::new(names).mail_unavailable(
        crate::schedule::notice::find_sendmail().is_none().then(|| {
            "this machine has no sendmail: a schedule file with a MAILTO notice does not \
                 load without one (install msmtp-mta, or set REDCRON_SENDMAIL)"
                .to_owned()
        }),
    );
    importer = if system {
        importer.checking_users(user_exists_here)
    } else {
        importer.suspecting_user_fields(user_not_program_here)
    };
    let (mut jobs, mut problems) = (0, 0);
    for crontab in &crontabs {
        let (selector, on) = placements.of(crontab);
        let options = ImportOptions {
            system,
            zone,
            source: crontab.source.clone(),
            selector,
            on,
        };
        let imported = importer.import(&crontab.text, &options);
        for problem in &imported.problems {
            eprintln!(
                "redcron: {}:{}: {}",
                crontab.label, problem.line, problem.message
            );
        }
        if !options.keeps_host_work() {
            warn_host_local(crontab, &options, &imported.host_local);
        }
        match &crontab.destination {
            Some(path) => std::fs::write(path, &imported.toml)
                .map_err(CliError::io(format!("writing {}", path.display())))?,
            None => out
                .write_all(imported.toml.as_bytes())
                .map_err(CliError::io("writing the schedule file"))?,
        }
        jobs += imported.jobs;
        problems += imported.problems.len();
    }

    eprintln!(
        "redcron: imported {jobs} job{}{}{}",
        plural(jobs),
        match (&args.dir, &args.output) {
            (Some(_), Some(output)) => format!(
                " from {} file{} into {}",
                crontabs.len(),
                plural(crontabs.len()),
                output.display()
            ),
            _ => String::new(),
        },
        match problems {
            0 => String::new(),
            1 => ", 1 line needs attention (see above)".to_owned(),
            n => format!(", {n} lines need attention (see above)"),
        }
    );
    if problems > 0 && !args.keep_going {
        let written = match (&args.dir, &args.output) {
            (Some(_), _) => "the schedule files were written anyway",
            (None, Some(_)) => "the schedule file was written anyway",
            (None, None) => "the schedule file went to standard output anyway",
        };
        return Err(CliError::ImportNeedsAttention(format!(
            "{problems} crontab line{} need{} attention: {written}, with a \"# redcron:\" \
             comment above each; fix them, or pass --keep-going to accept the files as they are",
            plural(problems),
            if problems == 1 { "s" } else { "" },
        )));
    }
    Ok(())
}

/// Says each line of `crontab` that does this machine's work and became a job one replica of
/// several runs (any one, or one of those its `where` picks), with the options that keep it on
/// each machine or on this one. A warning, not a problem: the line may be meant to move (a
/// backup of `/etc` that any machine can take is rare, but the importer cannot tell).
fn warn_host_local(crontab: &Crontab, options: &ImportOptions, lines: &[HostLocal]) {
    let runs = options.one_replica();
    let placing = match &crontab.name {
        Some(name) => format!(
            "--every-replica-file {name} to run it on every replica, or \
             --where-file {name}=host={}",
            host_name()
        ),
        None => format!(
            "--every-replica to run it on every replica, or --where host={}",
            host_name()
        ),
    };
    for line in lines {
        eprintln!(
            "redcron: {}:{}: job {} looks host-local ({}) but {runs}; pass {placing} to keep \
             it on this machine",
            crontab.label, line.line, line.job, line.reason
        );
    }
}

fn plural(count: usize) -> &'static str {
    if count == 1 { "" } else { "s" }
}

/// The crontab named on the command line, or standard input.
fn single(input: &str, destination: Option<PathBuf>) -> Result<Crontab, CliError> {
    let (bytes, source, label) = if input == "-" {
        let mut bytes = Vec::new();
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(CliError::io("reading the crontab from standard input"))?;
        (bytes, "standard input".to_owned(), "<stdin>".to_owned())
    } else {
        let bytes = std::fs::read(input).map_err(CliError::io(format!("reading {input}")))?;
        (bytes, input.to_owned(), input.to_owned())
    };
    Ok(Crontab {
        source,
        label,
        text: lossy(bytes),
        destination,
        name: None,
    })
}

/// The crontabs cron reads in `dir`, in name order, each to `<name>.toml` in `output`.
fn directory(dir: &Path, output: &Path) -> Result<Vec<Crontab>, CliError> {
    if output.exists() && !output.is_dir() {
        return Err(CliError::Argument(format!(
            "{} is not a directory: with --dir, -o names the directory to write the schedule \
             files in",
            output.display()
        )));
    }
    let reading = || format!("reading {}", dir.display());
    let mut entries = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(CliError::io(reading()))? {
        entries.push(entry.map_err(CliError::io(reading()))?.path());
    }
    entries.sort();
    let mut crontabs = Vec::new();
    for path in entries {
        let name = path
            .file_name()
            .and_then(|name| name.to_str())
            .filter(|name| cron_reads_name(name));
        let Some(name) = name else {
            eprintln!(
                "redcron: skipping {}: cron reads only files named with letters, digits, '_' \
                 and '-'",
                path.display()
            );
            continue;
        };
        if !path.is_file() {
            eprintln!("redcron: skipping {}: not a file", path.display());
            continue;
        }
        let bytes =
            std::fs::read(&path).map_err(CliError::io(format!("reading {}", path.display())))?;
        crontabs.push(Crontab {
            source: path.display().to_string(),
            label: path.display().to_string(),
            text: lossy(bytes),
            destination: Some(output.join(format!("{name}.toml"))),
            name: Some(name.to_owned()),
        });
    }
    Ok(crontabs)
}

/// Whether cron reads a file of a cron directory: Debian's cron takes the names run-parts
/// takes, so editor backups (`job~`), package leftovers (`job.dpkg-old`) and hidden files are
/// not crontabs.
fn cron_reads_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'-'))
}

/// Takes the job names of the schedule files already in `dir` and its subdirectories, but
/// those about to be rewritten: job names are unique across all files of a schedule directory.
/// A directory that holds no schedule file of its own is not a schedule directory, and is not
/// searched (it may be a home directory).
fn reserve_declared(names: &mut JobNames, dir: &Path, rewritten: &HashSet<PathBuf>) {
    if !holds_schedule_files(dir) {
        return;
    }
    let files = match schedule_files(dir) {
        Ok(files) => files,
        Err(problems) => {
            for problem in problems {
                eprintln!("redcron: {problem}; imported names may clash with its jobs");
            }
            return;
        }
    };
    for path in files {
        if std::fs::canonicalize(&path).is_ok_and(|path| rewritten.contains(&path)) {
            continue;
        }
        let declared = std::fs::read_to_string(&path)
            .map_err(|error| error.to_string())
            .and_then(|text| names.reserve_declared(&text));
        if let Err(error) = declared {
            eprintln!(
                "redcron: cannot read the job names of {} ({error}); imported names may clash \
                 with them",
                path.display()
            );
        }
    }
}

/// Whether `dir` holds a `*.toml` file itself: what makes it a schedule directory.
fn holds_schedule_files(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries.filter_map(Result::ok).any(|entry| {
            let path = entry.path();
            path.extension()
                .is_some_and(|extension| extension == "toml")
                && path.is_file()
        })
    })
}

/// cron reads bytes; a stray non-UTF-8 byte in a comment must not stop the import.
fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes)
        .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_skips_the_names_run_parts_skips() {
        for name in ["backup", "php8_3", "e2scrub_all", "Job-1"] {
            assert!(cron_reads_name(name), "{name}");
        }
        for name in [
            "",
            ".placeholder",
            "backup~",
            "backup.dpkg-old",
            "backup.dpkg-dist",
            "backup.rpmsave",
            "backup.swp",
            "a b",
        ] {
            assert!(!cron_reads_name(name), "{name}");
        }
    }
}
