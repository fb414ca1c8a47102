//! The HTTP endpoint of a process: `/metrics` for every namespace it serves, `/healthz` and
//! `/readyz` for all of them.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{StatusCode, header};
use axum::routing::get;
use prometheus::{Encoder, IntCounter, Registry, TextEncoder};

use super::{Health, Metrics, registered};
use crate::shutdown::Shutdown;

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
    ///
    /// ```no_run
    /// use redcron::metrics::Endpoint;
    ///
    /// # fn example(orders: redcron::store::Store, reports: redcron::store::Store) {
    /// // One exposition, and one health that fails when either namespace's does.
    /// let endpoint = Endpoint::new(vec![orders.metrics().clone(), reports.metrics().clone()]);
    /// # }
    /// ```
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

/// Serves the metrics of `endpoint` on `/metrics`, and its health on `/healthz` and `/readyz`,
/// on `listener` until `shutdown`.
///
/// ```no_run
/// use std::sync::Arc;
///
/// use redcron::metrics::{Endpoint, serve};
/// use redcron::shutdown::Shutdown;
///
/// # async fn example(store: redcron::store::Store, replica: redcron::replica::Replica) -> Result<(), Box<dyn std::error::Error>> {
/// let endpoint = Arc::new(Endpoint::new(vec![store.metrics().clone()]));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:9464").await?;
/// let serving = Shutdown::new();
/// tokio::spawn(serve(listener, endpoint, serving.clone()));
/// replica.run(Shutdown::new()).await?;
/// // Served until the replica has stopped, so that `/readyz` says so during the grace.
/// serving.cancel();
/// # Ok(())
/// # }
/// ```
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
    fn one_endpoint_serves_each_namespace_under_its_label_and_fails_with_any() {
        let (a, b) = (Arc::new(Metrics::new("a")), Arc::new(Metrics::new("b")));
        a.leader.set(1);
        b.record_run("j", "dead");
        let endpoint = Endpoint::new(vec![a.clone(), b.clone()]);
        let exported = endpoint.encode();
        for series in [
            "redcron_leader{namespace=\"a\"} 1",
            "redcron_leader{namespace=\"b\"} 0",
            "redcron_runs_total{outcome=\"dead\",redcron_job=\"j\",redcron_replica=\"\",namespace=\"b\"} 1",
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

    /// Prometheus sets `job` to the scrape target's: a series of its own with a `job` label has
    /// it renamed `exported_job`, and a dashboard grouped by job would merge every job. Each
    /// also names the replica that ran or skipped the run.
    #[test]
    fn per_job_series_name_the_job_apart_from_the_scrape_target_and_the_replica() {
        let metrics = Metrics::new("test");
        metrics.set_replica("r1");
        metrics.record_run("nightly", "succeeded");
        metrics.observe_duration("nightly", 0.1);
        metrics.observe_fire_lag("nightly", 0.1);
        metrics.record_skip("nightly", "paused");
        metrics.record_retry("nightly");
        let exported = Endpoint::new(vec![Arc::new(metrics)]).encode();
        for family in [
            "redcron_runs_total{",
            "redcron_run_duration_seconds_count{",
            "redcron_fire_lag_seconds_count{",
            "redcron_skipped_fires_total{",
            "redcron_retries_total{",
        ] {
            let series = exported
                .lines()
                .find(|line| line.starts_with(family))
                .unwrap_or_else(|| panic!("no {family} series in\n{exported}"));
            assert!(series.contains("redcron_job=\"nightly\""), "{series}");
            assert!(series.contains("redcron_replica=\"r1\""), "{series}");
        }
        assert!(
            !exported.contains("{job=") && !exported.contains(",job="),
            "{exported}"
        );
    }

    /// Every `redcron_*` series that the contrib dashboard and alert rules query is exported.
    #[test]
    fn contrib_dashboard_and_alerts_use_exported_metrics() {
        let metrics = Metrics::new("test");
        // Touch the labelled families so that they appear in the exposition.
        metrics.record_run("j", "succeeded");
        metrics.observe_duration("j", 0.1);
        metrics.observe_fire_lag("j", 0.1);
        metrics.record_skip("j", "paused");
        metrics.record_retry("j");
        metrics
            .ready_runs
            .with_label_values(&["default", "high"])
            .set(0);
        metrics
            .queue_replicas
            .with_label_values(&["default"])
            .set(1);
        let exported = Endpoint::new(vec![Arc::new(metrics)]).encode();
        for (file, text) in [
            (
                "grafana-dashboard.json",
                include_str!("../../contrib/grafana-dashboard.json"),
            ),
            (
                "prometheus-alerts.yml",
                include_str!("../../contrib/prometheus-alerts.yml"),
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
                // A metric's name, or the label of the job a series counts.
                assert!(
                    exported.contains(&format!("\n{name}"))
                        || exported.contains(&format!("\n{name}{{"))
                        || exported.contains(&format!("{name}=\"")),
                    "{file} uses {name}, which is not exported"
                );
            }
            assert!(seen > 5, "{file} queries redcron metrics");
        }
    }
}
