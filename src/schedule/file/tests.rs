use std::path::PathBuf;
use std::time::Duration;

use super::*;
use crate::schedule::job::{Delivery, Misfire, Output, Overlap, Priority};
use crate::schedule::notice::{DEFAULT_LATE_AFTER, Event, Target};
use crate::schedule::{Schedule, queues};

fn parse(text: &str) -> Result<Vec<Job>, Vec<String>> {
    parse_file(Path::new("jobs.toml"), text)
        .map_err(|found| found.iter().map(ToString::to_string).collect())
}

fn errors(text: &str) -> Vec<String> {
    parse(text).expect_err("the file must be refused")
}

#[test]
fn a_minimal_job_gets_every_default() {
    let jobs = parse("[jobs.cleanup]\ncommand = \"true\"\n").expect("valid");
    let job = &jobs[0];
    assert_eq!(job.name, "cleanup");
    assert_eq!(job.schedule, None);
    assert_eq!(job.timezone, chrono_tz::UTC);
    assert_eq!(job.priority, Priority::Normal);
    assert_eq!(job.queue, "default");
    assert_eq!(job.timeout, Duration::from_secs(3600));
    assert_eq!(job.retries, 0);
    assert_eq!(job.backoff, Duration::from_secs(30));
    assert_eq!(job.max_backoff, Duration::from_secs(3600));
    assert_eq!(
        job.overlap,
        Overlap::Allow,
        "an on-demand job is a task queue"
    );
    assert_eq!(job.max_concurrency, None);
    assert_eq!(job.misfire, Misfire::RunOnce);
    assert_eq!(job.starting_deadline, None);
    assert_eq!(job.jitter, Duration::ZERO);
    assert_eq!(job.delivery, Delivery::AtLeastOnce);
    assert!(job.enabled);
    assert_eq!(job.source.line, 1);
}

#[test]
fn a_scheduled_job_forbids_overlap_and_a_limit_above_one_needs_allow() {
    let jobs = parse(
        "[jobs.tick]\nschedule = \"@hourly\"\ncommand = \"true\"\n\
         [jobs.resize]\ncommand = \"true\"\nmax_concurrency = 4\n",
    )
    .expect("valid");
    assert_eq!(jobs[0].overlap, Overlap::Forbid);
    assert_eq!(
        (jobs[1].overlap, jobs[1].max_concurrency),
        (Overlap::Allow, Some(4))
    );
    assert_eq!(
        errors(
            "[jobs.tick]\nschedule = \"@hourly\"\ncommand = \"true\"\nmax_concurrency = 2\n\
             [jobs.none]\ncommand = \"true\"\nmax_concurrency = 0\n"
        ),
        [
            "jobs.toml:4:19: job \"tick\", field \"max_concurrency\": more than 1 needs \
             overlap = \"allow\" (forbid runs one at a time)",
            "jobs.toml:7:19: job \"none\", field \"max_concurrency\": a max_concurrency of 0 \
             would never run the job: expected 1 or more",
        ]
    );
}

#[test]
fn every_field_is_read() {
    let text = r#"
[jobs.report]
schedule = "0 * * * *"
timezone = "Europe/Paris"
command = "make report"
workdir = "/srv/reports"
env = { LANG = "C", REPORT_DIR = "/tmp" }
priority = "high"
queue = "reports"
timeout = "15m"
retries = 3
backoff = "10s"
max_backoff = "5m"
overlap = "allow"
misfire = "run-all"
starting_deadline = "2m"
jitter = "5s"
delivery = "at-most-once"
enabled = false
"#;
    let job = parse(text).expect("valid").remove(0);
    assert_eq!(
        job.schedule.as_ref().map(Schedule::as_str),
        Some("0 * * * *")
    );
    assert_eq!(job.timezone, chrono_tz::Europe::Paris);
    assert_eq!(job.workdir, Some(PathBuf::from("/srv/reports")));
    assert_eq!(job.env.get("REPORT_DIR").map(String::as_str), Some("/tmp"));
    assert_eq!(job.priority, Priority::High);
    assert_eq!(job.queue, "reports");
    assert_eq!(job.timeout, Duration::from_secs(900));
    assert_eq!(job.retries, 3);
    assert_eq!(job.backoff, Duration::from_secs(10));
    assert_eq!(job.max_backoff, Duration::from_secs(300));
    assert_eq!(job.overlap, Overlap::Allow);
    assert_eq!(job.misfire, Misfire::RunAll);
    assert_eq!(job.starting_deadline, Some(Duration::from_secs(120)));
    assert_eq!(job.jitter, Duration::from_secs(5));
    assert_eq!(job.delivery, Delivery::AtMostOnce);
    assert!(!job.enabled);
    assert_eq!(job.source.line, 2);
}

