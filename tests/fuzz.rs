//! Fuzzing, with proptest (cargo-fuzz needs a nightly toolchain): the cron parser, the schedule
//! file parser, the crontab importer and the decoding of claimed runs get mutated versions of
//! the seed inputs in `tests/fuzz/corpus/<target>/`: bytes inserted, deleted, replaced, tokens
//! that parsers treat specially spliced in, pieces of other seeds pasted in. Each target must
//! never panic and must keep its contract on whatever it accepts or refuses.
//!
//! `cargo test --test integration fuzz::` runs 256 cases a target; longer:
//! `PROPTEST_CASES=200000 cargo test --release --test integration fuzz::`. A failing case is
//! shrunk, printed, and saved in `tests/fuzz.proptest-regressions` to be replayed first next
//! time; add its input to the corpus once fixed.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use proptest::prelude::*;
use redcron::schedule::crontab::{ImportOptions, import};
use redcron::schedule::{Reach, Schedule, Selector, parse_file};
use redcron::store::ClaimedRun;
use redis::Value;

use crate::util::without_users;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz/corpus")
        .join(target)
}

/// Every seed file of `target`, as bytes.
fn seed_files(target: &str) -> Vec<Vec<u8>> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(corpus_dir(target))
        .expect("the corpus directory")
        .map(|entry| entry.expect("a corpus entry").path())
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|path| std::fs::read(path).expect("a seed file"))
        .collect()
}

/// The seeds of a target whose corpus holds one seed per line.
fn seed_lines(target: &str) -> Vec<Vec<u8>> {
    seed_files(target)
        .iter()
        .flat_map(|file| file.split(|byte| *byte == b'\n'))
        .filter(|line| !line.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

fn cron_seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| seed_lines("cron"))
}

fn schedule_seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| seed_files("schedule"))
}

fn crontab_seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| seed_files("crontab"))
}

fn run_seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| seed_lines("run"))
}

/// Pieces that mean something to one of the parsers.
const TOKENS: &[&str] = &[
    "*",
    "/",
    ",",
    "-",
    " ",
    "\t",
    "\n",
    "\r\n",
    "0",
    "7",
    "31",
    "60",
    "99999999999",
    "-1",
    "@",
    "@every ",
    "sun",
    "jan",
    "mon-fri",
    "L",
    "#",
    "?",
    "\"",
    "'",
    "'''",
    "[",
    "]",
    "[jobs.",
    "=",
    "{",
    "}",
    "%",
    "\\",
    "$",
    "\0",
    "\u{feff}",
    "é",
    "\u{2028}",
    "nil",
    "|",
];

/// One change to an input.
#[derive(Debug, Clone)]
enum Mutation {
    Insert(usize, u8),
    Delete(usize, usize),
    Replace(usize, u8),
    Token(usize, usize),
    /// Pastes part of another seed (index, start, length) at a position.
    Splice(usize, usize, usize, usize),
    /// Repeats a stretch (start, length) a few times.
    Repeat(usize, usize, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let at = any::<usize>();
    prop_oneof![
        (at, any::<u8>()).prop_map(|(at, byte)| Mutation::Insert(at, byte)),
        (at, 1usize..16).prop_map(|(at, len)| Mutation::Delete(at, len)),
        (at, any::<u8>()).prop_map(|(at, byte)| Mutation::Replace(at, byte)),
        (at, 0..TOKENS.len()).prop_map(|(at, token)| Mutation::Token(at, token)),
        (at, any::<usize>(), any::<usize>(), 1usize..64)
            .prop_map(|(at, seed, start, len)| Mutation::Splice(at, seed, start, len)),
        (at, 1usize..32, 2usize..50).prop_map(|(at, len, times)| Mutation::Repeat(at, len, times)),
    ]
}

/// A seed of `seeds` changed by `mutations`.
fn mutate(seeds: &[Vec<u8>], seed: usize, mutations: &[Mutation]) -> Vec<u8> {
    let mut input = seeds[seed % seeds.len()].clone();
    for change in mutations {
        let place = |at: usize, input: &Vec<u8>| at % (input.len() + 1);
        match *change {
            Mutation::Insert(at, byte) => {
                let at = place(at, &input);
                input.insert(at, byte);
            }
            Mutation::Delete(at, len) => {
                let at = place(at, &input);
                let end = (at + len).min(input.len());
                input.drain(at..end);
            }
            Mutation::Replace(at, byte) => {
                if !input.is_empty() {
                    let at = at % input.len();
                    input[at] = byte;
                }
            }
            Mutation::Token(at, token) => {
                let at = place(at, &input);
                input.splice(at..at, TOKENS[token].bytes());
            }
            Mutation::Splice(at, other, start, len) => {
                let other = &seeds[other % seeds.len()];
                let start = start % (other.len() + 1);
                let end = (start + len).min(other.len());
                let at = place(at, &input);
                input.splice(at..at, other[start..end].iter().copied());
            }
            Mutation::Repeat(at, len, times) => {
                let at = place(at, &input);
                let end = (at + len).min(input.len());
                let stretch = input[at..end].to_vec();
                for _ in 1..times {
                    input.splice(end..end, stretch.iter().copied());
                }
            }
        }
    }
    input
}

/// A mutated input of a target: a seed index and up to 8 changes.
fn mutated(seeds: fn() -> &'static [Vec<u8>]) -> impl Strategy<Value = Vec<u8>> {
    (any::<usize>(), proptest::collection::vec(mutation(), 0..8))
        .prop_map(move |(seed, mutations)| mutate(seeds(), seed, &mutations))
}

/// A claim reply from a corpus line: `|`-separated values, `nil` for a Redis nil.
fn claim_reply(line: &[u8]) -> Vec<Value> {
    line.split(|byte| *byte == b'|')
        .map(|value| match value {
            b"nil" => Value::Nil,
            number if !number.is_empty() && number.iter().all(u8::is_ascii_digit) => {
                std::str::from_utf8(number)
                    .ok()
                    .and_then(|text| text.parse().ok())
                    .map_or_else(|| Value::BulkString(number.to_vec()), Value::Int)
            }
            text => Value::BulkString(text.to_vec()),
        })
        .collect()
}

fn import_options(system: bool) -> ImportOptions {
    ImportOptions {
        system,
        zone: chrono_tz::UTC,
        source: "fuzz".to_owned(),
        selector: Selector::default(),
        on: Reach::One,
    }
}

fn after() -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_280_000, 0).expect("a valid instant")
}

