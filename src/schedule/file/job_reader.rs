//! Reading one `[jobs.<name>]` table into a [`Job`], and the `[defaults]` its file gives every
//! job: each field typed and checked, then the checks across fields, every problem at its place.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::Spanned;

use super::check_name;
use super::diagnostics::{Diagnostic, FileContext};
use super::table::{RawTable, Table, duration, schedule, typed, zone};
use crate::schedule::job::{
    DEFAULT_BACKOFF, DEFAULT_MAX_BACKOFF, Delivery, Job, Misfire, Output, Overlap, Priority, Source,
};
use crate::schedule::notice::{DEFAULT_LATE_AFTER, Event, Notices, Target};
use crate::schedule::selector::{Reach, Selector};
use crate::schedule::{limits, run_as};

/// The fields a job table may have, for the unknown-field message.
const FIELDS: [&str; 26] = [
    "schedule",
    "timezone",
    "command",
    "workdir",
    "env",
    "priority",
    "queue",
    "timeout",
    "retries",
    "backoff",
    "max_backoff",
    "overlap",
    "max_concurrency",
    "misfire",
    "starting_deadline",
    "jitter",
    "delivery",
    "enabled",
    "user",
    "group",
    "output",
    "notify",
    "notify_on",
    "late_after",
    "where",
    "on",
];

/// The fields `[defaults]` may not give: each job has its own.
const OWN_FIELDS: [&str; 2] = ["schedule", "command"];

/// Checks `[defaults]`: every field one a job may have, and none a job must give itself.
///
/// # Errors
/// Each field that cannot be a default, at the field: such defaults are given to no job.
pub(super) fn read_defaults(
    file: &FileContext<'_>,
    defaults: RawTable,
) -> Result<RawTable, Vec<Diagnostic>> {
    let mut diagnostics = Vec::new();
    for field in defaults.keys() {
        let message = if OWN_FIELDS.contains(&field.get_ref().as_str()) {
            "each job has its own: it cannot be a default".to_owned()
        } else if !FIELDS.contains(&field.get_ref().as_str()) {
            format!("unknown field: expected one of {}", FIELDS.join(", "))
        } else {
            continue;
        };
        diagnostics.push(file.diagnostic(
            Some(field.span().start),
            None,
            Some(&format!("defaults.{}", field.get_ref())),
            message,
        ));
    }
    if diagnostics.is_empty() {
        Ok(defaults)
    } else {
        Err(diagnostics)
    }
}