#[test]
fn every_bad_field_is_reported_with_line_column_and_field() {
    let text = "\
[jobs.one]
command = \"true\"
schedule = \"61 * * * *\"
timezone = \"Mars/Olympus\"
retries = -1
priorty = \"high\"

[jobs.two]
schedule = \"@daily\"
timeout = \"soon\"
priority = \"urgent\"
env = { 1BAD = \"x\" }
";
    assert_eq!(
        errors(text),
        [
            "jobs.toml:3:12: job \"one\", field \"schedule\": minute field \"61\": 61 is out \
             of range: expected a number 0-59",
            "jobs.toml:4:12: job \"one\", field \"timezone\": unknown time zone \
             \"Mars/Olympus\": expected an IANA name such as Europe/Paris, America/New_York \
             or UTC",
            "jobs.toml:5:11: job \"one\", field \"retries\": invalid value: integer `-1`, \
             expected u32",
            "jobs.toml:6:1: job \"one\", field \"priorty\": unknown field: expected one of \
             schedule, timezone, command, workdir, env, priority, queue, timeout, retries, \
             backoff, max_backoff, overlap, max_concurrency, misfire, starting_deadline, jitter, delivery, \
             enabled, user, group, output, notify, notify_on, late_after, where, on",
            "jobs.toml:8:7: job \"two\", field \"command\": missing: every job needs a command",
            "jobs.toml:10:11: job \"two\", field \"timeout\": \"soon\" is not a duration \
             (expected number at 0): expected a string like \"30s\", \"15m\" or \"2h\"",
            "jobs.toml:11:12: job \"two\", field \"priority\": unknown variant `urgent`, \
             expected one of `high`, `normal`, `low`",
            "jobs.toml:12:7: job \"two\", field \"env\": \"1BAD\" is not a variable name: \
             expected letters, digits and _, not starting with a digit",
        ]
    );
}

#[test]
fn wrong_types_name_what_was_expected() {
    let found = errors("[jobs.x]\ncommand = 3\nenabled = \"yes\"\n");
    assert_eq!(
        found,
        [
            "jobs.toml:2:11: job \"x\", field \"command\": invalid type: integer `3`, \
             expected a string",
            "jobs.toml:3:11: job \"x\", field \"enabled\": invalid type: string \"yes\", \
             expected a boolean",
        ]
    );
}

#[test]
fn names_and_structure_are_checked() {
    let found = errors("[jobs.Nightly]\ncommand = \"true\"\n");
    assert!(
        found[0].starts_with("jobs.toml:1:7: job \"Nightly\": bad job name"),
        "{found:?}"
    );
    let found = errors("[job.x]\ncommand = \"true\"\n");
    assert!(
        found[0].contains("unknown field `job`, expected one of `defaults`, `jobs`, `queues`"),
        "{found:?}"
    );
    assert!(found[0].starts_with("jobs.toml:1:2:"), "{found:?}");
    let found = errors("[jobs.x]\ncommand = \"true\"\nschedule = \n");
    assert!(found[0].starts_with("jobs.toml:3:"), "{found:?}");
    let found = errors("[jobs.x]\ncommand = \"true\"\nbackoff = \"2h\"\n");
    assert_eq!(
        found,
        ["jobs.toml:3:11: job \"x\", field \"backoff\": 2h is longer than max_backoff (1h)"]
    );
    let found = errors("[jobs.x]\ncommand = \"  \"\ntimeout = \"0s\"\n");
    assert_eq!(found.len(), 2, "{found:?}");
}

#[test]
fn crlf_files_and_comments_are_read() {
    let jobs = parse("# nightly\r\n[jobs.x]\r\ncommand = \"true\" # inline\r\n").expect("valid");
    assert_eq!(jobs[0].source.line, 2);
}

#[test]
fn content_hash_ignores_place_and_spelling_but_not_meaning() {
    let a = parse("[jobs.x]\ncommand = \"true\"\ntimeout = \"60m\"\n").expect("valid");
    let b = parse("\n\n[jobs.x]\ntimeout = \"1h\"\ncommand = \"true\"\n").expect("valid");
    let c = parse("[jobs.x]\ncommand = \"true\"\ntimeout = \"59m\"\n").expect("valid");
    assert_eq!(a[0].content_hash(), b[0].content_hash());
    assert_ne!(a[0].content_hash(), c[0].content_hash());
    assert_eq!(a[0].content_hash().len(), 64);
}

#[test]
fn a_directory_loads_whole_or_reports_every_file() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("a.toml"), "[jobs.x]\ncommand = \"true\"\n").expect("write");
    std::fs::write(dir.path().join("notes.txt"), "not a schedule").expect("write");
    assert_eq!(load_dir(dir.path()).expect("valid").len(), 1);

    std::fs::write(dir.path().join("b.toml"), "[jobs.x]\ncommand = \"false\"\n").expect("write");
    std::fs::write(dir.path().join("c.toml"), "[jobs.y]\nschedule = \"* *\"\n").expect("write");
    std::fs::write(dir.path().join("d.toml"), b"[jobs.z]\ncommand = \"\xff\"\n").expect("write");
    let error = load_dir(dir.path()).expect_err("invalid");
    let messages: Vec<String> = error.diagnostics.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 4, "{messages:#?}");
    assert!(messages[0].contains("c.toml:1:7: job \"y\", field \"command\": missing"));
    assert!(messages[1].contains("c.toml:2:12: job \"y\", field \"schedule\": expected 5"));
    assert!(messages[2].contains("d.toml:2:12: the file is not valid UTF-8"));
    assert!(messages[3].contains("b.toml:1:7: job \"x\": declared twice: first at"));
    assert!(
        messages[3].ends_with("a.toml:1; job and workflow names must be unique across all files")
    );

    let missing = load_dir(&dir.path().join("nope")).expect_err("missing");
    assert!(
        missing
            .to_string()
            .contains("cannot read the schedule directory")
    );
}

