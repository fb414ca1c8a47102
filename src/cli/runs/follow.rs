//! `runs show --follow`: a run's output printed as it grows, until the run ends, then how it
//! ended on standard error.

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use super::show::{no_record, output_so_far};
use crate::cli::CliError;
use crate::cli::output::printable;
use crate::cli::times::rfc3339;
use crate::client::Client;
use crate::store::RunState;

/// How often `runs show --follow` reads the run: its worker writes its output at most once a
/// second.
const FOLLOW_EVERY: Duration = Duration::from_millis(500);

/// Prints run `id`'s output as it grows until the run ends, then how it ended on standard
/// error; fails with the run's exit code when it did not succeed. Waits for a run that has not
/// started; a retry's output follows its failed attempt's.
pub(super) async fn follow(
    client: &Client,
    id: &str,
    out: &mut impl Write,
) -> Result<(), CliError> {
    // What was printed of the attempt being followed: its number and its tail as it was then.
    let mut printed: Option<(String, String)> = None;
    // The last attempt whose end was said, so that a retry's wait says it once.
    let mut ended: Option<String> = None;
    loop {
        let fields = client.run(id).await.map_err(CliError::from)?;
        if fields.is_empty() {
            return Err(no_record(client, id).await);
        }
        let field = |name: &str| fields.get(name).cloned().unwrap_or_default();
        let attempt = field("attempt");
        let state = RunState::parse(&field("state"));
        let text = match state {
            Some(RunState::Active) => output_so_far(client, id, &fields)
                .await?
                .map(|so_far| so_far.output),
            // The record's output is the ended attempt's whole tail, which the last write may
            // not have had.
            Some(_) if ended.as_ref() != Some(&attempt) => fields.get("output").cloned(),
            _ => None,
        };
        if let Some(text) = text {
            let before = match &printed {
                Some((shown_attempt, before)) if *shown_attempt == attempt => before.as_str(),
                _ => "",
            };
            write!(out, "{}", printable(new_output(before, &text)))
                .and_then(|()| out.flush())
                .map_err(CliError::io("writing the run's output"))?;
            printed = Some((attempt.clone(), text));
        }
        match state {
            Some(state) if state.is_finished() => return outcome(id, state, &fields),
            Some(RunState::Retrying) if ended.as_ref() != Some(&attempt) => {
                let due = fields
                    .get("due_ms")
                    .and_then(|ms| ms.parse().ok())
                    .map_or_else(|| "later".to_owned(), rfc3339);
                say(&format!(
                    "run {id}: attempt {attempt} failed ({}), tried again at {due}",
                    field("error")
                ));
                ended = Some(attempt);
            }
            _ => {}
        }
        tokio::time::sleep(FOLLOW_EVERY).await;
    }
}

/// What `now`, a run's output tail, adds to `before`, its tail when it was last printed: the
/// part after their overlap. Both may have lost their beginning (marked with `…`); when they
/// do not overlap, more than a tail was written in between, and `now` is new whole, its mark
/// saying that output was skipped.
fn new_output<'a>(before: &str, now: &'a str) -> &'a str {
    let mark = crate::handler::CUT_MARK;
    let old = before.strip_prefix(mark).unwrap_or(before);
    let new = now.strip_prefix(mark).unwrap_or(now);
    (0..old.len())
        .filter(|from| old.is_char_boundary(*from))
        .find(|from| new.starts_with(&old[*from..]))
        .map_or(now, |from| &new[old.len() - from..])
}

/// How a followed run ended, said on standard error; an error with its exit code when it did
/// not succeed.
fn outcome(id: &str, state: RunState, fields: &HashMap<String, String>) -> Result<(), CliError> {
    let exit_code = fields
        .get("exit_code")
        .and_then(|code| code.parse::<i32>().ok());
    let with_code = exit_code.map_or_else(String::new, |code| format!(", exit code {code}"));
    let why = [fields.get("reason"), fields.get("error")]
        .into_iter()
        .flatten()
        .filter(|text| !text.is_empty())
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(": ");
    if state == RunState::Succeeded {
        say(&format!("run {id} succeeded{with_code}"));
        return Ok(());
    }
    Err(CliError::RunNotSucceeded {
        message: format!("run {id} ended {} ({why}{with_code})", state.as_str()),
        code: exit_code
            .and_then(|code| u8::try_from(code).ok())
            .filter(|code| *code != 0)
            .unwrap_or(1),
    })
}

/// A line on standard error, whatever became of it: what a follower says beside the output.
pub(super) fn say(line: &str) {
    let _ = writeln!(std::io::stderr(), "{}", printable(line));
}

#[cfg(test)]
mod tests {
    use super::new_output;

    #[test]
    fn a_follower_prints_what_the_tail_added_since_it_last_printed_it() {
        assert_eq!(new_output("", "a\n"), "a\n");
        assert_eq!(new_output("a\n", "a\nb\n"), "b\n");
        assert_eq!(new_output("a\nb\n", "a\nb\n"), "");
        // The tail lost its beginning in between: they overlap in what both still hold.
        assert_eq!(new_output("one\ntwo\n", "…wo\nthree\n"), "three\n");
        assert_eq!(new_output("…x\ny\n", "…y\nz\n"), "z\n");
        // More than a tail was written in between: all of it, marked as cut.
        assert_eq!(new_output("a\n", "…q\nr\n"), "…q\nr\n");
    }
}
