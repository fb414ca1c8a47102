//! What Redis said while the runner ran, read every 100 ms and kept outside Redis: a crash or a
//! restore takes Redis's own record back in time, this one keeps what it had seen.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use redcron::store::keys::slot_group;

use crate::cluster::{keys, now_ms};
use crate::topology::Locator;

/// How often Redis is read.
const PERIOD: Duration = Duration::from_millis(100);

/// One entry of the events stream: a run's outcome (succeeded, retrying, dead, skipped).
#[derive(Debug, Clone)]
pub struct Event {
    /// When Redis recorded it (the entry id's time), ms.
    pub at_ms: i64,
    pub run: String,
    pub state: String,
    pub reason: Option<String>,
}

/// Everything seen, in the order seen.
#[derive(Debug, Default)]
pub struct Observed {
    /// Every entry of the events stream, also those a crash or a restore took back.
    pub events: Vec<Event>,
    /// Attempts of runs, by run and start (Redis's `started_ms`), with the earliest instant
    /// each was seen to have ended: its `finished_ms`, or, for one seen holding a slot of its
    /// job, the first reading without it. The earliest, since a Redis that lost writes can show
    /// a run that had finished as active again.
    pub attempts: HashMap<(String, i64), Option<i64>>,
    /// Each distinct leader token seen, with when it was first seen: (ms, replica id, epoch).
    pub leaders: Vec<(i64, String, u64)>,
}

/// The thread that reads Redis until [`Observer::finish`].
pub struct Observer {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<Observed>,
}

impl Observer {
    /// Starts reading the node that holds the namespace, found through `locator` again
    /// whenever a reading fails (after a failover, or when the slot moved).
    pub fn start(locator: Locator) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut reader = Reader::default();
            let mut connection: Option<redis::Connection> = None;
            loop {
                // Read once more after being told to stop: what happened until then counts.
                let last = stopped.load(Ordering::Relaxed);
                if connection.is_none() {
                    connection = locator.connect(Duration::from_millis(500)).ok();
                }
                if let Some(open) = connection.as_mut()
                    && reader.read(open).is_err()
                {
                    connection = None;
                }
                if last {
                    return reader.observed;
                }
                std::thread::sleep(PERIOD);
            }
        });
        Self { stop, thread }
    }

    /// Stops reading after one last reading; everything seen.
    pub fn finish(self) -> Observed {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().expect("the observer")
    }
}

#[derive(Default)]
struct Reader {
    observed: Observed,
    /// The id of the last stream entry read.
    last_id: Option<String>,
    /// The attempts the last reading found holding a slot.
    holding: HashSet<(String, i64)>,
}

/// A run's state and `started_ms`, and its score in `running:<job>` when it holds a slot.
type SlotReading = ((Option<String>, Option<i64>), Option<f64>);

impl Reader {
    fn read(&mut self, connection: &mut redis::Connection) -> redis::RedisResult<()> {
        self.read_leader(connection)?;
        let ended = self.read_events(connection)?;
        self.read_finished(connection, &ended)?;
        self.read_holds(connection)
    }

    fn read_leader(&mut self, connection: &mut redis::Connection) -> redis::RedisResult<()> {
        let token: Option<String> = redis::cmd("GET").arg(keys().leader()).query(connection)?;
        let Some((id, epoch)) = token.as_deref().and_then(crate::cluster::parse_token) else {
            return Ok(());
        };
        let leaders = &mut self.observed.leaders;
        if leaders
            .last()
            .is_none_or(|(_, last_id, last_epoch)| (last_id, *last_epoch) != (&id, epoch))
        {
            leaders.push((now_ms(), id, epoch));
        }
        Ok(())
    }

