//! The console's charts in a real browser: what a screen reader is told of each, in both
//! colour schemes, with the outcome colours a stylesheet gives them.

use std::time::Duration;

use axum::Router;
use axum::response::Html;
use axum::routing::get;
use chrono::{DateTime, TimeZone, Utc};
use redcron::web::chart::{FireBucket, RunDuration, durations_chart, fires_chart};
use redcron::web::strip::{Outcome, StripCell, outcome_strip};

use crate::util::browser::{Browser, ColorScheme};

/// A minute of a fixed day, so the page is the same on every run.
fn minute(index: i64) -> DateTime<Utc> {
    Utc.timestamp_opt(1_800_000_000 + 60 * index, 0)
        .single()
        .expect("a valid time")
}

/// A page of the three charts, with a job name that is markup, and a stylesheet that colours
/// the outcomes in each scheme as the console's does.
fn page() -> String {
    let name = "<b>backup</b>";
    let buckets: Vec<FireBucket> = (0..60)
        .map(|index| FireBucket {
            start: minute(index),
            succeeded: 3 + (index % 5) as u64,
            failed: u64::from(index % 11 == 0),
            skipped: u64::from(index % 13 == 0),
        })
        .collect();
    let mut runs: Vec<RunDuration> = (0..100)
        .map(|index| RunDuration {
            run_id: format!("run-{index}"),
            ended: minute(index),
            duration: Duration::from_millis(2_000 + (index as u64 * 37) % 900),
        })
        .collect();
    runs[60].duration = Duration::from_secs(2 * 3600);
    let outcomes = [
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::Skipped,
        Outcome::Dead,
    ];
    let cells: Vec<StripCell> = (0..20)
        .map(|index| StripCell {
            run_id: format!("run-{index}"),
            at: minute(index as i64),
            outcome: outcomes[index % outcomes.len()],
        })
        .collect();
    format!(
        r#"<!doctype html><html lang="en"><title>charts</title>
<style>
  body {{ color: #1a1a1a; background: #fff; font-family: sans-serif; max-width: 720px; }}
  svg {{ display: block; width: 100%; height: auto; margin: 1em 0; }}
  .strip {{ width: 240px; }}
  .outcome-succeeded, .outcome-failed, .outcome-dead, .outcome-skipped {{ fill-opacity: 1; }}
  .outcome-succeeded {{ fill: #1e7b34; }} .outcome-failed {{ fill: #c62828; }}
  .outcome-dead {{ fill: #7b1010; }} .outcome-skipped {{ fill: #9e9e9e; }}
  @media (prefers-color-scheme: dark) {{
    body {{ color: #e6e6e6; background: #121212; }}
    .outcome-succeeded {{ fill: #4caf50; }} .outcome-failed {{ fill: #ef5350; }}
    .outcome-dead {{ fill: #b71c1c; }} .outcome-skipped {{ fill: #616161; }}
  }}
</style>
<main><h1>Charts</h1>
<h2>Fires</h2>{}<h2>Durations</h2>{}<h2>Last outcomes</h2>{}<h2>A new job</h2>{}{}</main>"#,
        fires_chart("every job", &buckets).into_string(),
        durations_chart(name, &runs).into_string(),
        outcome_strip(name, &cells).into_string(),
        durations_chart(name, &[]).into_string(),
        outcome_strip(name, &[]).into_string(),
    )
}

#[tokio::test]
async fn charts_are_named_for_screen_readers_and_accessible_in_both_schemes() {
    let app = Router::new().route("/", get(Html(page())));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the page's server");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    let browser = Browser::start().await;
    browser.open(&format!("http://{address}/")).await;

    let labels: Vec<String> = {
        let mut labels = Vec::new();
        for chart in browser.find_all("svg[role=img]").await {
            labels.push(
                chart
                    .attr("aria-label")
                    .await
                    .expect("a label")
                    .unwrap_or_default(),
            );
        }
        labels
    };
    assert_eq!(labels.len(), 5, "{labels:#?}");
    assert!(
        labels[1].starts_with("<b>backup</b>: durations of the last 100 runs"),
        "{labels:#?}"
    );
    assert!(
        labels[2].contains("5 succeeded, 5 failed, 5 dead, 5 skipped"),
        "{labels:#?}"
    );
    assert!(labels[3].ends_with("no runs yet"), "{labels:#?}");
    assert!(
        browser.find_all("b").await.is_empty(),
        "the job's name is text, not markup"
    );

    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("charts");
    for scheme in [ColorScheme::Light, ColorScheme::Dark] {
        browser.set_color_scheme(scheme).await;
        browser.assert_accessible().await;
        let failed = browser
            .computed_style(".strip .outcome-failed", "fill")
            .await;
        let expected = match scheme {
            ColorScheme::Light => "rgb(198, 40, 40)",
            ColorScheme::Dark => "rgb(239, 83, 80)",
        };
        assert_eq!(
            failed, expected,
            "the stylesheet colours the outcome in {scheme:?}"
        );
        browser
            .screenshot(&shots, &format!("charts-{}", scheme.name()))
            .await;
    }
}
