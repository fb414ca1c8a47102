//! The reader of one table of a schedule file, shared by `[jobs]` and `[workflows]` tables: each
//! field taken and typed on its own, a problem reported at the field's value, every field left
//! over reported as unknown; and the conversions of the fields both kinds of table have.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono_tz::Tz;
use serde::de::DeserializeOwned;
use toml::{Spanned, Value};

use super::diagnostics::{Diagnostic, FileContext};
use crate::schedule::{Schedule, parse_zone};

/// A table as written: field name -> value, each with its byte span.
pub(in crate::schedule) type RawTable = BTreeMap<Spanned<String>, Spanned<Value>>;

/// Whose table is read, which decides what its problems name.
#[derive(Debug, Clone, Copy)]
enum Owner {
    /// A `[jobs.<name>]` table: a problem names the job and the field, or `defaults.<field>`
    /// alone when the job takes that field from `[defaults]`.
    Job,
    /// A `[workflows.<name>]` table: a problem names `workflows.<name>.<field>`.
    Workflow,
}

/// Checks and types one table's fields, collecting every problem, so that one pass reports
/// every bad field rather than stopping at the first.
pub(in crate::schedule) struct Table<'a> {
    file: &'a FileContext<'a>,
    name: &'a Spanned<String>,
    owner: Owner,
    /// The fields not taken yet: what is left at the end is unknown.
    fields: RawTable,
    /// The fields the table takes from `[defaults]`: their problems are the defaults'.
    inherited: BTreeSet<String>,
    diagnostics: Vec<Diagnostic>,
}

impl<'a> Table<'a> {
    /// A job's table, given each field of `defaults` that it does not set itself.
    pub(super) fn job(
        file: &'a FileContext<'a>,
        name: &'a Spanned<String>,
        mut fields: RawTable,
        defaults: Option<&RawTable>,
    ) -> Self {
        let mut inherited = BTreeSet::new();
        for (field, value) in defaults.into_iter().flatten() {
            if !fields.contains_key(field.get_ref().as_str()) {
                fields.insert(field.clone(), value.clone());
                inherited.insert(field.get_ref().clone());
            }
        }
        Self {
            file,
            name,
            owner: Owner::Job,
            fields,
            inherited,
            diagnostics: Vec::new(),
        }
    }

    /// A workflow's table: a workflow takes nothing from `[defaults]`.
    pub(in crate::schedule) fn workflow(
        file: &'a FileContext<'a>,
        name: &'a Spanned<String>,
        fields: RawTable,
    ) -> Self {
        Self {
            file,
            name,
            owner: Owner::Workflow,
            fields,
            inherited: BTreeSet::new(),
            diagnostics: Vec::new(),
        }
    }

    /// The file the table is written in.
    pub(in crate::schedule) fn file(&self) -> &'a FileContext<'a> {
        self.file
    }

