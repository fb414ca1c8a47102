//! How the commands print for scripts: one JSON document with `--json`, one JSON object a line
//! with `--jsonl`. The shape of each is documented in docs/cli.md, and tested against it.

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
