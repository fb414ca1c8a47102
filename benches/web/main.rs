//! What the web console costs at scale, against a private `redis-server` (AOF on, as `redcron
//! run` starts it) holding 10,000 declared jobs and 1,000,000 runs the engine wrote (see
//! `seed.rs`), the console served in process over loopback HTTP:
//!
//! - `pages`: each page and API read, requested one after another: its time from request to
//!   last byte (p50, p99) and the Redis commands it costs (scripts' commands included);
//! - `refresh`: browsers left open on a page, simulated as clients fetching it every 2 s as
//!   `console.js` does (a tick that finds the last fetch still waiting skips): Redis's
//!   commands per second and CPU, against the same window with no browser;
//! - `engine`: `redcron bench` (its own namespace, same Redis) alone and with browsers open on
//!   the overview, interleaved;
//! - `output` (first, before the namespace is seeded): `redcron bench` with runs that print and
//!   runs that do not, interleaved, and the Redis commands each run costs.
//!
//! `cargo bench --bench web` runs them all; `cargo bench --bench web -- pages` (or `refresh`,
//! `engine`, `output`) runs one. Numbers are printed as `name=value` lines.

mod redis_info;
mod seed;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redcron::client::Client;
use redcron::store::embedded::EmbeddedRedis;
use redcron::store::{Store, StoreSettings};
use redcron::web::{Auth, WebState, router};
use serde_json::Value;

use redis_info::RedisInfo;

/// The namespace the console reads.
const NAMESPACE: &str = "console";

/// Requests per page in `pages`: at most this many, and no more once [`PAGE_TIME`] has passed
/// (a page that takes a second gets fewer, and its p99 is then its maximum).
const REQUESTS: usize = 200;

/// How long `pages` keeps requesting one page, once it had [`MIN_REQUESTS`].
const PAGE_TIME: Duration = Duration::from_secs(20);

/// Requests every page gets, however slow.
const MIN_REQUESTS: usize = 3;

/// How long a browser waits for a page before it counts the fetch as failed (a page measured
/// alone is waited for however long it takes).
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// How often an open page fetches itself again (`console.js`).
const REFRESH: Duration = Duration::from_secs(2);

/// How long each `refresh` window is measured, after browsers had a refresh to start.
const WINDOW: Duration = Duration::from_secs(20);

/// Rounds of each interleaved comparison.
const ROUNDS: usize = 5;

/// Browsers open on the overview beside `redcron bench` in `engine`.
const ENGINE_BROWSERS: usize = 10;

fn main() {
    let only: Vec<String> = std::env::args()
        .skip(1)
        .filter(|argument| !argument.starts_with('-'))
        .collect();
    let wants = |scenario: &str| only.is_empty() || only.iter().any(|name| name == scenario);
    // reqwest is built without a TLS provider of its own; the bench speaks plain HTTP, but the
    // client wants one installed all the same.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let redis = EmbeddedRedis::start(dir.path())
            .await
            .expect("redis-server must be installed (apt-get install redis-server)");
        let url = redis.url().to_owned();
        let mut info = RedisInfo::connect(&url).await;
        // First, on an empty Redis: its per-run counts are then the engine's alone.
        if wants("output") {
            output(&url, &mut info).await;
        }
        if !["pages", "refresh", "engine"]
            .iter()
            .any(|scenario| wants(scenario))
        {
            redis.stop().await;
            return;
        }
        let store = Store::connect(&url, NAMESPACE, StoreSettings::default())
            .await
            .expect("connect to the benchmark redis");
        let seeded = seed::seed(&store, &url).await;
        let console = serve_console(&url).await;
        let http = reqwest::Client::new();
        let browser = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .build()
            .expect("an HTTP client");
        if wants("pages") {
            pages(&console, &http, &mut info, &seeded).await;
            ready_queues(&store, &mut info).await;
        }
        if wants("refresh") {
            for path in ["/", "/jobs/job5000"] {
                for browsers in [0, 1, 10, 50] {
                    refresh(&console, &browser, &mut info, path, browsers).await;
                }
            }
        }
        if wants("engine") {
            engine(&console, &browser, &url).await;
        }
        seeded.stop().await;
        redis.stop().await;
    });
}

