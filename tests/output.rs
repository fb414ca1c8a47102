//! Where a run's output goes besides its kept tail (a job's `output`): the replica's log, or a
//! file that is appended to and opened again after a rotation.

use std::time::Duration;

use crate::util::scenario::Scenario;
use crate::util::wait_until;

#[test]
fn output_goes_to_the_log_or_to_a_file_that_survives_a_rotation() {
    let scenario = Scenario::new();
    let logs = scenario.dir.path().join("logs");
    std::fs::create_dir(&logs).expect("the log directory");
    scenario.write_jobs(&format!(
        "[jobs.logged]\nschedule = \"* * * * * *\"\noutput = \"log\"\n\
         command = \"echo to stdout; echo to stderr >&2\"\n\
         [jobs.filed]\nschedule = \"* * * * * *\"\n\
         output = \"file:{logs}/{{job}}.log\"\n\
         command = \"for i in 1 2 3 4 5 6; do echo line $i; sleep 0.4; done\"\n",
        logs = logs.display()
    ));
    let replica = scenario.replica("r1", &[]);
    let file = logs.join("filed.log");
    // A run is under way, its first lines written: the file is rotated under it.
    assert!(
        wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(&file).is_ok_and(|text| text.contains(" line 2"))
        }),
        "no output in {}:\n{}",
        file.display(),
        replica.log()
    );
    std::fs::rename(&file, logs.join("filed.log.1")).expect("rotate");
    assert!(
        wait_until(Duration::from_secs(10), || {
            std::fs::read_to_string(&file).is_ok_and(|text| text.contains(" line 6"))
        }),
        "the file was not opened again after the rotation:\n{}",
        replica.log()
    );
    for text in [
        std::fs::read_to_string(&file).expect("the new file"),
        std::fs::read_to_string(logs.join("filed.log.1")).expect("the rotated file"),
    ] {
        for line in text.lines() {
            let (run, rest) = line.split_once(' ').expect("run id, then the line");
            assert!(run.starts_with("filed@"), "{line}");
            assert!(rest.starts_with("line "), "{line}");
        }
    }

    let log = replica.log();
    for output in ["to stdout", "to stderr"] {
        assert!(
            log.lines().any(|line| line.contains("redcron::output")
                && line.contains(output)
                && line.contains("run=\"logged@")
                && line.contains("job=\"logged\"")),
            "{output} is not in the replica's log:\n{log}"
        );
    }
    assert!(
        !log.lines()
            .any(|line| line.contains("redcron::output") && line.contains("line 1")),
        "a job writing to a file does not write to the log"
    );
}

#[test]
fn a_relative_output_path_is_refused_with_the_file_and_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = dir.path().join("schedules");
    std::fs::create_dir(&schedules).expect("schedules");
    std::fs::write(
        schedules.join("jobs.toml"),
        "[jobs.x]\ncommand = \"true\"\noutput = \"file:logs/x.log\"\n",
    )
    .expect("write");
    let error = crate::util::redcron_in(
        dir.path(),
        &[
            "check",
            "--schedules",
            schedules.to_str().expect("a UTF-8 path"),
        ],
        "",
    )
    .failure(1);
    assert!(
        error.contains(
            "jobs.toml:3:10: job \"x\", field \"output\": \"logs/x.log\" is not an absolute path"
        ),
        "{error}"
    );
}

/// `runs show` shows what a run printed without letting it steer the operator's terminal:
/// escape sequences, a window title, the bell, NUL, carriage returns and a right-to-left
/// override are written escaped, line breaks and tabs as they are; `--json` carries the output
/// as it was.
#[test]
fn runs_show_escapes_the_control_characters_a_run_printed() {
    let scenario = Scenario::new();
    scenario.write_jobs(
        r#"[jobs.hostile]
command = "printf 'done\\n\\033[2J\\033]0;pwned\\007\\000\\r\\tend\\342\\200\\256dne\\n'"
"#,
    );
    let replica = scenario.replica("r1", &[]);
    let run = scenario.trigger("hostile");
    let show = |args: &[&str]| {
        let mut all = vec!["runs", "show", run.as_str()];
        all.extend_from_slice(args);
        crate::util::cli(&scenario.server, scenario.dir.path(), &all).success()
    };
    assert!(
        wait_until(Duration::from_secs(10), || crate::util::one_document(
            &show(&["--json"])
        )["state"]
            == "succeeded"),
        "the run did not succeed:\n{}",
        replica.log()
    );
    let document = crate::util::one_document(&show(&["--json"]));
    assert_eq!(
        document["output"], "done\n\u{1b}[2J\u{1b}]0;pwned\u{7}\0\r\tend\u{202e}dne\n",
        "--json keeps the output as it was"
    );
    let text = show(&[]);
    for raw in ['\u{1b}', '\u{7}', '\0', '\r', '\u{202e}'] {
        assert!(
            !text.contains(raw),
            "{raw:?} reached the terminal: {text:?}"
        );
    }
    assert!(
        text.contains("done\n\\u{1b}[2J\\u{1b}]0;pwned\\u{7}\\u{0}\\r\tend\\u{202e}dne\n"),
        "{text:?}"
    );
}
