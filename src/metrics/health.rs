//! What `/healthz` and `/readyz` say of one replica.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

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
    /// The store operations (scripts) whose last call failed on the data it met (a key of the
    /// wrong type), with what Redis said: these fail again on every call until an operator
    /// repairs the key, so the replica is not ready meanwhile.
    failing: Mutex<BTreeMap<&'static str, String>>,
    /// Whether `failing` holds anything: read on every call, so that a success costs no lock.
    any_failing: AtomicBool,
    /// Why Redis refused this user the namespace (`NOPERM`), with the ACL it needs, until a
    /// heartbeat is written again: no retry helps before an operator changes the ACL, so
    /// `/readyz` says what to change.
    forbidden: Mutex<Option<String>>,
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
            failing: Mutex::new(BTreeMap::new()),
            any_failing: AtomicBool::new(false),
            forbidden: Mutex::new(None),
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

    /// Redis refused this user the namespace (`NOPERM`), as `why` says: not ready, saying why,
    /// until a heartbeat is written again.
    pub fn forbidden(&self, why: String) {
        *self
            .forbidden
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(why);
    }

    /// Whether Redis refused a write and no heartbeat was written since: the other replicas'
    /// heartbeats are likely refused too, so their age says nothing of them.
    pub fn writes_refused(&self) -> bool {
        self.writes_refused.load(Ordering::Relaxed)
    }

    /// The replica's heartbeat was written to Redis: progress, and Redis takes writes again.
    pub fn progressed(&self) {
        let now = self.now();
        self.redis_answered.store(now, Ordering::Relaxed);
        self.progressed.store(now, Ordering::Relaxed);
        if self.writes_refused.swap(false, Ordering::Relaxed) {
            // A refusal to the user is a refusal of writes: only one sets the other.
            *self
                .forbidden
                .lock()
                .unwrap_or_else(PoisonError::into_inner) = None;
        }
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

    /// Whether shutdown began.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
    }

    /// A component of the replica died: unhealthy and not ready from now on, since the
    /// process is stopping to be restarted.
    pub fn component_died(&self, component: &str) {
        let _ = self.died.set(component.to_owned());
    }

    /// A call of `operation` failed on the data it met (see [`Health::failing_script`]).
    pub fn script_failed(&self, operation: &'static str, error: String) {
        // A poisoned lock only means a caller panicked mid-insert; the map is still whole.
        let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        failing.insert(operation, error);
        self.any_failing.store(true, Ordering::Relaxed);
    }

    /// A call of `operation` succeeded: whatever it failed on is repaired.
    pub fn call_succeeded(&self, operation: &'static str) {
        if !self.any_failing.load(Ordering::Relaxed) {
            return;
        }
        let mut failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        failing.remove(operation);
        self.any_failing
            .store(!failing.is_empty(), Ordering::Relaxed);
    }

    /// The first operation (script) whose last call failed on the data it met, and what Redis
    /// said (the script and the key): `claim_runs` and `WRONGTYPE claim_runs: {ns}:paused holds
    /// a string, not a set`.
    pub fn failing_script(&self) -> Option<(&'static str, String)> {
        if !self.any_failing.load(Ordering::Relaxed) {
            return None;
        }
        let failing = self.failing.lock().unwrap_or_else(PoisonError::into_inner);
        failing
            .iter()
            .next()
            .map(|(operation, error)| (*operation, error.clone()))
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
    /// A component died, shutdown began, Redis refuses writes, the namespace is held, a script
    /// keeps failing on a damaged key, or Redis has not answered for [`READY_WITHIN`].
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
            if let Some(why) = self
                .forbidden
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .as_ref()
            {
                return Err(format!("redis refuses writes: {why}\n"));
            }
            return Err("redis refuses writes\n".to_owned());
        }
        if self.held.load(Ordering::Relaxed) {
            return Err("the namespace is held (redcron hold)\n".to_owned());
        }
        if let Some((operation, error)) = self.failing_script() {
            return Err(format!("script {operation} fails: {error}\n"));
        }
        Ok(())
    }
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
    fn readiness_names_a_refusal_of_the_namespace_until_a_heartbeat_is_written() {
        let health = Health::default();
        health.redis_ok();
        health.write_refused();
        health.forbidden("heartbeat: Redis refuses this user namespace \"b\" (NOPERM)".to_owned());
        assert_eq!(
            health.readiness(),
            Err(
                "redis refuses writes: heartbeat: Redis refuses this user namespace \"b\" \
                 (NOPERM)\n"
                    .to_owned()
            )
        );
        health.progressed();
        assert_eq!(health.readiness(), Ok(()));
        health.write_refused();
        assert_eq!(health.readiness(), Err("redis refuses writes\n".to_owned()));
    }

    #[test]
    fn readiness_fails_while_a_script_fails_until_it_succeeds() {
        let health = Health::default();
        health.progressed();
        let error = "WRONGTYPE claim_runs: {ns}:paused holds a string, not a set";
        health.script_failed("claim_runs", error.to_owned());
        // Other operations succeeding do not repair the one that fails.
        health.call_succeeded("ack_runs");
        assert_eq!(
            health.readiness(),
            Err(format!("script claim_runs fails: {error}\n"))
        );
        assert_eq!(health.liveness(), Ok(()));
        health.call_succeeded("claim_runs");
        assert_eq!(health.readiness(), Ok(()));
        assert_eq!(health.failing_script(), None);
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
}