/// Serves the console (read-only, no authentication) on a loopback port; its base URL.
async fn serve_console(url: &str) -> String {
    let client = Client::connect(url, NAMESPACE)
        .await
        .expect("the console's client connects");
    let app = router(WebState::new(client, NAMESPACE, Auth::default(), true));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let address = listener.local_addr().expect("the port bound");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

/// One GET of `path` (with `query`), its body read; an error or a status other than 200 is an
/// `Err` saying which, since its time would not be a page's.
async fn fetch(
    http: &reqwest::Client,
    console: &str,
    path: &str,
    query: &[(&str, &str)],
) -> Result<String, String> {
    let response = http
        .get(format!("{console}{path}"))
        .query(query)
        .header("Accept", "text/html")
        .send()
        .await
        .map_err(|error| format!("GET {path}: {error:?}"))?;
    let status = response.status();
    let body = response
        .text()
        .await
        .map_err(|error| format!("GET {path}: {error:?}"))?;
    if status != 200 {
        return Err(format!("GET {path}: {status}: {body:.300}"));
    }
    Ok(body)
}

/// [`fetch`] where a failure fails the bench: a page measured one request at a time.
async fn get(http: &reqwest::Client, console: &str, path: &str, query: &[(&str, &str)]) -> String {
    fetch(http, console, path, query)
        .await
        .unwrap_or_else(|error| panic!("{error}"))
}

/// A cursor 50,000 runs into the listing (active, then ready, then due), walked through the
/// API a thousand runs a page, as a user paging that far would reach it.
async fn deep_cursor(http: &reqwest::Client, console: &str) -> String {
    let mut cursor = String::new();
    for _ in 0..50 {
        let mut query = vec![("limit", "1000")];
        if !cursor.is_empty() {
            query.push(("cursor", cursor.as_str()));
        }
        let page: Value = serde_json::from_str(&get(http, console, "/api/v1/runs", &query).await)
            .expect("the API answers JSON");
        cursor = page["next_cursor"]
            .as_str()
            .expect("more runs follow")
            .to_owned();
    }
    cursor
}

/// A page measured by `pages`: its name in the figures, its path and its query.
type Target<'a> = (&'a str, &'a str, &'a [(&'a str, &'a str)]);

async fn pages(console: &str, http: &reqwest::Client, info: &mut RedisInfo, seeded: &seed::Seeded) {
    let cursor = deep_cursor(http, console).await;
    let run = format!("/runs/{}", seeded.succeeded_run);
    let api_run = format!("/api/v1/runs/{}", seeded.succeeded_run);
    let api_dead_run = format!("/api/v1/dead/{}", seeded.dead_run);
    let by_cursor = [("cursor", cursor.as_str())];
    let targets: Vec<Target> = vec![
        ("job", "/jobs/job5000", &[]),
        ("runs", "/runs", &[]),
        ("runs_50k_deep", "/runs", &by_cursor),
        ("runs_finished", "/runs", &[("state", "finished")]),
        ("run", &run, &[]),
        ("dead", "/dead", &[]),
        ("workflows", "/workflows", &[]),
        ("api_job", "/api/v1/jobs/job5000", &[]),
        ("api_runs", "/api/v1/runs", &[]),
        ("api_runs_50k_deep", "/api/v1/runs", &by_cursor),
        ("api_run", &api_run, &[]),
        ("api_history", "/api/v1/history", &[]),
        ("api_dead", "/api/v1/dead", &[]),
        ("api_dead_run", &api_dead_run, &[]),
        // Last: with 10,000 jobs these take from seconds to minutes a request (BENCHMARKS.md).
        ("overview", "/", &[]),
        ("api_status", "/api/v1/status", &[]),
        ("jobs", "/jobs", &[]),
        ("api_jobs", "/api/v1/jobs", &[]),
    ];
    println!("runs={} redis_keys={}", seeded.runs, info.keys().await);
    for (name, path, query) in targets {
        let mut times_ms = Vec::with_capacity(REQUESTS);
        let mut commands = Vec::with_capacity(REQUESTS);
        let mut bytes = 0;
        let began_page = Instant::now();
        while times_ms.len() < REQUESTS
            && (times_ms.len() < MIN_REQUESTS || began_page.elapsed() < PAGE_TIME)
        {
            let before = info.counters().await;
            let began = Instant::now();
            bytes = get(http, console, path, query).await.len();
            times_ms.push(began.elapsed().as_secs_f64() * 1_000.0);
            commands.push(before.calls_until(&info.counters().await));
        }
        times_ms.sort_by(f64::total_cmp);
        commands.sort_unstable();
        println!(
            "page={name} requests={} p50_ms={:.1} p99_ms={:.1} max_ms={:.1} \
             redis_commands_p50={} redis_commands_max={} bytes={bytes}",
            times_ms.len(),
            percentile(&times_ms, 0.50),
            percentile(&times_ms, 0.99),
            times_ms.last().copied().unwrap_or_default(),
            percentile(&commands, 0.50),
            commands.last().copied().unwrap_or_default(),
        );
    }
}

