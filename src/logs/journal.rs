//! Log lines as journal entries with fields: under systemd, a replica whose standard error is
//! the journal sends each line over the journal's native protocol instead, so that
//! `journalctl -u redcron JOB=backup` or `RUN=backup@1764730800000` finds a job's lines, and the
//! lines of one run.
//!
//! Events are formatted as JSON on the thread that logs (as for `--log-format json`) and turned
//! into entries on the writing thread: a journald that stalls holds up that thread alone, as a
//! stalled stream would.

use std::io::{self, Write};
use std::sync::atomic::Ordering;

use libsystemd::logging::{Priority, journal_send};
use serde_json::{Map, Value};

use super::REFUSED_LINES;

/// The entry's `SYSLOG_IDENTIFIER`, what `journalctl -t` selects.
const IDENTIFIER: &str = "redcron";

/// Whether standard error is the journal: systemd says so in `JOURNAL_STREAM`.
pub(super) fn connected() -> bool {
    libsystemd::logging::connected_to_journal()
}

/// One log line, read back from its JSON, as the journal takes it.
#[derive(Debug, PartialEq)]
struct Entry {
    priority: u8,
    message: String,
    /// Every other field of the event, named as the journal names fields: `run` is `RUN`.
    fields: Vec<(String, String)>,
}

impl Entry {
    /// The entry of one JSON line of the `fmt` layer (`flatten_event`); `None` for anything
    /// else.
    fn parse(line: &[u8]) -> Option<Self> {
        let Value::Object(event) = serde_json::from_slice(line).ok()? else {
            return None;
        };
        Some(Self::from_event(event))
    }

    fn from_event(mut event: Map<String, Value>) -> Self {
        // As syslog levels: tracing's INFO is the journal's "notice", as tracing-journald maps it.
        let priority = match event.remove("level").as_ref().and_then(Value::as_str) {
            Some("ERROR") => Priority::Error,
            Some("WARN") => Priority::Warning,
            Some("INFO") => Priority::Notice,
            Some("DEBUG") => Priority::Info,
            _ => Priority::Debug,
        };
        let message = match event.remove("message") {
            Some(Value::String(message)) => message,
            Some(other) => other.to_string(),
            None => String::new(),
        };
        // The journal stamps each entry itself.
        event.remove("timestamp");
        let mut fields = vec![("SYSLOG_IDENTIFIER".to_owned(), IDENTIFIER.to_owned())];
        for (name, value) in event {
            let value = match value {
                Value::Null => continue,
                Value::String(text) => text,
                other => other.to_string(),
            };
            fields.push((field_name(&name), value));
        }
        Self {
            priority: u8::from(priority),
            message,
            fields,
        }
    }

    /// The line as text, for standard error when the journal did not take it.
    fn text(&self) -> String {
        let mut line = self.message.clone();
        for (name, value) in &self.fields {
            if name != "SYSLOG_IDENTIFIER" {
                line.push_str(&format!(" {}={value:?}", name.to_ascii_lowercase()));
            }
        }
        line.push('\n');
        line
    }
}

/// A journal field name: upper case letters, digits and `_`, not starting with `_` (those are
/// the journal's own, trusted fields).
fn field_name(name: &str) -> String {
    let upper: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    let upper = upper.trim_start_matches('_');
    match upper {
        "" => "FIELD".to_owned(),
        // MESSAGE and PRIORITY are the entry's own; a field of that name keeps its value apart.
        "MESSAGE" | "PRIORITY" | "SYSLOG_IDENTIFIER" => format!("REDCRON_{upper}"),
        _ => upper.to_owned(),
    }
}

/// The writing thread's end: each line to the journal, or to standard error (the journal's
/// stream, without fields) when the journal refuses it, so no line is lost to a restarted
/// journald.
pub(super) struct Journal;

impl Write for Journal {
    fn write(&mut self, line: &[u8]) -> io::Result<usize> {
        let sent = match Entry::parse(line) {
            Some(entry) => {
                let fields = entry.fields.iter().map(|(name, value)| (name, value));
                match journal_send(priority(entry.priority), &entry.message, fields) {
                    Ok(()) => true,
                    Err(_) => io::stderr().write_all(entry.text().as_bytes()).is_ok(),
                }
            }
            None => io::stderr().write_all(line).is_ok(),
        };
        if !sent {
            REFUSED_LINES.fetch_add(1, Ordering::Relaxed);
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `Priority` is neither `Copy` nor comparable: it is rebuilt from its number.
fn priority(number: u8) -> Priority {
    match number {
        3 => Priority::Error,
        4 => Priority::Warning,
        5 => Priority::Notice,
        6 => Priority::Info,
        _ => Priority::Debug,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_becomes_an_entry_with_the_run_and_job_as_fields() {
        let entry = Entry::parse(
            br#"{"timestamp":"2026-12-04T10:00:00.000Z","level":"WARN","message":"run failed","run":"backup@1","job":"backup","attempt":2,"exit_code":3,"output":null,"target":"redcron::engine::worker","try_":1}"#,
        )
        .expect("an entry");
        assert_eq!(entry.priority, 4);
        assert_eq!(entry.message, "run failed");
        let field = |name: &str| {
            entry
                .fields
                .iter()
                .find(|(field, _)| field == name)
                .map(|(_, value)| value.as_str())
        };
        assert_eq!(field("RUN"), Some("backup@1"));
        assert_eq!(field("JOB"), Some("backup"));
        assert_eq!(field("ATTEMPT"), Some("2"));
        assert_eq!(field("EXIT_CODE"), Some("3"));
        assert_eq!(field("TARGET"), Some("redcron::engine::worker"));
        assert_eq!(field("TRY_"), Some("1"));
        assert_eq!(field("SYSLOG_IDENTIFIER"), Some("redcron"));
        assert_eq!(field("OUTPUT"), None, "absent values are left out");
        assert_eq!(
            field("TIMESTAMP"),
            None,
            "the journal stamps entries itself"
        );
        assert_eq!(
            entry.text(),
            "run failed attempt=\"2\" exit_code=\"3\" job=\"backup\" run=\"backup@1\" \
             target=\"redcron::engine::worker\" try_=\"1\"\n"
        );
    }

    #[test]
    fn field_names_are_what_the_journal_accepts() {
        assert_eq!(field_name("exit_code"), "EXIT_CODE");
        assert_eq!(field_name("_private"), "PRIVATE");
        assert_eq!(field_name("message"), "REDCRON_MESSAGE");
        assert_eq!(field_name("a.b-c"), "A_B_C");
        assert_eq!(field_name("__"), "FIELD");
    }

    #[test]
    fn a_line_that_is_not_an_event_is_not_an_entry() {
        assert_eq!(Entry::parse(b"not json\n"), None);
        assert_eq!(Entry::parse(b"[1, 2]\n"), None);
        let info = Entry::parse(br#"{"level":"INFO","message":"hi"}"#).expect("an entry");
        assert_eq!(info.priority, 5);
    }
}
