//! Prometheus metrics and the HTTP endpoint that serves them with the health checks.
//!
//! A replica's metrics and health are one [`Metrics`] handle, made with its store (or passed in
//! with [`crate::store::Store::with_metrics`]): components update them where the thing counted
//! happens, and two replicas in one process count apart. Every series carries the replica's
//! `namespace` label; the per-job ones carry `redcron_job`, not `job`, which Prometheus sets to
//! the scrape target's job (a `job` label of the target's own is renamed `exported_job`, and
//! every job's series would merge under the target's). Gauges of shared state (due, active,
//! dead, ready runs) are refreshed from Redis by the leader only, so that summing over replicas
//! does not count them twice.
//!
//! One [`Endpoint`] serves a process: the metrics of every namespace it serves, merged into one
//! exposition, and one health that fails when any namespace's does.

use std::sync::OnceLock;

use prometheus::{
    HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};

mod endpoint;
mod health;

pub use endpoint::{Endpoint, serve};
pub use health::{Health, READY_WITHIN, UNHEALTHY_AFTER};

/// Every metric a replica exports, labelled with its namespace.
pub struct Metrics {
    /// The namespace the replica serves: the `namespace` label of every series.
    namespace: String,
    registry: Registry,
    /// `redcron_runs_total{redcron_job,redcron_replica,outcome}`: runs finished, by outcome
    /// (succeeded, retrying, dead).
    pub runs_total: IntCounterVec,
    /// `redcron_run_duration_seconds{redcron_job,redcron_replica}`.
    pub run_duration_seconds: HistogramVec,
    /// `redcron_fire_lag_seconds{redcron_job,redcron_replica}`: start minus fire time of each cron fire's first
    /// start, so that retries, runs handed back and re-driven runs, which start late by
    /// design, do not read as a late scheduler.
    pub fire_lag_seconds: HistogramVec,
    /// `redcron_skipped_fires_total{redcron_job,redcron_replica,reason}`.
    pub skipped_fires_total: IntCounterVec,
    /// `redcron_retries_total{redcron_job,redcron_replica}`.
    pub retries_total: IntCounterVec,
    /// `redcron_notices_total{target,result}`: deliveries of notices by kind of target (mail,
    /// webhook, exec) and result (sent, failed: to be tried again, given_up).
    pub notices_total: IntCounterVec,
    /// `redcron_dead_runs`.
    pub dead_runs: IntGauge,
    /// `redcron_ready_runs{queue,priority}`.
    pub ready_runs: IntGaugeVec,
    /// `redcron_rerouted_runs_total{queue}`: ready runs moved from the queue, which no live
    /// replica served for its `fallback_after`, to its fallback.
    pub rerouted_runs_total: IntCounterVec,
    /// `redcron_queue_replicas{queue}`: live replicas serving the queue (set by the leader), 0
    /// for a queue with ready runs that none serves.
    pub queue_replicas: IntGaugeVec,
    /// `redcron_due_runs`.
    pub due_runs: IntGauge,
    /// `redcron_active_runs`.
    pub active_runs: IntGauge,
    /// `redcron_leader`: 1 while this replica leads.
    pub leader: IntGauge,
    /// `redcron_leader_changes_total`: leadership taken or lost by this replica.
    pub leader_changes_total: IntCounter,
    /// `redcron_fenced_writes_total`: planner writes refused for a stale epoch.
    pub fenced_writes_total: IntCounter,
    /// `redcron_dedup_skips_total`: runs skipped as duplicates.
    pub dedup_skips_total: IntCounter,
    /// `redcron_reaped_runs_total`: runs whose lease expired.
    pub reaped_runs_total: IntCounter,
    /// `redcron_stray_runs_total{state}`: runs the reaper found in none of the lists their
    /// state says they are in (a script failed halfway, a restore, a hand edit) and put back.
    pub stray_runs_total: IntCounterVec,
    /// `redcron_orphaned_runs_total`: runs Redis said this replica ran while it did not, ended
    /// as lost (the replica restarted, Redis restored from an older copy, a reply lost).
    pub orphaned_runs_total: IntCounter,
    /// `redcron_drifted_jobs`: jobs that live replicas declare in more than one way (set by the
    /// leader).
    pub drifted_jobs: IntGauge,
    /// `redcron_definitions_repaired_total`: published definitions the leader found unreadable
    /// or foreign and wrote again.
    pub definitions_repaired_total: IntCounter,
    /// `redcron_unreadable_declarations_total`: definitions another replica declared that the
    /// leader could not read (damaged, or from a version with settings this one lacks).
    pub unreadable_declarations_total: IntCounter,
    /// `redcron_declarations_republished_total`: times this replica found its published
    /// declarations not what it declares (written over, restored from another copy) and
    /// published them again.
    pub declarations_republished_total: IntCounter,
    /// `redcron_redis_data_lost_total`: times a heartbeat found the namespace's data in Redis
    /// not the copy it found before (Redis restarted without persistence, was flushed).
    pub redis_data_lost_total: IntCounter,
    /// `redcron_held`: 1 while the namespace is held (`redcron hold`), as the last heartbeat
    /// found.
    pub held: IntGauge,
    /// `redcron_workers_busy`.
    pub workers_busy: IntGauge,
    /// `redcron_workers_max`.
    pub workers_max: IntGauge,
    /// `redcron_redis_errors_total`: failed Redis calls, whatever made them (all retried).
    pub redis_errors_total: IntCounter,
    /// `redcron_archive_records`: outcomes recorded and not archived yet, as this replica's
    /// exporter last read (0 without `--archive`).
    pub archive_records: IntGauge,
    /// `redcron_archive_lag_seconds`: how long ago the oldest of them was recorded.
    pub archive_lag_seconds: IntGauge,
    /// `redcron_archive_records_total`: records this replica's exporter archived, and
    /// `redcron_archive_failures_total` the parts the archive refused it.
    pub archive_records_total: IntCounter,
    /// See `archive_records_total`.
    pub archive_failures_total: IntCounter,
    /// What `/healthz` and `/readyz` report.
    pub health: Health,
    /// The id of the replica these metrics count for, once it starts: the `redcron_replica`
    /// label of the per-run series, so that a dashboard or an alert names the replica that ran
    /// or skipped a run whatever the scrape target's labels say (an every-replica job's runs
    /// differ by replica).
    replica: OnceLock<String>,
}

