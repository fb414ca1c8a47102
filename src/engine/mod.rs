//! The replica's background components, one file each, all of the same shape: `tick()` does one
//! iteration (what tests call), `run(shutdown)` loops around it until shutdown. A failed tick is
//! logged and the loop goes on after a pause; only `run` decides what is fatal.
//!
//! - [`elector`]: takes, renews and releases the leader lease.
//! - [`planner`]: leader only; expands schedules into the due set, a horizon ahead.
//! - [`promoter`]: moves runs whose time has come to their ready lists.
//! - [`worker`]: claims ready runs, executes them with their handler, records the outcome.
//! - [`reaper`]: fails runs whose lease expired (their worker died) with reason `lost`.
//! - [`heartbeat`]: records the replica as alive, with its load.
//! - [`notifier`]: sends the notices owed to people (mail, webhooks, commands).

pub mod elector;
pub mod exporter;
pub mod heartbeat;
pub mod notifier;
pub mod planner;
pub mod promoter;
pub mod reaper;
mod retry;
pub mod worker;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

pub use crate::shutdown::Shutdown;
use tokio::sync::watch;
use tracing::info;

use crate::metrics::{Health, Metrics};
use crate::store::{FailReason, LeaderToken, SkipReason, StoreError};

/// The `job` label of runs of jobs this replica does not declare: job names read from Redis
/// never become series of their own, whatever is written there.
const UNDECLARED_JOB_LABEL: &str = "undeclared";

/// The reason a replica reports to [`record_skips`] for its run of an every-replica job skipped
/// as `missed` as it would start: superseded by its run of the job's next fire, due by then
/// (`missed_at_start`), however little late it is. Counted, like the history, as `missed`;
/// only its log line says why.
pub(crate) const SUPERSEDED: &str = "superseded";

/// The reason to report for a run skipped at its start for `reason`: [`SUPERSEDED`] for a
/// replica's run of an every-replica job (`every`) skipped as `missed`.
pub(crate) fn skip_reason_at_start(every: bool, reason: &str) -> &str {
    if every && reason == SkipReason::Missed.as_str() {
        SUPERSEDED
    } else {
        reason
    }
}

/// Counts runs a script skipped (or buried), `(job, reason)` as it reported them, labelled by
/// their job when `declares` it and by a reason the store knows: anything else is counted
/// under one label value, so the number of series stays bounded. The fires skipped for a reason
/// their job's owner may act on (an overlap, a missed fire, a starting deadline) are logged at
/// INFO, one line per job and reason: the fires missed in one outage come due together, and
/// one line says how many.
pub(crate) fn record_skips(
    metrics: &Metrics,
    skips: &[(String, String)],
    declares: impl Fn(&str) -> bool,
) {
    // Ordered, so that a call's lines come out the same way each time.
    let mut told: BTreeMap<(&str, &str, bool), (SkipReason, u64)> = BTreeMap::new();
    for (name, reason) in skips {
        let superseded = reason == SUPERSEDED;
        let skip = if superseded {
            Some(SkipReason::Missed)
        } else {
            SkipReason::parse(reason)
        };
        if let Some(
            told_reason @ (SkipReason::Overlap | SkipReason::Missed | SkipReason::Deadline),
        ) = skip
        {
            told.entry((name.as_str(), told_reason.as_str(), superseded))
                .or_insert((told_reason, 0))
                .1 += 1;
        }
        let job = if declares(name) {
            name.as_str()
        } else {
            UNDECLARED_JOB_LABEL
        };
        if skip == Some(SkipReason::Duplicate) {
            metrics.dedup_skips_total.inc();
        }
        let reason = skip
            .map(SkipReason::as_str)
            .or_else(|| FailReason::parse(reason).map(FailReason::as_str))
            .unwrap_or("other");
        metrics.record_skip(job, reason);
    }
    for ((job, reason, superseded), (skip, fires)) in told {
        let why = match skip {
            SkipReason::Overlap => "the job's previous run was still running (overlap forbidden)",
            SkipReason::Deadline => "later than the job's starting_deadline",
            _ if superseded => "superseded: its replica's run of the job's next fire is due",
            _ => "later than the misfire threshold, and the job's misfire policy skips it",
        };
        info!(job, reason, fires, "skipped: {why}");
    }
}

/// How long a component waits after a failed tick before trying again, doubling up to
/// [`MAX_RETRY_DELAY`]: Redis restarts and network blips are ridden out, not fatal.
pub const MIN_RETRY_DELAY: Duration = Duration::from_millis(100);

/// The longest pause between retries of a failing tick.
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(5);

/// Whether this replica leads, shared by the elector (which takes and renews the lease) and the
/// planner (which stops at once when a write is fenced).
#[derive(Debug, Clone, Default)]
pub struct Leadership {
    current: Arc<watch::Sender<Option<LeaderToken>>>,
}

impl Leadership {
    /// A replica that does not lead.
    pub fn new() -> Self {
        Self::default()
    }

    /// The token this replica holds the lease with, while it leads.
    pub fn token(&self) -> Option<LeaderToken> {
        self.current.borrow().clone()
    }

    /// Changes of leadership, for components that start and stop with it.
    pub fn subscribe(&self) -> watch::Receiver<Option<LeaderToken>> {
        self.current.subscribe()
    }

    fn lead(&self, token: LeaderToken, metrics: &Metrics) {
        self.current.send_replace(Some(token));
        metrics.leader.set(1);
        metrics.leader_changes_total.inc();
    }