/// Reads one job table, given the file's `[defaults]`.
///
/// # Errors
/// Every problem found, each at its field (or at `[defaults]`, for a field taken from there).
pub(super) fn read_job(
    file: &FileContext<'_>,
    name: &Spanned<String>,
    fields: RawTable,
    defaults: Option<&RawTable>,
) -> Result<Job, Vec<Diagnostic>> {
    let mut table = Table::job(file, name, fields, defaults);
    let name = table.name().get_ref().clone();
    if let Err(reason) = check_name(&name) {
        table.report(table.at(), None, format!("bad job name: {reason}"));
    }
    let schedule = table.take("schedule", schedule);
    let timezone = table.take("timezone", zone);
    let command_offset = table.offset_of("command");
    let command = table.take("command", |value| {
        let command = typed::<String>(value)?;
        if command.trim().is_empty() {
            return Err("the command is empty".to_owned());
        }
        limits::check_command(&command)?;
        Ok(command)
    });
    let workdir = table.take("workdir", |value| {
        let workdir = typed::<String>(value)?;
        if workdir.is_empty() {
            return Err(
                "the directory is empty: leave the field out to use the replica's".to_owned(),
            );
        }
        let workdir = PathBuf::from(workdir);
        limits::check_workdir(&workdir)?;
        Ok(workdir)
    });
    let env = table.take("env", |value| {
        let env = typed::<BTreeMap<String, String>>(value)?;
        match env.keys().find(|key| check_env_name(key).is_err()) {
            Some(key) => Err(format!(
                "\"{key}\" is not a variable name: expected letters, digits and _, not \
                 starting with a digit"
            )),
            None => limits::check_env(&env).map(|()| env),
        }
    });
    let priority = table.take("priority", typed::<Priority>);
    let queue_offset = table.offset_of("queue");
    let queue = table.take("queue", |value| {
        let queue = typed::<String>(value)?;
        check_name(&queue).map(|()| queue)
    });
    let timeout = table.take("timeout", |value| {
        let timeout = duration(value)?;
        if timeout.is_zero() {
            return Err("a timeout of 0 would kill every run at once".to_owned());
        }
        Ok(timeout)
    });
    let retries = table.take("retries", typed::<u32>);
    let backoff_offset = table.offset_of("backoff");
    let backoff = table.take("backoff", duration);
    let max_backoff = table.take("max_backoff", duration);
    let overlap_offset = table.offset_of("overlap");
    let overlap = table.take("overlap", typed::<Overlap>);
    let max_concurrency_offset = table.offset_of("max_concurrency");
    let max_concurrency = table.take("max_concurrency", |value| {
        let limit = typed::<u32>(value)?;
        if limit == 0 {
            return Err(
                "a max_concurrency of 0 would never run the job: expected 1 or more".to_owned(),
            );
        }
        Ok(limit)
    });
    let misfire = table.take("misfire", typed::<Misfire>);
    let starting_deadline = table.take("starting_deadline", duration);
    let jitter = table.take("jitter", duration);
    let delivery = table.take("delivery", typed::<Delivery>);
    let enabled = table.take("enabled", typed::<bool>);
    let user_offset = table.offset_of("user");
    let user = table.take("user", |value| {
        let user = typed::<String>(value)?;
        run_as::check_user(&user).map(|()| user)
    });
    let group_offset = table.offset_of("group");
    let group = table.take("group", |value| {
        let group = typed::<String>(value)?;
        run_as::check_group(&group).map(|()| group)
    });
    let job_name = table.name().get_ref().clone();
    let output = table.take("output", |value| {
        let output = Output::parse(&typed::<String>(value)?)?;
        // A directory cannot be appended to: said here rather than at every run.
        if let Output::File(template) = &output {
            let path = template.replace("{job}", &job_name);
            if Path::new(&path).is_dir() {
                return Err(format!("{path} is a directory: name a file in it"));
            }
        }
        Ok(output)
    });
    let notify_offset = table.offset_of("notify");
    let targets = table.take("notify", |value| {
        let written = typed::<Vec<String>>(value)?;
        let mut targets: Vec<Target> = Vec::with_capacity(written.len());
        for text in &written {
            let target = Target::parse(text)?;
            if targets.contains(&target) {
                return Err(format!("\"{text}\" is named twice: it would be told twice"));
            }
            targets.push(target);
        }
        Ok(targets)
    });
    let notify_on_offset = table.offset_of("notify_on");
    let notify_on = table.take("notify_on", |value| {
        let mut events = Vec::new();
        for name in typed::<Vec<String>>(value)? {
            let event = Event::parse(&name).ok_or_else(|| {
                let names: Vec<_> = Event::ALL.iter().map(|event| event.as_str()).collect();
                format!(
                    "\"{name}\" is not an outcome: expected {}",
                    names.join(", ")
                )
            })?;
            events.push(event);
        }
        events.sort_unstable();
        events.dedup();
        Ok(events)
    });
    let where_offset = table.offset_of("where");
    let selector = table.take("where", |value| {
        Selector::parse(&typed::<Vec<String>>(value)?)
    });
    let on_offset = table.offset_of("on");
    let on = table.take("on", typed::<Reach>).unwrap_or_default();
    let late_after_offset = table.offset_of("late_after");
    let late_after = table.take("late_after", |value| {
        let late_after = duration(value)?;
        if late_after.is_zero() {
            return Err("0s would call every start late: expected more than 0s".to_owned());
        }
        Ok(late_after)
    });

    table.report_unknown(&FIELDS);
    let backoff = backoff.unwrap_or(DEFAULT_BACKOFF);
    let max_backoff = max_backoff.unwrap_or(DEFAULT_MAX_BACKOFF);
    if backoff > max_backoff {
        table.report(
            backoff_offset.unwrap_or(table.at()),
            Some("backoff"),
            format!(
                "{} is longer than max_backoff ({})",
                humantime::format_duration(backoff),
                humantime::format_duration(max_backoff)
            ),
        );
    }
    // A scheduled job does not overlap itself unless told to; an on-demand job is a task
    // queue, where runs of the same job are independent.
    let overlap = overlap.unwrap_or(if schedule.is_some() {
        Overlap::Forbid
    } else {
        Overlap::Allow
    });
    if overlap == Overlap::Forbid && max_concurrency.is_some_and(|limit| limit > 1) {
        table.report(
            max_concurrency_offset
                .or(overlap_offset)
                .unwrap_or(table.at()),
            Some("max_concurrency"),
            "more than 1 needs overlap = \"allow\" (forbid runs one at a time)".to_owned(),
        );
    }
    // A job without a schedule is an on-demand job: its runs are ad-hoc runs, which an
    // every-replica job does not take (each would run once, on any replica).
    if on == Reach::Every && schedule.is_none() && !table.has_reported("schedule") {
        table.report(
            on_offset.unwrap_or(table.at()),
            Some("on"),
            "\"every\" needs a schedule: a job without one runs only as ad-hoc runs (redcron \
             enqueue), each once on any replica, and a job on every replica takes none"
                .to_owned(),
        );
    }
    // A `where` no replica matches is a job nobody runs, found out only when its fires are
    // skipped as undeclared: said here. An every-replica run waits in its replica's own
    // route, whatever the job's queue.
    if let Some(selector) = &selector {
        let queue = queue.as_deref().unwrap_or("default");
        if let Some(message) = selector.impossible() {
            table.report(where_offset.unwrap_or(table.at()), Some("where"), message);
        } else if let Some(message) = selector
            .other_queue(queue)
            .filter(|_| on == Reach::One && !table.has_reported("queue"))
        {
            // A `where` from [defaults] that a job's own queue contradicts is the job's
            // mistake, said at its queue.
            let (offset, field) = if table.inherits("where") && !table.inherits("queue") {
                (queue_offset, "queue")
            } else {
                (where_offset, "where")
            };
            table.report(offset.unwrap_or(table.at()), Some(field), message);
        }
    }
    if group.is_some() && user.is_none() && !table.has_reported("user") {
        table.report(
            group_offset.or(user_offset).unwrap_or(table.at()),
            Some("group"),
            "a group needs a user: add user = \"...\"".to_owned(),
        );
    }
    let Some(command) = command else {
        if !table.has_reported("command") {
            table.report(
                table.at(),
                Some("command"),
                "missing: every job needs a command".to_owned(),
            );
        }
        return Err(table.into_diagnostics());
    };
    // Each string fits; all of them together must too, with what the replica passes on.
    if let Err(message) =
        limits::check_exec_size(&command, env.as_ref().unwrap_or(&BTreeMap::new()))
    {
        table.report(
            command_offset.unwrap_or(table.at()),
            Some("command"),
            message,
        );
    }
    let notify = match (targets, notify_on) {
        (Some(targets), _) if targets.is_empty() => None,
        (Some(targets), on) => Some(Notices {
            targets,
            on: on.unwrap_or_else(|| vec![Event::Dead]),
            late_after: late_after.unwrap_or(DEFAULT_LATE_AFTER),
        }),
        (None, Some(_)) if !table.has_reported("notify") => {
            table.report(
                notify_on_offset.unwrap_or(table.at()),
                Some("notify_on"),
                "there is no target to notify: add notify = [\"mailto:...\"] (or a web \
                 address, or exec:COMMAND)"
                    .to_owned(),
            );
            None
        }
        (None, _) => None,
    };
    if late_after.is_some()
        && !table.inherits("late_after")
        && notify
            .as_ref()
            .is_some_and(|notices| !notices.sends(Event::Late))
    {
        table.report(
            late_after_offset.unwrap_or(table.at()),
            Some("late_after"),
            "it does nothing without \"late\" in notify_on".to_owned(),
        );
    }
    if notify.as_ref().is_some_and(|notices| notices.on.is_empty()) {
        table.report(
            notify_on_offset.or(notify_offset).unwrap_or(table.at()),
            Some("notify_on"),
            "no outcome is chosen: leave notify_on out for [\"dead\"], or name some".to_owned(),
        );
    }
    if table.has_problems() {
        return Err(table.into_diagnostics());
    }
    Ok(Job {
        source: Source {
            notify: notify_offset.map(|offset| {
                let (line, column) = file.position(offset);
                (line, column, table.inherits("notify"))
            }),
            ..file.source(table.at())
        },
        name,
        schedule,
        timezone: timezone.unwrap_or(chrono_tz::UTC),
        command,
        workdir,
        env: env.unwrap_or_default(),
        priority: priority.unwrap_or(Priority::Normal),
        queue: queue.unwrap_or_else(|| "default".to_owned()),
        timeout: timeout.unwrap_or(Duration::from_secs(3600)),
        retries: retries.unwrap_or(0),
        backoff,
        max_backoff,
        overlap,
        max_concurrency,
        misfire: misfire.unwrap_or(Misfire::RunOnce),
        starting_deadline,
        jitter: jitter.unwrap_or(Duration::ZERO),
        delivery: delivery.unwrap_or(Delivery::AtLeastOnce),
        enabled: enabled.unwrap_or(true),
        user,
        group,
        output: output.unwrap_or_default(),
        notify,
        workflow: None,
        selector: selector.unwrap_or_default(),
        on,
    })
}

fn check_env_name(name: &str) -> Result<(), ()> {
    let mut bytes = name.bytes();
    let first_ok = bytes
        .next()
        .is_some_and(|byte| byte.is_ascii_alphabetic() || byte == b'_');
    if first_ok && bytes.all(|byte| byte.is_ascii_alphanumeric() || byte == b'_') {
        Ok(())
    } else {
        Err(())
    }
}
