//! What operators do to jobs, dead runs and the namespace: pause and resume, re-drive and
//! purge, hold and release.

use std::time::Duration;

use super::reads::{UNREADABLE, dead_damage};
use super::{Client, ClientError};
use crate::store::{Entry, Redrive};

/// The most dead runs one [`Client::retry_dead_runs`] looks at.
const RETRY_ALL_LIMIT: usize = 100_000;

/// What [`Client::retry_dead_runs`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeadRetried {
    /// The runs due again.
    pub retried: Vec<String>,
    /// The runs that stay dead because their job is paused, each with that job.
    pub left_paused: Vec<(String, String)>,
    /// The runs that stay dead because their job is unknown to the namespace (no live replica
    /// has declared it for the undeclared grace), each with that job.
    pub left_unknown: Vec<(String, String)>,
    /// The entries of the dead letters that are no dead run, so that nothing can retry them
    /// (listed only when every job's runs are retried): each escaped (see [`Entry`]), with
    /// why it is damaged.
    pub damaged: Vec<(String, String)>,
}

impl Client {
    /// Pauses the declared job `job`: its fires are skipped until it is resumed. Whether it
    /// was not paused before.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let was_running = client.pause("nightly-backup").await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::UnknownJob`], or Redis errors.
    pub async fn pause(&self, job: &str) -> Result<bool, ClientError> {
        self.set_paused(job, true).await
    }

    /// Resumes the declared job `job`. Whether it was paused before.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let was_paused = client.resume("nightly-backup").await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::UnknownJob`], or Redis errors.
    pub async fn resume(&self, job: &str) -> Result<bool, ClientError> {
        self.set_paused(job, false).await
    }

    async fn set_paused(&self, job: &str, paused: bool) -> Result<bool, ClientError> {
        if !self.store.is_declared(job).await? {
            return Err(ClientError::UnknownJob(job.to_owned()));
        }
        Ok(self
            .store
            .set_paused_by(job, paused, self.actor.as_deref())
            .await?)
    }

    /// Makes the dead run `run_id` due again, with its attempts counted afresh.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// client.retry_dead("nightly-backup@1767225600000").await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::NoDeadRun`], [`ClientError::DamagedDeadRun`] (an entry that is not
    /// UTF-8, named escaped as `dead list` prints it), [`ClientError::JobPaused`] or
    /// [`ClientError::JobUnknown`] (the run stays dead), or Redis errors.
    pub async fn retry_dead(&self, run_id: &str) -> Result<(), ClientError> {
        match self
            .store
            .redrive_run_by(run_id, self.actor.as_deref())
            .await?
        {
            Redrive::Redriven => Ok(()),
            Redrive::NotDead => Err(self.not_dead(run_id).await?),
            Redrive::JobPaused(job) => Err(ClientError::JobPaused {
                run: run_id.to_owned(),
                job,
            }),
            Redrive::JobUnknown(job) => Err(ClientError::JobUnknown {
                run: run_id.to_owned(),
                job,
            }),
        }
    }

    /// Makes every dead run due again (of `job` only, when given), but those of paused jobs,
    /// which stay dead: which were retried, and which were left. An entry of the dead letters
    /// that is no dead run is left and named, and the others are retried all the same.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let outcome = client.retry_dead_runs(Some("thumbnail")).await?;
    /// println!("{} runs due again", outcome.retried.len());
    /// for (run, job) in &outcome.left_paused {
    ///     println!("{run} stays dead: {job} is paused");
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ClientError::UnknownJob`] for a job that has no dead run and is not declared, or Redis
    /// errors.
    pub async fn retry_dead_runs(&self, job: Option<&str>) -> Result<DeadRetried, ClientError> {
        let mut chosen = Vec::new();
        let mut damaged = Vec::new();
        for (entry, _) in self.store.dead_runs(RETRY_ALL_LIMIT).await? {
            let Entry::Run(run_id) = entry else {
                damaged.push((entry.to_string(), UNREADABLE.to_owned()));
                continue;
            };
            let mut fields = self.store.run_fields(&run_id).await?;
            if let Some(damage) = dead_damage(&fields) {
                damaged.push((run_id, damage));
            } else if job.is_none() || fields.remove("job").as_deref() == job {
                chosen.push(run_id);
            }
        }
        if let Some(job) = job
            && chosen.is_empty()
            && !self.store.is_declared(job).await?
        {
            return Err(ClientError::UnknownJob(job.to_owned()));
        }
        let mut outcome = DeadRetried {
            // Damaged entries belong to no job: shown only when every job's runs are retried.
            damaged: if job.is_none() { damaged } else { Vec::new() },
            ..DeadRetried::default()
        };
        for run_id in chosen {
            match self
                .store
                .redrive_run_by(&run_id, self.actor.as_deref())
                .await?
            {
                Redrive::Redriven => outcome.retried.push(run_id),
                // Retried by someone else meanwhile: no longer dead.
                Redrive::NotDead => {}
                Redrive::JobPaused(job) => outcome.left_paused.push((run_id, job)),
                Redrive::JobUnknown(job) => outcome.left_unknown.push((run_id, job)),
            }
        }
        Ok(outcome)
    }

    /// Holds the namespace still for `duration` (while its Redis Cluster slot moves): nothing
    /// is planned, claimed or recorded until [`Client::release`] or the time runs out. Whether
    /// it was held already (the new duration replaces the old).
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// client.hold(std::time::Duration::from_secs(300)).await?;
    /// // ... move the namespace's slot ...
    /// client.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Redis errors.
    pub async fn hold(&self, duration: Duration) -> Result<bool, ClientError> {
        Ok(self
            .store
            .set_hold_by(Some(duration), self.actor.as_deref())
            .await?)
    }

    /// Ends a hold; whether there was one.
    ///
    /// # Errors
    /// Redis errors.
    pub async fn release(&self) -> Result<bool, ClientError> {
        Ok(self.store.set_hold_by(None, self.actor.as_deref()).await?)
    }

    /// Deletes the dead runs that died more than `older_than` ago (on this machine's clock),
    /// or every one; how many.
    ///
    /// ```no_run
    /// # async fn example(client: redcron::client::Client) -> Result<(), redcron::client::ClientError> {
    /// let purged = client.purge_dead(Some(std::time::Duration::from_secs(30 * 86_400))).await?;
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// Redis errors.
    pub async fn purge_dead(&self, older_than: Option<Duration>) -> Result<u64, ClientError> {
        let cutoff = older_than.map(|age| {
            chrono::Utc::now().timestamp_millis()
                - i64::try_from(age.as_millis()).unwrap_or(i64::MAX / 2)
        });
        Ok(self
            .store
            .purge_dead_by(cutoff, self.actor.as_deref())
            .await?)
    }
}