    /// Stops leading if this replica still leads with `token`; returns whether it did. A newer
    /// token (re-acquired meanwhile) is left alone.
    pub fn step_down(&self, token: &LeaderToken, metrics: &Metrics) -> bool {
        let stepped_down = self.current.send_if_modified(|current| {
            if current.as_ref() == Some(token) {
                *current = None;
                true
            } else {
                false
            }
        });
        if stepped_down {
            metrics.leader.set(0);
            metrics.leader_changes_total.inc();
        }
        stepped_down
    }
}

/// The pause after a failed tick: doubles from [`MIN_RETRY_DELAY`] up to [`MAX_RETRY_DELAY`]
/// while ticks keep failing, and starts over after a success.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    last: Option<Duration>,
}

impl Backoff {
    /// A tick succeeded (so Redis answered): the next failure waits the shortest delay again.
    pub(crate) fn succeeded(&mut self, health: &Health) {
        health.redis_ok();
        self.last = None;
    }

    /// A tick failed with `error`: how long to wait before the next. A hold (`redcron hold`)
    /// is no failure of Redis: it is looked at again every [`HELD_RETRY`], so that work goes
    /// on within moments of its end.
    pub(crate) fn failed_with(&mut self, error: &StoreError) -> Duration {
        if error.is_held() {
            HELD_RETRY
        } else {
            self.failed()
        }
    }

    /// A tick failed (Redis errors are the only way a tick fails, and the store counts them
    /// where they happen): how long to wait before the next.
    pub(crate) fn failed(&mut self) -> Duration {
        let delay = self
            .last
            .map_or(MIN_RETRY_DELAY, |delay| (delay * 2).min(MAX_RETRY_DELAY));
        self.last = Some(delay);
        delay
    }
}

/// How often a component tries again while the namespace is held: a refused call costs Redis
/// one `EXISTS`.
pub(crate) const HELD_RETRY: Duration = Duration::from_millis(250);

/// How often a component warns that Redis refuses this user the namespace (`NOPERM`): each of
/// its ticks fails so until an operator changes the ACL, and one line says all there is to say.
const FORBIDDEN_WARN_EVERY: Duration = Duration::from_secs(30);

/// Logs a failed store call as a warning, or at debug level when the namespace is held: every
/// component meets an operator's hold, which the heartbeat announces once. A refusal of the
/// namespace to this user is warned once per [`FORBIDDEN_WARN_EVERY`] per component and
/// namespace, and at debug level in between.
pub(crate) fn log_store_failure(error: &StoreError, what: &str) {
    static WARNED: LazyLock<Mutex<HashMap<(String, String), Instant>>> =
        LazyLock::new(Mutex::default);
    if error.is_held() {
        tracing::debug!(%error, "{what}");
        return;
    }
    if let Some(namespace) = error.forbidden_namespace() {
        let mut warned = WARNED.lock().unwrap_or_else(PoisonError::into_inner);
        let component = (what.to_owned(), namespace.to_owned());
        let now = Instant::now();
        if warned
            .get(&component)
            .is_some_and(|last| now.duration_since(*last) < FORBIDDEN_WARN_EVERY)
        {
            tracing::debug!(%error, "{what}");
            return;
        }
        warned.insert(component, now);
    }
    tracing::warn!(%error, "{what}");
}

/// A test fault point, `REDCRON_TEST_FAULT_PLANNER_PANIC`: the path of a file; once the file
/// exists, the planner of the leading replica panics at its next tick, so that tests can watch
/// the supervisor stop the replica and another one take over. Read once, when a replica starts;
/// unset, as everywhere but in tests, it costs nothing.
static PLANNER_PANIC_FILE: LazyLock<Option<PathBuf>> =
    LazyLock::new(|| std::env::var_os("REDCRON_TEST_FAULT_PLANNER_PANIC").map(PathBuf::from));

/// Reads the test fault points' settings, at the replica's start.
pub(crate) fn arm_fault_points() {
    LazyLock::force(&PLANNER_PANIC_FILE);
    exporter::arm_fault_point();
}

/// Whether the planner's test fault point has been triggered.
fn planner_fault_triggered() -> bool {
    PLANNER_PANIC_FILE
        .as_deref()
        .is_some_and(std::path::Path::exists)
}

#[cfg(test)]
mod tests {
    use prometheus::core::Collector;

    use super::*;

    #[test]
    fn skips_of_jobs_not_declared_here_and_unknown_reasons_share_one_label_each() {
        let metrics = Metrics::new("test");
        record_skips(
            &metrics,
            &[
                ("mine".to_owned(), "overlap".to_owned()),
                ("written-into-redis-42".to_owned(), "paused".to_owned()),
                ("mine".to_owned(), "made-up-reason".to_owned()),
            ],
            |job| job == "mine",
        );
        let labels: Vec<(String, String)> = metrics
            .skipped_fires_total
            .collect()
            .iter()
            .flat_map(|family| family.get_metric().iter())
            .map(|metric| {
                let label = |name: &str| {
                    metric
                        .get_label()
                        .iter()
                        .find(|pair| pair.name() == name)
                        .map(|pair| pair.value().to_owned())
                        .unwrap_or_default()
                };
                (label(crate::metrics::JOB_LABEL), label("reason"))
            })
            .collect();
        for expected in [
            ("mine", "overlap"),
            ("undeclared", "paused"),
            ("mine", "other"),
        ] {
            assert!(
                labels
                    .iter()
                    .any(|(job, reason)| (job.as_str(), reason.as_str()) == expected),
                "{expected:?} in {labels:?}"
            );
        }
        assert!(
            !labels
                .iter()
                .any(|(job, reason)| job.starts_with("written") || reason.starts_with("made-up")),
            "{labels:?}"
        );
    }
}
