//! Prometheus metrics and the HTTP endpoint that serves them with the health checks.
//!
//! A replica's metrics and health are one [`Metrics`] handle, made with its store (or passed in
//! with [`crate::store::Store::with_metrics`]): components update them where the thing counted
//! happens, and two replicas in one process count apart. Every series carries the replica's
//! `namespace` label. Gauges of shared state (due, active, dead, ready runs) are refreshed from
//! Redis by the leader only, so that summing over replicas does not count them twice.
//!
//! One [`Endpoint`] serves a process: the metrics of every namespace it serves, merged into one
//! exposition, and one health that fails when any namespace's does.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::routing::get;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::shutdown::Shutdown;

/// Every metric a replica exports, labelled with its namespace.
pub struct Metrics {
    /// The namespace the replica serves: the `namespace` label of every series.
    namespace: String,
    registry: Registry,
    /// `redcron_runs_total{job,outcome}`: runs finished, by outcome (succeeded, retrying, dead).
    pub runs_total: IntCounterVec,
    /// `redcron_run_duration_seconds{job}`.
    pub run_duration_seconds: HistogramVec,
    /// `redcron_fire_lag_seconds{job}`: start minus fire time of cron runs.
    pub fire_lag_seconds: HistogramVec,
    /// `redcron_skipped_fires_total{job,reason}`.
    pub skipped_fires_total: IntCounterVec,
    /// `redcron_retries_total{job}`.
    pub retries_total: IntCounterVec,
    /// `redcron_notices_total{target,result}`: deliveries of notices by kind of target (mail,
    /// webhook, exec) and result (sent, failed: to be tried again, given_up).
    pub notices_total: IntCounterVec,
    /// `redcron_dead_runs`.
    pub dead_runs: IntGauge,
    /// `redcron_ready_runs{queue,priority}`.
    pub ready_runs: IntGaugeVec,
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
    /// `redcron_workers_busy`.
    pub workers_busy: IntGauge,
    /// `redcron_workers_max`.
    pub workers_max: IntGauge,
    /// `redcron_redis_errors_total`: failed Redis calls, whatever made them (all retried).
    pub redis_errors_total: IntCounter,
    /// What `/healthz` and `/readyz` report.
    pub health: Health,
}

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
            registered(&registry, HistogramVec::new(options, &["job"]))
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
                &["job", "outcome"],
            ),
            run_duration_seconds: histogram_vec(
                "redcron_run_duration_seconds",
                "How long runs took",
            ),
            fire_lag_seconds: histogram_vec(
                "redcron_fire_lag_seconds",
                "Start minus fire time of cron runs",
            ),
            notices_total: counter_vec(
                "redcron_notices_total",
                "Deliveries of notices, by kind of target and result",
                &["target", "result"],
            ),
            skipped_fires_total: counter_vec(
                "redcron_skipped_fires_total",
                "Fires recorded as skipped, by reason",
                &["job", "reason"],
            ),
            retries_total: counter_vec(
                "redcron_retries_total",
                "Runs due again after a failure",
                &["job"],
            ),
            dead_runs: gauge(
                "redcron_dead_runs",
                "Runs in the dead letters (set by the leader)",
            ),
            ready_runs,
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
            workers_busy: gauge("redcron_workers_busy", "Runs executing on this replica"),
            workers_max: gauge("redcron_workers_max", "Runs this replica executes at once"),
            redis_errors_total: counter("redcron_redis_errors_total", "Failed Redis calls"),
            health: Health::default(),
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
    /// makes new series (see `engine::count_skips`).
    pub fn record_skip(&self, job: &str, reason: &str) {
        self.skipped_fires_total
            .with_label_values(&[job, reason])
            .inc();
    }
}

/// What one process serves on its metrics endpoint: the metrics and health of every namespace it
/// serves, and the metrics of the process itself.
pub struct Endpoint {
    namespaces: Vec<Arc<Metrics>>,
    /// The process's own series, which carry no namespace.
    registry: Registry,
    /// `redcron_log_lines_dropped_total`: log lines the log stream refused or was too slow
    /// for; kept in step with [`crate::logs::dropped_lines`] at each scrape.
    log_lines_dropped_total: IntCounter,
    /// The dropped log lines already added to `log_lines_dropped_total`: two scrapes at once
    /// must not add the same lines twice.
    log_lines_counted: Mutex<u64>,
}