    /// The table's name, where its header names it.
    pub(in crate::schedule) fn name(&self) -> &'a Spanned<String> {
        self.name
    }

    /// Where the table's name is written: the place of a problem with no field of its own.
    pub(in crate::schedule) fn at(&self) -> usize {
        self.name.span().start
    }

    /// Whether `field` comes from `[defaults]` rather than from the table itself.
    pub(super) fn inherits(&self, field: &str) -> bool {
        self.inherited.contains(field)
    }

    /// Removes `field` and converts its value; a failed conversion is reported at the value and
    /// gives `None`, like an absent field, so reading goes on to find further problems.
    pub(in crate::schedule) fn take<T>(
        &mut self,
        field: &str,
        convert: impl FnOnce(Value) -> Result<T, String>,
    ) -> Option<T> {
        let value = self.remove(field)?;
        let offset = value.span().start;
        match convert(value.into_inner()) {
            Ok(converted) => Some(converted),
            Err(message) => {
                self.report(offset, Some(field), message);
                None
            }
        }
    }

    /// Removes `field` as written, for a field whose problems are reported inside its value.
    pub(in crate::schedule) fn remove(&mut self, field: &str) -> Option<Spanned<Value>> {
        self.fields.remove(field)
    }

    /// Where the value of `field` is written, if the field is there and not taken yet.
    pub(super) fn offset_of(&self, field: &str) -> Option<usize> {
        self.fields.get(field).map(|value| value.span().start)
    }

    /// Whether a problem of `field` is reported already, so that a check across fields does
    /// not add a second one that only follows from it.
    pub(in crate::schedule) fn has_reported(&self, field: &str) -> bool {
        let named: Vec<String> = match self.owner {
            Owner::Job => vec![field.to_owned(), format!("defaults.{field}")],
            Owner::Workflow => vec![format!("workflows.{}.{field}", self.name.get_ref())],
        };
        self.diagnostics.iter().any(|diagnostic| {
            diagnostic
                .field
                .as_ref()
                .is_some_and(|reported| named.contains(reported))
        })
    }

    /// Reports a problem at `offset`, of `field` or of the table as a whole.
    pub(in crate::schedule) fn report(
        &mut self,
        offset: usize,
        field: Option<&str>,
        message: String,
    ) {
        let diagnostic = match self.owner {
            Owner::Job => match field.filter(|field| self.inherited.contains(*field)) {
                Some(field) => self.file.diagnostic(
                    Some(offset),
                    None,
                    Some(&format!("defaults.{field}")),
                    message,
                ),
                None => {
                    self.file
                        .diagnostic(Some(offset), Some(self.name.get_ref()), field, message)
                }
            },
            Owner::Workflow => {
                let field = match field {
                    Some(field) => format!("workflows.{}.{field}", self.name.get_ref()),
                    None => format!("workflows.{}", self.name.get_ref()),
                };
                self.file
                    .diagnostic(Some(offset), None, Some(&field), message)
            }
        };
        self.diagnostics.push(diagnostic);
    }

    /// Reports every field not taken, naming the `known` ones.
    pub(in crate::schedule) fn report_unknown(&mut self, known: &[&str]) {
        let unknown: Vec<_> = std::mem::take(&mut self.fields).into_keys().collect();
        for field in unknown {
            self.report(
                field.span().start,
                Some(field.get_ref()),
                format!("unknown field: expected one of {}", known.join(", ")),
            );
        }
    }

    /// Whether any problem is reported.
    pub(in crate::schedule) fn has_problems(&self) -> bool {
        !self.diagnostics.is_empty()
    }

    /// Every problem reported, in the order found.
    pub(in crate::schedule) fn into_diagnostics(self) -> Vec<Diagnostic> {
        self.diagnostics
    }
}

/// Converts a value with serde, keeping serde's message ("invalid type: integer `3`, expected a
/// string", "unknown variant `hgh`, expected one of ...").
pub(in crate::schedule) fn typed<T: DeserializeOwned>(value: Value) -> Result<T, String> {
    value
        .try_into()
        .map_err(|error: toml::de::Error| error.message().trim_end().to_owned())
}

/// A duration as people write it: `"30s"`, `"15m"`, `"2h"`.
pub(super) fn duration(value: Value) -> Result<Duration, String> {
    let text = typed::<String>(value)?;
    humantime::parse_duration(&text).map_err(|error| {
        format!("\"{text}\" is not a duration ({error}): expected a string like \"30s\", \"15m\" or \"2h\"")
    })
}

/// `schedule`: a cron expression, a macro such as `@daily`, or `@every <duration>`.
pub(in crate::schedule) fn schedule(value: Value) -> Result<Schedule, String> {
    Schedule::parse(&typed::<String>(value)?).map_err(|error| error.to_string())
}

/// `timezone`: an IANA zone name.
pub(in crate::schedule) fn zone(value: Value) -> Result<Tz, String> {
    parse_zone(&typed::<String>(value)?)
}
