//! The overview's charts, from the events stream: fires over the last day by outcome (counted by
//! minute, drawn in bars of a few minutes),
//! and how late fires started (fire lag) over the last hour.

use chrono::DateTime;
use maud::{Markup, html};

use crate::cli::times::duration;
use crate::store::Event;
use crate::store::keys::fire_of_run;
use crate::web::chart::{FireBucket, fires_chart};

/// How far back the fires chart reaches, and its bucket.
const DAY_MS: i64 = 24 * 3600 * 1000;
const MINUTE_MS: i64 = 60 * 1000;

/// How far back the fire lag is measured.
const HOUR_MS: i64 = 3600 * 1000;

/// The fires of the last 24 hours by minute and outcome, and the fire lag of the last hour;
/// `events` newest first, as the stream gives them.
pub(super) fn charts(events: &[Event], now_ms: i64) -> Markup {
    let lags = fire_lags(events, now_ms);
    html! {
        div #charts {
            h3 { "Fires over the last day, by outcome" }
            (fires_chart("every job", &fire_buckets(events, now_ms)))
            h3 { "Fire lag over the last hour" }
            @match percentiles(lags) {
                Some((count, p50, p99)) => p {
                    "From a fire's time to its run's start, over " (count) " fires: p50 "
                    strong { (duration(p50)) } ", p99 " strong { (duration(p99)) } "."
                },
                None => p.empty { "No scheduled fire started in the last hour." },
            }
        }
    }
}

/// One bucket per minute of the last 24 hours, oldest first: each outcome counted at the
/// minute it was recorded. A retry counts as a failure, as the strip shows it.
fn fire_buckets(events: &[Event], now_ms: i64) -> Vec<FireBucket> {
    let first_ms = (now_ms - DAY_MS).div_euclid(MINUTE_MS) * MINUTE_MS;
    let mut buckets: Vec<FireBucket> = (0..=DAY_MS / MINUTE_MS)
        .filter_map(|index| {
            Some(FireBucket {
                start: DateTime::from_timestamp_millis(first_ms + index * MINUTE_MS)?,
                succeeded: 0,
                failed: 0,
                skipped: 0,
            })
        })
        .collect();
    for event in events.iter().take_while(|event| event.at_ms >= first_ms) {
        let Some(bucket) = usize::try_from((event.at_ms - first_ms) / MINUTE_MS)
            .ok()
            .and_then(|index| buckets.get_mut(index))
        else {
            continue;
        };
        match event.fields.get("state").map(String::as_str) {
            Some("succeeded") => bucket.succeeded += 1,
            Some("retrying" | "dead") => bucket.failed += 1,
            Some("skipped") => bucket.skipped += 1,
            _ => {}
        }
    }
    buckets
}

/// How late each scheduled fire of the last hour started, ms: its attempt's start less its
/// fire time, for the attempts that ran (an ad-hoc run has no fire time).
fn fire_lags(events: &[Event], now_ms: i64) -> Vec<i64> {
    events
        .iter()
        .take_while(|event| now_ms - event.at_ms <= HOUR_MS)
        .filter_map(|event| {
            let field = |name: &str| event.fields.get(name).map(String::as_str);
            // The first attempt's lag only: a retry starts late by its backoff, by design.
            if field("attempt") != Some("1") {
                return None;
            }
            let fire_ms = fire_of_run(field("job")?, field("run")?)?;
            let started_ms: i64 = field("started_ms")?.parse().ok()?;
            Some((started_ms - fire_ms).max(0))
        })
        .collect()
}

/// How many lags, their p50 and their p99 (nearest rank), ms; `None` for none.
fn percentiles(mut lags: Vec<i64>) -> Option<(usize, i64, i64)> {
    if lags.is_empty() {
        return None;
    }
    lags.sort_unstable();
    let rank = |p: usize| lags[(lags.len() * p).div_ceil(100).saturating_sub(1)];
    Some((lags.len(), rank(50), rank(99)))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn event(at_ms: i64, fields: &[(&str, &str)]) -> Event {
        Event {
            at_ms,
            fields: fields
                .iter()
                .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
                .collect::<HashMap<_, _>>(),
        }
    }

    #[test]
    fn fires_fall_in_the_minute_they_were_recorded_and_older_ones_are_left_out() {
        let now = 1_767_225_600_000;
        let events = [
            event(now - 1000, &[("state", "succeeded")]),
            event(now - 30_000, &[("state", "dead")]),
            event(now - 5 * MINUTE_MS, &[("state", "skipped")]),
            event(now - DAY_MS - 2 * MINUTE_MS, &[("state", "succeeded")]),
        ];
        let buckets = fire_buckets(&events, now);
        assert_eq!(buckets.len(), 1441);
        let total = |pick: fn(&FireBucket) -> u64| buckets.iter().map(pick).sum::<u64>();
        assert_eq!(
            (
                total(|bucket| bucket.succeeded),
                total(|bucket| bucket.failed),
                total(|bucket| bucket.skipped)
            ),
            (1, 1, 1)
        );
        assert_eq!(buckets[buckets.len() - 6].skipped, 1);
    }

    #[test]
    fn the_lag_is_a_first_attempts_start_less_its_fire_time() {
        let now = 1_767_225_600_000;
        let fire = now - 10_000;
        let run = format!("tick@{fire}");
        let started = (fire + 250).to_string();
        let retry_started = (fire + 60_000).to_string();
        let events = [
            event(
                now,
                &[
                    ("job", "tick"),
                    ("run", &run),
                    ("attempt", "1"),
                    ("started_ms", &started),
                ],
            ),
            event(
                now,
                &[
                    ("job", "tick"),
                    ("run", &run),
                    ("attempt", "2"),
                    ("started_ms", &retry_started),
                ],
            ),
            event(
                now,
                &[
                    ("job", "tick"),
                    ("run", "0190-adhoc"),
                    ("attempt", "1"),
                    ("started_ms", &started),
                ],
            ),
        ];
        assert_eq!(fire_lags(&events, now), [250]);
        assert_eq!(percentiles(vec![5, 1, 100, 2]), Some((4, 2, 100)));
        assert_eq!(percentiles(Vec::new()), None);
    }
}