impl Endpoint {
    /// The endpoint of a process serving the namespaces whose metrics are `namespaces`.
    pub fn new(namespaces: Vec<Arc<Metrics>>) -> Self {
        let registry = Registry::new();
        let log_lines_dropped_total = registered(
            &registry,
            IntCounter::new(
                "redcron_log_lines_dropped_total",
                "Log lines dropped: the log stream refused them or was too slow",
            ),
        );
        Self {
            namespaces,
            registry,
            log_lines_dropped_total,
            log_lines_counted: Mutex::new(0),
        }
    }

    /// The text exposition format: each metric family once, holding the series of every
    /// namespace (a family named twice would be refused by Prometheus).
    fn encode(&self) -> String {
        {
            // A poisoned lock only means a scrape panicked mid-update; the count is still right.
            let mut counted = self
                .log_lines_counted
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let dropped = crate::logs::dropped_lines();
            if dropped > *counted {
                self.log_lines_dropped_total.inc_by(dropped - *counted);
                *counted = dropped;
            }
        }
        let mut families = BTreeMap::new();
        let registries =
            std::iter::once(&self.registry).chain(self.namespaces.iter().map(|m| &m.registry));
        for mut family in registries.flat_map(Registry::gather) {
            match families.entry(family.name().to_owned()) {
                Entry::Vacant(entry) => {
                    entry.insert(family);
                }
                Entry::Occupied(mut entry) => {
                    entry.get_mut().mut_metric().extend(family.take_metric());
                }
            }
        }
        let families: Vec<_> = families.into_values().collect();
        let mut buffer = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        let _ = TextEncoder::new().encode(&families, &mut buffer);
        String::from_utf8_lossy(&buffer).into_owned()
    }

    /// `Ok` while every namespace's replica lives and progresses, else why not (for
    /// `/healthz`), naming the namespace when there are several.
    ///
    /// # Errors
    /// The first namespace whose [`Health::liveness`] fails.
    pub fn liveness(&self) -> Result<(), String> {
        self.each_health(Health::liveness)
    }

    /// `Ok` while every namespace's replica can take work, else why not (for `/readyz`),
    /// naming the namespace when there are several.
    ///
    /// # Errors
    /// The first namespace whose [`Health::readiness`] fails.
    pub fn readiness(&self) -> Result<(), String> {
        self.each_health(Health::readiness)
    }

    /// The first component that died, and its namespace when there are several.
    pub fn dead_component(&self) -> Option<String> {
        self.namespaces.iter().find_map(|metrics| {
            let component = metrics.health.dead_component()?;
            Some(self.naming(metrics, component))
        })
    }

    fn each_health(&self, check: fn(&Health) -> Result<(), String>) -> Result<(), String> {
        self.namespaces.iter().try_for_each(|metrics| {
            check(&metrics.health).map_err(|why| self.naming(metrics, &why))
        })
    }

    /// `what`, prefixed with the namespace of `metrics` when the process serves several.
    fn naming(&self, metrics: &Metrics, what: &str) -> String {
        if self.namespaces.len() > 1 {
            format!("namespace {}: {what}", metrics.namespace)
        } else {
            what.to_owned()
        }
    }
}

/// What `/healthz` and `/readyz` report.
///
/// Progress is a heartbeat written to Redis: it proves at once that the runtime runs, that Redis
/// answers and that it accepts this replica's writes. A component that died is reported by the
/// replica's supervisor the moment it is noticed.
#[derive(Debug)]
pub struct Health {
    /// The origin of the instants below, on the monotonic clock: a jump of the wall clock must
    /// not make a replica look stuck.
    origin: Instant,
    /// When Redis last answered a call: ms since `origin`, plus one (0: never).
    redis_answered: AtomicU64,
    /// When the replica last made progress: ms since `origin`, plus one (0: never, and the
    /// silence counts from `origin`).
    progressed: AtomicU64,
    /// Redis refused a write (out of memory, read-only, ...) and no heartbeat was written since.
    writes_refused: AtomicBool,
    /// The namespace is held (`redcron hold`), as the last heartbeat found.
    held: AtomicBool,
    /// Set once shutdown begins.
    stopping: AtomicBool,
    /// The first component that died, by name.
    died: OnceLock<String>,
}

/// How long a replica may go without progress (no heartbeat written to Redis) before
/// `/healthz` answers 503.
pub const UNHEALTHY_AFTER: Duration = Duration::from_secs(30);

/// How recently Redis must have answered for `/readyz` to answer 200.
pub const READY_WITHIN: Duration = Duration::from_secs(10);

