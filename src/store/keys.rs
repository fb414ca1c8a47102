//! Every Redis key name redcron uses, built in one place.
//!
//! All keys share one hash tag, `{ns}`, so every script touches a single slot and runs unchanged
//! on Redis Cluster. Scripts that reach keys named after a run, job, queue or replica build them
//! from [`Keys::prefix`] with the helpers of `lua/include/common.lua` (`key_run`,
//! `key_running`, `ready_list`...), which a test checks against the functions here.

use thiserror::Error;

use crate::schedule::Priority;

/// The longest namespace: keys stay short, and a namespace is a name, not data.
const MAX_NAMESPACE_LEN: usize = 64;

/// A namespace that cannot be one.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "invalid namespace {0:?}: use 1 to 64 letters, digits, '.', '_' or '-' (it becomes the hash \
     tag {{NS}} of every key)"
)]
pub struct InvalidNamespace(pub String);

/// Checks that `namespace` makes a hash tag of its own: not empty (`{}` is no hash tag, so the
/// keys would spread over a cluster's slots), no braces, no spaces or control characters.
///
/// # Errors
/// [`InvalidNamespace`], which says what a namespace may hold.
pub fn validate_namespace(namespace: &str) -> Result<(), InvalidNamespace> {
    let valid = (1..=MAX_NAMESPACE_LEN).contains(&namespace.len())
        && namespace
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
    if valid {
        Ok(())
    } else {
        Err(InvalidNamespace(namespace.to_owned()))
    }
}

/// A replica's own route: the queue name under which the runs of every-replica jobs meant for
/// it wait (`ready-fires:@<id>:<priority>`), which only its workers claim. No queue name starts
/// with `@`.
pub fn private_route(replica_id: &str) -> String {
    format!("@{replica_id}")
}

/// The replica whose own route `queue` is (see [`private_route`]); `None` for a queue.
pub fn route_replica(queue: &str) -> Option<&str> {
    queue.strip_prefix('@')
}

/// The id of `replica_id`'s run of the every-replica fire `fire_id` (`<job>@<fire ms>`):
/// deterministic, so that a fire promoted twice makes one run per replica.
pub fn replica_run_id(fire_id: &str, replica_id: &str) -> String {
    format!("{fire_id}:{replica_id}")
}

/// The name a run's job slots are kept under (`running:<name>`, `waiting:<name>`): its job's,
/// or `<job>@<replica>` for a replica's run of an every-replica job, whose overlap and
/// `max_concurrency` count per replica.
pub fn slot_group<'a>(job: &'a str, run_id: &str) -> std::borrow::Cow<'a, str> {
    match replica_of_run(job, run_id) {
        Some(replica) => replica_slot_group(job, replica).into(),
        None => job.into(),
    }
}

/// The name `replica`'s slots of the every-replica job `job` are kept under (see
/// [`slot_group`]).
pub fn replica_slot_group(job: &str, replica: &str) -> String {
    format!("{job}@{replica}")
}

/// The replica a run of `job` is meant for, when it is a replica's run of an every-replica
/// fire (`<job>@<fire ms>:<replica>`, see [`replica_run_id`]); `None` for any other run.
pub fn replica_of_run<'a>(job: &str, run_id: &'a str) -> Option<&'a str> {
    run_id
        .strip_prefix(job)
        .and_then(|rest| rest.strip_prefix('@'))
        .and_then(|rest| rest.split_once(':'))
        .filter(|(fire, _)| !fire.is_empty() && fire.bytes().all(|byte| byte.is_ascii_digit()))
        .map(|(_, replica)| replica)
}

/// The fire time (ms) of a cron run of `job`: a fire (`<job>@<fire ms>`) or a replica's run of
/// one (`<job>@<fire ms>:<replica>`); `None` for any other run. Read from the id, so a run
/// skipped before any replica claimed it has one too.
pub fn fire_of_run(job: &str, run_id: &str) -> Option<i64> {
    let rest = run_id.strip_prefix(job)?.strip_prefix('@')?;
    let fire = rest.split_once(':').map_or(rest, |(fire, _)| fire);
    if fire.is_empty() || !fire.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    fire.parse().ok()
}

