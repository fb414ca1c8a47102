//! A job's last outcomes as a strip of coloured cells, inline SVG rendered on the server: each
//! cell names its run, time and outcome, and the strip says in words what it shows.

use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::chart::when;

/// The most cells a strip draws: the newest, so a job with thousands of runs stays one line.
pub const MAX_CELLS: usize = 100;

/// A cell's side in SVG units, and the gap after it.
const CELL: f64 = 10.0;
const GAP: f64 = 2.0;

/// How a run ended, as the console colours it: each outcome is a CSS class the page's
/// stylesheet gives a colour per theme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// It ran and exited 0.
    Succeeded,
    /// It ran and failed (it may be retried).
    Failed,
    /// It failed its last attempt and is in the dead letters.
    Dead,
    /// Its fire was not run: missed, or its overlap forbidden.
    Skipped,
    /// It runs now.
    Running,
}

impl Outcome {
    /// Its word, as the command line prints it.
    pub fn word(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Dead => "dead",
            Outcome::Skipped => "skipped",
            Outcome::Running => "running",
        }
    }

    /// The CSS class that colours it: `outcome-` and its word. The stylesheet sets its `fill`,
    /// and its `fill-opacity` to 1 over the fallback shade.
    pub fn class(self) -> String {
        format!("outcome-{}", self.word())
    }

    /// Its shade of `currentColor` where no stylesheet colours it (a feed reader, a page
    /// saved without its CSS): outcomes stay apart, if only by their darkness.
    pub(super) fn fallback_opacity(self) -> &'static str {
        match self {
            Outcome::Succeeded => "0.35",
            Outcome::Failed => "1",
            Outcome::Dead => "0.85",
            Outcome::Skipped => "0.15",
            Outcome::Running => "0.6",
        }
    }
}

/// One run in a strip.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StripCell {
    /// Its id.
    pub run_id: String,
    /// When it started, or its fire's time when it did not run.
    pub at: DateTime<Utc>,
    /// How it ended.
    pub outcome: Outcome,
}

/// The last [`MAX_CELLS`] of `cells` (oldest first), `subject` naming the job in its summary.
pub fn outcome_strip(subject: &str, cells: &[StripCell]) -> Markup {
    let shown = &cells[cells.len().saturating_sub(MAX_CELLS)..];
    let Some(latest) = shown.last() else {
        let summary = format!("{subject}: last outcomes: no runs yet");
        return html! {
            svg class="strip empty" viewBox="0 0 120 12" role="img" aria-label=(summary) {
                title { (summary) }
                text class="label" fill="currentColor" font-size="10" x="0" y="10" {
                    "no runs yet"
                }
            }
        };
    };
    let counts: Vec<String> = [
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::Dead,
        Outcome::Skipped,
        Outcome::Running,
    ]
    .into_iter()
    .filter_map(|outcome| {
        let count = shown.iter().filter(|cell| cell.outcome == outcome).count();
        (count > 0).then(|| format!("{count} {}", outcome.word()))
    })
    .collect();
    let summary = format!(
        "{subject}: last {} outcomes, oldest first: {}; latest {} at {}",
        shown.len(),
        counts.join(", "),
        latest.outcome.word(),
        when(latest.at),
    );
    let width = shown.len() as f64 * (CELL + GAP) - GAP;
    html! {
        svg class="strip" viewBox={ "0 0 " (width) " " (CELL) } role="img" aria-label=(summary) {
            title { (summary) }
            @for (index, cell) in shown.iter().enumerate() {
                rect class=(cell.outcome.class()) fill="currentColor"
                    fill-opacity=(cell.outcome.fallback_opacity())
                    x=(index as f64 * (CELL + GAP)) y="0" width=(CELL) height=(CELL) {
                    title { "run " (cell.run_id) ", " (when(cell.at)) ": " (cell.outcome.word()) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::web::chart::tests::elements;

    fn cell(index: usize, outcome: Outcome) -> StripCell {
        StripCell {
            run_id: format!("run-{index}"),
            at: Utc
                .timestamp_opt(1_800_000_000 + 60 * index as i64, 0)
                .single()
                .expect("a valid time"),
            outcome,
        }
    }

    #[test]
    fn strip_draws_each_outcome_and_names_each_run() {
        let cells = [
            cell(0, Outcome::Succeeded),
            cell(1, Outcome::Failed),
            cell(2, Outcome::Skipped),
            cell(3, Outcome::Succeeded),
        ];
        let svg = outcome_strip("backup", &cells).into_string();
        let elements = elements(&svg);
        assert_eq!(elements.iter().filter(|name| *name == "rect").count(), 4);
        assert!(svg.contains(
            "aria-label=\"backup: last 4 outcomes, oldest first: 2 succeeded, 1 failed, 1 \
             skipped; latest succeeded at 2027-01-15 08:03 UTC\""
        ));
        assert!(svg.contains(
            "class=\"outcome-failed\" fill=\"currentColor\" fill-opacity=\"1\" x=\"12\""
        ));
        assert!(svg.contains("<title>run run-1, 2027-01-15 08:01 UTC: failed</title>"));
    }

    #[test]
    fn strip_without_runs_says_so() {
        let svg = outcome_strip("backup", &[]).into_string();
        elements(&svg);
        assert!(svg.contains("aria-label=\"backup: last outcomes: no runs yet\""));
        assert!(svg.contains(">no runs yet</text>"));
    }

    #[test]
    fn strip_of_ten_thousand_runs_shows_the_newest() {
        let cells: Vec<StripCell> = (0..10_000)
            .map(|index| cell(index, Outcome::Dead))
            .collect();
        let svg = outcome_strip("backup", &cells).into_string();
        let elements = elements(&svg);
        assert_eq!(
            elements.iter().filter(|name| *name == "rect").count(),
            MAX_CELLS
        );
        assert!(svg.contains("run run-9999,"));
        assert!(
            !svg.contains("run run-9899,"),
            "only the newest {MAX_CELLS}"
        );
        assert!(svg.contains("last 100 outcomes, oldest first: 100 dead"));
    }

    #[test]
    fn strip_escapes_job_names_and_run_ids() {
        let hostile = "<script>alert(\"x\")</script>";
        let cells = [StripCell {
            run_id: hostile.to_owned(),
            ..cell(0, Outcome::Running)
        }];
        let svg = outcome_strip(hostile, &cells).into_string();
        assert!(!svg.contains("<script"), "{svg}");
        assert!(svg.contains("<title>run &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;, "));
        elements(&svg);
    }
}
