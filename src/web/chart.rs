//! The console's charts as inline SVG rendered on the server: fires per bucket stacked by
//! outcome, and a job's run durations with their p50 and p99. No script and no external
//! reference; shapes are coloured by the outcome classes of [`Outcome`] and `currentColor`, so
//! the page's stylesheet colours them in either theme (it sets `fill` and `fill-opacity` of
//! each `outcome-*` class) and they stay legible without it.

use std::time::Duration;

use chrono::{DateTime, Utc};
use maud::{Markup, html};

use super::strip::Outcome;

/// The most bars a fires chart draws: more buckets are merged, neighbours summed, so a chart
/// of 10,000 buckets stays a few hundred SVG elements.
pub const MAX_BARS: usize = 120;

/// The most points a durations chart's line has: more runs are grouped, each group drawn at
/// its longest run, so a spike stays visible.
pub const MAX_POINTS: usize = 200;

/// The drawing's size in SVG units; the page scales it to its width.
const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 160.0;
/// Room for the axis labels: left of the plot and under it.
const LEFT: f64 = 64.0;
/// Where the plot ends, short of the drawing's edge so a mark on its last point shows whole.
const RIGHT: f64 = WIDTH - 4.0;
const BOTTOM: f64 = 18.0;
/// Room above the plot, for a label at the top of the scale.
const TOP: f64 = 8.0;

/// A durations chart's scale stops at this many times the p99 when the longest run passes
/// it: one run of hours must not flatten a hundred runs of seconds to a line at zero.
const OFF_SCALE_FACTOR: u32 = 4;

/// How many fires of each outcome fell in one bucket of time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FireBucket {
    /// When the bucket starts; buckets are given in order, of equal length.
    pub start: DateTime<Utc>,
    /// Fires whose run succeeded.
    pub succeeded: u64,
    /// Fires whose run failed (retrying, or dead).
    pub failed: u64,
    /// Fires not run (missed, or an overlap forbidden).
    pub skipped: u64,
}

impl FireBucket {
    fn total(&self) -> u64 {
        self.succeeded + self.failed + self.skipped
    }
}

/// One finished run, for a durations chart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunDuration {
    /// Its id.
    pub run_id: String,
    /// When it ended.
    pub ended: DateTime<Utc>,
    /// How long it ran.
    pub duration: Duration,
}

/// A stacked bar chart of `buckets` (oldest first) of fires, `subject` naming what they are
/// ("every job", a job's name) in its summary.
pub fn fires_chart(subject: &str, buckets: &[FireBucket]) -> Markup {
    let (Some(first), Some(last)) = (buckets.first(), buckets.last()) else {
        return empty(&format!("{subject}: fires by outcome: no runs yet"));
    };
    let merged = merge_buckets(buckets);
    let sum = |outcome: fn(&FireBucket) -> u64| buckets.iter().map(outcome).sum::<u64>();
    let (succeeded, failed, skipped) = (
        sum(|bucket| bucket.succeeded),
        sum(|bucket| bucket.failed),
        sum(|bucket| bucket.skipped),
    );
    // A bar counts the fires of its span, which grows with the time shown (13 minutes for a
    // day of minutes): the chart says so, never a rate it does not draw.
    let per = bar_span(buckets, &merged).map_or_else(|| "bar".to_owned(), span_words);
    let summary = format!(
        "{subject}: fires by outcome from {} to {}, per {per}: {succeeded} succeeded, \
         {failed} failed, {skipped} skipped",
        when(first.start),
        when(last.start),
    );
    if succeeded + failed + skipped == 0 {
        return empty(&format!("{summary}: no runs yet"));
    }
    let highest = merged
        .iter()
        .map(FireBucket::total)
        .max()
        .unwrap_or(1)
        .max(1);
    let plot_height = HEIGHT - TOP - BOTTOM;
    let slot = (RIGHT - LEFT) / merged.len() as f64;
    let bar_width = (slot * 0.8).max(1.0);
    html! {
        svg class="chart fires" viewBox=(view_box()) role="img" aria-label=(summary) {
            title { (summary) }
            (axes(&highest.to_string(), &when(first.start), &when(last.start)))
            text class="label" fill="currentColor" font-size="10" x=(units(LEFT + 4.0))
                y=(units(TOP + 8.0)) { "fires per " (per) }
            @for (index, bucket) in merged.iter().enumerate() {
                @let x = LEFT + index as f64 * slot + (slot - bar_width) / 2.0;
                g {
                    title {
                        (when(bucket.start)) ": " (bucket.succeeded) " succeeded, "
                        (bucket.failed) " failed, " (bucket.skipped) " skipped"
                    }
                    @for (outcome, y, height) in stack(bucket, highest, plot_height) {
                        rect class=(outcome.class()) fill="currentColor"
                            fill-opacity=(outcome.fallback_opacity())
                            x=(units(x)) y=(units(y)) width=(units(bar_width))
                            height=(units(height)) {}
                    }
                }
            }
        }
    }
}