/// The key names of one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keys {
    /// `{ns}:`, the start of every key.
    prefix: String,
}

impl Keys {
    /// The keys of namespace `namespace` (default `redcron`).
    pub fn new(namespace: &str) -> Self {
        Self {
            prefix: format!("{{{namespace}}}:"),
        }
    }

    /// `{ns}:`, which scripts extend into per-run, per-job and per-queue keys.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    fn key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.prefix)
    }

    /// String with a PX lease: `<replica id>:<epoch>` of the current leader.
    pub fn leader(&self) -> String {
        self.key("leader")
    }

    /// Integer incremented on every leader acquisition: the fencing token's epoch.
    pub fn epoch(&self) -> String {
        self.key("epoch")
    }

    /// Hash job -> fire ms of the last fire planned or skipped.
    pub fn cursor(&self) -> String {
        self.key("cursor")
    }

    /// Hash job -> definition JSON: the definitions as the leader sees them.
    pub fn defs(&self) -> String {
        self.key("defs")
    }

    /// Hash job -> content hash of its published definition: what a new leader compares with
    /// its own, without reading every definition.
    pub fn def_hashes(&self) -> String {
        self.key("def-hashes")
    }

    /// Zset run id -> due ms: planned cron fires and their retries and re-drives.
    pub fn due(&self) -> String {
        self.key("due")
    }

    /// Zset run id -> due ms: ad-hoc runs due later, and their retries and re-drives. Apart from
    /// [`Keys::due`] so that promotion takes the fires due first: a backlog of runs due at one
    /// instant never holds back a fire due then.
    pub fn due_runs(&self) -> String {
        self.key("due-runs")
    }

    /// Hash job -> its fires planned and not promoted yet (ms, comma-separated): replanning on
    /// reload, misfire decisions. One field per job rather than a key per job: a key costs
    /// about as much as the run it indexes.
    pub fn planned(&self) -> String {
        self.key("planned")
    }

    /// String: the time (ms) up to which the leader has planned every job's fires, so that
    /// `run-once` does not run a missed fire as the latest while later missed fires are not
    /// planned yet (after an outage longer than the horizon).
    pub fn planned_through(&self) -> String {
        self.key("planned-through")
    }

    /// Hash job -> its latest fire promoted (made ready or skipped), ms: how `run-once` judges
    /// a fire claimed ahead that never started and comes due again late.
    pub fn latest_fires(&self) -> String {
        self.key("latest-fire")
    }

    /// Hash of one run.
    pub fn run(&self, run_id: &str) -> String {
        self.key(&format!("run:{run_id}"))
    }

    /// Hash of a running run's output so far (`output`, `written_ms`, `attempt`), written by
    /// its worker at most once a second while output arrives, with an expiry of a few run
    /// leases: what a replica killed mid-run left expires on its own (see
    /// `lua/publish_live_output.lua`).
    pub fn live_output(&self, run_id: &str) -> String {
        self.key(&format!("live-output:{run_id}"))
    }

    /// List of ad-hoc run ids ready to claim in one queue at one priority.
    pub fn ready(&self, queue: &str, priority: Priority) -> String {
        self.key(&format!("ready:{queue}:{}", priority_name(priority)))
    }

    /// List of cron fires (and their retries) ready to claim in one queue at one priority:
    /// claimed before the ad-hoc runs of [`Keys::ready`], so a backlog never delays a schedule.
    pub fn ready_fires(&self, queue: &str, priority: Priority) -> String {
        self.key(&format!("ready-fires:{queue}:{}", priority_name(priority)))
    }

    /// The queue of a ready list's key ([`Keys::ready`] or [`Keys::ready_fires`]), read back
    /// from a `SCAN` of the namespace; `None` for any other key, or one whose last part is no
    /// priority (a list no claim reads).
    pub fn queue_of_ready_list<'a>(&self, key: &'a str) -> Option<&'a str> {
        let rest = key.strip_prefix(self.prefix.as_str())?;
        let list = rest
            .strip_prefix("ready-fires:")
            .or_else(|| rest.strip_prefix("ready:"))?;
        let (queue, priority) = list.rsplit_once(':')?;
        Priority::ALL
            .into_iter()
            .any(|known| priority_name(known) == priority)
            .then_some(queue)
    }

    /// Set of the queues (and replicas' own routes) whose ready lists may hold runs: every script
    /// that pushes a run onto a ready list adds its queue, and the reapers forget a queue once
    /// its lists are empty. What readers take instead of walking every key.
    pub fn ready_queues(&self) -> String {
        self.key("ready-queues")
    }

    /// String: the ms at which a reaper's walk over every key ended with each ready list it met
    /// in [`Keys::ready_queues`]. Absent in a namespace written only by versions before the
    /// index, whose readers walk the keys for ready lists instead.
    pub fn ready_queues_walked(&self) -> String {
        self.key("ready-queues-walked")
    }

    /// Zset with at most one member, added when runs become ready in `queue`: idle workers block
    /// on it instead of polling.
    pub fn wake(&self, queue: &str) -> String {
        self.key(&format!("wake:{queue}"))
    }

    /// Zset with at most one member, added when another replica put aside runs of a job this
    /// replica declares: its idle workers block on it beside their queues' markers.
    pub fn wake_replica(&self, replica_id: &str) -> String {
        self.key(&format!("wake-replica:{replica_id}"))
    }

    /// Pub/sub channel telling promoters that a run became due earlier than they planned to look.
    pub fn wake_promoter(&self) -> String {
        self.key("wake-promoter")
    }

    /// Zset run id -> lease deadline ms of running runs.
    pub fn active(&self) -> String {
        self.key("active")
    }

    /// String with a PX ttl: the run id that owns a fingerprint.
    pub fn fingerprint(&self, fingerprint: &str) -> String {
        self.key(&format!("fp:{fingerprint}"))
    }

    /// Zset run id -> ms it died: the dead letters.
    pub fn dead(&self) -> String {
        self.key("dead")
    }

    /// Stream of run state changes, capped.
    pub fn events(&self) -> String {
        self.key("events")
    }

    /// Stream of the records the archive has yet to hold, one per outcome, written beside the
    /// event when the namespace archives; trimmed only below what the exporters acknowledged.
    pub fn archive(&self) -> String {
        self.key("archive")
    }

    /// Hash first record id -> `<last record id> <records>` of each part of the archive given to
    /// an exporter and not acknowledged yet: a part given again is the same records.
    pub fn archive_parts(&self) -> String {
        self.key("archive-parts")
    }

    /// Zset of the days (since 1970-01-01, UTC, each scored by itself) with a part archived and
    /// no manifest written yet: added by each acknowledgement, removed once the day's manifest
    /// is in the archive.
    pub fn archive_days(&self) -> String {
        self.key("archive-days")
    }

    /// Hash replica id -> `<ms> <part> <reason>`: the last part the archive refused that
    /// replica's exporter, when (ms on Redis's clock) and why in a few words; removed by its
    /// next part written, and gone a day after the last refusal of any.
    pub fn archive_failures(&self) -> String {
        self.key("archive-failures")
    }

    /// String naming where the namespace archives (the URL, without credentials): written by
    /// a replica started with `--archive`, read by every replica as it starts.
    pub fn archive_marker(&self) -> String {
        self.key("archive-to")
    }

    /// Zset replica id -> last heartbeat ms.
    pub fn replicas(&self) -> String {
        self.key("replicas")
    }

    /// String, without a TTL: names this copy of the namespace's data, written by the first
    /// heartbeat that finds it missing. Another value, or none, where a replica saw one before
    /// means Redis lost the data in between.
    pub fn origin(&self) -> String {
        self.key("origin")
    }

    /// Hash, without a TTL: `written_ms`, the time of the latest claim that started or skipped
    /// runs or success recorded (never below what a replica's claim saw), and `rewound_ms`, when
    /// a claim last found it below what its replica had seen: Redis had come back older (a
    /// restore, a failover to a replica that lagged, a crash that lost writes).
    pub fn rewind(&self) -> String {
        self.key("rewind")
    }

    /// Zset replica id -> ms it stopped cleanly, for a day: `status` tells a replica that was
    /// stopped from one that was lost.
    pub fn stopped_replicas(&self) -> String {
        self.key("stopped-replicas")
    }

    /// Hash describing one replica (host, pid, version, start time, busy and max workers),
    /// expiring when its heartbeats stop (a day after it stopped cleanly).
    pub fn replica(&self, replica_id: &str) -> String {
        self.key(&format!("replica:{replica_id}"))
    }

    /// Hash job -> content hash of the definitions one replica declares, for drift detection;
    /// expires with the replica's heartbeats.
    pub fn replica_jobs(&self, replica_id: &str) -> String {
        self.key(&format!("replica-jobs:{replica_id}"))
    }

    /// Hash: declarations of one replica being written, a batch at a time, before they replace
    /// its `replica-jobs:<id>` in one step (`RENAME`); `publication` tells apart two that
    /// cross. Expires with the replica's declarations when a publication is cut short.
    pub fn replica_jobs_aside(&self, replica_id: &str, publication: u64) -> String {
        self.key(&format!(
            "replica-jobs-aside:{replica_id}:{publication:016x}"
        ))
    }

    /// Zset replica id -> ms it last declared the every-replica job `job`: the targets of the
    /// job's fires are those that declared it within the misfire threshold.
    pub fn targets(&self, job: &str) -> String {
        self.key(&format!("targets:{job}"))
    }

    /// Hash: what one replica declared when it last stopped cleanly (as `replica-jobs:<id>`),
    /// kept for the undeclared grace, so that the leader tells a restart without a job from a
    /// replica gone.
    pub fn withdrawn_jobs(&self, replica_id: &str) -> String {
        self.key(&format!("withdrawn-jobs:{replica_id}"))
    }

    /// Hash content hash -> canonical JSON of every definition some replica declares, one copy
    /// per distinct definition: the leader reads the ones it plans but does not declare itself.
    pub fn declared_definitions(&self) -> String {
        self.key("declared-defs")
    }

    /// Counter incremented whenever a replica publishes or withdraws its declarations: the
    /// leader reads them again only when it moved (or when the live replicas change).
    pub fn declarations_version(&self) -> String {
        self.key("declarations")
    }

    /// Set of jobs whose published definition ([`Keys::defs`]) a promoter could not read: the
    /// leader writes them again at its next tick.
    pub fn damaged_definitions(&self) -> String {
        self.key("damaged-defs")
    }

    /// Zset key suffix (`run:<id>`, `wf:<id>`) -> ms the reapers found it damaged (a record
    /// without the fields its kind has, or of another type) and gave it an expiry: what
    /// `status` counts.
    pub fn damaged_keys(&self) -> String {
        self.key("damaged-keys")
    }

    /// Set of paused job names.
    pub fn paused(&self) -> String {
        self.key("paused")
    }

    /// String, with a TTL: while it exists the namespace is held (`redcron hold`) and every
    /// script that builds keys of its own refuses to run, so that a migration of the
    /// namespace's slot never meets a script halfway.
    pub fn hold(&self) -> String {
        self.key("hold")
    }

    /// String, with a TTL: while it exists no lease is taken for expired. Set with a hold and
    /// kept a grace past its end, so that runs whose lease or outcome the hold kept from Redis
    /// are not reaped as lost while their workers catch up.
    pub fn reaping_paused(&self) -> String {
        self.key("reaping-paused")
    }

    /// Zset run id -> deadline ms: the runs holding a slot of a job with a limit (`overlap =
    /// "forbid"`: one; `max_concurrency`), running or handed a freed slot.
    pub fn running(&self, job: &str) -> String {
        self.key(&format!("running:{job}"))
    }

    /// Zset job -> ms since when runs of it wait in [`Keys::undeclared`] for a replica that
    /// declares it (reset while a live replica declares it).
    pub fn undeclared_jobs(&self) -> String {
        self.key("undeclared-jobs")
    }

    /// List of ready run ids of `job` put aside by replicas that do not declare it, oldest
    /// first.
    pub fn undeclared(&self, job: &str) -> String {
        self.key(&format!("undeclared:{job}"))
    }

    /// List of run ids waiting for a slot of their job, oldest first.
    pub fn waiting(&self, job: &str) -> String {
        self.key(&format!("waiting:{job}"))
    }

    /// Zset notice id -> ms from which any replica may take it: the notices owed and not yet
    /// sent (while one is being sent, the end of its sender's lease).
    pub fn notices(&self) -> String {
        self.key("notices")
    }

    /// Hash of one notice owed: the run's fields when it was recorded, its targets, who sends
    /// it and which targets have it already.
    pub fn notice(&self, notice_id: &str) -> String {
        self.key(&format!("notice:{notice_id}"))
    }

    /// Zset notice id -> ms recorded: the notices of outcomes one replica recorded, which it
    /// sends itself.
    pub fn notices_of(&self, replica_id: &str) -> String {
        self.key(&format!("notices-of:{replica_id}"))
    }

    /// Hash of one workflow instance: its state, its steps' statuses and outputs (see
    /// `lua/include/workflows.lua`).
    pub fn workflow(&self, workflow_id: &str) -> String {
        self.key(&format!("wf:{workflow_id}"))
    }

    /// Zset workflow instance id -> ms started: what `redcron workflow list` reads.
    pub fn workflows(&self) -> String {
        self.key("workflows")
    }

    /// Zset workflow instance id -> ms started, of the instances running: what the reapers
    /// settle (see `lua/settle_workflows.lua`).
    pub fn workflows_running(&self) -> String {
        self.key("workflows-running")
    }

    /// Hash job -> run id of its latest dead run, for jobs told of their recovery: the next
    /// success removes it and sends `recovered`.
    pub fn dead_jobs(&self) -> String {
        self.key("dead-jobs")
    }
}