/// What `Store::ready_queues` costs on the seeded Redis: a read of the index of queues with ready
/// runs, and a `SCAN` of the namespace as well while no reaper has walked every key of it once.
async fn ready_queues(store: &Store, info: &mut RedisInfo) {
    let mut times_ms = Vec::new();
    let mut commands = 0;
    let mut queues = 0;
    for _ in 0..5 {
        let before = info.counters().await;
        let began = Instant::now();
        queues = store.ready_queues().await.expect("ready queues").len();
        times_ms.push(began.elapsed().as_secs_f64() * 1_000.0);
        commands = before.calls_until(&info.counters().await);
    }
    times_ms.sort_by(f64::total_cmp);
    println!(
        "ready_queues_ms_p50={:.1} ready_queues_commands={commands} ready_queues_found={queues}",
        percentile(&times_ms, 0.50)
    );
}

/// What the fetches of open browsers took.
#[derive(Default)]
struct Fetches {
    /// Each answered fetch's time, request to last byte.
    times_ms: Vec<f64>,
    /// Fetches that failed or took longer than [`FETCH_TIMEOUT`].
    failed: usize,
}

impl Fetches {
    /// Counts one fetch's answer: its time, or a failure.
    fn count(&mut self, answer: Result<Result<f64, String>, tokio::task::JoinError>) {
        match answer {
            Ok(Ok(time_ms)) => self.times_ms.push(time_ms),
            _ => self.failed += 1,
        }
    }
}