/// A line chart of `runs`' durations (oldest first) with guide lines at their p50 and p99,
/// `subject` naming the job in its summary.
pub fn durations_chart(subject: &str, runs: &[RunDuration]) -> Markup {
    if runs.is_empty() {
        return empty(&format!("{subject}: run durations: no runs yet"));
    }
    let mut sorted: Vec<Duration> = runs.iter().map(|run| run.duration).collect();
    sorted.sort_unstable();
    let (p50, p99) = (percentile(&sorted, 50), percentile(&sorted, 99));
    let longest = sorted[sorted.len() - 1];
    let scale_top = if longest > p99 * OFF_SCALE_FACTOR && !p99.is_zero() {
        p99 * OFF_SCALE_FACTOR
    } else {
        longest
    }
    .max(Duration::from_millis(1));
    let off_scale = runs.iter().filter(|run| run.duration > scale_top).count();
    let summary = format!(
        "{subject}: durations of the last {} runs: median {}, p99 {}, longest {}",
        runs.len(),
        human(p50),
        human(p99),
        human(longest),
    );
    let plot_height = HEIGHT - TOP - BOTTOM;
    let y = |duration: Duration| {
        let share = duration.min(scale_top).as_secs_f64() / scale_top.as_secs_f64();
        HEIGHT - BOTTOM - share * plot_height
    };
    let points = downsample(runs);
    let step = (RIGHT - LEFT) / (points.len().max(2) - 1) as f64;
    let line: Vec<String> = points
        .iter()
        .enumerate()
        .map(|(index, run)| {
            format!(
                "{},{}",
                units(LEFT + index as f64 * step),
                units(y(run.duration))
            )
        })
        .collect();
    let longest_run = runs
        .iter()
        .max_by_key(|run| run.duration)
        .expect("runs is not empty");
    html! {
        svg class="chart durations" viewBox=(view_box()) role="img" aria-label=(summary) {
            title { (summary) }
            (axes(&human(scale_top), &when(runs[0].ended), &when(runs[runs.len() - 1].ended)))
            // p50 labelled under its line at the left, p99 over its line at the right: the two
            // lines are often close, their labels then apart.
            @for (name, value, x, dy, anchor) in [
                ("p50", p50, LEFT + 4.0, 10.0, "start"),
                ("p99", p99, RIGHT, -2.0, "end"),
            ] {
                @let at = y(value);
                line class={ "guide " (name) } stroke="currentColor" stroke-dasharray="4 3"
                    stroke-opacity="0.6" x1=(units(LEFT)) x2=(units(RIGHT)) y1=(units(at))
                    y2=(units(at)) {}
                text class="label" fill="currentColor" font-size="10" text-anchor=(anchor)
                    x=(units(x)) y=(units(at + dy)) { (name) " " (human(value)) }
            }
            polyline class="line" fill="none" stroke="currentColor" stroke-width="1.5"
                points=(line.join(" ")) {
                title { "longest: " (human(longest_run.duration)) ", run " (longest_run.run_id) }
            }
            // The newest run marked: the line's end, and the only mark of a job run once.
            @let newest = &runs[runs.len() - 1];
            circle class="newest" fill="currentColor" r="2.5"
                cx=(units(LEFT + (points.len() - 1) as f64 * step)) cy=(units(y(newest.duration))) {
                title { "newest: " (human(newest.duration)) ", run " (newest.run_id) }
            }
            @if off_scale > 0 {
                text class="label off-scale" fill="currentColor" font-size="10"
                    x=(units(LEFT + 4.0)) y=(units(TOP + 10.0)) {
                    (off_scale) " above the scale, longest " (human(longest))
                    " (run " (longest_run.run_id) ")"
                }
            }
        }
    }
}

