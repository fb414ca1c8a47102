//! `redcron bench`: how many runs per second this engine moves through a Redis, and how late a
//! burst of delayed runs starts. It uses a namespace of its own (`bench` unless told another),
//! deleted before and after, and an in-process no-op handler (library mode), through the full
//! state machine. On one Redis server it also says what Redis did per run ([`redis_work`]), and
//! with `--archive` how fast the outcomes reached the archive. With `--waiting` and
//! `--waiting-delayed` it measures with that many runs already waiting, to show whether the
//! cost of a run grows with the work in Redis.

mod redis_work;

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Args;

use self::redis_work::{Counters, PerRun, Work};
use super::{CliError, block_on};
use crate::archive::{Archive, ArchiveUrl};
use crate::engine::Shutdown;
use crate::engine::exporter::ExporterConfig;
use crate::engine::worker::Concurrency;
use crate::handler::{Completed, RunContext};
use crate::replica::{Replica, ReplicaConfig};
use crate::schedule::parse_file;
use crate::store::{Enqueue, ReplicatedWrites, Store, StoreSettings};

/// The job, and its queue, of the runs `--waiting` leaves ready: the replica serves only
/// `default`, so they wait through the whole benchmark as the runs of a queue no replica
/// serves do.
const WAITING: &str = "waiting";

/// How far ahead the runs of `--waiting-delayed` are due: past any benchmark's end.
const WAITING_DELAY: Duration = Duration::from_secs(3600);

/// How many waiting runs are made per bulk enqueue, so that a million are never all in memory.
const FILL_BATCH: usize = 100_000;

/// How far ahead the delayed burst is due.
const DELAY: Duration = Duration::from_secs(3);

/// The most runs in the delayed burst.
const MAX_DELAYED: usize = 2_000;

/// With `--archive`, a part closes once its first record is this old (or it holds 1,000), and
/// an exporter that found nothing looks again this soon: the export rate is then that of the
/// exporter at work, not of a quiet namespace's minute-old parts, nor of the second the
/// exporter of `run` sleeps on the empty outbox the replica starts with.
const ARCHIVE_PAUSE: Duration = Duration::from_millis(100);

/// How many commands `--commands` lists for each phase.
const TOP_COMMANDS: usize = 10;

#[derive(Debug, Args)]
#[command(
    after_help = "Prints name=value lines: the rates and the delayed burst's lateness; with \
    --archive, archive_records_per_s; and on one Redis server (not Sentinel or Cluster), from \
    the whole server's INFO commandstats and INFO cpu around each phase, per enqueued and per \
    processed run: redis_calls_per_job (every command Redis ran, once each, those scripts ran \
    included, the script calls apart), redis_us_per_job (their time in Redis), \
    redis_scripts_per_job and redis_script_us_per_job (the script calls and their time, which \
    includes their commands'), redis_cpu_us_per_job (Redis's CPU); the same _per_enqueue. \
    docs/cli.md says what each counts."
)]
pub(super) struct BenchArgs {
    /// The Redis to measure against (its `bench` namespace is deleted before and after).
    #[arg(
        long,
        env = "REDIS_URL",
        value_name = "URL",
        hide_env_values = true,
        help_heading = "Connection"
    )]
    redis: String,
    /// The namespace the benchmark owns: deleted before and after (unless `--keep`). Several
    /// benchmarks at once against one Redis or Cluster each need one of their own.
    #[arg(
        long,
        value_name = "NS",
        default_value = "bench",
        value_parser = one_namespace,
        help_heading = "Connection"
    )]
    namespace: String,
    /// How many runs to enqueue and process.
    #[arg(long, value_name = "N", default_value_t = 20_000)]
    jobs: usize,
    /// How many runs the one replica executes at once (1 to 4096).
    #[arg(long, value_name = "C", default_value_t = 50, value_parser = worker_count)]
    concurrency: usize,
    /// Every state change waits until it reached N replicas (as `run --replicated-writes`).
    #[arg(long, value_name = "N", default_value_t = 0)]
    replicated_writes: u32,
    /// Each run prints this many bytes of output, in ten parts over its run time, as a command
    /// printing it would: what a run's output so far (the console's live output) costs.
    #[arg(long, value_name = "BYTES", default_value_t = 0)]
    output: usize,
    /// How long each run takes (`1500ms`); a run longer than a second publishes its output so
    /// far while it runs.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "0s")]
    run_time: Duration,
    /// The replica archives every outcome there, as `run --archive` does (file:///DIR, or
    /// s3://BUCKET/PREFIX with the AWS_* environment variables), and the benchmark says how
    /// fast the processed runs' records reached it.
    #[arg(long, value_name = "URL", value_parser = super::run::ArchiveUrlParser)]
    archive: Option<ArchiveUrl>,
    /// Also list, for enqueueing and for processing, the commands Redis ran most per run (one
    /// Redis server only).
    #[arg(long)]
    commands: bool,
    /// Before the measured part, leave this many ready runs waiting in a queue the replica does
    /// not serve (bulk enqueued, pipelined): they are in Redis throughout, never claimed.
    #[arg(long, value_name = "N", default_value_t = 0)]
    waiting: usize,
    /// Before the measured part, leave this many runs of the measured job waiting, due in an
    /// hour (bulk enqueued, pipelined): they are in Redis throughout, never promoted.
    #[arg(long, value_name = "N", default_value_t = 0)]
    waiting_delayed: usize,
    /// Leave the namespace as the benchmark ends: its finished runs kept for the retention (a
    /// week), and the waiting ones, for measuring what reads them.
    #[arg(long)]
    keep: bool,
}

