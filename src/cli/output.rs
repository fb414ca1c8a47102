//! How the commands print: for scripts, one JSON document with `--json`, one JSON object a line
//! with `--jsonl` (the shape of each is documented in docs/cli.md, and tested against it); for
//! people, text in which nothing read from outside can steer their terminal.

use std::borrow::Cow;
use std::io::{self, Write};

use serde_json::Value;

/// `--json` and `--jsonl`, for the commands that print a list.
#[derive(Debug, Clone, Copy, clap::Args)]
pub(super) struct ListFormat {
    /// Print one JSON document, an object holding the list, instead of text.
    #[arg(long, conflicts_with = "jsonl")]
    json: bool,
    /// Print the list's elements as JSON objects, one a line (the objects of --json's list).
    #[arg(long)]
    jsonl: bool,
}

impl ListFormat {
    /// Whether a script asked for JSON in either form.
    pub(super) fn is_json(self) -> bool {
        self.json || self.jsonl
    }

    /// Whether a script asked for one JSON object a line (`--jsonl`).
    pub(super) fn is_lines(self) -> bool {
        self.jsonl
    }

    /// Writes `elements`: as `{"<name>": [...]}` with `--json` (an empty list when there is
    /// nothing, so a reader always gets a document), else one a line.
    ///
    /// The list is wrapped in an object, as kubectl wraps its lists in a `List`, so that a field
    /// can be added beside it later without breaking a reader.
    ///
    /// # Errors
    /// Writing to `out`.
    pub(super) fn write(
        self,
        out: &mut impl Write,
        name: &str,
        elements: Vec<Value>,
    ) -> io::Result<()> {
        if self.jsonl {
            elements
                .iter()
                .try_for_each(|element| writeln!(out, "{element}"))
        } else {
            let mut document = serde_json::Map::new();
            document.insert(name.to_owned(), Value::Array(elements));
            writeln!(out, "{}", Value::Object(document))
        }
    }
}

/// `text` as a terminal may show it: its control characters escaped (`\u{1b}[2J`, `\r`,
/// `\u{7}`), and its invisible format characters too (`\u{202e}`, see [`is_format`]), line
/// breaks and tabs kept. What a run printed, a payload, an error that Redis or a job wrote: none
/// of it may clear the screen, retitle the window, ring the bell or reorder what the operator
/// reads.
pub(super) fn printable(text: &str) -> Cow<'_, str> {
    escaped(text, |character| matches!(character, '\n' | '\t'))
}

/// `text` on one line as a terminal may show it: every control character escaped, line breaks
/// and tabs too, so that a table's cell can neither break its row nor steer the terminal.
pub(super) fn printable_cell(text: &str) -> Cow<'_, str> {
    escaped(text, |_| false)
}

/// `text` with its control characters (C0, DEL and C1) and format characters escaped as Rust
/// writes them, but those that `kept` keeps.
fn escaped(text: &str, kept: impl Fn(char) -> bool) -> Cow<'_, str> {
    let escapes =
        |character: char| (character.is_control() || is_format(character)) && !kept(character);
    if !text.chars().any(escapes) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for character in text.chars() {
        if escapes(character) {
            shown.extend(character.escape_default());
        } else {
            shown.push(character);
        }
    }
    Cow::Owned(shown)
}

/// Whether `character` is an invisible format character (Unicode's category Cf, as of Unicode
/// 16) or a line or paragraph separator: shown raw, a right-to-left override (U+202E) or an
/// isolate (U+2066..U+2069) makes a terminal show text in another order than it is (a file
/// name `txt.exe` read as `exe.txt`), and a zero-width space, joiner or byte order mark
/// (U+200B..U+200D, U+FEFF) hides a difference between two names that look the same.
fn is_format(character: char) -> bool {
    matches!(
        character,
        '\u{ad}'
            | '\u{600}'..='\u{605}'
            | '\u{61c}'
            | '\u{6dd}'
            | '\u{70f}'
            | '\u{890}'..='\u{891}'
            | '\u{8e2}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{2028}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{110bd}'
            | '\u{110cd}'
            | '\u{13430}'..='\u{1343f}'
            | '\u{1bca0}'..='\u{1bca3}'
            | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0001}'
            | '\u{e0020}'..='\u{e007f}'
    )
}

/// The fields of a Redis hash (a run's, a replica's) as a JSON object: Redis stores every value
/// as a string, but `--json` readers should not have to know which ones are numbers. Counts and
/// times (`*_ms`) are numbers, or null when empty; a value that does not parse stays the string
/// it is, so that foreign or damaged data is shown rather than hidden.
pub(super) fn typed_fields(
    fields: impl IntoIterator<Item = (String, String)>,
) -> serde_json::Map<String, serde_json::Value> {
    const INTEGERS: [&str; 7] = [
        "attempt",
        "max_attempts",
        "exit_code",
        "max_concurrency",
        "pid",
        "busy_workers",
        "max_workers",
    ];
    fields
        .into_iter()
        .map(|(name, value)| {
            let typed = if !(INTEGERS.contains(&name.as_str()) || name.ends_with("_ms")) {
                value.into()
            } else if value.is_empty() {
                serde_json::Value::Null
            } else {
                value
                    .parse::<i64>()
                    .map_or_else(|_| value.into(), serde_json::Value::from)
            };
            (name, typed)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_would_steer_a_terminal_is_escaped_and_lines_are_kept() {
        let output = "done\n\u{1b}[2J\u{1b}]0;pwned\u{7}\0\r\u{9b}31m\tend\u{7f}é";
        assert_eq!(
            printable(output),
            "done\n\\u{1b}[2J\\u{1b}]0;pwned\\u{7}\\u{0}\\r\\u{9b}31m\tend\\u{7f}é"
        );
        assert_eq!(printable_cell("a\nb\tc"), "a\\nb\\tc");
        assert!(matches!(printable("plain text\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn what_would_reorder_or_hide_text_is_escaped_and_other_letters_are_kept() {
        let name = "report\u{202e}txt.exe \u{2066}a\u{2069} b\u{200b}c\u{feff} é ש 日本 🙂";
        assert_eq!(
            printable(name),
            "report\\u{202e}txt.exe \\u{2066}a\\u{2069} b\\u{200b}c\\u{feff} é ש 日本 🙂"
        );
        assert_eq!(printable_cell("a\u{2028}b"), "a\\u{2028}b");
        assert!(matches!(printable("é ש 日本 🙂"), Cow::Borrowed(_)));
    }

    #[test]
    fn hash_fields_become_typed_json_values() {
        let fields = [
            ("due_ms", "1767225600000"),
            ("attempt", "2"),
            ("exit_code", ""),
            ("finished_ms", "soon"),
            ("output", "42"),
            ("job", "nightly"),
        ]
        .map(|(name, value)| (name.to_owned(), value.to_owned()));
        assert_eq!(
            serde_json::Value::Object(typed_fields(fields)),
            serde_json::json!({
                "due_ms": 1_767_225_600_000_i64,
                "attempt": 2,
                "exit_code": null,
                "finished_ms": "soon",
                "output": "42",
                "job": "nightly",
            })
        );
    }
}
