//! How many runs a replica executes at once: a fixed number, or (`--workers MIN..MAX`) a bound
//! that grows while ready runs wait for a worker and shrinks once they no longer do.
//!
//! Growth is quick and shrinking slow, so that a bound does not swing with each claim: a backlog
//! that stays [`GROW_AFTER`] with every slot busy doubles the bound; a bound is lowered only after
//! [`SHRINK_AFTER`] without a backlog, and then to the most runs that executed at once during
//! that time, so that a steady load keeps the workers it uses.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// How long ready runs must keep waiting, every slot busy, before the bound grows.
pub const GROW_AFTER: Duration = Duration::from_secs(1);

/// How long no run may wait for a worker before the bound shrinks.
pub const SHRINK_AFTER: Duration = Duration::from_secs(10);

/// The most workers one replica may have: each run may hold a process and a few descriptors.
pub const MAX_WORKERS: usize = 4096;

/// How many runs a replica executes at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Concurrency {
    /// At start, and never fewer.
    pub min: usize,
    /// Never more; equal to `min` for a fixed number.
    pub max: usize,
}

impl Concurrency {
    /// Always `count` runs at once.
    pub fn fixed(count: usize) -> Self {
        Self {
            min: count,
            max: count,
        }
    }

    /// From `min` runs at once, up to `max` while a backlog lasts.
    pub fn between(min: usize, max: usize) -> Self {
        Self { min, max }
    }

    /// Whether the bound moves with the backlog.
    pub fn is_adaptive(&self) -> bool {
        self.max > self.min
    }
}

impl fmt::Display for Concurrency {
    fn fmt(&self, out: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_adaptive() {
            write!(out, "{}..{}", self.min, self.max)
        } else {
            write!(out, "{}", self.min)
        }
    }
}

impl FromStr for Concurrency {
    type Err = String;

    /// Reads `N` (fixed) or `MIN..MAX`, each from 1 to `MAX_WORKERS` (4096).
    fn from_str(text: &str) -> Result<Self, String> {
        let count = |part: &str| match part.trim().parse::<usize>() {
            Ok(count @ 1..=MAX_WORKERS) => Ok(count),
            _ => Err(format!(
                "{text:?} is not a number of workers from 1 to {MAX_WORKERS}, nor MIN..MAX"
            )),
        };
        match text.split_once("..") {
            None => count(text).map(Self::fixed),
            Some((min, max)) => {
                let (min, max) = (count(min)?, count(max)?);
                if min > max {
                    return Err(format!("{text:?}: the minimum is above the maximum"));
                }
                Ok(Self::between(min, max))
            }
        }
    }
}

/// The current bound, shared with the heartbeat (which reports it) and the metrics.
#[derive(Debug, Default)]
pub struct WorkerLoad {
    busy: AtomicUsize,
    limit: AtomicUsize,
}

impl WorkerLoad {
    /// Runs executing now, from claim to recorded outcome.
    pub fn busy(&self) -> usize {
        self.busy.load(Ordering::Relaxed)
    }

    /// How many runs may execute at once now.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    pub(super) fn started(&self) {
        self.busy.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn ended(&self) {
        self.busy.fetch_sub(1, Ordering::Relaxed);
    }

    fn set_limit(&self, limit: usize) {
        self.limit.store(limit, Ordering::Relaxed);
    }
}

/// Decides the bound from what the workers see at each tick.
#[derive(Debug)]
pub(super) struct Sizing {
    bounds: Concurrency,
    load: Arc<WorkerLoad>,
    /// Since when ready runs have waited with every slot busy.
    pressed_since: Option<Instant>,
    /// Since when no run has waited for a worker, and the most that ran at once since.
    calm_since: Option<(Instant, usize)>,
}

impl Sizing {
    /// Starts at the minimum.
    pub(super) fn new(bounds: Concurrency) -> Self {
        let bounds = Concurrency::between(bounds.min.max(1), bounds.max.max(bounds.min).max(1));
        let load = Arc::new(WorkerLoad::default());
        load.set_limit(bounds.min);
        Self {
            bounds,
            load,
            pressed_since: None,
            calm_since: None,
        }
    }

    /// The most slots there can ever be.
    pub(super) fn max(&self) -> usize {
        self.bounds.max
    }

    /// How many runs may execute at once now.
    pub(super) fn limit(&self) -> usize {
        self.load.limit()
    }

    /// The load the heartbeat reports.
    pub(super) fn load(&self) -> Arc<WorkerLoad> {
        self.load.clone()
    }

    /// When the bound could next grow, should the backlog last: the workers look again then
    /// even while every slot is busy with long runs.
    pub(super) fn next_growth(&self) -> Option<Instant> {
        (self.limit() < self.bounds.max)
            .then_some(self.pressed_since?)
            .map(|since| since + GROW_AFTER)
    }

