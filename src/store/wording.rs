//! What each store operation does, in the words its errors say it with: an operation is named
//! in the code by its function or script (`leader_id`, `trigger_fire`), which the metrics and
//! the replicas' reports of failing scripts keep, but a person reading an error is told what
//! was being read or written.

/// What `operation` was doing, for the start of its error (`reading the leader`). An operation
/// this table does not know (a command named by a caller outside the store) is shown as named.
pub(super) fn described(operation: &'static str) -> &'static str {
    match operation {
        "ack_archived" => "acknowledging the archived runs",
        "ack_runs" => "recording the runs' outcomes",
        "acquire_leader" => "taking the leadership",
        "active_runs" => "counting the active runs",
        "archive_backlog" => "reading the runs waiting for the archive",
        "archive_failures" => "reading the archive's failures",
        "archive_marked" => "reading the archive's mark",
        "bury_undeclared_runs" => "ending the runs no replica declares",
        "check_access" => "checking what Redis lets this user do",
        "claim_runs" => "claiming runs",
        "clear_archive_failure" => "clearing the archive's failure",
        "clear_namespace" => "clearing the namespace",
        "clock" => "reading Redis's clock",
        "closed_archive_days" => "reading the archive's closed days",
        "connect" => "connecting to Redis",
        "cursors" => "reading where each job's planning stands",
        "damaged_keys" => "reading the damaged records",
        "damaged_names" => "reading the damaged names",
        "dead_runs" => "reading the dead letters",
        "declarations_intact" => "checking this replica's declarations",
        "declarations_signal" => "reading the replicas' declarations",
        "declare_targets" => "recording the replicas a job runs on",
        "declared_definitions" => "reading the declared definitions",
        "definition_hashes_refused" => "reading the type of the definitions' hashes",
        "died_at" => "reading when a run died",
        "drop_damaged_leases" => "dropping damaged leases",
        "due_at" => "reading when a run is due",
        "enqueue_runs" => "enqueueing runs",
        "events_before" => "reading the runs ended",
        "expire_damaged_keys" => "giving damaged records an expiry",
        "expired_leases" => "reading the expired leases",
        "extend_lease" => "extending a run's lease",
        "fail_run" => "recording a run's failure",
        "failing_scripts" => "reading the scripts the replicas report failing",
        "forget_archive_day" => "forgetting an archived day",
        "forget_declared_definitions" => "forgetting the definitions no replica declares",
        "forget_empty_queues" => "forgetting the empty queues",
        "free_expired_slots" => "freeing the job slots past their deadline",
        "heartbeat" => "sending this replica's heartbeat",
        "index_ready_queues" => "indexing the queues with ready runs",
        "is_declared" => "reading whether the job is declared",
        "known_replicas" => "reading the replicas",
        "leader_id" => "reading the leader",
        "leased_runs_after" => "reading the active runs",
        "live_output" => "reading a run's output so far",
        "mark_archive" => "marking the archive",
        "move_ready_runs" => "moving ready runs to a fallback queue",
        "newest_dead_runs" => "reading the newest dead runs",
        "now_ms" => "reading Redis's clock",
        "overview" => "reading the namespace's overview",
        "owed_notices" => "counting the notices owed",
        "owned_runs" => "reading this replica's runs",
        "plan_fires" => "planning fires",
        "probe_writes" => "checking that Redis takes writes",
        "promote_due" => "promoting the runs due",
        "publish_definitions" => "publishing the definitions",
        "publish_live_output" => "publishing a run's output so far",
        "publish_replica_jobs" => "publishing this replica's declarations",
        "published_definitions" => "reading the published definitions",
        "published_hashes" => "reading the published definitions' hashes",
        "published_names" => "reading the published definitions' names",
        "purge_dead" => "purging dead runs",
        "queue_servers" => "reading which replicas serve each queue",
        "range_after" => "reading the runs due",
        "ready_lists" => "reading the lists of ready runs",
        "ready_queues" => "reading the queues with ready runs",
        "ready_waiter" => "waiting for ready runs",
        "recent_events" => "reading the recent events",
        "record_archive_failure" => "recording the archive's failure",
        "record_page" => "reading a page of the namespace's keys",
        "redrive_run" => "retrying a dead run",
        "release_leader" => "giving up the leadership",
        "remove_damaged_names" => "removing the damaged names",
        "renew_leader" => "renewing the leadership",
        "replace_definition_hashes" => "replacing the definitions' hashes",
        "replica_declarations" => "reading the replicas' declarations",
        "replica_host" => "reading a replica's host",
        "replica_instance" => "reading a replica's process",
        "requeue_stray_runs" => "putting back stray runs",
        "retry_workflow" => "retrying a workflow",
        "run_counts" => "counting the runs",
        "run_fields" => "reading a run",
        "runs_fields" => "reading runs",
        "set_hold" => "holding or releasing the namespace",
        "set_paused" => "pausing or resuming a job",
        "settle_notice" => "settling a notice",
        "settle_workflows" => "settling the workflows",
        "skip_stranded_runs" => "skipping the runs of replicas gone",
        "start_claimed_runs" => "starting runs claimed ahead",
        "start_workflow" => "starting a workflow",
        "take_archive_part" => "taking runs for the archive",
        "take_job_slot" => "taking a slot of a job",
        "take_notices" => "taking notices to send",
        "trigger_fire" => "triggering a job",
        "unplan_job" => "unplanning a job",
        "wait" => "waiting for ready runs",
        "waiting_runs_after" => "reading the ready runs",
        "wake_promoter" => "waking the promoters",
        "withdraw_replica" => "withdrawing this replica's declarations",
        "withdrawn_declarations" => "reading the declarations of stopped replicas",
        "workflow" => "reading a workflow",
        "workflows" => "reading the workflows",
        "write_definitions" => "writing the published definitions",
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::super::StoreError;

    #[test]
    fn errors_say_what_was_being_done_not_the_function_that_did_it() {
        let held = StoreError::Held {
            operation: "trigger_fire",
        };
        assert_eq!(
            held.to_string(),
            "triggering a job: the namespace is held (redcron hold) until it is released"
        );
        let reply = StoreError::Reply {
            operation: "overview",
            detail: "reply too short".to_owned(),
        };
        assert_eq!(
            reply.to_string(),
            "reading the namespace's overview: Redis answered what redcron does not write: \
             reply too short"
        );
    }
}
