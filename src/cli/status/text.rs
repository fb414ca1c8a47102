//! The status as people read it: the leader, the counts and the warnings, then the replicas,
//! the ready runs by queue and the jobs, each a table.

use std::io::Write;

use super::published::published;
use super::read::StatusRead;
use super::replicas::{labels, replica_state, served_by};
use super::warnings::{damaged_names, damaged_records, set_aside};
use super::{archive, definitions, no_jobs, paused_jobs, refused, running_by_job, undeclared};
use crate::cli::times::{ago, duration};
use crate::cli::write_table;
use crate::store::keys::route_replica;

/// Writes `read` as `status` shows it without `--json`, with `failing`, the scripts the
/// replicas report failing, below the replicas; `namespace` is named when it holds nothing.
pub(super) fn write(
    read: &StatusRead,
    failing: Option<&str>,
    namespace: &str,
    out: &mut impl Write,
) -> std::io::Result<()> {
    let StatusRead {
        overview,
        events,
        owed_notices,
        writes_refused,
        damaged,
        archive,
        redis_settings,
        ..
    } = read;
    let owed_notices = *owed_notices;
    let refused = writes_refused.is_some();
    let jobs = published(overview, None);
    let running = running_by_job(overview);
    let paused = paused_jobs(overview);

    match &overview.leader {
        Some((token, lease_ms)) => {
            let (id, epoch) = token.rsplit_once(':').unwrap_or((token, "?"));
            writeln!(
                out,
                "leader: {id} (epoch {epoch}), lease {} left",
                duration(*lease_ms)
            )?;
        }
        None => writeln!(
            out,
            "leader: none (an election is due within the lease ttl)"
        )?,
    }
    if let Some(refused) = writes_refused {
        writeln!(out, "{}", refused::paragraph(refused))?;
    }
    for setting in redis_settings {
        writeln!(out, "REDIS LOSES DATA: {setting}")?;
    }
    if let Some(left) = overview.held_for {
        writeln!(
            out,
            "held: nothing is planned, claimed or recorded for {} more (`redcron release` \
             ends it)",
            duration(i64::try_from(left.as_millis()).unwrap_or(i64::MAX))
        )?;
    }
    writeln!(
        out,
        "runs: {} due, {} active, {} dead",
        overview.counts.due, overview.counts.active, overview.counts.dead
    )?;
    if owed_notices > 0 {
        writeln!(
            out,
            "notices: {owed_notices} owed, not yet sent (being sent, or waiting to be tried \
             again: see the replicas' logs)"
        )?;
    }
    if damaged.count > 0 {
        writeln!(out, "{}", damaged_records(damaged))?;
    }
    if overview.definition_hashes_damaged {
        writeln!(out, "{}", definitions::HASHES_DAMAGED)?;
    }
    if !overview.damaged_names.is_empty() {
        writeln!(out, "{}", damaged_names(&overview.damaged_names))?;
    }
    for aside in &overview.undeclared {
        writeln!(out, "{}", set_aside(overview, aside))?;
    }
    for line in archive::lines(archive.as_ref(), overview, refused) {
        writeln!(out, "{line}")?;
    }
    // With no replica alive, one line below the replicas says so for every job at once.
    let any_alive = overview.replicas.iter().any(|replica| {
        !matches!(
            replica_state(overview, replica, refused),
            "lost" | "stopped"
        )
    });
    for job in jobs
        .iter()
        .filter(|job| any_alive && !undeclared::declared_live(overview, &job.name, refused))
    {
        writeln!(out, "{}", undeclared::warning(job))?;
    }
    writeln!(out)?;
    let replicas: Vec<Vec<String>> = overview
        .replicas
        .iter()
        .map(|replica| {
            // A lost replica's record expires with its heartbeats: what it said is gone.
            let field = |name: &str| replica.info.get(name).filter(|value| !value.is_empty());
            let shown = |name: &str| field(name).cloned().unwrap_or_else(|| "-".to_owned());
            let state = replica_state(overview, replica, refused);
            vec![
                replica.id.clone(),
                shown("host"),
                shown("version"),
                ago(overview.now_ms, replica.heartbeat_ms),
                // What a replica that no longer beats said last is not what it runs now.
                match (field("busy_workers"), field("max_workers")) {
                    (Some(busy), Some(max)) if state == "alive" => format!("{busy}/{max}"),
                    _ => "-".to_owned(),
                },
                shown("queues"),
                match labels(replica).join(" ") {
                    none if none.is_empty() => "-".to_owned(),
                    labels => labels,
                },
                state.to_owned(),
            ]
        })
        .collect();
    if replicas.is_empty() {
        writeln!(
            out,
            "no replica has sent a heartbeat in namespace \"{}\"",
            namespace
        )?;
    } else {
        write_table(
            out,
            &[
                "REPLICA",
                "HOST",
                "VERSION",
                "HEARTBEAT",
                "BUSY",
                "QUEUES",
                "LABELS",
                "STATE",
            ],
            &replicas,
        )?;
        if !refused
            && overview
                .replicas
                .iter()
                .all(|replica| replica_state(overview, replica, refused) != "alive")
        {
            writeln!(
                out,
                "no live replica: no fire is planned or run until one starts"
            )?;
        }
        if let Some(text) = failing {
            writeln!(out, "{text}")?;
        }
    }
    writeln!(out)?;
    let ready: Vec<Vec<String>> = overview
        .counts
        .ready
        .iter()
        .map(|(queue, lengths)| {
            std::iter::once(queue.clone())
                .chain(lengths.iter().map(ToString::to_string))
                .chain(std::iter::once(
                    served_by(overview, queue, refused).to_string(),
                ))
                .collect()
        })
        .collect();
    writeln!(out, "ready runs, by queue and priority:")?;
    write_table(
        out,
        &["QUEUE", "HIGH", "NORMAL", "LOW", "SERVED BY"],
        &ready,
    )?;
    for (queue, lengths) in &overview.counts.ready {
        let waiting: u64 = lengths.iter().sum();
        if waiting > 0 && !refused && served_by(overview, queue, refused) == 0 {
            if let Some(id) = route_replica(queue) {
                writeln!(
                    out,
                    "route {queue}: {waiting} ready run(s) of every-replica jobs for replica \
                     {id}, which is not alive: they wait for it, and are skipped as \
                     replica-down once it has been gone longer than the misfire threshold"
                )?;
                continue;
            }
            writeln!(
                out,
                "queue {queue}: {waiting} ready run(s) and no live replica serves it: they \
                 wait for one started with --queues {queue} (or for the queue's [queues] \
                 fallback, if it has one)"
            )?;
        }
    }
    writeln!(out)?;
    let rows: Vec<Vec<String>> = jobs
        .iter()
        .map(|job| {
            let (last, when) = events.last_outcome(&job.name).map_or_else(
                || ("-".to_owned(), "-".to_owned()),
                |(state, at)| (state.to_owned(), ago(overview.now_ms, at)),
            );
            vec![
                job.label(),
                if paused.contains(job.name.as_str()) {
                    "paused"
                } else {
                    "-"
                }
                .to_owned(),
                last,
                when,
                job.next_fires(overview.now_ms, 1)
                    .pop()
                    .unwrap_or_else(|| "-".to_owned()),
                running
                    .get(job.name.as_str())
                    .map(|runs| runs.join(" "))
                    .unwrap_or_default(),
            ]
        })
        .collect();
    if rows.is_empty() {
        return no_jobs(out, namespace);
    }
    write_table(
        out,
        &["JOB", "PAUSED", "LAST", "WHEN", "NEXT FIRE", "RUNNING"],
        &rows,
    )
}