/// The label naming a run's job. Not `job`: Prometheus gives that name to the scrape target's
/// job, and renames a target's own `job` label `exported_job`.
pub const JOB_LABEL: &str = "redcron_job";

/// The label naming the replica that ran or skipped a run.
pub const REPLICA_LABEL: &str = "redcron_replica";

/// Buckets for durations and lags, in seconds: from a millisecond to an hour.
const BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0, 300.0,
    3600.0,
];

/// Registers `metric` in `registry`. Names, labels and buckets are constants here: building or
/// registering can only fail on a programming error, which the metrics tests exercise.
fn registered<M: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: prometheus::Result<M>,
) -> M {
    let metric = metric.expect("metric names and labels are valid");
    registry
        .register(Box::new(metric.clone()))
        .expect("each metric is registered once");
    metric
}

impl Metrics {
    /// Every metric of namespace `namespace` at zero, in a registry of its own, and a replica
    /// that has not started.
    pub fn new(namespace: &str) -> Self {
        let labels =
            std::collections::HashMap::from([("namespace".to_owned(), namespace.to_owned())]);
        let registry =
            Registry::new_custom(None, Some(labels)).expect("a namespace is a valid label value");
        let counter_vec = |name: &str, help: &str, labels: &[&str]| {
            registered(&registry, IntCounterVec::new(Opts::new(name, help), labels))
        };
        let histogram_vec = |name: &str, help: &str| {
            let options = HistogramOpts::new(name, help).buckets(BUCKETS.to_vec());
            registered(
                &registry,
                HistogramVec::new(options, &[JOB_LABEL, REPLICA_LABEL]),
            )
        };
        let gauge = |name: &str, help: &str| registered(&registry, IntGauge::new(name, help));
        let counter = |name: &str, help: &str| registered(&registry, IntCounter::new(name, help));
        let ready_runs = registered(
            &registry,
            IntGaugeVec::new(
                Opts::new(
                    "redcron_ready_runs",
                    "Runs ready to claim, by queue and priority",
                ),
                &["queue", "priority"],
            ),
        );
        Self {
            runs_total: counter_vec(
                "redcron_runs_total",
                "Runs finished, by outcome",
                &[JOB_LABEL, REPLICA_LABEL, "outcome"],
            ),
            run_duration_seconds: histogram_vec(
                "redcron_run_duration_seconds",
                "How long runs took",
            ),
            fire_lag_seconds: histogram_vec(
                "redcron_fire_lag_seconds",
                "Start minus fire time of the first start of cron fires",
            ),
            notices_total: counter_vec(
                "redcron_notices_total",
                "Deliveries of notices, by kind of target and result",
                &["target", "result"],
            ),
            skipped_fires_total: counter_vec(
                "redcron_skipped_fires_total",
                "Fires recorded as skipped, by reason",
                &[JOB_LABEL, REPLICA_LABEL, "reason"],
            ),
            rerouted_runs_total: counter_vec(
                "redcron_rerouted_runs_total",
                "Ready runs moved from an unserved queue to its fallback",
                &["queue"],
            ),
            retries_total: counter_vec(
                "redcron_retries_total",
                "Runs due again after a failure",
                &[JOB_LABEL, REPLICA_LABEL],
            ),
            dead_runs: gauge(
                "redcron_dead_runs",
                "Runs in the dead letters (set by the leader)",
            ),
            ready_runs,
            queue_replicas: registered(
                &registry,
                IntGaugeVec::new(
                    Opts::new(
                        "redcron_queue_replicas",
                        "Live replicas serving the queue (set by the leader)",
                    ),
                    &["queue"],
                ),
            ),
            due_runs: gauge(
                "redcron_due_runs",
                "Runs in the due set (set by the leader)",
            ),
            active_runs: gauge(
                "redcron_active_runs",
                "Runs holding a lease (set by the leader)",
            ),
            leader: gauge("redcron_leader", "1 while this replica leads"),
            leader_changes_total: counter(
                "redcron_leader_changes_total",
                "Leadership taken or lost",
            ),
            fenced_writes_total: counter(
                "redcron_fenced_writes_total",
                "Planner writes refused as stale",
            ),
            dedup_skips_total: counter("redcron_dedup_skips_total", "Runs skipped as duplicates"),
            reaped_runs_total: counter("redcron_reaped_runs_total", "Runs whose lease expired"),
            stray_runs_total: counter_vec(
                "redcron_stray_runs_total",
                "Runs found in none of the lists their state says they are in, put back",
                &["state"],
            ),
            orphaned_runs_total: counter(
                "redcron_orphaned_runs_total",
                "Runs Redis said this replica ran while it did not, ended as lost",
            ),
            drifted_jobs: gauge(
                "redcron_drifted_jobs",
                "Jobs live replicas declare in more than one way (set by the leader)",
            ),
            definitions_repaired_total: counter(
                "redcron_definitions_repaired_total",
                "Published definitions found unreadable or foreign and written again",
            ),
            unreadable_declarations_total: counter(
                "redcron_unreadable_declarations_total",
                "Definitions declared by another replica that the leader could not read",
            ),
            declarations_republished_total: counter(
                "redcron_declarations_republished_total",
                "Times this replica's published declarations were found damaged and published again",
            ),
            redis_data_lost_total: counter(
                "redcron_redis_data_lost_total",
                "Times a heartbeat found that Redis lost the namespace's data since the one before",
            ),
            held: gauge(
                "redcron_held",
                "1 while the namespace is held (redcron hold): nothing is planned, claimed or recorded",
            ),
            workers_busy: gauge("redcron_workers_busy", "Runs executing on this replica"),
            workers_max: gauge("redcron_workers_max", "Runs this replica executes at once"),
            redis_errors_total: counter("redcron_redis_errors_total", "Failed Redis calls"),
            archive_records: gauge(
                "redcron_archive_records",
                "Outcomes recorded in Redis and not archived yet",
            ),
            archive_lag_seconds: gauge(
                "redcron_archive_lag_seconds",
                "How long ago the oldest outcome not archived yet was recorded",
            ),
            archive_records_total: counter(
                "redcron_archive_records_total",
                "Records this replica wrote to the archive (or found written)",
            ),
            archive_failures_total: counter(
                "redcron_archive_failures_total",
                "Parts the archive refused this replica",
            ),
            health: Health::default(),
            replica: OnceLock::new(),
            namespace: namespace.to_owned(),
            registry,
        }
    }

