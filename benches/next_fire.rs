//! How long the cron engine takes to find the next fire of many different schedules.
//!
//! `cargo bench --bench next_fire` reports the time for 100,000 different schedules (one next
//! fire each), spread over zones with and without DST, the time to parse 1,000 of them, and
//! the time to import a crontab of 100,000 lines.
//! The baseline, measured in the same run, is the bare wall-clock search of the cron
//! expressions among them, with no zone and no DST rules: the difference is what redcron's zone
//! layer costs.

use std::hint::black_box;
use std::time::Duration;

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use criterion::{Criterion, criterion_group, criterion_main};
use redcron::schedule::crontab::{ImportOptions, import};
use redcron::schedule::{CronExpr, Reach, Schedule, Selector};

const ZONES: [Tz; 4] = [
    chrono_tz::UTC,
    chrono_tz::America::New_York,
    chrono_tz::Europe::Berlin,
    chrono_tz::Asia::Kolkata,
];

/// The `i`-th of a family of distinct, realistic schedules: fixed times, steps, ranges, day
/// rules, seconds and `@every`.
fn expression(i: u32) -> String {
    match i % 8 {
        0 => format!("{} {} * * *", i % 60, (i / 60) % 24),
        1 => format!("*/{} * * * *", i % 59 + 1),
        2 => format!("{} {}-{} * * mon-fri", i % 60, i % 8, i % 8 + 10),
        3 => format!("{} {} {} * {}", i % 60, i % 24, i % 28 + 1, i % 7),
        4 => format!("*/{} {} * * * *", i % 30 + 1, i % 60),
        5 => format!("{} {} 1,15 */{} *", i % 60, i % 24, i % 6 + 1),
        6 => format!("@every {}s", i % 3_600 + 1),
        _ => format!("{},{} */{} * * *", i % 30, i % 30 + 30, i % 12 + 1),
    }
}

fn schedules(count: u32) -> Vec<(Schedule, Tz)> {
    (0..count)
        .map(|i| {
            let schedule =
                Schedule::parse(&expression(i)).expect("benchmark expressions are valid");
            (schedule, ZONES[i as usize % ZONES.len()])
        })
        .collect()
}

fn next_fire(c: &mut Criterion) {
    let after = DateTime::<Utc>::from_timestamp(1_788_000_000, 0).expect("valid instant");
    let all = schedules(100_000);
    let mut group = c.benchmark_group("next_fire");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(10));
    group.bench_function("100k_schedules", |b| {
        b.iter(|| {
            all.iter()
                .filter_map(|(schedule, zone)| schedule.next_after(black_box(after), *zone))
                .count()
        })
    });
    let wall_clock: Vec<CronExpr> = (0..100_000)
        .map(expression)
        .filter(|text| !text.starts_with("@every"))
        .map(|text| CronExpr::parse(&text).expect("benchmark expressions are valid"))
        .collect();
    let wall_after = after.naive_utc();
    group.bench_function("baseline_wall_clock", |b| {
        b.iter(|| {
            wall_clock
                .iter()
                .filter_map(|expr| expr.next_wall_time(black_box(wall_after), false))
                .count()
        })
    });
    group.finish();

    let texts: Vec<String> = (0..1_000).map(expression).collect();
    let mut group = c.benchmark_group("parse");
    group.sample_size(10);
    group.bench_function("1k_schedules", |b| {
        b.iter(|| {
            texts
                .iter()
                .filter_map(|text| Schedule::parse(black_box(text)).ok())
                .count()
        })
    });
    group.finish();

    // A crontab of 100,000 lines built from the same expressions, each with its own command.
    let crontab: String = (0..100_000)
        .map(|i| {
            let text = expression(i);
            // crontab has no @every: a macro stands in for those.
            let fields = if text.starts_with('@') {
                "@daily".to_owned()
            } else {
                five_fields(&text)
            };
            format!("{fields} /usr/local/bin/task-{i} >> /var/log/task-{i}.log 2>&1\n")
        })
        .collect();
    let options = ImportOptions {
        system: false,
        zone: chrono_tz::UTC,
        source: "bench".to_owned(),
        selector: Selector::default(),
        on: Reach::One,
    };
    let mut group = c.benchmark_group("import");
    group.sample_size(10);
    group.bench_function("100k_line_crontab", |b| {
        b.iter(|| import(black_box(&crontab), &options).jobs)
    });
    group.finish();
}

/// The last five fields of a 6-field expression (crontab lines have no seconds field).
fn five_fields(text: &str) -> String {
    let fields: Vec<&str> = text.split_whitespace().collect();
    fields[fields.len().saturating_sub(5)..].join(" ")
}

criterion_group!(benches, next_fire);
criterion_main!(benches);
