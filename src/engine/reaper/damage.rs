//! What the reaper does about damaged data: job slots that only a deadline frees, entries of the
//! active set that are no run, records that no redcron script wrote as they are, which would
//! otherwise never expire, and runs left in no list.

use tracing::{debug, info, warn};

use super::Reaper;
use crate::store::{RunState, StoreError};

impl Reaper {
    /// Frees the job slots whose deadline passed, or that no run of their job holds, for the
    /// runs waiting for them: a claim or an end of a run of the job would, but none may come.
    /// Then drops the expired entries of the active set that are no run id, which would stop
    /// the reaping of the leases behind them.
    pub(super) async fn sweep_damage(&mut self) -> Result<(), StoreError> {
        let handed = self.store.free_expired_slots().await?;
        if handed > 0 {
            info!(
                runs = handed,
                "job slots freed at their deadline: their waiting runs go on"
            );
        }
        let dropped = self.store.drop_damaged_leases(self.config.batch).await?;
        if dropped > 0 {
            warn!(
                entries = dropped,
                "entries of the active runs that are no run id (not UTF-8) dropped: they hold no \
                 lease"
            );
        }
        Ok(())
    }

    /// Walks one page further over the namespace's records: adds the queues of its ready lists
    /// to the index of queues with ready runs, gives the damaged records an expiry and puts back
    /// the runs found in none of the lists their state says they are in (what a script that
    /// failed halfway, a restore or a hand edit leaves). A round over every key takes (keys /
    /// page) ticks, each costing the same; at its end the index forgets its empty queues, and
    /// the names that are not UTF-8 in the indexes of job and replica names are removed.
    /// Returns how many runs were put back.
    pub(super) async fn walk_records(&mut self) -> Result<u64, StoreError> {
        if self.records_from == 0 {
            self.queues_indexed = true;
        }
        let page = self.store.record_page(self.records_from).await?;
        self.records_from = page.next;
        // First, so that a page whose records the calls below fail at still adds its queues; and
        // a damaged index, which fails this at every page, stops neither of them. A round with
        // a page whose queues could not be added does not vouch for the index.
        let indexed = self.store.index_ready_queues(&page).await;
        if matches!(indexed, Ok(false)) {
            warn!(
                key = self.store.keys().ready_queues(),
                "the index of queues with ready runs was of another type (damaged, or written \
                 by hand): replaced; readers walk the keys until a round finds it whole"
            );
        }
        self.queues_indexed &= matches!(indexed, Ok(true));
        let found = self.store.expire_damaged_keys(&page).await?;
        if found > 0 {
            warn!(
                keys = found,
                "run or workflow records without the fields redcron writes (written by something \
                 else, or damaged) expire after the run retention; status counts them"
            );
        }
        let strays = self.store.requeue_stray_runs(&page).await?;
        for stray in &strays {
            if stray.state == RunState::Dead.as_str() {
                warn!(
                    run = stray.run_id,
                    job = stray.job,
                    "ready run whose record routes it to no list a claim reads (its queue or \
                     priority damaged since it came due): dead as corrupt"
                );
            } else {
                warn!(
                    run = stray.run_id,
                    job = stray.job,
                    state = stray.state,
                    "run found in none of the lists its state says it is in (a script failed \
                     halfway, a restore, a hand edit): put back"
                );
            }
            self.store
                .metrics()
                .stray_runs_total
                .with_label_values(&[stray.state.as_str()])
                .inc();
        }
        indexed?;
        if page.next == 0 {
            // Once a round, not once a tick: the indexes of names are read whole.
            let names = self.store.damaged_names().await?;
            if !names.is_empty() {
                self.store.remove_damaged_names(&names).await?;
                let names: Vec<String> = names.iter().map(ToString::to_string).collect();
                warn!(
                    names = names.join(", "),
                    "names that are not UTF-8 (written by something else, or damaged) name no \
                     job or replica: removed"
                );
            }
            match self.store.forget_empty_queues(self.queues_indexed).await? {
                Some(forgotten) if !forgotten.is_empty() => debug!(
                    queues = forgotten.join(","),
                    "queues without ready runs left the index of queues with ready runs"
                ),
                Some(_) => {}
                None => warn!(
                    key = self.store.keys().ready_queues(),
                    "the index of queues with ready runs was of another type (damaged, or \
                     written by hand) at the end of a round: deleted; readers walk the keys \
                     until the next round finds it whole"
                ),
            }
        }
        Ok(strays.len() as u64)
    }
}