proptest::proptest! {
    #[test]
    fn parser_never_panics_on_arbitrary_text(text in "\\PC{0,200}") {
        let _ = parse_file(Path::new("fuzz.toml"), &text);
    }

    #[test]
    fn parser_never_panics_on_job_like_text(
        text in "(\\[jobs\\.[a-z]{1,3}\\]\n|[a-z_]{1,8} = (\"[ -~]{0,12}\"|[0-9-]{1,3}|true|\\{\\})\n){0,8}"
    ) {
        let _ = parse_file(Path::new("fuzz.toml"), &text);
    }
}

#[test]
fn defaults_apply_to_every_job_of_the_file_unless_it_sets_its_own() {
    let jobs = parse(
        "[defaults]\nnotify = [\"exec:cat\"]\nretries = 2\n\n\
         [jobs.a]\ncommand = \"true\"\n\n\
         [jobs.b]\ncommand = \"true\"\nretries = 0\nnotify = []\n\n\
         [jobs.c]\ncommand = \"true\"\nnotify_on = [\"late\", \"dead\", \"late\"]\n\
         late_after = \"5m\"\n",
    )
    .expect("valid");
    let notify = |index: usize| jobs[index].notify.clone();
    assert_eq!(jobs[0].retries, 2);
    let a = notify(0).expect("a has the file's notices");
    assert_eq!(a.targets, [Target::Exec("cat".into())]);
    assert_eq!(a.on, [Event::Dead], "dead only, unless told");
    assert_eq!(a.late_after, DEFAULT_LATE_AFTER);
    assert_eq!(jobs[1].retries, 0);
    assert_eq!(notify(1), None, "notify = [] turns the file's notices off");
    let c = notify(2).expect("c has notices");
    assert_eq!(c.on, [Event::Dead, Event::Late], "sorted, each once");
    assert_eq!(c.late_after, Duration::from_secs(300));
}

