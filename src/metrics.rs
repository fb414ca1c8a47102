//! Prometheus metrics and the HTTP endpoint that serves them with the health checks.
//!
//! The metrics are process-wide (one replica per process): components update them where the
//! thing counted happens. Gauges of shared state (due, active, dead, ready runs) are refreshed
//! from Redis by the leader only, so that summing over replicas does not count them twice.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::routing::get;
use prometheus::{
    Encoder, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

use crate::engine::Shutdown;

/// Every metric a replica exports.
pub struct Metrics {
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
    /// `redcron_workers_busy`.
    pub workers_busy: IntGauge,
    /// `redcron_workers_max`.
    pub workers_max: IntGauge,
    /// `redcron_redis_errors_total`: failed Redis operations (all retried).
    pub redis_errors_total: IntCounter,
    /// `redcron_log_lines_dropped_total`: log lines the log stream refused or was too slow
    /// for; kept in step with [`crate::logs::dropped_lines`] at each scrape.
    log_lines_dropped_total: IntCounter,
    /// The dropped log lines already added to `log_lines_dropped_total`: two scrapes at once
    /// must not add the same lines twice.
    log_lines_counted: Mutex<u64>,
}

/// The process's metrics.
pub static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// Buckets for durations and lags, in seconds: from a millisecond to an hour.
const BUCKETS: [f64; 16] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 15.0, 60.0, 300.0,
    3600.0,
];

impl Metrics {
    fn new() -> Self {
        let registry = Registry::new();
        // Names, labels and buckets are constants here: building or registering can only
        // fail on a programming error, which the metrics tests exercise.
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
            workers_busy: gauge("redcron_workers_busy", "Runs executing on this replica"),
            workers_max: gauge("redcron_workers_max", "Runs this replica executes at once"),
            redis_errors_total: counter("redcron_redis_errors_total", "Failed Redis operations"),
            log_lines_dropped_total: counter(
                "redcron_log_lines_dropped_total",
                "Log lines dropped: the log stream refused them or was too slow",
            ),
            log_lines_counted: Mutex::new(0),
            registry,
        }
    }

    /// Counts skipped fires reported by a script: `(job, reason)` pairs.
    pub fn record_skips(&self, skipped: &[(String, String)]) {
        for (job, reason) in skipped {
            self.skipped_fires_total
                .with_label_values(&[job, reason])
                .inc();
            if reason == "duplicate" {
                self.dedup_skips_total.inc();
            }
        }
    }

    /// The text exposition format.
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
        let mut buffer = Vec::new();
        // Encoding into a Vec cannot fail for well-formed metrics.
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut buffer);
        String::from_utf8_lossy(&buffer).into_owned()
    }
}

/// What `/healthz` and `/readyz` report.
#[derive(Debug, Default)]
pub struct Health {
    /// When Redis last answered, ms since the epoch (local clock).
    last_redis_ok_ms: AtomicI64,
    /// Set once shutdown begins.
    stopping: AtomicBool,
}

/// How long Redis may be unreachable before `/healthz` answers 503.
pub const UNHEALTHY_AFTER: Duration = Duration::from_secs(30);

/// How recently Redis must have answered for `/readyz` to answer 200.
pub const READY_WITHIN: Duration = Duration::from_secs(10);

impl Health {
    /// Redis just answered.
    pub fn redis_ok(&self) {
        self.last_redis_ok_ms
            .store(chrono::Utc::now().timestamp_millis(), Ordering::Relaxed);
    }

    /// Shutdown began: not ready for new work.
    pub fn stopping(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }

    fn redis_silent_for(&self) -> Duration {
        let last = self.last_redis_ok_ms.load(Ordering::Relaxed);
        let silent = chrono::Utc::now().timestamp_millis() - last;
        Duration::from_millis(u64::try_from(silent).unwrap_or(0))
    }
}

/// The process's health.
pub static HEALTH: LazyLock<Health> = LazyLock::new(Health::default);

/// Serves `/metrics`, `/healthz` and `/readyz` on `address` until `shutdown`.
///
/// # Errors
/// The address cannot be bound.
pub async fn serve(address: SocketAddr, shutdown: Shutdown) -> std::io::Result<()> {
    let app = Router::new()
        .route(
            "/metrics",
            get(|| async {
                (
                    [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
                    METRICS.encode(),
                )
            }),
        )
        .route(
            "/healthz",
            get(|| async {
                if HEALTH.redis_silent_for() > UNHEALTHY_AFTER {
                    (StatusCode::SERVICE_UNAVAILABLE, "redis unreachable\n")
                } else {
                    (StatusCode::OK, "ok\n")
                }
            }),
        )
        .route(
            "/readyz",
            get(|| async {
                if HEALTH.stopping.load(Ordering::Relaxed) {
                    (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n")
                } else if HEALTH.redis_silent_for() > READY_WITHIN {
                    (StatusCode::SERVICE_UNAVAILABLE, "redis unreachable\n")
                } else {
                    (StatusCode::OK, "ready\n")
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(address).await?;
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `redcron_*` series that the contrib dashboard and alert rules query is exported.
    #[test]
    fn contrib_dashboard_and_alerts_use_exported_metrics() {
        // Touch the labelled families so that they appear in the exposition.
        METRICS
            .runs_total
            .with_label_values(&["j", "succeeded"])
            .inc();
        METRICS
            .run_duration_seconds
            .with_label_values(&["j"])
            .observe(0.1);
        METRICS
            .fire_lag_seconds
            .with_label_values(&["j"])
            .observe(0.1);
        METRICS
            .skipped_fires_total
            .with_label_values(&["j", "paused"])
            .inc();
        METRICS.retries_total.with_label_values(&["j"]).inc();
        METRICS
            .ready_runs
            .with_label_values(&["default", "high"])
            .set(0);
        let exported = METRICS.encode();
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
