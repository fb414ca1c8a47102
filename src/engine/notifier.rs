//! The notifier: on every replica, sends the notices owed (see `crate::store` `notices`): first
//! those of outcomes this replica recorded, then those of replicas that died before sending
//! theirs, and those due again after a target failed. Each notice is leased to one sender at a
//! time, and each of its targets is marked once it has it, so a notice reaches each target once
//! unless its sender dies after the target took it and before the mark (the target then gets it
//! again, with the same notice id).

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tracing::{error, info, warn};

use super::retry::retry_store;
use super::{Backoff, Shutdown, log_store_failure};
use crate::notify::{Deliverer, DeliveryError, DeliveryLimits, Document, spool};
use crate::schedule::Jobs;
use crate::store::{OwedNotice, Settle, Store, StoreError};

/// How the notifier behaves.
#[derive(Debug, Clone)]
pub struct NotifierConfig {
    /// This replica's id: the notices of outcomes it recorded are its own to send.
    pub replica_id: String,
    /// Time between looks for notices to send.
    pub period: Duration,
    /// How long a notice taken is this replica's, extended while it is being sent: another
    /// replica sends it after this long when this one dies.
    pub lease: Duration,
    /// Most notices taken (and sent at once) per tick.
    pub batch: usize,
    /// The wait before a notice whose target failed is tried again; tripled each time.
    pub retry_backoff: Duration,
    /// How many times a notice is tried before it is given up.
    pub max_tries: u32,
    /// How long each delivery may take.
    pub limits: DeliveryLimits,
}

impl Default for NotifierConfig {
    fn default() -> Self {
        Self {
            replica_id: "replica".to_owned(),
            period: Duration::from_secs(1),
            lease: Duration::from_secs(30),
            batch: 16,
            retry_backoff: Duration::from_secs(10),
            max_tries: 5,
            limits: DeliveryLimits::default(),
        }
    }
}

/// How long a stopping replica spends sending the notices it still owes.
const FINAL_SEND: Duration = Duration::from_millis(800);

/// The longest wait between two tries of a notice.
const MAX_RETRY_BACKOFF: Duration = Duration::from_secs(600);

/// Sends owed notices.
pub struct Notifier {
    store: Store,
    config: NotifierConfig,
    deliverer: Deliverer,
    host: String,
    /// The jobs this replica declares: a mail's cron-style subject quotes the command.
    jobs: Option<watch::Receiver<Jobs>>,
}

impl Notifier {
    /// A notifier.
    pub fn new(store: Store, config: NotifierConfig) -> Self {
        let deliverer = Deliverer::new(config.limits.clone());
        let host = nix::unistd::gethostname()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default();
        Self {
            store,
            config,
            deliverer,
            host,
            jobs: None,
        }
    }

    /// Quotes the command and user of the jobs in `jobs` in mails with a cron-style subject
    /// (`mailto:...?subject=cron`).
    #[must_use]
    pub fn with_jobs(mut self, jobs: watch::Receiver<Jobs>) -> Self {
        self.jobs = Some(jobs);
        self
    }

    /// Takes one batch of notices and sends them, all at once; returns how many it took.
    ///
    /// # Errors
    /// Redis errors while taking them (what happens while sending is logged and settled).
    pub async fn tick(&self) -> Result<usize, StoreError> {
        let taken = self
            .store
            .take_notices(
                &self.config.replica_id,
                self.config.lease,
                self.config.batch,
            )
            .await?;
        let count = taken.len();
        futures_util::future::join_all(taken.into_iter().map(|notice| async move {
            match notice {
                Ok(notice) => self.send(notice).await,
                Err(damaged) => {
                    error!(
                        notice = damaged.id,
                        problem = damaged.problem,
                        "a notice owed cannot be read: it is dropped"
                    );
                    self.settle(&damaged.id, Settle::Finish).await;
                }
            }
        }))
        .await;
        Ok(count)
    }

