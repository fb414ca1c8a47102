//! A run's output while it runs: its tail, kept as the output arrives, which the worker
//! publishes to Redis for `redcron runs show` and the record keeps once the run ends.

use std::sync::{Arc, Mutex, PoisonError};

/// How much of a run's output (a command's stdout and stderr together) is kept: with the run
/// once it ends, and in Redis while it runs.
pub const OUTPUT_TAIL_BYTES: usize = 4096;

/// What a tail that lost its beginning starts with: its first line is not the line the command
/// wrote, so it must never read as one (a workflow step's JSON object, say).
pub const CUT_MARK: &str = "…";

/// A run's output so far, shared by its handler, which pushes output as it comes, and its
/// worker, which publishes the tail while the run runs (at most once a second, only when it
/// changed; see `DESIGN.md`). Only the last [`OUTPUT_TAIL_BYTES`] are kept, so a chatty run
/// costs neither the replica nor Redis more than that.
///
/// A registered handler may push its own progress here, to show it while the run runs:
///
/// ```
/// use redcron::handler::{Completed, Outcome, RunContext};
///
/// async fn import(run: RunContext) -> Outcome {
///     for batch in 1..=3 {
///         run.output.push(format!("batch {batch} imported\n").as_bytes());
///     }
///     // The record kept once the run ends is the outcome's own output.
///     Ok(Completed { output: run.output.text(), ..Completed::default() })
/// }
/// ```
#[derive(Debug, Clone, Default)]
pub struct LiveOutput {
    shared: Arc<Mutex<Shared>>,
}

#[derive(Debug, Default)]
struct Shared {
    tail: Tail,
    /// Output arrived since the worker last took the tail to publish it.
    changed: bool,
}

impl LiveOutput {
    /// Appends `chunk` of output: any bytes, split anywhere (a character cut between two
    /// chunks is whole again once both arrived).
    pub fn push(&self, chunk: &[u8]) {
        if chunk.is_empty() {
            return;
        }
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        shared.tail.push(chunk);
        shared.changed = true;
    }

    /// The tail as text: at most [`OUTPUT_TAIL_BYTES`], starting with `…` when earlier output
    /// was dropped.
    pub fn text(&self) -> String {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .tail
            .text()
    }

    /// The tail as text when output arrived since the last call, for the worker to publish.
    pub(crate) fn take_changed(&self) -> Option<String> {
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut shared.changed).then(|| shared.tail.text())
    }
}

/// The last [`OUTPUT_TAIL_BYTES`] of output.
#[derive(Debug, Default)]
struct Tail {
    bytes: Vec<u8>,
    /// Whether earlier output was dropped.
    cut: bool,
}

impl Tail {
    fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > OUTPUT_TAIL_BYTES {
            let excess = self.bytes.len() - OUTPUT_TAIL_BYTES;
            self.bytes.drain(..excess);
            self.cut = true;
        }
    }

    /// The tail as text: at most [`OUTPUT_TAIL_BYTES`], the mark included, cut at a character
    /// boundary. Bytes that are not UTF-8 read as U+FFFD, which is longer: the bound holds for
    /// the text, not only for the bytes.
    fn text(&self) -> String {
        // A character the cut fell inside would read as U+FFFD: what is left of it goes with
        // the rest of what was cut (a UTF-8 character has at most 3 continuation bytes).
        let inside = if self.cut {
            self.bytes
                .iter()
                .take(3)
                .take_while(|byte| **byte & 0xC0 == 0x80)
                .count()
        } else {
            0
        };
        let text = String::from_utf8_lossy(&self.bytes[inside..]);
        if !self.cut && text.len() <= OUTPUT_TAIL_BYTES {
            return text.into_owned();
        }
        let mut from = text.len() - (OUTPUT_TAIL_BYTES - CUT_MARK.len()).min(text.len());
        while !text.is_char_boundary(from) {
            from += 1;
        }
        format!("{CUT_MARK}{}", &text[from..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tail_that_lost_its_beginning_says_so_and_its_cut_line_is_no_object() {
        let mut tail = Tail::default();
        let object = format!("{{\"kept\": \"{}\"}}", "z".repeat(OUTPUT_TAIL_BYTES - 12));
        // The cut falls just before an object that ends a longer line.
        assert_eq!(object.len(), OUTPUT_TAIL_BYTES);
        tail.push(b"NOT JSON ");
        tail.push(object.as_bytes());
        let text = tail.text();
        assert!(text.starts_with(CUT_MARK), "{}", &text[..20]);
        assert!(crate::payload::object_problem(&text).is_some());

        let mut whole = Tail::default();
        whole.push(b"one line\n{\"a\": 1}\n");
        assert_eq!(whole.text(), "one line\n{\"a\": 1}\n");
    }

    #[test]
    fn a_cut_tail_starts_at_a_whole_character_and_stays_within_its_bound() {
        let mut tail = Tail::default();
        // Two-byte characters: the byte cut falls inside one.
        tail.push("é".repeat(OUTPUT_TAIL_BYTES).as_bytes());
        tail.push(b"x");
        let text = tail.text();
        assert!(text.len() <= OUTPUT_TAIL_BYTES, "{}", text.len());
        let kept = text.strip_prefix(CUT_MARK).expect("marked as cut");
        assert!(kept.trim_end_matches('x').chars().all(|c| c == 'é'));

        let mut binary = Tail::default();
        binary.push(&[0xff; OUTPUT_TAIL_BYTES]);
        let text = binary.text();
        assert!(text.len() <= OUTPUT_TAIL_BYTES, "{}", text.len());
        assert!(
            text.ends_with(char::REPLACEMENT_CHARACTER),
            "shown, not dropped"
        );
    }

    #[test]
    fn only_output_that_arrived_since_the_last_take_is_taken() {
        let output = LiveOutput::default();
        assert_eq!(output.take_changed(), None, "no output yet");
        output.push(b"one\n");
        output.push(b"");
        assert_eq!(output.take_changed().as_deref(), Some("one\n"));
        assert_eq!(output.take_changed(), None, "nothing new");
        output.push(b"two\n");
        assert_eq!(output.take_changed().as_deref(), Some("one\ntwo\n"));
        assert_eq!(output.text(), "one\ntwo\n");
    }
}