    /// Takes in what a tick saw at `now`: whether ready runs wait for a worker (the last claim
    /// filled every slot it asked for and left runs behind). Returns the new bound when it
    /// changed.
    pub(super) fn observe(&mut self, now: Instant, waiting: bool) -> Option<usize> {
        if !self.bounds.is_adaptive() {
            return None;
        }
        let (limit, busy) = (self.limit(), self.load.busy());
        if waiting && busy >= limit {
            self.calm_since = None;
            let since = *self.pressed_since.get_or_insert(now);
            if now.duration_since(since) < GROW_AFTER || limit >= self.bounds.max {
                return None;
            }
            self.pressed_since = Some(now);
            return Some(self.set(limit.saturating_mul(2).min(self.bounds.max)));
        }
        if waiting {
            // Slots are free: the next claim fills them; nothing to decide yet.
            return None;
        }
        self.pressed_since = None;
        let (since, peak) = self.calm_since.get_or_insert((now, busy));
        *peak = (*peak).max(busy);
        if now.duration_since(*since) < SHRINK_AFTER {
            return None;
        }
        let needed = (*peak).max(self.bounds.min);
        self.calm_since = Some((now, busy));
        (needed < limit).then(|| self.set(needed))
    }

    fn set(&self, limit: usize) -> usize {
        self.load.set_limit(limit);
        limit
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workers_read_as_a_number_or_a_range() {
        assert_eq!("8".parse(), Ok(Concurrency::fixed(8)));
        assert_eq!("2..16".parse(), Ok(Concurrency::between(2, 16)));
        assert_eq!("4..4".parse(), Ok(Concurrency::fixed(4)));
        assert_eq!(Concurrency::between(2, 16).to_string(), "2..16");
        assert_eq!(Concurrency::fixed(3).to_string(), "3");
        for bad in ["0", "0..4", "8..2", "1..", "..4", "x", "1..5000", "-1"] {
            assert!(bad.parse::<Concurrency>().is_err(), "{bad}");
        }
        let error = "8..2".parse::<Concurrency>().expect_err("inverted");
        assert!(error.contains("minimum is above the maximum"), "{error}");
    }

    /// `busy` runs executing.
    fn with_busy(sizing: &Sizing, busy: usize) {
        while sizing.load.busy() < busy {
            sizing.load.started();
        }
        while sizing.load.busy() > busy {
            sizing.load.ended();
        }
    }

    #[test]
    fn a_lasting_backlog_doubles_the_bound_up_to_the_maximum() {
        let mut sizing = Sizing::new(Concurrency::between(2, 5));
        let start = Instant::now();
        with_busy(&sizing, 2);
        assert_eq!(sizing.observe(start, true), None);
        // Not yet: a backlog shorter than GROW_AFTER is a burst.
        assert_eq!(sizing.observe(start + GROW_AFTER / 2, true), None);
        assert_eq!(sizing.next_growth(), Some(start + GROW_AFTER));
        assert_eq!(sizing.observe(start + GROW_AFTER, true), Some(4));
        // Free slots while runs wait: the next claim fills them first.
        assert_eq!(sizing.observe(start + GROW_AFTER * 3, true), None);
        with_busy(&sizing, 4);
        assert_eq!(sizing.observe(start + GROW_AFTER * 3, true), Some(5));
        with_busy(&sizing, 5);
        assert_eq!(sizing.observe(start + GROW_AFTER * 5, true), None);
        assert_eq!(sizing.limit(), 5);
        assert_eq!(sizing.next_growth(), None);
    }

    #[test]
    fn a_calm_spell_shrinks_the_bound_to_what_it_used() {
        let mut sizing = Sizing::new(Concurrency::between(1, 8));
        let start = Instant::now();
        sizing.set(8);
        with_busy(&sizing, 3);
        assert_eq!(sizing.observe(start, false), None);
        with_busy(&sizing, 1);
        assert_eq!(sizing.observe(start + SHRINK_AFTER / 2, false), None);
        // Three ran at once in the spell: three are kept.
        assert_eq!(sizing.observe(start + SHRINK_AFTER, false), Some(3));
        with_busy(&sizing, 0);
        assert_eq!(sizing.observe(start + SHRINK_AFTER * 2, false), Some(1));
        // Never below the minimum, and a backlog interrupts a spell.
        assert_eq!(sizing.observe(start + SHRINK_AFTER * 3, false), None);
        assert_eq!(sizing.limit(), 1);
    }

    #[test]
    fn a_fixed_number_never_moves() {
        let mut sizing = Sizing::new(Concurrency::fixed(4));
        let start = Instant::now();
        with_busy(&sizing, 4);
        assert_eq!(sizing.observe(start, true), None);
        assert_eq!(sizing.observe(start + GROW_AFTER * 10, true), None);
        with_busy(&sizing, 0);
        assert_eq!(sizing.observe(start + SHRINK_AFTER * 10, false), None);
        assert_eq!(sizing.limit(), 4);
    }
}