#[test]
fn every_seed_is_valid_input() {
    for seed in cron_seeds() {
        let text = std::str::from_utf8(seed).expect("UTF-8 seed");
        let schedule = Schedule::parse(text).unwrap_or_else(|error| panic!("{text}: {error}"));
        assert!(
            schedule.next_after(after(), chrono_tz::UTC).is_some(),
            "{text}"
        );
    }
    for seed in schedule_seeds() {
        let text = std::str::from_utf8(seed).expect("UTF-8 seed");
        parse_file(Path::new("seed.toml"), text).unwrap_or_else(|errors| panic!("{errors:?}"));
    }
    for seed in crontab_seeds() {
        let options = import_options(String::from_utf8_lossy(seed).contains(" root "));
        let imported = import(&String::from_utf8_lossy(seed), &options);
        assert!(imported.jobs > 0, "{}", imported.toml);
    }
    for seed in run_seeds() {
        ClaimedRun::from_reply(claim_reply(seed)).expect("a seed claim decodes");
    }
}

proptest! {
    #[test]
    fn the_cron_parser_refuses_or_accepts_and_then_finds_a_later_fire(
        input in mutated(cron_seeds),
    ) {
        let text = String::from_utf8_lossy(&input);
        if let Ok(schedule) = Schedule::parse(&text) {
            for zone in [chrono_tz::UTC, chrono_tz::America::New_York, chrono_tz::Australia::Lord_Howe] {
                if let Some(next) = schedule.next_after(after(), zone) {
                    prop_assert!(next > after(), "{text}: {next} is not after {}", after());
                }
            }
        }
    }

    #[test]
    fn the_schedule_file_parser_names_a_line_of_the_file_for_every_problem(
        input in mutated(schedule_seeds),
    ) {
        let text = String::from_utf8_lossy(&input);
        let lines = text.lines().count().max(1);
        match parse_file(Path::new("fuzz.toml"), &text) {
            Ok(jobs) => {
                for job in jobs {
                    prop_assert!(job.source.line >= 1 && job.source.line <= lines, "{:?}", job.source);
                }
            }
            Err(problems) => {
                prop_assert!(!problems.is_empty());
                for problem in problems {
                    let message = problem.to_string();
                    prop_assert!(message.starts_with("fuzz.toml:"), "{message}");
                    let line = problem.position.map(|(line, _)| line);
                    prop_assert!(
                        line.is_some_and(|line| line >= 1 && line <= lines + 1),
                        "{message}"
                    );
                }
            }
        }
    }

    #[test]
    fn the_crontab_importer_writes_only_schedule_files_that_load(
        input in mutated(crontab_seeds),
        system in any::<bool>(),
    ) {
        let text = String::from_utf8_lossy(&input);
        let options = import_options(system);
        let imported = import(&text, &options);
        let loaded = parse_file(Path::new("imported.toml"), &without_users(&imported.toml));
        prop_assert!(loaded.is_ok(), "{:?}\n{}", loaded.err(), imported.toml);
        prop_assert_eq!(loaded.map(|jobs| jobs.len()).unwrap_or(0), imported.jobs);
    }

    #[test]
    fn claimed_runs_decode_or_are_reported_corrupt_with_their_id(
        input in mutated(run_seeds),
    ) {
        let reply = claim_reply(&input);
        let id = match reply.first() {
            Some(Value::BulkString(bytes)) => String::from_utf8(bytes.clone()).ok(),
            Some(Value::Int(number)) => Some(number.to_string()),
            _ => None,
        };
        match ClaimedRun::from_reply(reply) {
            Ok(run) => prop_assert_eq!(Some(run.id), id),
            Err(corrupt) => {
                prop_assert!(!corrupt.detail.is_empty());
                prop_assert_eq!(corrupt.run_id, id.unwrap_or_default());
            }
        }
    }
}
