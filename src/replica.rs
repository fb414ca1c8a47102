//! One replica: the engine's components wired together, started, and stopped in order.
//!
//! Shutdown order, written down once: (1) workers stop claiming and running runs get the grace
//! period, after which the rest are stopped and handed back without using an attempt; (2) the
//! planner, promoter, reaper and heartbeat stop; (3) the elector releases the leader lease, last,
//! so that no plan is written after the lease is given up.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::engine::elector::{Elector, ElectorConfig};
use crate::engine::heartbeat::{Heartbeat, HeartbeatConfig};
use crate::engine::planner::{Jobs, Planner, PlannerConfig, shared_jobs};
use crate::engine::promoter::{Promoter, PromoterConfig};
use crate::engine::reaper::{Reaper, ReaperConfig};
use crate::engine::worker::{WorkerConfig, Workers};
use crate::engine::{Leadership, Shutdown};
use crate::handler::{Handler, Handlers};
use crate::schedule::Job;
use crate::store::Store;

/// Everything a replica can be told.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    /// Unique among the replicas sharing a Redis.
    pub replica_id: String,
    /// The leader lease: a dead leader is replaced within about this long.
    pub leader_ttl: Duration,
    /// Claiming and executing runs.
    pub workers: WorkerConfig,
    /// How long running runs may finish after shutdown is asked for.
    pub shutdown_grace: Duration,
    /// Planning fires.
    pub planner: PlannerConfig,
    /// Promoting due runs.
    pub promoter: PromoterConfig,
    /// Reaping runs of dead workers.
    pub reaper: ReaperConfig,
    /// Time between heartbeats.
    pub heartbeat_period: Duration,
}

impl Default for ReplicaConfig {
    fn default() -> Self {
        Self {
            replica_id: "replica".to_owned(),
            leader_ttl: Duration::from_secs(5),
            workers: WorkerConfig::default(),
            shutdown_grace: Duration::from_secs(30),
            planner: PlannerConfig::default(),
            promoter: PromoterConfig::default(),
            reaper: ReaperConfig::default(),
            heartbeat_period: Duration::from_secs(2),
        }
    }
}

/// Replaces a running replica's job definitions (a reload).
#[derive(Clone)]
pub struct JobsHandle(Arc<watch::Sender<Jobs>>);

impl JobsHandle {
    /// Declares `jobs` instead of the current ones: the planner unplans changed and removed
    /// jobs and plans the new definitions; workers execute by the new definitions.
    pub fn replace(&self, jobs: Vec<Job>) {
        self.0.send_replace(shared_jobs(jobs));
    }
}

/// Builds a [`Replica`]: its store, jobs, handlers and settings.
pub struct ReplicaBuilder {
    store: Store,
    jobs: Vec<Job>,
    handlers: Handlers,
    config: ReplicaConfig,
}

impl ReplicaBuilder {
    /// The declared jobs.
    pub fn jobs(mut self, jobs: Vec<Job>) -> Self {
        self.jobs = jobs;
        self
    }

    /// Runs `job` with `handler` (library mode) instead of its command.
    pub fn handler(mut self, job: impl Into<String>, handler: impl Handler) -> Self {
        self.handlers.register(job, handler);
        self
    }

    /// The replica's settings.
    pub fn config(mut self, config: ReplicaConfig) -> Self {
        self.config = config;
        self
    }

    /// The replica, ready to run.
    pub fn build(self) -> Replica {
        let (jobs, _) = watch::channel(shared_jobs(self.jobs));
        Replica {
            store: self.store,
            jobs: Arc::new(jobs),
            handlers: self.handlers,
            config: self.config,
        }
    }
}

/// One replica of the scheduler.
pub struct Replica {
    store: Store,
    jobs: Arc<watch::Sender<Jobs>>,
    handlers: Handlers,
    config: ReplicaConfig,
}

impl Replica {
    /// A builder for a replica on `store`.
    pub fn builder(store: Store) -> ReplicaBuilder {
        ReplicaBuilder {
            store,
            jobs: Vec::new(),
            handlers: Handlers::new(),
            config: ReplicaConfig::default(),
        }
    }

    /// A handle to replace the job definitions while the replica runs.
    pub fn jobs_handle(&self) -> JobsHandle {
        JobsHandle(self.jobs.clone())
    }

    /// Runs every component until `shutdown`, then stops them in order (see the module docs).
    pub async fn run(self, shutdown: Shutdown) {
        let config = self.config;
        let leadership = Leadership::new();
        let (planning, electing) = (Shutdown::new(), Shutdown::new());

        let elector = Elector::new(
            self.store.clone(),
            leadership.clone(),
            ElectorConfig {
                replica_id: config.replica_id.clone(),
                lease_ttl: config.leader_ttl,
            },
        );
        let planner = Planner::new(
            self.store.clone(),
            leadership.clone(),
            self.jobs.subscribe(),
            config.planner.clone(),
        );
        let workers = Workers::new(
            self.store.clone(),
            WorkerConfig {
                replica_id: config.replica_id.clone(),
                // As long as the heartbeat keeps them.
                declarations_ttl: config.heartbeat_period * 3,
                ..config.workers.clone()
            },
            self.jobs.subscribe(),
            self.handlers,
        );
        let heartbeat = Heartbeat::new(
            self.store.clone(),
            HeartbeatConfig {
                replica_id: config.replica_id.clone(),
                period: config.heartbeat_period,
                max_workers: config.workers.concurrency,
            },
            workers.busy(),
            self.jobs.subscribe(),
            leadership.clone(),
        );
        let elector_task = tokio::spawn(elector.run(electing.clone()));
        let background = [
            tokio::spawn(planner.run(planning.clone())),
            tokio::spawn(Promoter::new(self.store.clone(), config.promoter).run(planning.clone())),
            tokio::spawn(
                Reaper::new(
                    self.store.clone(),
                    ReaperConfig {
                        replica_live_for: config.heartbeat_period * 3,
                        ..config.reaper
                    },
                )
                .run(planning.clone()),
            ),
            tokio::spawn(heartbeat.run(planning.clone())),
        ];

        workers.run(shutdown, config.shutdown_grace).await;
        planning.cancel();
        for task in background {
            let _ = task.await;
        }
        electing.cancel();
        let _ = elector_task.await;
    }
}
