//! `[queues.<name>]` tables: what becomes of a queue's ready runs when no live replica serves
//! it, the escape hatch of a region that is down.
//!
//! ```toml
//! [queues.eu-west]
//! fallback = "default"       # where its ready runs go
//! fallback_after = "2m"      # once no live replica has served it for this long
//! ```

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::file::{Diagnostic, FileContext, check_name};
use super::job::Source;

/// How long a queue stays unserved before its ready runs move, when `fallback_after` is not
/// given.
pub const DEFAULT_FALLBACK_AFTER: Duration = Duration::from_secs(120);

/// The shortest `fallback_after`: a few heartbeats, so that a replica restarting, or a
/// heartbeat late by a second, never moves a queue's runs away.
pub const MIN_FALLBACK_AFTER: Duration = Duration::from_secs(10);

/// A queue whose ready runs move to another once no live replica has served it for a while.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueFallback {
    /// The queue watched.
    pub queue: String,
    /// Where its ready runs go.
    pub fallback: String,
    /// How long no live replica may serve it before they go.
    pub after: Duration,
    /// Where its table is declared.
    pub source: Source,
}

/// The queue fallbacks as a replica knows them; replaced whole on reload.
pub type QueueFallbacks = std::sync::Arc<Vec<QueueFallback>>;

/// The longest `fallback_after`: a week; a typo of a unit must not switch the fallback off.
pub const MAX_FALLBACK_AFTER: Duration = Duration::from_secs(7 * 24 * 3600);

/// A queue declared twice (across all files); fallbacks that lead back to where they started
/// (runs would move around the cycle while every queue in it is unserved); a fallback that is
/// neither `default` nor the queue of a job in `job_queues`, which replicas serve only when
/// told to: a typo there would move runs where nothing claims them.
/// `complete` says whether `job_queues` are the queues of every job declared: when a job did
/// not read well, a fallback to a queue no other job names may be that job's, and is not judged.
pub(super) fn check_fallbacks(
    queues: &[QueueFallback],
    job_queues: &[&str],
    complete: bool,
) -> Vec<Diagnostic> {
    let diagnostic = |queue: &QueueFallback, message: String| Diagnostic {
        path: queue.source.path.clone(),
        position: Some((queue.source.line, queue.source.column)),
        job: None,
        field: Some(format!("queues.{}", queue.queue)),
        message,
    };
    let mut diagnostics = Vec::new();
    let mut by_name: HashMap<&str, &QueueFallback> = HashMap::new();
    for queue in queues {
        match by_name.get(queue.queue.as_str()) {
            Some(first) => diagnostics.push(diagnostic(
                queue,
                format!(
                    "declared twice: first at {}:{}; a queue has one [queues] table across all \
                     files",
                    first.source.path.display(),
                    first.source.line
                ),
            )),
            None => {
                by_name.insert(&queue.queue, queue);
            }
        }
    }
    for queue in queues {
        if complete && queue.fallback != "default" && !job_queues.contains(&queue.fallback.as_str())
        {
            diagnostics.push(diagnostic(
                queue,
                format!(
                    "fallback \"{}\" is neither default nor the queue of a job here: only \
                     replicas started with --queues {} would claim the runs moved there",
                    queue.fallback, queue.fallback
                ),
            ));
        }
        let mut path = vec![queue.queue.as_str()];
        let mut next = queue.fallback.as_str();
        while let Some(hop) = by_name.get(next) {
            if next == queue.queue {
                path.push(next);
                diagnostics.push(diagnostic(
                    queue,
                    format!(
                        "its fallbacks lead back to it ({}): runs would move around while \
                         every queue of the cycle is unserved",
                        path.join(" -> ")
                    ),
                ));
                break;
            }
            if path.contains(&next) {
                // A cycle that does not pass through this queue: reported at its own queues.
                break;
            }
            path.push(next);
            next = hop.fallback.as_str();
        }
    }
    diagnostics
}

/// A `[queues.<name>]` table as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawQueue {
    fallback: Spanned<String>,
    #[serde(default)]
    fallback_after: Option<Spanned<String>>,
}