/// The segments of `bucket`'s bar, bottom up, as outcome, top and height, the plot being
/// `plot_height` high for `highest` fires; an outcome without fires has none.
fn stack(bucket: &FireBucket, highest: u64, plot_height: f64) -> Vec<(Outcome, f64, f64)> {
    let mut base = HEIGHT - BOTTOM;
    [
        (Outcome::Succeeded, bucket.succeeded),
        (Outcome::Failed, bucket.failed),
        (Outcome::Skipped, bucket.skipped),
    ]
    .into_iter()
    .filter(|(_, count)| *count > 0)
    .map(|(outcome, count)| {
        let height = count as f64 / highest as f64 * plot_height;
        base -= height;
        (outcome, base, height)
    })
    .collect()
}

/// `runs` in at most [`MAX_POINTS`] points: consecutive groups, each drawn as its longest run.
fn downsample(runs: &[RunDuration]) -> Vec<&RunDuration> {
    let group = runs.len().div_ceil(MAX_POINTS);
    runs.chunks(group)
        .filter_map(|chunk| chunk.iter().max_by_key(|run| run.duration))
        .collect()
}

/// `buckets` in at most [`MAX_BARS`]: consecutive groups summed, each starting at its first.
fn merge_buckets(buckets: &[FireBucket]) -> Vec<FireBucket> {
    let group = buckets.len().div_ceil(MAX_BARS);
    buckets
        .chunks(group)
        .map(|chunk| FireBucket {
            start: chunk[0].start,
            succeeded: chunk.iter().map(|bucket| bucket.succeeded).sum(),
            failed: chunk.iter().map(|bucket| bucket.failed).sum(),
            skipped: chunk.iter().map(|bucket| bucket.skipped).sum(),
        })
        .collect()
}

/// How long one bar of `merged` (made of `buckets`) lasts: from one bar's start to the next,
/// or for a single bar its buckets' length times their number; `None` for a single bucket.
fn bar_span(buckets: &[FireBucket], merged: &[FireBucket]) -> Option<chrono::TimeDelta> {
    match (merged, buckets) {
        ([first, second, ..], _) => Some(second.start - first.start),
        (_, [first, second, ..]) => {
            Some((second.start - first.start) * i32::try_from(buckets.len()).ok()?)
        }
        _ => None,
    }
}

/// A bar's span in words: "13 min", "2 h", "30 s".
fn span_words(span: chrono::TimeDelta) -> String {
    let seconds = span.num_seconds();
    match seconds {
        3600.. if seconds % 3600 == 0 => format!("{} h", seconds / 3600),
        60.. if seconds % 60 == 0 => format!("{} min", seconds / 60),
        _ => format!("{seconds} s"),
    }
}

/// The nearest-rank `p`th percentile of `sorted`, which is not empty.
fn percentile(sorted: &[Duration], p: usize) -> Duration {
    let rank = (sorted.len() * p).div_ceil(100).max(1);
    sorted[rank - 1]
}

/// The frame both charts share: the baseline, the top of the scale, the first and last time.
fn axes(top: &str, from: &str, to: &str) -> Markup {
    html! {
        line class="axis" stroke="currentColor" stroke-opacity="0.4" x1=(units(LEFT))
            x2=(units(RIGHT)) y1=(units(HEIGHT - BOTTOM)) y2=(units(HEIGHT - BOTTOM)) {}
        text class="label" fill="currentColor" font-size="10" text-anchor="end"
            x=(units(LEFT - 4.0)) y=(units(TOP + 8.0)) { (top) }
        text class="label" fill="currentColor" font-size="10" text-anchor="end"
            x=(units(LEFT - 4.0)) y=(units(HEIGHT - BOTTOM)) { "0" }
        text class="label" fill="currentColor" font-size="10" x=(units(LEFT))
            y=(units(HEIGHT - 4.0)) { (from) }
        text class="label" fill="currentColor" font-size="10" text-anchor="end"
            x=(units(RIGHT)) y=(units(HEIGHT - 4.0)) { (to) }
    }
}

