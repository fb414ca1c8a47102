//! The scenarios and the seeded plan of faults: the same seed gives the same faults at the same
//! offsets, so a failing run can be replayed.

use std::fmt;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};

/// A kind of trouble, runnable alone (`--scenario NAME`) or mixed with the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// `kill -9` the leader, restart it 2 s later.
    LeaderKill,
    /// SIGSTOP the leader for three leader ttls, then SIGCONT.
    LeaderPause,
    /// `kill -9` a replica while it runs a long job, restart it 2 s later.
    WorkerKill,
    /// Restart `redis-server`: clean SHUTDOWN, or `kill -9`, alternately.
    RedisRestart,
    /// SIGSTOP `redis-server` for 10 s.
    RedisPause,
    /// Two replicas run with their clocks 5 minutes ahead and behind; leaders are killed so
    /// that skewed replicas lead too.
    ClockSkew,
    /// Every client's commands held for 12 s (`CLIENT PAUSE ... ALL`).
    RedisStall,
    /// `kill -9` Redis and start it from a snapshot taken 5 s before: the writes of those
    /// seconds are lost, as after a restore from backup or a failover to a lagging replica.
    RedisRestore,
    /// Replicas restarted one at a time on a new version of the schedule files, which adds a
    /// job and changes another's schedule.
    RollingDeploy,
    /// `kill -9` the primary of a Sentinel setup: the sentinels promote its replica; the old
    /// primary is started again and comes back as a replica of the new one.
    PrimaryKill,
    /// `kill -9` the Redis Cluster master that serves the namespace's slot: its replica takes
    /// the slot over; the killed node is started again and rejoins as a replica.
    SlotMasterKill,
    /// Move the namespace's slot to another master of the Redis Cluster, keys and all, while
    /// the replicas use it.
    SlotMigrate,
}

/// The Redis the replicas use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topology {
    /// One `redis-server` with AOF on.
    Single,
    /// A primary, its replica and three sentinels.
    Sentinel,
    /// A Redis Cluster of three masters with a replica each.
    Cluster,
}

impl Topology {
    /// Every topology.
    pub const ALL: [Topology; 3] = [Topology::Single, Topology::Sentinel, Topology::Cluster];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Topology::Single => "single",
            Topology::Sentinel => "sentinel",
            Topology::Cluster => "cluster",
        }
    }

    /// The topology called `name`.
    pub fn parse(name: &str) -> Option<Topology> {
        Topology::ALL
            .into_iter()
            .find(|topology| topology.name() == name)
    }

    /// What runs without `--scenario`: on one `redis-server`, [`Scenario::DEFAULT`]; on the
    /// others, the faults of the replicas and those of the topology.
    pub fn default_scenarios(self) -> Vec<Scenario> {
        if self == Topology::Single {
            return Scenario::DEFAULT.to_vec();
        }
        Scenario::ALL
            .into_iter()
            .filter(|scenario| scenario.runs_on(self) && !scenario.runs_on(Topology::Single))
            .chain(Scenario::REPLICA_LEVEL)
            .collect()
    }
}

impl Scenario {
    /// Every scenario, in the order the issues list them.
    pub const ALL: [Scenario; 12] = [
        Scenario::LeaderKill,
        Scenario::LeaderPause,
        Scenario::WorkerKill,
        Scenario::RedisRestart,
        Scenario::RedisPause,
        Scenario::ClockSkew,
        Scenario::RedisStall,
        Scenario::RedisRestore,
        Scenario::RollingDeploy,
        Scenario::PrimaryKill,
        Scenario::SlotMasterKill,
        Scenario::SlotMigrate,
    ];

    /// What runs without `--scenario` on one `redis-server`: every scenario of that topology,
    /// the rolling deploy included, now that the leader plans every job a live replica
    /// declares.
    pub const DEFAULT: [Scenario; 9] = [
        Scenario::LeaderKill,
        Scenario::LeaderPause,
        Scenario::WorkerKill,
        Scenario::RedisRestart,
        Scenario::RedisPause,
        Scenario::ClockSkew,
        Scenario::RedisStall,
        Scenario::RedisRestore,
        Scenario::RollingDeploy,
    ];

    /// The scenarios that hurt the replicas only, whatever Redis they use.
    pub const REPLICA_LEVEL: [Scenario; 5] = [
        Scenario::LeaderKill,
        Scenario::LeaderPause,
        Scenario::WorkerKill,
        Scenario::ClockSkew,
        Scenario::RollingDeploy,
    ];

