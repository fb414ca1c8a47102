//! What `/healthz` and `/readyz` say of one replica.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
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

    /// Whether shutdown began.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Relaxed)
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
}