/// A chart with nothing to draw: its summary, said and shown.
fn empty(summary: &str) -> Markup {
    html! {
        svg class="chart empty" viewBox=(view_box()) role="img" aria-label=(summary) {
            title { (summary) }
            text class="label" fill="currentColor" text-anchor="middle" x=(units(WIDTH / 2.0))
                y=(units(HEIGHT / 2.0)) { "no runs yet" }
        }
    }
}

fn view_box() -> String {
    format!("0 0 {WIDTH} {HEIGHT}")
}

/// A coordinate to a tenth of a unit: finer is invisible and only lengthens the page.
fn units(value: f64) -> String {
    format!("{value:.1}")
}

/// A time as people read it, to the minute.
pub(super) fn when(at: DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// A duration as people read it, to the millisecond ("1m 3s 250ms").
pub(super) fn human(duration: Duration) -> String {
    let rounded = Duration::from_millis(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
    if rounded.is_zero() {
        "0ms".to_owned()
    } else {
        humantime::format_duration(rounded).to_string()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use chrono::TimeZone;

    /// The elements of `svg`, in order, after checking that it is one `svg` element whose
    /// every tag is closed in order, with no script, no style, no event handler and no
    /// reference to anything outside it.
    pub(in crate::web) fn elements(svg: &str) -> Vec<String> {
        let mut open: Vec<String> = Vec::new();
        let mut seen = Vec::new();
        let mut rest = svg;
        while let Some(start) = rest.find('<') {
            let end = rest[start..].find('>').expect("every tag ends") + start;
            let tag = &rest[start + 1..end];
            rest = &rest[end + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(
                    open.pop().as_deref(),
                    Some(name),
                    "tags close in order: {svg}"
                );
                continue;
            }
            // The attributes' names: what is left once the quoted values are taken out.
            let unquoted: String = tag.split('"').step_by(2).collect();
            let mut words = unquoted.split_whitespace();
            let name = words.next().expect("a tag name").to_owned();
            for attribute in words.map(|word| word.trim_end_matches('=')) {
                assert!(
                    !attribute.starts_with("on")
                        && !attribute.contains("href")
                        && attribute != "style",
                    "no {attribute} attribute: {svg}"
                );
            }
            assert!(!["script", "style", "image", "use", "foreignObject"].contains(&name.as_str()));
            seen.push(name.clone());
            open.push(name);
        }
        assert!(open.is_empty(), "every tag is closed: {svg}");
        assert_eq!(seen.first().map(String::as_str), Some("svg"));
        assert_eq!(seen.iter().filter(|name| *name == "svg").count(), 1);
        assert!(!svg.contains("url("), "no external reference: {svg}");
        seen
    }

    fn minute(index: i64) -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000 + 60 * index, 0)
            .single()
            .expect("a valid time")
    }

    /// The points (`x,y`) of the chart's first line.
    fn line_points(svg: &str) -> Vec<&str> {
        svg.split("points=\"")
            .nth(1)
            .and_then(|line| line.split('"').next())
            .expect("a line with its points")
            .split(' ')
            .collect()
    }

    fn run(index: usize, millis: u64) -> RunDuration {
        RunDuration {
            run_id: format!("run-{index}"),
            ended: minute(index as i64),
            duration: Duration::from_millis(millis),
        }
    }

    #[test]
    fn fires_chart_stacks_each_outcome_and_says_the_totals() {
        let buckets = [
            FireBucket {
                start: minute(0),
                succeeded: 3,
                failed: 1,
                skipped: 0,
            },
            FireBucket {
                start: minute(1),
                succeeded: 0,
                failed: 0,
                skipped: 2,
            },
        ];
        let svg = fires_chart("every job", &buckets).into_string();
        let elements = elements(&svg);
        assert_eq!(elements.iter().filter(|name| *name == "rect").count(), 3);
        assert!(svg.contains(
            "aria-label=\"every job: fires by outcome from 2027-01-15 08:00 UTC to 2027-01-15 \
             08:01 UTC, per 1 min: 3 succeeded, 1 failed, 2 skipped\""
        ));
        assert!(svg.contains("class=\"outcome-failed\""));
        assert!(svg.contains("<title>2027-01-15 08:01 UTC: 0 succeeded, 0 failed, 2 skipped"));
    }

    #[test]
    fn charts_without_runs_say_so() {
        for svg in [
            fires_chart("backup", &[]),
            fires_chart(
                "backup",
                &[FireBucket {
                    start: minute(0),
                    succeeded: 0,
                    failed: 0,
                    skipped: 0,
                }],
            ),
            durations_chart("backup", &[]),
        ] {
            let svg = svg.into_string();
            elements(&svg);
            assert!(svg.contains("no runs yet</text>"), "{svg}");
            assert!(
                svg.contains("no runs yet\">"),
                "the summary says it too: {svg}"
            );
        }
    }

    #[test]
    fn ten_thousand_points_stay_a_bounded_drawing() {
        let buckets: Vec<FireBucket> = (0..10_000)
            .map(|index| FireBucket {
                start: minute(index),
                succeeded: 1,
                failed: 1,
                skipped: 1,
            })
            .collect();
        let svg = fires_chart("every job", &buckets).into_string();
        let rects = elements(&svg).iter().filter(|name| *name == "rect").count();
        assert_eq!(rects, 3 * MAX_BARS);
        // 10,000 minutes in 120 bars: 84 minutes each, said in the summary and on the axis.
        assert!(svg.contains(", per 84 min: "), "{svg}");
        assert!(svg.contains(">fires per 84 min</text>"), "{svg}");
        assert!(
            svg.contains("10000 succeeded, 10000 failed, 10000 skipped"),
            "the summary counts every bucket"
        );

        let runs: Vec<RunDuration> = (0..10_000).map(|index| run(index, 1_000)).collect();
        let svg = durations_chart("backup", &runs).into_string();
        assert!(elements(&svg).len() < 20);
        assert_eq!(line_points(&svg).len(), MAX_POINTS);
    }

    #[test]
    fn one_huge_duration_leaves_the_others_readable() {
        let mut runs: Vec<RunDuration> = (0..100)
            .map(|index| run(index, 2_000 + index as u64))
            .collect();
        runs[40].duration = Duration::from_secs(3 * 3600);
        let svg = durations_chart("backup", &runs).into_string();
        elements(&svg);
        assert!(
            svg.contains("1 above the scale, longest 3h (run run-40)"),
            "{svg}"
        );
        assert!(
            svg.contains("median 2s 50ms, p99 2s 99ms, longest 3h"),
            "{svg}"
        );
        let heights: Vec<f64> = line_points(&svg)
            .iter()
            .map(|point| {
                point
                    .split(',')
                    .nth(1)
                    .expect("x,y")
                    .parse()
                    .expect("a number")
            })
            .collect();
        // The scale stops at 4 × p99: the huge run at its top, the others a quarter up the
        // plot, not flattened on the baseline.
        assert_eq!(heights[40], TOP);
        let baseline = HEIGHT - BOTTOM;
        for (index, height) in heights.iter().enumerate().filter(|(index, _)| *index != 40) {
            assert!(
                *height < baseline - 25.0,
                "run {index} stands at {height}: {svg}"
            );
        }
    }

    #[test]
    fn one_run_is_marked() {
        let svg = durations_chart("backup", &[run(0, 1_500)]).into_string();
        assert!(elements(&svg).contains(&"circle".to_owned()), "{svg}");
        assert!(
            svg.contains("<title>newest: 1s 500ms, run run-0</title>"),
            "{svg}"
        );
    }

    #[test]
    fn job_names_and_run_ids_are_escaped() {
        let hostile = "<script>alert(1)</script>";
        let svg = durations_chart(
            hostile,
            &[RunDuration {
                run_id: hostile.to_owned(),
                ..run(0, 5)
            }],
        )
        .into_string();
        assert!(!svg.contains("<script"), "{svg}");
        assert!(svg.contains("&lt;script&gt;alert(1)&lt;/script&gt;: durations"));
        elements(&svg);
        let svg = fires_chart(hostile, &[]).into_string();
        assert!(!svg.contains("<script"), "{svg}");
    }
}
