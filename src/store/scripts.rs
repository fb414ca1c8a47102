//! The Lua scripts, one per atomic operation, embedded at compile time.
//!
//! Each script is `lua/include/common.lua` (shared helpers), `lua/include/slots.lua` (a job's
//! slots, and a fire judged missed as it would start) and `lua/include/workflows.lua` (what
//! ending a workflow step does) followed by the script's own file, whose flags line, if
//! it has one, goes first.
//! `redis::Script` invokes by SHA and loads the source on NOSCRIPT, so a Redis restart or a
//! failover to a replica without the script cache costs one extra round trip, not an error.

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($name:ident, $file:literal) => {
        #[doc = concat!("`lua/", $file, "`: see its header for KEYS, ARGV and the reply.")]
        pub static $name: LazyLock<Script> =
            LazyLock::new(|| Script::new(&source(include_str!(concat!("../../lua/", $file)))));
    };
}

/// A script's whole source: the helpers, then the script. A script's flags line (`#!lua
/// flags=...`) goes first, the one place Redis reads it: a flagged script is refused whole,
/// before it runs, by a Redis out of memory, unless its flags allow it (`allow-oom`), instead of
/// failing at its first write that needs memory after the writes before it stood.
fn source(script: &str) -> String {
    const HELPERS: &str = concat!(
        include_str!("../../lua/include/common.lua"),
        "\n",
        include_str!("../../lua/include/slots.lua"),
        "\n",
        include_str!("../../lua/include/workflows.lua"),
    );
    match script.split_once('\n') {
        Some((flags, body)) if flags.starts_with("#!") => format!("{flags}\n{HELPERS}\n{body}"),
        _ => format!("{HELPERS}\n{script}"),
    }
}

script!(ACQUIRE_LEADER, "acquire_leader.lua");
script!(RENEW_LEADER, "renew_leader.lua");
script!(RELEASE_LEADER, "release_leader.lua");
script!(PLAN_FIRES, "plan_fires.lua");
script!(UNPLAN_JOB, "unplan_job.lua");
script!(PROMOTE_DUE, "promote_due.lua");
script!(CLAIM_RUNS, "claim_runs.lua");
script!(EXTEND_LEASE, "extend_lease.lua");
script!(START_CLAIMED_RUNS, "start_claimed_runs.lua");
script!(TAKE_JOB_SLOT, "take_job_slot.lua");
script!(ACK_RUNS, "ack_runs.lua");
script!(FAIL_RUN, "fail_run.lua");
script!(PUBLISH_LIVE_OUTPUT, "publish_live_output.lua");
script!(LIST_OWNED_RUNS, "list_owned_runs.lua");
script!(BURY_UNDECLARED_RUNS, "bury_undeclared_runs.lua");
script!(REQUEUE_STRAY_RUNS, "requeue_stray_runs.lua");
script!(ENQUEUE_RUNS, "enqueue_runs.lua");
script!(TRIGGER_FIRE, "trigger_fire.lua");
script!(REDRIVE_RUN, "redrive_run.lua");
script!(SET_PAUSED, "set_paused.lua");
script!(PURGE_DEAD, "purge_dead.lua");
script!(FREE_EXPIRED_SLOTS, "free_expired_slots.lua");
script!(EXPIRE_DAMAGED_KEYS, "expire_damaged_keys.lua");
script!(DROP_DAMAGED_LEASES, "drop_damaged_leases.lua");
script!(MOVE_READY_RUNS, "move_ready_runs.lua");
script!(SKIP_STRANDED_RUNS, "skip_stranded_runs.lua");
script!(START_WORKFLOW, "start_workflow.lua");
script!(RETRY_WORKFLOW, "retry_workflow.lua");
script!(SETTLE_WORKFLOWS, "settle_workflows.lua");
script!(
    FORGET_DECLARED_DEFINITIONS,
    "forget_declared_definitions.lua"
);
script!(FORGET_EMPTY_QUEUES, "forget_empty_queues.lua");
script!(TAKE_NOTICES, "take_notices.lua");
script!(SETTLE_NOTICE, "settle_notice.lua");
script!(PROBE_WRITES, "probe_writes.lua");
script!(RANGE_AFTER, "range_after.lua");
script!(TAKE_ARCHIVE_PART, "take_archive_part.lua");
script!(ACK_ARCHIVED, "ack_archived.lua");
