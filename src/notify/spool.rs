//! The output of runs whose jobs mail it, kept on the replica that ran them until their mail is
//! sent: cron mails all of a job's output, and Redis keeps only its last 4 KiB with the run.
//!
//! The spool is the process's memory, bounded in age and size: a notice sent by another
//! replica (this one died first) or after [`KEPT_FOR`] mails the tail Redis keeps, and says so.

use std::collections::VecDeque;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use crate::schedule::Job;

/// How much of a run's output a mail carries when [`LIMIT_ENV`] does not say: cron mails it
/// all, and 1 MiB is more than a mailbox wants to read.
pub const DEFAULT_LIMIT: usize = 1024 * 1024;

/// The environment variable that sets how much of a run's output a mail carries, in bytes
/// (`262144`) or with a unit (`256KiB`, `4MiB`).
pub const LIMIT_ENV: &str = "REDCRON_MAIL_OUTPUT_LIMIT";

/// How long a run's output waits for its mail: a notice is sent within seconds, or within
/// minutes when its target fails for a while.
const KEPT_FOR: Duration = Duration::from_secs(3600);

/// The most output kept at once, all runs together: the oldest goes first.
const MOST_KEPT_BYTES: usize = 64 * 1024 * 1024;

/// What a mail carries of a run's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailOutput {
    /// Its beginning, up to the limit.
    pub text: String,
    /// How many bytes it had in all.
    pub total: u64,
    /// The limit it was cut at.
    pub limit: usize,
}

impl MailOutput {
    /// Whether the text is not the whole output.
    pub fn is_cut(&self) -> bool {
        self.total > self.text.len() as u64
    }
}

/// The beginning of a run's output, up to a limit, while it runs.
#[derive(Debug)]
pub struct Head {
    bytes: Vec<u8>,
    limit: usize,
    total: u64,
}

impl Head {
    /// The head to keep for a run of `job`: `None` when the job mails nothing. A bad
    /// [`LIMIT_ENV`] gives the default here; the replica refuses it at its start.
    pub fn for_job(job: &Job) -> Option<Self> {
        let mails = job
            .notify
            .as_ref()
            .is_some_and(crate::schedule::Notices::mails);
        mails.then(|| Self {
            bytes: Vec::new(),
            limit: limit().unwrap_or(DEFAULT_LIMIT),
            total: 0,
        })
    }

    /// Takes the next chunk of output.
    pub fn push(&mut self, chunk: &[u8]) {
        self.total += chunk.len() as u64;
        let room = self.limit.saturating_sub(self.bytes.len());
        self.bytes
            .extend_from_slice(&chunk[..room.min(chunk.len())]);
    }

    /// The output as a mail carries it; `None` when the tail kept with the run is all of it
    /// anyway.
    pub fn finish(self, tail_bytes: usize) -> Option<MailOutput> {
        (self.total > tail_bytes as u64).then(|| MailOutput {
            text: String::from_utf8_lossy(&self.bytes).into_owned(),
            total: self.total,
            limit: self.limit,
        })
    }
}

/// The limit [`LIMIT_ENV`] sets, or [`DEFAULT_LIMIT`].
///
/// # Errors
/// What is wrong with the value.
pub fn limit() -> Result<usize, String> {
    static LIMIT: OnceLock<Result<usize, String>> = OnceLock::new();
    LIMIT
        .get_or_init(|| match std::env::var(LIMIT_ENV) {
            Ok(value) => parse_size(&value).ok_or_else(|| {
                format!(
                    "{LIMIT_ENV}=\"{value}\" is not a size: expected bytes (262144) or a number \
                     with KiB or MiB (256KiB, 4MiB)"
                )
            }),
            Err(_) => Ok(DEFAULT_LIMIT),
        })
        .clone()
}

fn parse_size(text: &str) -> Option<usize> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let scale = match unit.trim() {
        "" | "B" => 1,
        "KiB" => 1024,
        "MiB" => 1024 * 1024,
        _ => return None,
    };
    number.parse::<usize>().ok()?.checked_mul(scale)
}

/// The outputs kept, oldest first, and their size together.
#[derive(Default)]
struct Spool {
    entries: VecDeque<(String, Instant, MailOutput)>,
    bytes: usize,
}

static SPOOL: OnceLock<Mutex<Spool>> = OnceLock::new();

fn key(run_id: &str, attempt: u32) -> String {
    format!("{run_id}:{attempt}")
}

/// Keeps the output of `attempt` of `run_id` for its mail.
pub fn keep(run_id: &str, attempt: u32, output: MailOutput) {
    let mut spool = SPOOL
        .get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let now = Instant::now();
    spool.bytes += output.text.len();
    spool.entries.push_back((key(run_id, attempt), now, output));
    while let Some((_, at, oldest)) = spool.entries.front() {
        if now.duration_since(*at) < KEPT_FOR && spool.bytes <= MOST_KEPT_BYTES {
            break;
        }
        spool.bytes -= oldest.text.len();
        spool.entries.pop_front();
    }
}

/// The output kept for `attempt` of `run_id`, if this process ran it and still has it.
pub fn kept(run_id: &str, attempt: u32) -> Option<MailOutput> {
    let spool = SPOOL.get()?.lock().unwrap_or_else(PoisonError::into_inner);
    let key = key(run_id, attempt);
    spool
        .entries
        .iter()
        .find(|(kept, at, _)| *kept == key && at.elapsed() < KEPT_FOR)
        .map(|(_, _, output)| output.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_bytes_or_with_a_binary_unit() {
        assert_eq!(parse_size("262144"), Some(262_144));
        assert_eq!(parse_size("256KiB"), Some(262_144));
        assert_eq!(parse_size("4MiB"), Some(4 * 1024 * 1024));
        assert_eq!(parse_size("4 MiB"), Some(4 * 1024 * 1024));
        for bad in ["", "4MB", "lots", "-1", "4GiB"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_head_keeps_the_beginning_up_to_its_limit_and_counts_the_rest() {
        let mut head = Head {
            bytes: Vec::new(),
            limit: 10,
            total: 0,
        };
        head.push(b"0123456");
        head.push(b"789abcdef");
        let output = head.finish(4).expect("longer than the tail");
        assert_eq!(output.text, "0123456789");
        assert_eq!(output.total, 16);
        assert!(output.is_cut());
        let mut short = Head {
            bytes: Vec::new(),
            limit: 10,
            total: 0,
        };
        short.push(b"abc");
        assert_eq!(short.finish(4), None, "the tail holds it all");
    }

    #[test]
    fn kept_output_is_found_by_run_and_attempt() {
        let output = MailOutput {
            text: "x".repeat(10),
            total: 10,
            limit: 10,
        };
        keep("spool-test@1", 2, output.clone());
        assert_eq!(kept("spool-test@1", 2), Some(output));
        assert_eq!(kept("spool-test@1", 1), None);
    }
}