#[test]
fn bad_notices_and_defaults_are_reported_where_they_are_written() {
    assert_eq!(
        errors("[defaults]\nschedule = \"@daily\"\n\n[jobs.a]\ncommand = \"true\"\n"),
        [
            "jobs.toml:2:1: field \"defaults.schedule\": each job has its own: it cannot be a default"
        ]
    );
    assert_eq!(
        errors(
            "[jobs.a]\ncommand = \"true\"\nnotify = [\"ftp://x\"]\n\n\
             [jobs.b]\ncommand = \"true\"\nnotify = [\"exec:cat\"]\nnotify_on = [\"boom\"]\n\n\
             [jobs.c]\ncommand = \"true\"\nnotify_on = [\"dead\"]\n\n\
             [jobs.d]\ncommand = \"true\"\nnotify = [\"mailto:-oQ/tmp\"]\n"
        ),
        [
            "jobs.toml:3:10: job \"a\", field \"notify\": \"ftp://x\": expected \
             \"mailto:ADDRESS\", \"https://...\", \"http://...\" or \"exec:COMMAND\"",
            "jobs.toml:8:13: job \"b\", field \"notify_on\": \"boom\" is not an outcome: \
             expected dead, failed, recovered, skipped, late, output",
            "jobs.toml:12:13: job \"c\", field \"notify_on\": there is no target to notify: add \
             notify = [\"mailto:...\"] (or a web address, or exec:COMMAND)",
            "jobs.toml:16:10: job \"d\", field \"notify\": \"-oQ/tmp\" is not a mail address: \
             expected user@host (or a local user name)",
        ]
    );
}

#[test]
fn an_output_file_is_a_file_named_with_job_only() {
    let dir = tempfile::tempdir().expect("temp dir");
    let found = errors(&format!(
        "[jobs.a]\ncommand = \"true\"\noutput = \"file:/var/log/{{name}}.log\"\n\n\
         [jobs.b]\ncommand = \"true\"\noutput = \"file:{}\"\n",
        dir.path().display()
    ));
    assert_eq!(
        found,
        [
            "jobs.toml:3:10: job \"a\", field \"output\": \"{name}\" is not replaced in output \
             paths: only {job}, the job's name, is"
                .to_owned(),
            format!(
                "jobs.toml:7:10: job \"b\", field \"output\": {} is a directory: name a file in it",
                dir.path().display()
            ),
        ]
    );
    let jobs = parse(&format!(
        "[jobs.c]\ncommand = \"true\"\noutput = \"file:{}/{{job}}.log\"\n",
        dir.path().display()
    ))
    .expect("a file in a directory is fine");
    assert!(matches!(&jobs[0].output, Output::File(path) if path.ends_with("/{job}.log")));
}

#[test]
fn notices_that_would_repeat_or_do_nothing_are_refused() {
    assert_eq!(
        errors(
            "[defaults]\nretries = -1\n\n[jobs.a]\ncommand = \"true\"\n\n\
             [jobs.b]\ncommand = \"true\"\nnotify = [\"exec:x\", \"exec:x\"]\n\n\
             [jobs.c]\ncommand = \"true\"\nnotify = [\"exec:x\"]\nlate_after = \"5m\"\n\n\
             [jobs.d]\ncommand = \"true\"\nnotify = [\"exec:x\"]\nnotify_on = [\"late\"]\n\
             late_after = \"0s\"\n"
        ),
        [
            "jobs.toml:2:11: field \"defaults.retries\": invalid value: integer `-1`, expected u32",
            "jobs.toml:9:10: job \"b\", field \"notify\": \"exec:x\" is named twice: it would be \
             told twice",
            "jobs.toml:14:14: job \"c\", field \"late_after\": it does nothing without \"late\" in \
             notify_on",
            "jobs.toml:20:14: job \"d\", field \"late_after\": 0s would call every start late: \
             expected more than 0s",
        ],
        "a default's problem once, where it is written; later jobs still get the defaults"
    );
}