    /// Whether it can run on `topology`: the replicas' faults run on every one, the others on
    /// the Redis they are about.
    pub fn runs_on(self, topology: Topology) -> bool {
        match self {
            Scenario::RedisRestart
            | Scenario::RedisPause
            | Scenario::RedisStall
            | Scenario::RedisRestore => topology == Topology::Single,
            Scenario::PrimaryKill => topology == Topology::Sentinel,
            Scenario::SlotMasterKill | Scenario::SlotMigrate => topology == Topology::Cluster,
            _ => true,
        }
    }

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::LeaderKill => "leader-kill",
            Scenario::LeaderPause => "leader-pause",
            Scenario::WorkerKill => "worker-kill",
            Scenario::RedisRestart => "redis-restart",
            Scenario::RedisPause => "redis-pause",
            Scenario::ClockSkew => "clock-skew",
            Scenario::RedisStall => "redis-stall",
            Scenario::RedisRestore => "redis-restore",
            Scenario::RollingDeploy => "rolling-deploy",
            Scenario::PrimaryKill => "primary-kill",
            Scenario::SlotMasterKill => "slot-master-kill",
            Scenario::SlotMigrate => "slot-migrate",
        }
    }

    /// The scenario called `name`.
    pub fn parse(name: &str) -> Option<Scenario> {
        Scenario::ALL
            .into_iter()
            .find(|scenario| scenario.name() == name)
    }

    /// The faults it injects; clock skew is a setting of the replicas, and kills leaders so
    /// that the skewed ones take their turn.
    fn faults(self) -> &'static [Fault] {
        match self {
            Scenario::LeaderKill | Scenario::ClockSkew => &[Fault::KillLeader],
            Scenario::LeaderPause => &[Fault::PauseLeader],
            Scenario::WorkerKill => &[Fault::KillBusyReplica],
            Scenario::RedisRestart => &[Fault::ShutdownRedis, Fault::CrashRedis],
            Scenario::RedisPause => &[Fault::FreezeRedis],
            Scenario::RedisStall => &[Fault::StallRedis],
            Scenario::RedisRestore => &[Fault::RestoreRedis],
            Scenario::RollingDeploy => &[Fault::RollingDeploy],
            Scenario::PrimaryKill => &[Fault::KillPrimary],
            Scenario::SlotMasterKill => &[Fault::KillSlotMaster],
            Scenario::SlotMigrate => &[Fault::MigrateSlot],
        }
    }
}

/// One fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `kill -9` the leader; restart it after [`DOWN`].
    KillLeader,
    /// SIGSTOP the leader for [`LEADER_PAUSE`], then SIGCONT.
    PauseLeader,
    /// `kill -9` a replica running a long job; restart it after [`DOWN`].
    KillBusyReplica,
    /// SHUTDOWN `redis-server` (it writes its AOF), start it again after [`DOWN`].
    ShutdownRedis,
    /// `kill -9` `redis-server` (it loses up to a second of writes), start it after [`DOWN`].
    CrashRedis,
    /// SIGSTOP `redis-server` for [`REDIS_FREEZE`], then SIGCONT.
    FreezeRedis,
    /// `CLIENT PAUSE` every client for [`REDIS_STALL`].
    StallRedis,
    /// Snapshot Redis, and [`SNAPSHOT_AGE`] later `kill -9` it and start it from the snapshot
    /// after [`DOWN`].
    RestoreRedis,
    /// Stop each replica in turn (SIGTERM), start it on the next version of the schedule files,
    /// [`DEPLOY_STEP`] apart.
    RollingDeploy,
    /// `kill -9` the Sentinel setup's primary, wait for the promotion of its replica, start
    /// the old primary again and wait until it is a replica in sync.
    KillPrimary,
    /// `kill -9` the master of the namespace's slot, wait until its replica serves the slot,
    /// start the killed node again and wait until it is a replica in sync.
    KillSlotMaster,
    /// Migrate the namespace's slot to another master.
    MigrateSlot,
}

/// How long a killed process stays down.
pub const DOWN: Duration = Duration::from_secs(2);

/// Three leader ttls (the replicas run with `--leader-ttl 2s`).
pub const LEADER_PAUSE: Duration = Duration::from_secs(6);

/// How long Redis is unreachable in [`Fault::FreezeRedis`].
pub const REDIS_FREEZE: Duration = Duration::from_secs(10);

/// How long every client's commands wait in [`Fault::StallRedis`].
pub const REDIS_STALL: Duration = Duration::from_secs(12);

/// How old the copy is that [`Fault::RestoreRedis`] brings back.
pub const SNAPSHOT_AGE: Duration = Duration::from_secs(5);

/// In a rolling deploy, from starting one replica on the new version to stopping the next:
/// meanwhile replicas of both versions run side by side.
pub const DEPLOY_STEP: Duration = Duration::from_secs(5);