/// How many parts a run's `--output` is printed in, spread over its `--run-time`.
const OUTPUT_PARTS: u32 = 10;

/// What one benchmark run measured.
struct Figures {
    enqueue_jobs_per_s: f64,
    process_jobs_per_s: f64,
    lateness_ms: Vec<i64>,
    /// What Redis did to enqueue the runs: `None` unless it is one server.
    enqueue_work: Option<Work>,
    /// What Redis did to process them, from the replica's start to the last ack (with
    /// `--archive`, until the last of them was archived).
    process_work: Option<Work>,
    /// With `--archive`: records archived per second, from the replica's start until the
    /// outbox held none of the processed runs' records.
    archive_records_per_s: Option<f64>,
}

pub(super) fn execute(args: &BenchArgs, out: &mut impl Write) -> Result<(), CliError> {
    let figures = block_on(measure(args))?;
    let mut lateness = figures.lateness_ms;
    lateness.sort_unstable();
    let percentile = |fraction: f64| {
        let index = ((lateness.len().saturating_sub(1)) as f64 * fraction).round() as usize;
        lateness.get(index).copied().unwrap_or_default()
    };
    writeln!(
        out,
        "peer=redcron\nenqueue_jobs_per_s={:.0}\nprocess_jobs_per_s={:.0}\n\
         delayed_lateness_ms_p50={}\ndelayed_lateness_ms_p99={}\ndelayed_lateness_ms_max={}",
        figures.enqueue_jobs_per_s,
        figures.process_jobs_per_s,
        percentile(0.5),
        percentile(0.99),
        lateness.last().copied().unwrap_or_default(),
    )
    .map_err(CliError::io("writing the figures"))?;
    if let Some(rate) = figures.archive_records_per_s {
        writeln!(out, "archive_records_per_s={rate:.0}")
            .map_err(CliError::io("writing the figures"))?;
    }
    for (work, unit) in [
        (&figures.enqueue_work, "enqueue"),
        (&figures.process_work, "job"),
    ] {
        if let Some(work) = work {
            write_work(out, work, unit).map_err(CliError::io("writing the figures"))?;
        }
    }
    if args.commands {
        for (work, phase, unit) in [
            (&figures.enqueue_work, "enqueue", "enqueue"),
            (&figures.process_work, "process", "job"),
        ] {
            for (name, per_run) in work.iter().flat_map(|work| work.top(TOP_COMMANDS)) {
                writeln!(
                    out,
                    "{phase}_command={name} calls_per_{unit}={:.3} us_per_{unit}={:.2}",
                    per_run.calls, per_run.us
                )
                .map_err(CliError::io("writing the figures"))?;
            }
        }
    }
    Ok(())
}

/// The Redis figures of a phase whose runs are `unit`s (`job`, `enqueue`).
fn write_work(out: &mut impl Write, work: &Work, unit: &str) -> std::io::Result<()> {
    let PerRun { calls, us } = work.commands();
    let scripts = work.scripts();
    writeln!(
        out,
        "redis_calls_per_{unit}={calls:.2}\nredis_us_per_{unit}={us:.2}\n\
         redis_scripts_per_{unit}={:.3}\nredis_script_us_per_{unit}={:.2}\n\
         redis_cpu_us_per_{unit}={:.2}",
        scripts.calls,
        scripts.us,
        work.cpu_us()
    )
}