fn priority_name(priority: Priority) -> &'static str {
    match priority {
        Priority::High => "high",
        Priority::Normal => "normal",
        Priority::Low => "low",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_a_short_name_that_makes_a_hash_tag() {
        for valid in ["redcron", "prod.eu-1", "a_b", &"x".repeat(64)] {
            assert_eq!(validate_namespace(valid), Ok(()), "{valid}");
        }
        for invalid in ["", "a}b", "{a", "a b", "ns\n", "é", &"x".repeat(65)] {
            let error = validate_namespace(invalid).expect_err(invalid);
            assert!(error.to_string().contains("1 to 64 letters"), "{error}");
        }
    }

    #[test]
    fn a_ready_list_key_names_its_queue_and_no_other_key_does() {
        let keys = Keys::new("prod");
        for priority in Priority::ALL {
            assert_eq!(
                keys.queue_of_ready_list(&keys.ready("mail.eu", priority)),
                Some("mail.eu")
            );
            assert_eq!(
                keys.queue_of_ready_list(&keys.ready_fires("default", priority)),
                Some("default")
            );
        }
        for other in [
            "{prod}:ready:mail:urgent",
            "{prod}:ready-runs",
            "{other}:ready:mail:high",
            "{prod}:run:ready:mail:high",
        ] {
            assert_eq!(keys.queue_of_ready_list(other), None, "{other}");
        }
    }

    #[test]
    fn every_key_carries_the_namespace_hash_tag() {
        let keys = Keys::new("prod");
        assert_eq!(keys.prefix(), "{prod}:");
        assert_eq!(keys.leader(), "{prod}:leader");
        assert_eq!(
            keys.run("nightly@1767225600000"),
            "{prod}:run:nightly@1767225600000"
        );
        assert_eq!(keys.ready("mail", Priority::High), "{prod}:ready:mail:high");
        assert_eq!(keys.planned(), "{prod}:planned");
        assert_eq!(keys.planned_through(), "{prod}:planned-through");
        for key in [
            keys.due(),
            keys.due_runs(),
            keys.running("x"),
            keys.waiting("x"),
            keys.ready_fires("q", Priority::Low),
            keys.wake("q"),
            keys.fingerprint("ab"),
            keys.live_output("r"),
        ] {
            assert!(key.starts_with("{prod}:"), "{key}");
        }
    }
}