/// After a new version of the schedule files is up on a replica, how long the cluster has to
/// plan and run a job that version adds (heartbeat 2 s, planner tick 1 s, and some slack);
/// also how long after the last replica is up a deploy counts as under way.
pub const DEPLOY_SETTLE: Duration = Duration::from_secs(5);

/// How long a failover may take before it counts as not having happened.
pub const FAILOVER_LIMIT: Duration = Duration::from_secs(30);

impl Fault {
    /// Whether it hurts the Redis topology rather than the replicas or one `redis-server`.
    fn is_failover(self) -> bool {
        matches!(
            self,
            Fault::KillPrimary | Fault::KillSlotMaster | Fault::MigrateSlot
        )
    }

    /// How long after it starts the cluster is whole again, at most: the gap to the next fault
    /// is never shorter, so faults never overlap.
    fn recovery(self, replicas: usize) -> Duration {
        match self {
            Fault::KillLeader | Fault::ShutdownRedis | Fault::CrashRedis => Duration::from_secs(6),
            Fault::PauseLeader => LEADER_PAUSE + Duration::from_secs(4),
            // Waiting for a long job to be running (they start every 7.5 s on average and run
            // 6 s), then its lease (3 s) and its re-run (6 s).
            Fault::KillBusyReplica => Duration::from_secs(3 + 2 + 3 + 6),
            Fault::FreezeRedis => REDIS_FREEZE + Duration::from_secs(4),
            // Fires late by the stall run one at a time: 12 of a job running up to 0.8 s.
            Fault::StallRedis => REDIS_STALL + Duration::from_secs(8),
            // The fires of the lost seconds run again, one at a time for a job with a limit.
            Fault::RestoreRedis => SNAPSHOT_AGE + DOWN + Duration::from_secs(8),
            // Each replica: its shutdown grace (2 s), down, and the step; then the settling.
            Fault::RollingDeploy => {
                (Duration::from_secs(2) + DOWN + DEPLOY_STEP) * replicas as u32 + DEPLOY_SETTLE
            }
            // The promotion (3-4 s after the kill), the old node back as a replica and in sync
            // (3-5 s), and the fires held meanwhile.
            Fault::KillPrimary | Fault::KillSlotMaster => Duration::from_secs(16),
            Fault::MigrateSlot => Duration::from_secs(6),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Fault::KillLeader => "kill -9 the leader",
            Fault::PauseLeader => "SIGSTOP the leader",
            Fault::KillBusyReplica => "kill -9 a replica running a long job",
            Fault::ShutdownRedis => "SHUTDOWN redis-server",
            Fault::CrashRedis => "kill -9 redis-server",
            Fault::FreezeRedis => "SIGSTOP redis-server",
            Fault::StallRedis => "CLIENT PAUSE every client of redis-server",
            Fault::RestoreRedis => "restore redis-server from an older snapshot",
            Fault::RollingDeploy => "rolling deploy of new schedule files",
            Fault::KillPrimary => "kill -9 the primary (Sentinel)",
            Fault::KillSlotMaster => "kill -9 the slot's master",
            Fault::MigrateSlot => "migrate the namespace's slot to another master",
        })
    }
}

/// A fault and when it starts, from the start of the window.
#[derive(Debug, Clone, Copy)]
pub struct Step {
    /// Offset from the start of the window.
    pub at: Duration,
    /// What happens then.
    pub fault: Fault,
}

/// The faults of `scenarios` over `window`, 14-18 s apart (longer when a fault takes longer
/// to recover from, with `replicas` replicas), the first 10 s in, none recovering later than
/// 5 s before the window ends. Every kind of fault comes once, in a seeded order, before any
/// comes again; the failovers of a Sentinel setup or a cluster first in each round, so that a
/// short window has them.
pub fn plan(seed: u64, scenarios: &[Scenario], window: Duration, replicas: usize) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut kinds: Vec<Fault> = Vec::new();
    for fault in scenarios.iter().flat_map(|scenario| scenario.faults()) {
        if !kinds.contains(fault) {
            kinds.push(*fault);
        }
    }
    let mut steps = Vec::new();
    if kinds.is_empty() {
        return steps;
    }
    let mut round: Vec<Fault> = Vec::new();
    let mut at = Duration::from_secs(10);
    loop {
        if round.is_empty() {
            round = kinds.clone();
            round.shuffle(&mut rng);
            // Taken from the end: the failovers last in the vector come first.
            round.sort_by_key(|fault| fault.is_failover());
        }
        let fault = round[round.len() - 1];
        if at + fault.recovery(replicas) + Duration::from_secs(5) > window {
            return steps;
        }
        round.pop();
        steps.push(Step { at, fault });
        let gap = Duration::from_millis(rng.random_range(14_000..=18_000));
        at += gap.max(fault.recovery(replicas) + Duration::from_secs(1));
    }
}