async fn measure(args: &BenchArgs) -> Result<Figures, CliError> {
    let settings = StoreSettings {
        replicated_writes: (args.replicated_writes > 0).then_some(ReplicatedWrites {
            replicas: args.replicated_writes,
            timeout: Duration::from_secs(1),
        }),
        ..StoreSettings::default()
    };
    let store = Store::connect(&args.redis, &args.namespace, settings)
        .await
        .map_err(|source| CliError::unreachable(&args.redis, source, true))?;
    store.clear_namespace().await?;
    let mut counters = Counters::connect(store.topology()).await?;
    let jobs = parse_file(
        Path::new("bench.toml"),
        &format!(
            "[jobs.noop]\ncommand = \"true\"\noverlap = \"allow\"\n\
             [jobs.{WAITING}]\ncommand = \"true\"\noverlap = \"allow\"\nqueue = \"{WAITING}\"\n"
        ),
    )
    .map_err(|problems| CliError::Argument(format!("benchmark job: {problems:?}")))?;
    store.publish_definitions(&jobs).await?;
    fill(&store, args.waiting, args.waiting_delayed).await?;

    let requests: Vec<Enqueue> = (0..args.jobs)
        .map(|_| Enqueue {
            job: "noop".to_owned(),
            due_ms: None,
            payload: None,
            priority: None,
            unique: None,
        })
        .collect();
    let before = read(&mut counters).await?;
    let started = Instant::now();
    store.enqueue_many(&requests).await?;
    let enqueue_jobs_per_s = args.jobs as f64 / started.elapsed().as_secs_f64();
    let enqueued = read(&mut counters).await?;

    // Process: one replica, the no-op handler, from its start until the last ack.
    let done = Arc::new(AtomicUsize::new(0));
    let starts: Arc<Mutex<Vec<i64>>> = Arc::default();
    let counter = done.clone();
    let recorder = starts.clone();
    // A line a part, as a command printing its progress writes it.
    let part = match args.output / OUTPUT_PARTS as usize {
        0 => String::new(),
        bytes => format!("{}\n", "x".repeat(bytes - 1)),
    };
    let run_time = args.run_time;
    let replica = Replica::builder(store.clone())
        .jobs(jobs)
        .handler("noop", move |run: RunContext| {
            let counter = counter.clone();
            let recorder = recorder.clone();
            let part = part.clone();
            async move {
                if let Ok(mut starts) = recorder.lock() {
                    starts.push(chrono::Utc::now().timestamp_millis());
                }
                if !part.is_empty() || !run_time.is_zero() {
                    for _ in 0..OUTPUT_PARTS {
                        run.output.push(part.as_bytes());
                        if !run_time.is_zero() {
                            tokio::time::sleep(run_time / OUTPUT_PARTS).await;
                        }
                    }
                }
                counter.fetch_add(1, Ordering::Relaxed);
                // What a command's run keeps: its output's tail.
                Ok(Completed {
                    output: run.output.text(),
                    ..Completed::default()
                })
            }
        })
        .config(bench_config(
            &args.namespace,
            args.concurrency,
            args.archive.as_ref(),
        )?)
        .build();
    let shutdown = Shutdown::new();
    let archived = store.metrics().archive_records_total.get();
    let started = Instant::now();
    let running = tokio::spawn(replica.run(shutdown.clone()));
    wait_for_acks(&store, &done, args.jobs).await?;
    let process_jobs_per_s = args.jobs as f64 / started.elapsed().as_secs_f64();
    let archive_records_per_s = match args.archive {
        Some(_) => {
            wait_for_archive(&store).await?;
            let records = store.metrics().archive_records_total.get() - archived;
            Some(records as f64 / started.elapsed().as_secs_f64())
        }
        None => None,
    };
    // Read once the runs are archived too, so that what Redis did for them includes that.
    let processed = read(&mut counters).await?;

    // Delayed burst: every run due at the same instant, a few seconds ahead.
    let delayed = args.jobs.min(MAX_DELAYED);
    let due_ms = store.now_ms().await? + i64::try_from(DELAY.as_millis()).unwrap_or(3_000);
    if let Ok(mut starts) = starts.lock() {
        starts.clear();
    }
    let burst: Vec<Enqueue> = (0..delayed)
        .map(|_| Enqueue {
            job: "noop".to_owned(),
            due_ms: Some(due_ms),
            payload: None,
            priority: None,
            unique: None,
        })
        .collect();
    store.enqueue_many(&burst).await?;
    wait_for_acks(&store, &done, args.jobs + delayed).await?;
    let lateness_ms = starts
        .lock()
        .map(|starts| starts.iter().map(|start| start - due_ms).collect())
        .unwrap_or_default();

    shutdown.cancel();
    // A replica whose component died would have stopped processing: its figures mean nothing.
    if let Ok(Err(died)) = running.await {
        return Err(died.into());
    }
    if !args.keep {
        store.clear_namespace().await?;
    }
    let work = |from: &Option<_>, to: &Option<_>| match (from, to) {
        (Some(from), Some(to)) => Some(Work::between(from, to, args.jobs)),
        _ => None,
    };
    Ok(Figures {
        enqueue_jobs_per_s,
        process_jobs_per_s,
        lateness_ms,
        enqueue_work: work(&before, &enqueued),
        process_work: work(&enqueued, &processed),
        archive_records_per_s,
    })
}