    /// Sends one notice to each target not done with yet, then settles it: a target that
    /// refuses it is given up at once, one that fails for now is tried again later, up to
    /// `max_tries` times.
    async fn send(&self, notice: OwedNotice) {
        let host = match notice.replica() {
            Some(replica) if replica == self.config.replica_id => Some(self.host.clone()),
            Some(replica) => self.store.replica_host(replica).await.ok().flatten(),
            None => None,
        };
        let mut document = Document::new(&notice, host);
        if document.output.is_some() {
            document.kept_output = spool::kept(&notice.run_id, notice.attempt);
        }
        document.declared = self.jobs.as_ref().and_then(|jobs| {
            let jobs = jobs.borrow();
            let job = jobs.iter().find(|job| job.name == notice.job)?;
            Some((job.command.clone(), job.user.clone()))
        });
        let last_try = notice.tries >= self.config.max_tries;
        let mut failed_for_now = false;
        for (index, target) in notice.targets.iter().enumerate() {
            if notice.settled.contains(&index) {
                continue;
            }
            let Some(delivered) = self
                .holding(&notice.id, self.deliverer.deliver(target, &document))
                .await
            else {
                warn!(
                    notice = notice.id,
                    "the notice was taken over by another replica while it was being sent"
                );
                return;
            };
            let (result, settle) = match delivered {
                Ok(()) => {
                    info!(
                        notice = notice.id,
                        job = notice.job,
                        event = notice.event.as_str(),
                        target = target.kind(),
                        "notice sent"
                    );
                    ("sent", Some(Settle::Delivered(index)))
                }
                Err(problem @ DeliveryError::Transient(_)) if !last_try => {
                    warn!(
                        notice = notice.id,
                        job = notice.job,
                        event = notice.event.as_str(),
                        target = target.kind(),
                        tries = notice.tries,
                        error = %problem,
                        "a notice could not be sent: it is tried again later"
                    );
                    failed_for_now = true;
                    ("failed", None)
                }
                Err(problem) => {
                    error!(
                        notice = notice.id,
                        job = notice.job,
                        event = notice.event.as_str(),
                        target = target.kind(),
                        tries = notice.tries,
                        error = %problem,
                        "a notice is given up: this target never got it"
                    );
                    ("given_up", Some(Settle::GivenUp(index)))
                }
            };
            self.store
                .metrics()
                .notices_total
                .with_label_values(&[target.kind(), result])
                .inc();
            if let Some(settle) = settle {
                self.settle(&notice.id, settle).await;
            }
        }
        let settle = if failed_for_now {
            Settle::Retry(retry_after(self.config.retry_backoff, notice.tries))
        } else {
            Settle::Finish
        };
        self.settle(&notice.id, settle).await;
    }

    /// Runs `work` while keeping the notice's lease, extended every third of it; `None` when
    /// the notice stopped being this replica's meanwhile (the work is then dropped, and a
    /// command it started killed).
    async fn holding<T>(&self, notice_id: &str, work: impl Future<Output = T>) -> Option<T> {
        let lease = self.config.lease;
        let keeper = async {
            let mut held_at = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(lease / 3).await;
                let extend = Settle::Extend(lease);
                match self
                    .store
                    .settle_notice(notice_id, &self.config.replica_id, &extend)
                    .await
                {
                    Ok(true) => held_at = tokio::time::Instant::now(),
                    Ok(false) => return,
                    Err(error) => {
                        warn!(%error, notice = notice_id, "cannot extend the notice's lease");
                        if held_at.elapsed() >= lease {
                            return;
                        }
                    }
                }
            }
        };
        tokio::select! {
            done = work => Some(done),
            () = keeper => None,
        }
    }

    /// Records what became of a notice, riding out a Redis blip; a notice no longer this
    /// replica's, or not recorded, is sent again by whoever takes it next.
    async fn settle(&self, notice_id: &str, settle: Settle) {
        let settled = retry_store(&self.store.metrics().health, || {
            self.store
                .settle_notice(notice_id, &self.config.replica_id, &settle)
        })
        .await;
        if settled != Some(true) {
            warn!(
                notice = notice_id,
                "could not record what became of the notice: its lease will expire and it may \
                 be sent again"
            );
        }
    }

    /// Sends notices every period until `shutdown`.
    pub async fn run(self, shutdown: Shutdown) {
        let mut backoff = Backoff::default();
        loop {
            let pause = match self.tick().await {
                Ok(taken) => {
                    backoff.succeeded(&self.store.metrics().health);
                    // A full batch means more are waiting.
                    if taken == self.config.batch {
                        Duration::ZERO
                    } else {
                        self.config.period
                    }
                }
                Err(error) => {
                    log_store_failure(&error, "notifier tick failed");
                    backoff.failed_with(&error)
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(pause) => {}
            }
        }
        // The notifier stops after the runs did: the outcomes recorded as they ended are told
        // before the replica goes, rather than when another replica or this one starts. Bounded,
        // as the stop of every component is; a notice still being sent then is sent again by
        // another replica once its lease expires.
        if tokio::time::timeout(FINAL_SEND, self.tick()).await.is_err() {
            warn!("stopping with notices still being sent: another replica sends them");
        }
    }
}

/// The wait before try `tries + 1`: `base`, tripled with each try, at most
/// [`MAX_RETRY_BACKOFF`].
fn retry_after(base: Duration, tries: u32) -> Duration {
    base.saturating_mul(3u32.saturating_pow(tries.saturating_sub(1)))
        .min(MAX_RETRY_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_wait_three_times_longer_each_time_up_to_ten_minutes() {
        let base = Duration::from_secs(10);
        let waits: Vec<u64> = (1..=6)
            .map(|tries| retry_after(base, tries).as_secs())
            .collect();
        assert_eq!(waits, [10, 30, 90, 270, 600, 600]);
    }
}