    /// The namespace these metrics count for.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// Counts one skipped (or, `corrupt`, buried) run under the labels the caller chose: a job
    /// this replica declares and a reason the store knows, so that nothing written to Redis
    /// makes new series (see `engine::record_skips`).
    pub fn record_skip(&self, job: &str, reason: &str) {
        self.skipped_fires_total
            .with_label_values(&[job, self.replica(), reason])
            .inc();
    }

    /// Names the replica these metrics count for (its id); the first call wins, as a process
    /// serves each namespace under one id.
    pub fn set_replica(&self, id: &str) {
        // A second call names the same replica: nothing to do.
        let _ = self.replica.set(id.to_owned());
    }

    /// The `redcron_replica` label: this replica's id, or empty before it started (a store
    /// used as a library, or by the CLI).
    fn replica(&self) -> &str {
        self.replica.get().map_or("", String::as_str)
    }

    /// Counts a run's attempt ended with `outcome` (succeeded, retrying, dead, lost).
    pub fn record_run(&self, job: &str, outcome: &str) {
        self.runs_total
            .with_label_values(&[job, self.replica(), outcome])
            .inc();
    }

    /// Counts a failed attempt that will be tried again.
    pub fn record_retry(&self, job: &str) {
        self.retries_total
            .with_label_values(&[job, self.replica()])
            .inc();
    }

    /// Observes how long an attempt of `job` ran.
    pub fn observe_duration(&self, job: &str, seconds: f64) {
        self.run_duration_seconds
            .with_label_values(&[job, self.replica()])
            .observe(seconds);
    }

    /// Observes a cron fire's first start, `seconds` after its fire time.
    pub fn observe_fire_lag(&self, job: &str, seconds: f64) {
        self.fire_lag_seconds
            .with_label_values(&[job, self.replica()])
            .observe(seconds);
    }
}
