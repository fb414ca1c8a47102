//! The client's per-run work on the hot path, without Redis: turning an enqueue request into
//! its script arguments, and reading a claimed run out of a claim's reply.
//!
//! `cargo bench --bench run_encoding` reports the time for 1,000 runs of each, with and without
//! a payload. The baseline, measured in the same run, is cloning the same number of run ids:
//! the least any encoding must do.

use std::hint::black_box;
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use redcron::store::{ClaimedRun, Enqueue};
use redis::Value;

const RUNS: usize = 1_000;
const PAYLOAD: &str = r#"{"to":"ada@example.com","template":"welcome","locale":"en"}"#;

fn run_id(i: usize) -> String {
    format!("01a2376f-16d1-7193-a181-{i:012x}")
}

fn requests(payload: Option<&str>) -> Vec<Enqueue> {
    (0..RUNS)
        .map(|i| Enqueue {
            job: "welcome-email".to_owned(),
            due_ms: (i % 2 == 0).then_some(1_796_226_417_123),
            payload: payload.map(str::to_owned),
            priority: None,
            unique: None,
        })
        .collect()
}

/// What `claim_runs.lua` returns for one run.
fn reply(i: usize, payload: Option<&str>) -> Vec<Value> {
    let text = |text: &str| Value::BulkString(text.as_bytes().to_vec());
    vec![
        text(&run_id(i)),
        text("replica-1/7"),
        text("welcome-email"),
        Value::Int(1),
        Value::Int(4),
        Value::Nil,
        payload.map_or(Value::Nil, text),
    ]
}

fn run_encoding(c: &mut Criterion) {
    let mut group = c.benchmark_group("run_encoding");
    group
        .sample_size(50)
        .measurement_time(Duration::from_secs(5));
    let ids: Vec<String> = (0..RUNS).map(run_id).collect();
    for (name, payload) in [("", None), ("_with_payload", Some(PAYLOAD))] {
        let requests = requests(payload);
        group.bench_function(format!("enqueue_arguments_1k{name}"), |b| {
            b.iter(|| {
                for (request, id) in requests.iter().zip(&ids) {
                    black_box(request.script_arguments(id));
                }
            });
        });
        let replies: Vec<Vec<Value>> = (0..RUNS).map(|i| reply(i, payload)).collect();
        group.bench_function(format!("claimed_run_from_reply_1k{name}"), |b| {
            b.iter_batched(
                || replies.clone(),
                |replies| {
                    replies
                        .into_iter()
                        .filter_map(|values| ClaimedRun::from_reply(values).ok())
                        .count()
                },
                criterion::BatchSize::SmallInput,
            );
        });
    }
    group.bench_function("baseline_clone_1k_run_ids", |b| {
        b.iter(|| {
            for id in &ids {
                black_box(id.clone());
            }
        });
    });
    group.finish();
}

criterion_group!(benches, run_encoding);
criterion_main!(benches);