/// Browsers open on `path`: each fetches it every [`REFRESH`] unless its last fetch still waits,
/// their ticks spread over the interval, until `stop`. Each browser's task ends once its last fetch answered, with what its
/// fetches took, so that no fetch of one window runs into the next.
fn open_browsers(
    console: &str,
    http: &reqwest::Client,
    path: &str,
    browsers: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<Fetches>> {
    (0..browsers)
        .map(|browser| {
            let (console, http, path) = (console.to_owned(), http.clone(), path.to_owned());
            let stop = stop.clone();
            let phase = REFRESH * u32::try_from(browser).unwrap_or(0) / browsers as u32;
            tokio::spawn(async move {
                let mut ticks =
                    tokio::time::interval_at(tokio::time::Instant::now() + phase, REFRESH);
                // A timer that fired late fires once, as a browser's does, not once per tick missed.
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
                let mut took = Fetches::default();
                let mut waiting: Option<tokio::task::JoinHandle<Result<f64, String>>> = None;
                loop {
                    ticks.tick().await;
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    // As console.js does: a tick that finds the last fetch still waiting skips.
                    if waiting.as_ref().is_some_and(|fetch| !fetch.is_finished()) {
                        continue;
                    }
                    if let Some(fetch) = waiting.take() {
                        took.count(fetch.await);
                    }
                    let (console, http, path) = (console.clone(), http.clone(), path.clone());
                    waiting = Some(tokio::spawn(async move {
                        let began = Instant::now();
                        fetch(&http, &console, &path, &[])
                            .await
                            .map(|_| began.elapsed().as_secs_f64() * 1_000.0)
                    }));
                }
                if let Some(fetch) = waiting {
                    took.count(fetch.await);
                }
                took
            })
        })
        .collect()
}

/// Stops the browsers and waits for their last fetches; what all their fetches took.
async fn close_browsers(
    stop: &AtomicBool,
    tasks: Vec<tokio::task::JoinHandle<Fetches>>,
) -> Fetches {
    stop.store(true, Ordering::Relaxed);
    let mut all = Fetches::default();
    for task in tasks {
        let took = task.await.expect("a browser's task ends");
        all.times_ms.extend(took.times_ms);
        all.failed += took.failed;
    }
    all.times_ms.sort_by(f64::total_cmp);
    all
}

async fn refresh(
    console: &str,
    http: &reqwest::Client,
    info: &mut RedisInfo,
    path: &str,
    browsers: usize,
) {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = open_browsers(console, http, path, browsers, &stop);
    tokio::time::sleep(REFRESH).await;
    let before = info.counters().await;
    tokio::time::sleep(WINDOW).await;
    let after = info.counters().await;
    let fetches = close_browsers(&stop, tasks).await;
    let seconds = WINDOW.as_secs_f64();
    println!(
        "refresh page={path} browsers={browsers} redis_commands_per_s={:.0} \
         redis_cpu_pct={:.1} fetches={} failed={} page_p50_ms={:.1} page_p99_ms={:.1}",
        before.calls_until(&after) as f64 / seconds,
        (after.cpu_s - before.cpu_s) / seconds * 100.0,
        fetches.times_ms.len(),
        fetches.failed,
        percentile(&fetches.times_ms, 0.50),
        percentile(&fetches.times_ms, 0.99),
    );
}

/// `redcron bench` on `url` with `extra` arguments: its `name=value` lines.
async fn redcron_bench(url: &str, extra: &[&str]) -> Vec<(String, f64)> {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_redcron"))
        .arg("bench")
        .args(["--redis", url])
        .args(extra)
        .output()
        .await
        .expect("redcron bench starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "redcron bench {extra:?} failed: {}{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .filter_map(|line| {
            let (name, value) = line.split_once('=')?;
            Some((name.to_owned(), value.parse().ok()?))
        })
        .collect()
}

fn figure(figures: &[(String, f64)], name: &str) -> f64 {
    figures
        .iter()
        .find(|(figure, _)| figure == name)
        .map(|(_, value)| *value)
        .unwrap_or_else(|| panic!("redcron bench printed no {name}"))
}

async fn engine(console: &str, http: &reqwest::Client, url: &str) {
    let mut alone = Vec::new();
    let mut beside = Vec::new();
    for round in 0..ROUNDS {
        // The order alternates, so that neither side always runs on a warmer machine.
        for with_browsers in [round % 2 == 1, round % 2 == 0] {
            let browsers = if with_browsers { ENGINE_BROWSERS } else { 0 };
            let stop = Arc::new(AtomicBool::new(false));
            let tasks = open_browsers(console, http, "/", browsers, &stop);
            let figures = redcron_bench(url, &[]).await;
            let fetches = close_browsers(&stop, tasks).await;
            let process = figure(&figures, "process_jobs_per_s");
            if with_browsers {
                &mut beside
            } else {
                &mut alone
            }
            .push(process);
            println!(
                "engine round={round} browsers={browsers} process_jobs_per_s={process:.0} \
                 enqueue_jobs_per_s={:.0} delayed_lateness_ms_p99={:.0} page_p50_ms={:.1} \
                 failed={}",
                figure(&figures, "enqueue_jobs_per_s"),
                figure(&figures, "delayed_lateness_ms_p99"),
                percentile(&fetches.times_ms, 0.50),
                fetches.failed,
            );
        }
    }
    print_comparison("engine", "process_jobs_per_s", &alone, &beside);
}

/// The medians of `baseline` and `other` (rounds measured interleaved) and the median of
/// their per-round ratios.
fn print_comparison(scenario: &str, name: &str, baseline: &[f64], other: &[f64]) {
    let mut ratios: Vec<f64> = baseline
        .iter()
        .zip(other)
        .map(|(baseline, other)| other / baseline)
        .collect();
    ratios.sort_by(f64::total_cmp);
    let median = |values: &[f64]| {
        let mut values = values.to_vec();
        values.sort_by(f64::total_cmp);
        percentile(&values, 0.50)
    };
    println!(
        "{scenario} median {name} baseline={:.2} other={:.2} ratio={:.3} ratios={:?}",
        median(baseline),
        median(other),
        percentile(&ratios, 0.50),
        ratios
            .iter()
            .map(|ratio| format!("{ratio:.2}"))
            .collect::<Vec<_>>(),
    );
}

async fn output(url: &str, info: &mut RedisInfo) {
    // Runs that end at once (no output is published: a run shorter than a second writes none)
    // and runs of 1.5 s, printing 1 KiB in ten parts or nothing.
    let shapes: [(&str, &[&str], f64); 2] = [
        ("instant", &[], 22_000.0),
        (
            "1500ms",
            &[
                "--jobs",
                "1000",
                "--concurrency",
                "1000",
                "--run-time",
                "1500ms",
            ],
            2_000.0,
        ),
    ];
    for (shape, arguments, runs) in shapes {
        let mut silent = Vec::new();
        let mut printing_runs = Vec::new();
        for round in 0..ROUNDS {
            for printing in [round % 2 == 1, round % 2 == 0] {
                let mut arguments = arguments.to_vec();
                if printing {
                    arguments.extend(["--output", "1024"]);
                }
                let before = info.counters().await;
                let figures = redcron_bench(url, &arguments).await;
                let per_run = before.calls_until(&info.counters().await) as f64 / runs;
                if printing {
                    &mut printing_runs
                } else {
                    &mut silent
                }
                .push(per_run);
                println!(
                    "output runs={shape} round={round} printing={printing} \
                     process_jobs_per_s={:.0} redis_commands_per_run={per_run:.2}",
                    figure(&figures, "process_jobs_per_s"),
                );
            }
        }
        print_comparison(
            &format!("output runs={shape}"),
            "redis_commands_per_run",
            &silent,
            &printing_runs,
        );
    }
}

fn percentile<T: Copy + Default>(sorted: &[T], fraction: f64) -> T {
    let index = ((sorted.len().saturating_sub(1)) as f64 * fraction).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}