impl Default for Health {
    fn default() -> Self {
        Self {
            origin: Instant::now(),
            redis_answered: AtomicU64::new(0),
            progressed: AtomicU64::new(0),
            writes_refused: AtomicBool::new(false),
            held: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            died: OnceLock::new(),
        }
    }
}

impl Health {
    fn now(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis())
            .unwrap_or(u64::MAX - 1)
            .saturating_add(1)
    }

    fn silent_for(&self, since: &AtomicU64) -> Duration {
        let since = since.load(Ordering::Relaxed).saturating_sub(1);
        Duration::from_millis(self.now().saturating_sub(1).saturating_sub(since))
    }

    /// A replica starts: its silence counts from now, not from the start of the process.
    pub fn starting(&self) {
        self.progressed.store(self.now(), Ordering::Relaxed);
    }

    /// Redis just answered.
    pub fn redis_ok(&self) {
        self.redis_answered.store(self.now(), Ordering::Relaxed);
    }

    /// Redis refused a write: not ready until a heartbeat is written again.
    pub fn write_refused(&self) {
        self.writes_refused.store(true, Ordering::Relaxed);
    }

    /// The replica's heartbeat was written to Redis: progress, and Redis takes writes again.
    pub fn progressed(&self) {
        let now = self.now();
        self.redis_answered.store(now, Ordering::Relaxed);
        self.progressed.store(now, Ordering::Relaxed);
        self.writes_refused.store(false, Ordering::Relaxed);
    }

    /// Whether the namespace is held (`redcron hold`): not ready while it is, since nothing is
    /// claimed or recorded.
    pub fn set_held(&self, held: bool) {
        self.held.store(held, Ordering::Relaxed);
    }

    /// Shutdown began: not ready for new work.
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    /// A component of the replica died: unhealthy and not ready from now on, since the
    /// process is stopping to be restarted.
    pub fn component_died(&self, component: &str) {
        let _ = self.died.set(component.to_owned());
    }

    /// The component that died, if one did.
    pub fn dead_component(&self) -> Option<&str> {
        self.died.get().map(String::as_str)
    }

    /// `Ok` while the replica lives and progresses, else why not (for `/healthz`).
    ///
    /// # Errors
    /// A component died, or no heartbeat was written for [`UNHEALTHY_AFTER`].
    pub fn liveness(&self) -> Result<(), String> {
        if let Some(component) = self.died.get() {
            return Err(format!("the {component} died\n"));
        }
        let silent = self.silent_for(&self.progressed);
        if silent > UNHEALTHY_AFTER {
            return Err(format!(
                "no progress for {} s: no heartbeat written to redis\n",
                silent.as_secs()
            ));
        }
        Ok(())
    }

    /// `Ok` while the replica can take work, else why not (for `/readyz`).
    ///
    /// # Errors
    /// A component died, shutdown began, Redis refuses writes, the namespace is held, or Redis
    /// has not answered for [`READY_WITHIN`].
    pub fn readiness(&self) -> Result<(), String> {
        if let Some(component) = self.died.get() {
            return Err(format!("the {component} died\n"));
        }
        if self.stopping.load(Ordering::Relaxed) {
            return Err("shutting down\n".to_owned());
        }
        if self.redis_answered.load(Ordering::Relaxed) == 0
            || self.silent_for(&self.redis_answered) > READY_WITHIN
        {
            return Err("redis unreachable\n".to_owned());
        }
        if self.writes_refused.load(Ordering::Relaxed) {
            return Err("redis refuses writes\n".to_owned());
        }
        if self.held.load(Ordering::Relaxed) {
            return Err("the namespace is held (redcron hold)\n".to_owned());
        }
        Ok(())
    }
}