/// Checks one `[queues.<name>]` table.
pub(super) fn read_queue(
    file: &FileContext<'_>,
    name: &Spanned<String>,
    table: RawQueue,
) -> Result<QueueFallback, Vec<Diagnostic>> {
    let field = |which: &str| format!("queues.{}.{which}", name.get_ref());
    let mut diagnostics = Vec::new();
    if let Err(problem) = check_name(name.get_ref()) {
        diagnostics.push(file.diagnostic(Some(name.span().start), None, None, problem));
    }
    let fallback = table.fallback;
    if let Err(problem) = check_name(fallback.get_ref()) {
        diagnostics.push(file.diagnostic(
            Some(fallback.span().start),
            None,
            Some(&field("fallback")),
            problem,
        ));
    } else if fallback.get_ref() == name.get_ref() {
        diagnostics.push(file.diagnostic(
            Some(fallback.span().start),
            None,
            Some(&field("fallback")),
            "a queue cannot fall back to itself".to_owned(),
        ));
    }
    let after = match table.fallback_after {
        None => DEFAULT_FALLBACK_AFTER,
        Some(text) => match humantime::parse_duration(text.get_ref()) {
            Ok(after) if (MIN_FALLBACK_AFTER..=MAX_FALLBACK_AFTER).contains(&after) => after,
            Ok(after) if after > MAX_FALLBACK_AFTER => {
                diagnostics.push(file.diagnostic(
                    Some(text.span().start),
                    None,
                    Some(&field("fallback_after")),
                    format!(
                        "\"{}\" is longer than {}: leave the table out for no fallback",
                        text.get_ref(),
                        humantime::format_duration(MAX_FALLBACK_AFTER)
                    ),
                ));
                DEFAULT_FALLBACK_AFTER
            }
            Ok(_) => {
                diagnostics.push(file.diagnostic(
                    Some(text.span().start),
                    None,
                    Some(&field("fallback_after")),
                    format!(
                        "\"{}\" is shorter than {}: a replica restarting must not send its \
                         queue's runs away",
                        text.get_ref(),
                        humantime::format_duration(MIN_FALLBACK_AFTER)
                    ),
                ));
                DEFAULT_FALLBACK_AFTER
            }
            Err(error) => {
                diagnostics.push(file.diagnostic(
                    Some(text.span().start),
                    None,
                    Some(&field("fallback_after")),
                    format!("\"{}\" is not a duration like 2m: {error}", text.get_ref()),
                ));
                DEFAULT_FALLBACK_AFTER
            }
        },
    };
    if !diagnostics.is_empty() {
        return Err(diagnostics);
    }
    Ok(QueueFallback {
        queue: name.get_ref().clone(),
        fallback: fallback.into_inner(),
        after,
        source: file.source(name.span().start),
    })
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn fallback(queue: &str, to: &str, line: usize) -> QueueFallback {
        QueueFallback {
            queue: queue.to_owned(),
            fallback: to.to_owned(),
            after: DEFAULT_FALLBACK_AFTER,
            source: Source {
                path: PathBuf::from("queues.toml"),
                line,
                column: 1,
                notify: None,
            },
        }
    }

    #[test]
    fn chains_pass_and_cycles_and_repeats_are_named() {
        let queues = ["eu", "us", "a", "b", "c", "d"];
        let chain = [fallback("eu", "us", 1), fallback("us", "default", 2)];
        assert_eq!(check_fallbacks(&chain, &queues, true), Vec::new());
        let typo = check_fallbacks(&[fallback("eu", "defualt", 1)], &queues, true);
        assert_eq!(typo.len(), 1, "{typo:?}");
        assert!(
            typo[0]
                .message
                .starts_with("fallback \"defualt\" is neither default nor the queue of a job"),
            "{typo:?}"
        );

        let cycle = [
            fallback("a", "b", 1),
            fallback("b", "c", 2),
            fallback("c", "a", 3),
            fallback("d", "a", 4),
        ];
        let found: Vec<String> = check_fallbacks(&cycle, &queues, true)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(
            found[0].contains("queues.a") && found[0].contains("(a -> b -> c -> a)"),
            "{found:?}"
        );

        let twice = [fallback("a", "b", 1), fallback("a", "c", 5)];
        let found = check_fallbacks(&twice, &queues, true);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0]
                .message
                .contains("declared twice: first at queues.toml:1")
        );
    }
}