    /// Reads the stream's new entries; the runs whose attempt one of them ended.
    fn read_events(
        &mut self,
        connection: &mut redis::Connection,
    ) -> redis::RedisResult<Vec<String>> {
        const PAGE: usize = 1_000;
        let mut ended = Vec::new();
        loop {
            let from = self.last_id.clone().unwrap_or_else(|| "0".to_owned());
            let reply: Option<redis::streams::StreamReadReply> = redis::cmd("XREAD")
                .arg("COUNT")
                .arg(PAGE)
                .arg("STREAMS")
                .arg(keys().events())
                .arg(&from)
                .query(connection)?;
            let entries = reply
                .and_then(|reply| reply.keys.into_iter().next())
                .map(|stream| stream.ids)
                .unwrap_or_default();
            for entry in &entries {
                let at_ms = entry
                    .id
                    .split_once('-')
                    .and_then(|(ms, _)| ms.parse().ok())
                    .unwrap_or_default();
                let (Some(run), Some(state)) =
                    (entry.get::<String>("run"), entry.get::<String>("state"))
                else {
                    continue;
                };
                if state != "skipped" {
                    ended.push(run.clone());
                }
                self.observed.events.push(Event {
                    at_ms,
                    run,
                    state,
                    reason: entry.get("reason"),
                });
            }
            if let Some(last) = entries.last() {
                self.last_id = Some(last.id.clone());
            }
            if entries.len() < PAGE {
                return Ok(ended);
            }
        }
    }

    /// Reads the start and end of the attempts that just ended, while their run hashes still
    /// have them (a retried run's next attempt may have started since: then its start is later
    /// than the end, and tells nothing).
    fn read_finished(
        &mut self,
        connection: &mut redis::Connection,
        runs: &[String],
    ) -> redis::RedisResult<()> {
        if runs.is_empty() {
            return Ok(());
        }
        let mut pipeline = redis::pipe();
        for run in runs {
            pipeline
                .cmd("HMGET")
                .arg(keys().run(run))
                .arg("started_ms")
                .arg("finished_ms");
        }
        let times: Vec<(Option<i64>, Option<i64>)> = pipeline.query(connection)?;
        for (run, (started, finished)) in runs.iter().zip(times) {
            if let (Some(started), Some(finished)) = (started, finished)
                && started <= finished
            {
                self.end_attempt(run, started, finished);
            }
        }
        Ok(())
    }

    /// Reads which runs hold a slot of their job now, as `claim_runs.lua` sees them when it
    /// decides an overlap: in `running:<job>` (`running:<job>@<replica>` for a replica's run of
    /// an every-replica fire), state `active`, with a start.
    fn read_holds(&mut self, connection: &mut redis::Connection) -> redis::RedisResult<()> {
        let active: Vec<String> = redis::cmd("ZRANGE")
            .arg(keys().active())
            .arg(0)
            .arg(-1)
            .query(connection)?;
        let mut pipeline = redis::pipe();
        for run in &active {
            let job = run.split_once('@').map_or(run.as_str(), |(job, _)| job);
            pipeline
                .cmd("HMGET")
                .arg(keys().run(run))
                .arg("state")
                .arg("started_ms")
                .cmd("ZSCORE")
                .arg(keys().running(&slot_group(job, run)))
                .arg(run);
        }
        let replies: Vec<SlotReading> = if active.is_empty() {
            Vec::new()
        } else {
            pipeline.query(connection)?
        };
        let now = now_ms();
        let mut holding = HashSet::new();
        for (run, ((state, started), slot)) in active.into_iter().zip(replies) {
            if let (Some("active"), Some(started), Some(_)) = (state.as_deref(), started, slot) {
                self.observed
                    .attempts
                    .entry((run.clone(), started))
                    .or_insert(None);
                holding.insert((run, started));
            }
        }
        for (run, started) in std::mem::replace(&mut self.holding, holding.clone()) {
            if !holding.contains(&(run.clone(), started)) {
                self.end_attempt(&run, started, now);
            }
        }
        Ok(())
    }

    /// Records that the attempt of `run` that started at `started` had let go by `ended`.
    fn end_attempt(&mut self, run: &str, started: i64, ended: i64) {
        let end = self
            .observed
            .attempts
            .entry((run.to_owned(), started))
            .or_insert(None);
        *end = Some(end.map_or(ended, |known| known.min(ended)));
    }
}