/// Leaves `ready` runs of the job [`WAITING`] ready in its queue, which the replica does not
/// serve, and `delayed` runs of the measured job due in an hour: the work already in Redis
/// that the measured part runs beside. Bulk enqueued, a batch at a time.
///
/// # Errors
/// Redis errors.
async fn fill(store: &Store, ready: usize, delayed: usize) -> Result<(), CliError> {
    let due_ms = store.now_ms().await? + i64::try_from(WAITING_DELAY.as_millis()).unwrap_or(0);
    for (job, count, due_ms) in [(WAITING, ready, None), ("noop", delayed, Some(due_ms))] {
        let mut left = count;
        while left > 0 {
            let batch = left.min(FILL_BATCH);
            let requests: Vec<Enqueue> = (0..batch)
                .map(|_| Enqueue {
                    job: job.to_owned(),
                    due_ms,
                    payload: None,
                    priority: None,
                    unique: None,
                })
                .collect();
            store.enqueue_many(&requests).await?;
            left -= batch;
        }
    }
    Ok(())
}

/// Redis's counters now, on one server.
async fn read(counters: &mut Option<Counters>) -> Result<Option<redis_work::Snapshot>, CliError> {
    match counters {
        Some(counters) => counters.read().await.map(Some),
        None => Ok(None),
    }
}

/// Reads `--namespace`: one namespace, checked as the store checks it, so that a bad one is
/// refused with the usage.
fn one_namespace(text: &str) -> Result<String, String> {
    crate::store::validate_namespace(text)
        .map(|()| text.to_owned())
        .map_err(|error| error.to_string())
}

/// Reads `--concurrency`: one number of workers, as `run --workers` reads it, for a benchmark
/// that compares fixed settings.
fn worker_count(text: &str) -> Result<usize, String> {
    let concurrency: Concurrency = text.parse()?;
    if concurrency.is_adaptive() {
        return Err(format!(
            "{text:?}: the benchmark runs one fixed number of workers"
        ));
    }
    Ok(concurrency.min)
}

/// A replica tuned for throughput: the benchmark's runs are ad-hoc, so the planner is idle.
/// With `archive`, it exports as `run --archive` does, but without its long pauses.
fn bench_config(
    namespace: &str,
    concurrency: usize,
    archive: Option<&ArchiveUrl>,
) -> Result<ReplicaConfig, CliError> {
    let mut config = ReplicaConfig {
        replica_id: format!("bench-{}", std::process::id()),
        shutdown_grace: Duration::from_secs(5),
        ..ReplicaConfig::default()
    };
    config.workers.concurrency = Concurrency::fixed(concurrency);
    if let Some(url) = archive {
        config.exporter = Some(ExporterConfig {
            part_age: ARCHIVE_PAUSE,
            max_sleep: ARCHIVE_PAUSE,
            ..ExporterConfig::new(Archive::open(url)?, namespace, &config.replica_id)
        });
    }
    Ok(config)
}

/// Waits until `expected` handler calls returned and no run holds a lease (all acked). Redis
/// is only asked once the handlers are done, so that waiting does not load it.
async fn wait_for_acks(store: &Store, done: &AtomicUsize, expected: usize) -> Result<(), CliError> {
    let limit = Instant::now() + Duration::from_secs(600);
    loop {
        if done.load(Ordering::Relaxed) >= expected && store.active_runs().await? == 0 {
            return Ok(());
        }
        if Instant::now() > limit {
            return Err(CliError::Argument(format!(
                "the benchmark stalled: {} of {expected} runs finished in 10 minutes",
                done.load(Ordering::Relaxed)
            )));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Waits until the archive holds every record the replica recorded: the outbox is empty.
async fn wait_for_archive(store: &Store) -> Result<(), CliError> {
    let limit = Instant::now() + Duration::from_secs(600);
    loop {
        let backlog = store.archive_backlog().await?;
        if backlog.records == 0 {
            return Ok(());
        }
        if Instant::now() > limit {
            return Err(CliError::Argument(format!(
                "the archive stalled: {} records still waited for it after 10 minutes",
                backlog.records
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
