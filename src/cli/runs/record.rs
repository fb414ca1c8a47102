//! A run's record as `runs show`, `dead` and the web console show it: one JSON object with every
//! field typed, or `name  value` lines people read.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;

use serde_json::{Map, Value};

use super::show::unknown_run;
use crate::cli::output::{printable, printable_cell};
use crate::cli::times::{duration, rfc3339};
use crate::cli::{CliError, typed_fields};
use crate::store::OutputSoFar;

/// The instants of a run's record, ms since the epoch: `--json` adds each as RFC 3339 under its
/// name without `_ms`, and text shows only that. Its other `_ms` fields are spans.
const RUN_INSTANTS: [&str; 8] = [
    "created_ms",
    "due_ms",
    "fire_ms",
    "ready_ms",
    "started_ms",
    "finished_ms",
    "redriven_ms",
    "missed_after_ms",
];

/// The fields of a run that `--json` always carries, `null` when the run has none (yet): what
/// docs/cli.md promises. The record's other fields are shown too, typed the same way.
const RUN_FIELDS: [&str; 14] = [
    "job",
    "actor",
    "kind",
    "state",
    "attempt",
    "max_attempts",
    "queue",
    "priority",
    "worker",
    "exit_code",
    "reason",
    "error",
    "output",
    "payload",
];

/// A run's record as the JSON object `runs show`, `dead show` and `dead list` print: its id,
/// every field typed, the promised ones `null` when missing, and each instant also as RFC 3339.
pub(crate) fn run_document(id: &str, mut fields: HashMap<String, String>) -> Map<String, Value> {
    let notices = notices_of(&mut fields);
    let mut document = typed_fields(fields);
    document.extend(notices);
    document.insert("id".to_owned(), id.into());
    for name in RUN_FIELDS.iter().chain(&RUN_INSTANTS) {
        document.entry(*name).or_insert(Value::Null);
    }
    for name in RUN_INSTANTS {
        let at = document[name].as_i64().map(rfc3339);
        document.insert(name.trim_end_matches("_ms").to_owned(), at.into());
    }
    document.insert(OUTPUT_SO_FAR.to_owned(), Value::Null);
    document
}

/// What `runs show --json` prints: [`run_document`] with the output so far of a running run.
pub(crate) fn shown_run_document(
    id: &str,
    fields: HashMap<String, String>,
    so_far: Option<&OutputSoFar>,
) -> Map<String, Value> {
    let mut document = run_document(id, fields);
    if let Some(so_far) = so_far {
        document.insert(
            OUTPUT_SO_FAR.to_owned(),
            serde_json::json!({
                "output": so_far.output,
                "written": rfc3339(so_far.written_ms),
                "written_ms": so_far.written_ms,
                "attempt": so_far.attempt,
            }),
        );
    }
    document
}

/// The field of `runs show --json` that holds a running run's output so far (null in lists and
/// for a run that does not run).
const OUTPUT_SO_FAR: &str = "output_so_far";

/// The run's notice settings as lists, out of the forms the scripts keep them in (`notify` as
/// JSON text, `notify_on` as `,dead,late,`): what a person or a script reads. Absent when the
/// job has none.
fn notices_of(fields: &mut HashMap<String, String>) -> Vec<(String, Value)> {
    let mut lists = Vec::new();
    if let Some(targets) = fields.remove("notify") {
        let targets = serde_json::from_str::<Value>(&targets).unwrap_or(Value::String(targets));
        lists.push(("notify".to_owned(), targets));
    }
    if let Some(events) = fields.remove("notify_on") {
        let events: Vec<Value> = events
            .split(',')
            .filter(|event| !event.is_empty())
            .map(Value::from)
            .collect();
        lists.push(("notify_on".to_owned(), Value::Array(events)));
    }
    lists
}

/// Writes a run's fields, sorted by name: `name  value` lines with instants in RFC 3339 and
/// spans in seconds or minutes, or one JSON object (see [`run_document`]).
pub(in crate::cli) fn write_run(
    out: &mut impl Write,
    id: &str,
    fields: HashMap<String, String>,
    so_far: Option<&OutputSoFar>,
    json: bool,
) -> Result<(), CliError> {
    if fields.is_empty() {
        return Err(unknown_run(id));
    }
    let written = if json {
        writeln!(
            out,
            "{}",
            Value::Object(shown_run_document(id, fields, so_far))
        )
    } else {
        let mut fields = fields;
        let notices = notices_of(&mut fields);
        let mut shown: BTreeMap<String, String> = fields
            .into_iter()
            .map(|(name, value)| readable(name, value))
            .collect();
        for (name, list) in notices {
            let items: Vec<String> = match list {
                Value::Array(items) => items
                    .iter()
                    .map(|item| {
                        item.as_str()
                            .map_or_else(|| item.to_string(), str::to_owned)
                    })
                    .collect(),
                other => vec![other.to_string()],
            };
            shown.insert(name, items.join(" "));
        }
        // What the run printed, its payload and its error come from outside: shown, not obeyed.
        let shown: Vec<(String, String)> = shown
            .into_iter()
            .map(|(name, value)| {
                (
                    printable_cell(&name).into_owned(),
                    printable(&value).into_owned(),
                )
            })
            .collect();
        let width = shown
            .iter()
            .map(|(name, _)| name.chars().count())
            .max()
            .unwrap_or(0)
            .max(2);
        writeln!(out, "{:width$}  {}", "id", printable_cell(id))
            .and_then(|()| {
                shown
                    .iter()
                    .try_for_each(|(name, value)| writeln!(out, "{name:width$}  {value}"))
            })
            .and_then(|()| match so_far {
                Some(so_far) => {
                    let text = printable(&so_far.output);
                    let end = if text.ends_with('\n') { "" } else { "\n" };
                    write!(
                        out,
                        "output so far (written {}):\n{text}{end}",
                        rfc3339(so_far.written_ms)
                    )
                }
                None => Ok(()),
            })
    };
    written.map_err(CliError::io("writing the run"))
}

/// A field as people read it: `due_ms 1767225600000` is `due 2026-01-01T00:00:00+00:00`, and
/// `backoff_ms 30000` is `backoff 30 s`. A value that is not a number stays as it is, under its
/// own name, so that damaged data is shown rather than hidden.
pub(crate) fn readable(name: String, value: String) -> (String, String) {
    let Some(stem) = name.strip_suffix("_ms") else {
        return (name, value);
    };
    let Ok(ms) = value.parse::<i64>() else {
        return (name, value);
    };
    let shown = if RUN_INSTANTS.contains(&name.as_str()) {
        rfc3339(ms)
    } else {
        duration(ms)
    };
    (stem.to_owned(), shown)
}

#[cfg(test)]
mod tests {
    use super::readable;

    #[test]
    fn instants_read_as_times_and_spans_as_durations() {
        let field = |name: &str, value: &str| readable(name.to_owned(), value.to_owned());
        for instant in ["due_ms", "missed_after_ms"] {
            assert_eq!(
                field(instant, "1767225600000").1,
                "2026-01-01T00:00:00+00:00",
                "{instant}"
            );
        }
        assert_eq!(
            field("backoff_ms", "30000"),
            ("backoff".to_owned(), "30 s".to_owned())
        );
        assert_eq!(
            field("due_ms", "soon"),
            ("due_ms".to_owned(), "soon".to_owned())
        );
    }
}