/// Serves the metrics of `endpoint` on `/metrics`, and its health on `/healthz` and `/readyz`,
/// on `listener` until `shutdown`.
///
/// # Errors
/// The listener fails.
pub async fn serve(
    listener: tokio::net::TcpListener,
    endpoint: Arc<Endpoint>,
    shutdown: Shutdown,
) -> std::io::Result<()> {
    let (scraped, live, ready) = (endpoint.clone(), endpoint.clone(), endpoint);
    let app = Router::new()
        .route(
            "/metrics",
            get(|| async move {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    scraped.encode(),
                )
            }),
        )
        .route(
            "/healthz",
            get(|| async move {
                match live.liveness() {
                    Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
                    Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason),
                }
            }),
        )
        .route(
            "/readyz",
            get(|| async move {
                match ready.readiness() {
                    Ok(()) => (StatusCode::OK, "ready\n".to_owned()),
                    Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason),
                }
            }),
        );
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_fails_from_a_refused_write_until_a_heartbeat_is_written() {
        let health = Health::default();
        assert_eq!(health.readiness(), Err("redis unreachable\n".to_owned()));
        health.redis_ok();
        assert_eq!(health.readiness(), Ok(()));
        health.write_refused();
        // Other calls still answer: reads go on while Redis refuses writes.
        health.redis_ok();
        assert_eq!(health.readiness(), Err("redis refuses writes\n".to_owned()));
        assert_eq!(health.liveness(), Ok(()));
        health.progressed();
        assert_eq!(health.readiness(), Ok(()));
        health.stopping();
        assert_eq!(health.readiness(), Err("shutting down\n".to_owned()));
        assert_eq!(health.liveness(), Ok(()));
    }

    #[test]
    fn a_dead_component_fails_both_checks_at_once() {
        let health = Health::default();
        health.progressed();
        health.component_died("planner");
        health.component_died("elector");
        let dead = Err("the planner died\n".to_owned());
        assert_eq!(health.liveness(), dead);
        assert_eq!(health.readiness(), dead);
    }

    #[test]
    fn one_endpoint_serves_each_namespace_under_its_label_and_fails_with_any() {
        let (a, b) = (Arc::new(Metrics::new("a")), Arc::new(Metrics::new("b")));
        a.leader.set(1);
        b.runs_total.with_label_values(&["j", "dead"]).inc();
        let endpoint = Endpoint::new(vec![a.clone(), b.clone()]);
        let exported = endpoint.encode();
        for series in [
            "redcron_leader{namespace=\"a\"} 1",
            "redcron_leader{namespace=\"b\"} 0",
            "redcron_runs_total{job=\"j\",outcome=\"dead\",namespace=\"b\"} 1",
            "redcron_log_lines_dropped_total ",
        ] {
            assert!(
                exported.contains(&format!("\n{series}")),
                "{series}\n{exported}"
            );
        }
        // Each family is described once, however many namespaces it holds series of.
        assert_eq!(
            exported.matches("# TYPE redcron_leader gauge").count(),
            1,
            "{exported}"
        );

        for metrics in [&a, &b] {
            metrics.health.progressed();
        }
        assert_eq!(endpoint.readiness(), Ok(()));
        b.health.write_refused();
        assert_eq!(
            endpoint.readiness(),
            Err("namespace b: redis refuses writes\n".to_owned())
        );
        assert_eq!(endpoint.liveness(), Ok(()));
        b.health.component_died("planner");
        assert_eq!(
            endpoint.liveness(),
            Err("namespace b: the planner died\n".to_owned())
        );
        assert_eq!(
            endpoint.dead_component().as_deref(),
            Some("namespace b: planner")
        );
        // One namespace: the reasons as they were.
        let alone = Endpoint::new(vec![b]);
        assert_eq!(alone.liveness(), Err("the planner died\n".to_owned()));
    }

    /// Every `redcron_*` series that the contrib dashboard and alert rules query is exported.
    #[test]
    fn contrib_dashboard_and_alerts_use_exported_metrics() {
        let metrics = Metrics::new("test");
        // Touch the labelled families so that they appear in the exposition.
        metrics
            .runs_total
            .with_label_values(&["j", "succeeded"])
            .inc();
        metrics
            .run_duration_seconds
            .with_label_values(&["j"])
            .observe(0.1);
        metrics
            .fire_lag_seconds
            .with_label_values(&["j"])
            .observe(0.1);
        metrics
            .skipped_fires_total
            .with_label_values(&["j", "paused"])
            .inc();
        metrics.retries_total.with_label_values(&["j"]).inc();
        metrics
            .ready_runs
            .with_label_values(&["default", "high"])
            .set(0);
        let exported = Endpoint::new(vec![Arc::new(metrics)]).encode();
        for (file, text) in [
            (
                "grafana-dashboard.json",
                include_str!("../contrib/grafana-dashboard.json"),
            ),
            (
                "prometheus-alerts.yml",
                include_str!("../contrib/prometheus-alerts.yml"),
            ),
        ] {
            let mut rest = text;
            let mut seen = 0;
            while let Some(start) = rest.find("redcron_") {
                let name: String = rest[start..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                rest = &rest[start + name.len()..];
                seen += 1;
                assert!(
                    exported.contains(&format!("\n{name}"))
                        || exported.contains(&format!("\n{name}{{")),
                    "{file} uses {name}, which is not exported"
                );
            }
            assert!(seen > 5, "{file} queries redcron metrics");
        }
    }
}
