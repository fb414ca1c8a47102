//! The lines `status` adds above its tables for what needs someone's eye: runs set aside for a
//! replica that declares their job, damaged records, scripts the replicas report failing.

use super::replicas::declared_by;
use crate::cli::times::{elapsed, local_time};
use crate::store::{DamagedKeys, DamagedName, Overview, UndeclaredRuns};

/// One line of `status` for runs put aside: `3 runs of nightly waiting since 14:02:11 (2 min)
/// for a replica that declares it`. These runs are in no other count, so without this line
/// they would be invisible until the reaper ends them.
pub(super) fn set_aside(overview: &Overview, aside: &UndeclaredRuns) -> String {
    let mut line = format!(
        "{} run{} of {} waiting since {} ({}) for a replica that declares it",
        aside.runs,
        if aside.runs == 1 { "" } else { "s" },
        aside.job,
        local_time(overview.now_ms, aside.since_ms),
        elapsed(overview.now_ms - aside.since_ms),
    );
    // A live replica that declares the job takes them back at its next claim if it serves
    // their queue: naming it says where to look when they stay.
    let declarers = declared_by(overview, &aside.job);
    if !declarers.is_empty() {
        line.push_str(&format!(" (declared by {})", declarers.join(", ")));
    }
    line
}

/// The line that names the names that are not UTF-8 in the indexes of names, each after its
/// index, escaped.
pub(super) fn damaged_names(damaged: &[DamagedName]) -> String {
    let names: Vec<String> = damaged.iter().map(ToString::to_string).collect();
    format!(
        "DAMAGED NAMES: {}: not UTF-8 (written by something else, or damaged), they name no \
         job, replica or queue and are left out; the reapers remove them at the end of their \
         round over the keys",
        names.join(", ")
    )
}

/// The line that says how many records the reapers found damaged, naming the first few.
pub(super) fn damaged_records(damaged: &DamagedKeys) -> String {
    let more = if damaged.count > damaged.keys.len() as u64 {
        ", ..."
    } else {
        ""
    };
    format!(
        "damaged records: {} ({}{more}): run or workflow records without the fields redcron \
         writes (written by something else, or damaged); they expire after the run retention",
        damaged.count,
        damaged.keys.join(", ")
    )
}

/// What the replicas report of their scripts that fail on a damaged key, one line each, or
/// `None` when none does.
pub(super) fn failing_scripts_text(failing: &[(String, String)]) -> Option<String> {
    let lines: Vec<String> = failing
        .iter()
        .map(|(replica, report)| {
            format!(
                "replica {replica}: script {report}; nothing that script does happens until \
                 the key is repaired or deleted"
            )
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}
