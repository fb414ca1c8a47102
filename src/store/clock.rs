//! Time as the store sees it: Redis's clock, which every script decides with, or a clock tests
//! set and move by hand.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use super::During;
use super::{Store, StoreError, millis};

/// A reading of Redis's clock, with when it was asked and answered on this machine's monotonic
/// clock: it maps a time on Redis's clock to the latest local instant it can be, so a run
/// started then never starts before its time on Redis's clock.
#[derive(Debug, Clone, Copy)]
pub struct RedisClock {
    sent: tokio::time::Instant,
    received: tokio::time::Instant,
    redis_micros: i64,
}

impl RedisClock {
    /// Time between asking and the answer: the reading's uncertainty.
    pub fn round_trip(&self) -> Duration {
        self.received - self.sent
    }

    /// When the reading was answered.
    pub fn received(&self) -> tokio::time::Instant {
        self.received
    }

    /// The latest local instant at which Redis's clock can read `redis_ms`: Redis read its
    /// clock before the answer arrived, so its time then is at most the time of the answer.
    pub fn latest_instant_of(&self, redis_ms: i64) -> tokio::time::Instant {
        let ahead_micros = redis_ms.saturating_mul(1000) - self.redis_micros;
        match u64::try_from(ahead_micros) {
            Ok(micros) => self.received + Duration::from_micros(micros),
            Err(_) => self.received,
        }
    }
}

/// A clock that stands still until moved: every script and [`Store::now_ms`] of a store given it
/// ([`Store::with_clock`]) read it instead of Redis's clock, so tests put runs in the past or
/// the future, or let time pass, without waiting. Clones share one reading.
#[derive(Debug, Clone)]
pub struct ManualClock(Arc<AtomicI64>);

impl ManualClock {
    /// A clock reading `now_ms`, ms since the epoch.
    pub fn at(now_ms: i64) -> Self {
        Self(Arc::new(AtomicI64::new(now_ms)))
    }

    /// What it reads, ms since the epoch.
    pub fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }

    /// Moves it `by` ahead.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(
            i64::try_from(millis(by)).unwrap_or(i64::MAX),
            Ordering::SeqCst,
        );
    }

    /// Sets it to `now_ms`.
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Store {
    /// This store, reading `clock` instead of Redis's clock, in every script and in
    /// [`Store::now_ms`]: for tests of time-based decisions. Leases Redis expires itself (the
    /// leader's) still run on Redis's clock.
    pub fn with_clock(mut self, clock: &ManualClock) -> Self {
        self.manual_clock = Some(clock.clone());
        self
    }

    /// This store, with a clock that reads `now_ms` and stands still (see
    /// [`Store::with_clock`]).
    pub fn with_frozen_clock(self, now_ms: i64) -> Self {
        self.with_clock(&ManualClock::at(now_ms))
    }

    /// "Now" as the scripts take it: the manual clock's reading, or '' for Redis's clock.
    pub(super) fn now_arg(&self) -> String {
        self.manual_clock
            .as_ref()
            .map_or_else(String::new, |clock| clock.now_ms().to_string())
    }

    /// The time on Redis's clock, ms since the epoch: what every script decides with, so the
    /// planner's misfire decisions agree with theirs whatever the local clock says.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn now_ms(&self) -> Result<i64, StoreError> {
        if let Some(clock) = &self.manual_clock {
            return Ok(clock.now_ms());
        }
        let (seconds, micros): (i64, i64) = self
            .query_keyless(&redis::cmd("TIME"))
            .await
            .during(&self.metrics, "now_ms")?;
        Ok(seconds * 1000 + micros / 1000)
    }

    /// Reads Redis's clock, noting when it was asked and answered (see [`RedisClock`]).
    ///
    /// # Errors
    /// Redis errors.
    pub async fn clock(&self) -> Result<RedisClock, StoreError> {
        let sent = tokio::time::Instant::now();
        let redis_micros = match &self.manual_clock {
            Some(clock) => clock.now_ms().saturating_mul(1000),
            None => {
                let (seconds, micros): (i64, i64) = self
                    .query_keyless(&redis::cmd("TIME"))
                    .await
                    .during(&self.metrics, "clock")?;
                seconds * 1_000_000 + micros
            }
        };
        Ok(RedisClock {
            sent,
            received: tokio::time::Instant::now(),
            redis_micros,
        })
    }
}
