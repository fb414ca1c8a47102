//! `redcron next`: what scripts read.

use crate::util::redcron;

#[test]
fn prints_one_rfc3339_time_per_line_and_nothing_else() {
    let out = redcron(&[
        "next",
        "0 * * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2026-11-01T00:00:00-04:00",
        "-n",
        "4",
    ])
    .success();
    assert_eq!(
        out,
        "2026-11-01T01:00:00-04:00\n2026-11-01T01:00:00-05:00\n\
         2026-11-01T02:00:00-05:00\n2026-11-01T03:00:00-05:00\n"
    );
}

#[test]
fn spring_forward_golden_case_through_the_cli() {
    let out = redcron(&[
        "next",
        "30 1-3 * * *",
        "--tz",
        "America/New_York",
        "--after",
        "2026-03-08T00:00:00-05:00",
        "-n",
        "3",
    ])
    .success();
    assert_eq!(
        out,
        "2026-03-08T01:30:00-05:00\n2026-03-08T03:00:00-04:00\n2026-03-08T03:30:00-04:00\n"
    );
}

#[test]
fn defaults_to_utc_five_fires_after_now() {
    let out = redcron(&["next", "@every 10s"]).success();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 5, "{out}");
    let first = chrono::DateTime::parse_from_rfc3339(lines[0]).expect("RFC 3339");
    assert_eq!(first.offset().local_minus_utc(), 0);
    assert_eq!(first.timestamp() % 10, 0);
    assert!(first > chrono::Utc::now() - chrono::Duration::seconds(10));
}

#[test]
fn a_declared_job_uses_its_own_zone() {
    let out = redcron(&[
        "next",
        "--job",
        "morning-digest",
        "--after",
        "2026-03-27T00:00:00Z",
        "-n",
        "2",
    ])
    .success();
    // Paris moves to summer time on Sunday 2026-03-29.
    assert_eq!(
        out,
        "2026-03-27T08:30:00+01:00\n2026-03-30T08:30:00+02:00\n"
    );
}

#[test]
fn bad_input_is_a_clear_error_with_exit_code_2() {
    let cases: [(&[&str], &str); 6] = [
        (
            &["next", "* * 32 * *"],
            "bad expression: day-of-month field \"32\"",
        ),
        (
            &["next", "@daily", "--tz", "Mars/Base"],
            "unknown time zone \"Mars/Base\"",
        ),
        (
            &["next", "@daily", "--after", "yesterday"],
            "--after \"yesterday\" is not an RFC 3339 time",
        ),
        (&["next", "--job", "nope"], "no job \"nope\" in schedules"),
        (
            &["next", "--job", "welcome-email"],
            "job \"welcome-email\" has no schedule",
        ),
        (&["next"], "required arguments were not provided"),
    ];
    for (args, expected) in cases {
        let errors = redcron(args).failure(2);
        assert!(errors.contains(expected), "{args:?}: {errors}");
    }
    // A disabled job's fires would never happen: none are listed.
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(
        dir.path().join("off.toml"),
        "[jobs.off]\nschedule = \"*/2 * * * * *\"\ncommand = \"true\"\nenabled = false\n",
    )
    .expect("write");
    let schedules = dir.path().display().to_string();
    let errors = redcron(&["next", "--job", "off", "--schedules", &schedules]).failure(2);
    assert!(
        errors.contains("job \"off\" is disabled (enabled = false): it does not fire"),
        "{errors}"
    );
}