#[test]
fn queue_tables_load_with_their_defaults_and_their_mistakes_are_named() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("a.toml"),
        "[jobs.invoice]\ncommand = \"true\"\nqueue = \"eu-west\"\n\n\
         [queues.eu-west]\nfallback = \"default\"\nfallback_after = \"30s\"\n\n\
         [queues.us-east]\nfallback = \"default\"\n",
    )
    .expect("write");
    let loaded = load_schedule_dir(dir.path()).expect("valid");
    assert_eq!(loaded.jobs.len(), 1);
    let fallbacks: Vec<(&str, &str, Duration)> = loaded
        .queues
        .iter()
        .map(|queue| (queue.queue.as_str(), queue.fallback.as_str(), queue.after))
        .collect();
    assert_eq!(
        fallbacks,
        [
            ("eu-west", "default", Duration::from_secs(30)),
            ("us-east", "default", queues::DEFAULT_FALLBACK_AFTER),
        ]
    );
    assert_eq!(loaded.queues[0].source.line, 5);

    for (table, expected) in [
        (
            "[queues.a]\nfallback = \"a\"\n",
            "jobs.toml:2:12: field \"queues.a.fallback\": a queue cannot fall back to itself",
        ),
        (
            "[queues.a]\nfallback = \"b\"\nfallback_after = \"5s\"\n",
            "field \"queues.a.fallback_after\": \"5s\" is shorter than 10s",
        ),
        (
            "[queues.a]\nfallback = \"b\"\nfallback_after = \"soon\"\n",
            "\"soon\" is not a duration like 2m",
        ),
        ("[queues.a]\nfallback = \"B\"\n", "does not match [a-z0-9]"),
        (
            "[queues.a]\nfallback = \"b\"\nfallback_after = \"1000000y\"\n",
            "is longer than 7days",
        ),
        ("[queues.a]\nfallbak = \"b\"\n", "unknown field `fallbak`"),
        ("[queues.a]\n", "missing field `fallback`"),
    ] {
        let found = errors(table);
        assert!(
            found.iter().any(|error| error.contains(expected)),
            "{table}: {found:?}"
        );
    }

    // Across files: a queue declared twice, and fallbacks in a cycle.
    std::fs::write(
        dir.path().join("b.toml"),
        "[queues.eu-west]\nfallback = \"us-east\"\n\n[queues.default]\nfallback = \"eu-west\"\n",
    )
    .expect("write");
    let found = load_schedule_dir(dir.path())
        .expect_err("refused")
        .to_string();
    assert!(found.contains("declared twice: first at"), "{found}");
    assert!(
        found.contains("its fallbacks lead back to it (default -> eu-west -> default)"),
        "{found}"
    );
}

#[test]
fn every_problem_of_a_directory_is_listed_at_once_and_none_that_is_not_there() {
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("a.toml"),
        "[jobs.broken]\ncommand = \"true\"\npriority = \"urgent\"\n\
         [jobs.us-task]\ncommand = \"true\"\nqueue = \"us\"\n\
         [queues.eu]\nfallback = \"us\"\n\
         [workflows.unknown-step]\nsteps = [\"us-task\", \"nope\"]\n\
         [workflows.nested]\nsteps = [\"unknown-step\"]\n\
         [workflows.waits]\nsteps = [\"broken\"]\n",
    )
    .expect("write");
    let error = load_dir(dir.path()).expect_err("invalid");
    let found: Vec<String> = error.diagnostics.iter().map(ToString::to_string).collect();
    let said = |text: &str| found.iter().filter(|line| line.contains(text)).count();
    // The bad field, and the steps that name no job or a workflow, in one pass.
    assert_eq!(said("job \"broken\", field \"priority\""), 1, "{found:#?}");
    assert_eq!(
        said("step \"nope\" runs \"nope\", which is not a job"),
        1,
        "{found:#?}"
    );
    assert_eq!(
        said("step \"unknown-step\" runs \"unknown-step\", which is a workflow"),
        1,
        "{found:#?}"
    );
    // Not what the invalid job would settle, nor a fallback to the queue of a valid job.
    assert_eq!(found.len(), 3, "{found:#?}");
}
