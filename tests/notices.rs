//! Notices: a job's `notify` targets (mail through `sendmail`, webhooks, `exec:` commands) told
//! of the outcomes its `notify_on` names, each notice once, by the replica that recorded the
//! outcome, or by another when that one died first.

use std::path::Path;
use std::time::Duration;

use crate::util::replica::ReplicaProcess;
use crate::util::scenario::Scenario;
use crate::util::webhook::WebhookReceiver;
use crate::util::{cli, fake_sendmail, one_document, wait_until};

/// The JSON documents an `exec:` target appended to `path`, one per line.
fn documents(path: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("one JSON document a line"))
        .collect()
}

/// How many notices are owed and not sent.
fn owed(scenario: &Scenario) -> u64 {
    redis::cmd("ZCARD")
        .arg(crate::util::keys().notices())
        .query(&mut scenario.server.connection())
        .expect("ZCARD notices")
}

fn logs(replicas: &[&ReplicaProcess]) -> String {
    replicas
        .iter()
        .map(|replica| format!("log of {}:\n{}", replica.id, replica.log()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn a_dead_run_is_told_once_to_mail_a_webhook_and_a_command() {
    let scenario = Scenario::new();
    let dir = scenario.dir.path();
    let sendmail = fake_sendmail(dir);
    let bin = sendmail.parent().expect("its directory");
    let receiver = WebhookReceiver::start();
    let exec_log = dir.join("exec.jsonl");
    scenario.write_jobs(&format!(
        "[jobs.backup]\ncommand = \"echo disk full; exit 3\"\n\
         notify = [\"mailto:ops@example.com\", \"{}\", \"exec:cat >> {}\"]\n",
        receiver.url("/hooks/redcron"),
        exec_log.display()
    ));
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let replica = ReplicaProcess::start_with_env(
        "r1",
        &scenario.server.url(),
        &scenario.schedules(),
        dir,
        &[],
        &[("PATH", &path), ("REDCRON_WEBHOOK_SECRET", "s3cret")],
    );
    let run_id = scenario.trigger("backup");
    let mail_log = dir.join("mail.log");
    assert!(
        wait_until(Duration::from_secs(15), || {
            documents(&exec_log).len() == 1
                && receiver.received().len() == 1
                && std::fs::read_to_string(&mail_log).is_ok_and(|mail| mail.contains("--END--"))
        }),
        "the notice did not reach every target:\n{}",
        replica.log()
    );

    let told = &documents(&exec_log)[0];
    for (field, expected) in [
        ("event", serde_json::json!("dead")),
        ("job", serde_json::json!("backup")),
        ("run", serde_json::json!(run_id)),
        ("attempt", serde_json::json!(1)),
        ("outcome", serde_json::json!("dead")),
        ("reason", serde_json::json!("failed")),
        ("exit_code", serde_json::json!(3)),
        ("replica", serde_json::json!("r1")),
        ("kind", serde_json::json!("adhoc")),
        ("notice", serde_json::json!(format!("{run_id}:1:dead"))),
    ] {
        assert_eq!(told[field], expected, "{field} in {told}");
    }
    assert!(
        told["output"]
            .as_str()
            .is_some_and(|output| output.contains("disk full")),
        "{told}"
    );
    assert!(
        told["host"].as_str().is_some_and(|host| !host.is_empty()),
        "{told}"
    );
    assert!(told["duration_ms"].as_i64().is_some(), "{told}");
    assert!(
        told["fire_time"].is_null(),
        "an enqueued run has no fire: {told}"
    );

    let hook = &receiver.received()[0];
    assert_eq!(
        hook.json(),
        *told,
        "the webhook and the command get the same document"
    );
    assert_eq!(
        hook.header("x-redcron-notice"),
        Some(told["notice"].as_str().expect("id"))
    );
    assert_eq!(hook.header("content-type"), Some("application/json"));
    assert_eq!(
        hook.header("x-redcron-signature"),
        Some(redcron::notify::signature(b"s3cret", hook.body.as_bytes()).as_str()),
        "the body is signed with the replica's secret"
    );

    let mail = std::fs::read_to_string(&mail_log).expect("the mail");
    assert!(mail.starts_with("ARGS: -i -- ops@example.com\n"), "{mail}");
    assert!(mail.contains("To: ops@example.com\n"), "{mail}");
    assert!(
        mail.contains("Subject: redcron: backup dead (failed, exit 3) on "),
        "{mail}"
    );
    assert!(mail.contains("disk full"), "{mail}");

    // Once each, and nothing left owed: nothing is sent again.
    assert!(
        wait_until(Duration::from_secs(10), || owed(&scenario) == 0),
        "notices still owed\n{}",
        replica.log()
    );
    assert_eq!(documents(&exec_log).len(), 1);
    assert_eq!(receiver.received().len(), 1);
    let mail = std::fs::read_to_string(&mail_log).expect("the mail");
    assert_eq!(mail.matches("--END--").count(), 1, "{mail}");
    assert_eq!(owed(&scenario), 0);
    let log = replica.log();
    assert!(
        log.lines()
            .any(|line| line.contains("notice sent") && line.contains("target=\"webhook\"")),
        "{log}"
    );
}

#[test]
fn a_failing_target_is_tried_again_and_a_refusing_one_is_given_up() {
    let scenario = Scenario::new();
    let flaky = WebhookReceiver::start();
    flaky.answer(&[Some(503)]);
    let refusing = WebhookReceiver::start();
    refusing.answer(&[Some(404)]);
    let moved = WebhookReceiver::start();
    moved.answer(&[Some(302)]);
    scenario.write_jobs(&format!(
        "[jobs.report]\ncommand = \"exit 1\"\nnotify = [\"{}\", \"{}\", \"{}\"]\n",
        flaky.url("/"),
        refusing.url("/"),
        moved.url("/")
    ));
    let replica = scenario.replica("r1", &["--notice-backoff", "1s"]);
    scenario.trigger("report");
    assert!(
        wait_until(Duration::from_secs(15), || flaky.received().len() == 2),
        "the failed delivery was not tried again:\n{}",
        replica.log()
    );
    // Taken by one, given up by the others: nothing is owed, so nothing is sent again.
    assert!(
        wait_until(Duration::from_secs(10), || owed(&scenario) == 0),
        "notices still owed\n{}",
        replica.log()
    );
    let tries = flaky.received();
    assert_eq!(tries.len(), 2, "tried until it was taken, then no more");
    assert_eq!(tries[0].answered, Some(503));
    assert_eq!(tries[1].answered, Some(200));
    assert_eq!(
        tries[0].header("x-redcron-notice"),
        tries[1].header("x-redcron-notice")
    );
    assert_eq!(
        tries[0].header("x-redcron-signature"),
        None,
        "no secret, no signature"
    );
    assert_eq!(
        refusing.received().len(),
        1,
        "a receiver that refuses a notice (404) is not asked again"
    );
    assert_eq!(
        moved.received().len(),
        1,
        "a redirect is not followed, so it is not tried again either"
    );
    assert_eq!(owed(&scenario), 0);
    let log = replica.log();
    assert!(log.contains("a notice could not be sent"), "{log}");
    assert!(log.contains("a notice is given up"), "{log}");
}

#[test]
fn status_counts_the_notices_owed_until_their_targets_take_them() {
    let scenario = Scenario::new();
    scenario.write_jobs("[jobs.report]\ncommand = \"exit 1\"\nnotify = [\"exec:exit 7\"]\n");
    let replica = scenario.replica("r1", &["--notice-backoff", "1h"]);
    let status = || cli(&scenario.server, scenario.dir.path(), &["status"]).success();
    assert!(!status().contains("notices:"), "nothing owed yet");
    scenario.trigger("report");
    assert!(
        wait_until(Duration::from_secs(10), || replica
            .log()
            .contains("a notice could not be sent")),
        "{}",
        replica.log()
    );
    let log = replica.log();
    assert!(log.contains("exited with 7"), "{log}");
    assert!(
        status().contains("notices: 1 owed, not yet sent"),
        "{}",
        status()
    );
    let json =
        one_document(&cli(&scenario.server, scenario.dir.path(), &["status", "--json"]).success());
    assert_eq!(json["notices_owed"], 1, "{json}");
}

/// The sender of a notice is `kill -9`ed while its `exec:` target runs: the target dies with it
/// before it records the notice, and the other replica sends it once the lease expires.
#[test]
fn a_notice_is_sent_once_when_its_sender_is_killed_mid_send() {
    let scenario = Scenario::new();
    let dir = scenario.dir.path();
    let started = dir.join("started.jsonl");
    let ledger = dir.join("told.jsonl");
    let script = dir.join("page.sh");
    std::fs::write(
        &script,
        format!(
            "body=$(cat)\necho \"$body\" >> {started}\nsleep 4\necho \"$body\" >> {ledger}\n",
            started = started.display(),
            ledger = ledger.display()
        ),
    )
    .expect("write the target");
    scenario.write_jobs(&format!(
        "[jobs.sync]\ncommand = \"exit 1\"\nnotify = [\"exec:sh {}\"]\n",
        script.display()
    ));
    let mut replicas = scenario.replicas_with_a_leader(&["r1", "r2"], &["--run-lease", "2s"]);
    scenario.trigger("sync");
    assert!(
        wait_until(Duration::from_secs(15), || documents(&started).len() == 1),
        "the notice was not sent:\n{}",
        logs(&replicas.iter().collect::<Vec<_>>())
    );
    let first = documents(&started).remove(0);
    let sender = first["replica"]
        .as_str()
        .expect("the replica that ran it")
        .to_owned();
    let sender_index = replicas
        .iter()
        .position(|replica| replica.id == sender)
        .expect("one of ours");
    replicas[sender_index].kill9();
    assert!(
        wait_until(Duration::from_secs(20), || documents(&ledger).len() == 1),
        "the other replica did not send the notice:\n{}",
        logs(&replicas.iter().collect::<Vec<_>>())
    );
    // Recorded as sent: no replica sends it again.
    assert!(
        wait_until(Duration::from_secs(10), || owed(&scenario) == 0),
        "the notice is still owed\n{}",
        logs(&replicas.iter().collect::<Vec<_>>())
    );
    let told = documents(&ledger);
    assert_eq!(
        told.len(),
        1,
        "sent once: {told:?}\nbegun: {:?}\n{}",
        documents(&started),
        logs(&replicas.iter().collect::<Vec<_>>())
    );
    assert_eq!(told[0]["notice"], first["notice"]);
    assert_eq!(
        told[0]["replica"], first["replica"],
        "it says which replica ran the job"
    );
    assert_eq!(documents(&started).len(), 2, "begun twice, finished once");
    assert_eq!(owed(&scenario), 0);
}

#[test]
fn skipped_late_failed_recovered_and_output_notices_with_the_default_settings() {
    let scenario = Scenario::new();
    let dir = scenario.dir.path();
    let told = dir.join("told.jsonl");
    let ok = dir.join("ok");
    // Defaults for the whole file; each job chooses its outcomes.
    scenario.write_jobs(&format!(
        "[defaults]\nnotify = [\"exec:cat >> {told}\"]\n\
         [jobs.slow]\nschedule = \"* * * * * *\"\ncommand = \"sleep 2.5\"\nnotify_on = [\"skipped\"]\n\
         [jobs.flaky]\ncommand = \"test -f {ok}\"\nnotify_on = [\"failed\", \"recovered\"]\n\
         [jobs.chatty]\ncommand = \"echo hello\"\nnotify_on = [\"output\"]\n\
         [jobs.quiet]\ncommand = \"true\"\nnotify_on = [\"output\", \"failed\"]\n\
         [jobs.lateish]\ncommand = \"true\"\nnotify_on = [\"late\"]\nlate_after = \"2s\"\n",
        told = told.display(),
        ok = ok.display()
    ));
    let replica = scenario.replica("r1", &[]);
    let of = |event: &str, job: &str| {
        documents(&told)
            .into_iter()
            .filter(|document| document["event"] == event && document["job"] == job)
            .collect::<Vec<_>>()
    };

    let failed_run = scenario.trigger("flaky");
    assert!(
        wait_until(Duration::from_secs(10), || !of("failed", "flaky")
            .is_empty()),
        "{}",
        replica.log()
    );
    std::fs::write(&ok, "").expect("fix flaky");
    let recovered_run = scenario.trigger("flaky");
    scenario.trigger("chatty");
    let quiet_run = scenario.trigger("quiet");
    let ten_seconds_ago = (chrono::Utc::now() - chrono::Duration::seconds(10)).to_rfc3339();
    cli(
        &scenario.server,
        dir,
        &[
            "enqueue",
            "lateish",
            "--at",
            &ten_seconds_ago,
            "--allow-past",
        ],
    )
    .success();
    assert!(
        wait_until(Duration::from_secs(15), || {
            !of("recovered", "flaky").is_empty()
                && !of("output", "chatty").is_empty()
                && !of("late", "lateish").is_empty()
                && !of("skipped", "slow").is_empty()
        }),
        "missing notices in {:?}:\n{}",
        documents(&told),
        replica.log()
    );
    let failed = &of("failed", "flaky")[0];
    assert_eq!(failed["run"], serde_json::json!(failed_run));
    assert_eq!(failed["exit_code"], 1);
    let recovered = &of("recovered", "flaky")[0];
    assert_eq!(recovered["run"], serde_json::json!(recovered_run));
    assert_eq!(recovered["outcome"], "succeeded");
    assert_eq!(of("output", "chatty")[0]["output"], "hello\n");
    let late = &of("late", "lateish")[0];
    assert_eq!(late["outcome"], "started");
    assert!(
        late["late_ms"].as_i64().is_some_and(|ms| ms >= 9_000),
        "{late}"
    );
    let skipped = &of("skipped", "slow")[0];
    assert_eq!(skipped["reason"], "overlap");
    assert_eq!(skipped["attempt"], 0);
    assert!(skipped["fire_time"].is_string(), "{skipped}");
    // A run that printed nothing and succeeded tells nothing; a success is not a recovery
    // twice. What a success owes is written with it: once it is recorded and nothing is owed,
    // all it told has been told.
    assert!(
        wait_until(Duration::from_secs(10), || scenario
            .run_field(&quiet_run, "state")
            .as_deref()
            == Some("succeeded")
            && owed(&scenario) == 0),
        "quiet did not succeed, or notices stay owed:\n{}",
        replica.log()
    );
    assert!(of("output", "quiet").is_empty() && of("failed", "quiet").is_empty());
    assert_eq!(of("recovered", "flaky").len(), 1);
    assert_eq!(of("failed", "flaky").len(), 1);
}

#[test]
fn a_mail_target_without_sendmail_is_refused_at_load_with_the_file_and_job() {
    let dir = tempfile::tempdir().expect("temp dir");
    let schedules = dir.path().join("schedules");
    std::fs::create_dir(&schedules).expect("schedules");
    std::fs::write(
        schedules.join("mail.toml"),
        "[defaults]\nnotify = [\"mailto:ops@example.com\"]\n\n[jobs.backup]\ncommand = \"true\"\n",
    )
    .expect("write");
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_redcron"))
        .args(["check", "--schedules"])
        .arg(&schedules)
        .env("REDCRON_SENDMAIL", "/nonexistent/sendmail")
        .output()
        .expect("redcron check");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("mail.toml:2:10: field \"defaults.notify\": a mailto: target needs sendmail, and REDCRON_SENDMAIL (/nonexistent/sendmail)"),
        "{stderr}"
    );
    let sendmail = fake_sendmail(dir.path());
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_redcron"))
        .args(["check", "--schedules"])
        .arg(&schedules)
        .env("REDCRON_SENDMAIL", &sendmail)
        .output()
        .expect("redcron check");
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Every replica is down for a few seconds: the fires missed meanwhile send one `skipped`
/// notice for the job, not one each, and a paused job's send none; a fire after the outage that
/// is skipped on its own (its overlap with the late run, or a start past the threshold) tells
/// of itself.
#[test]
fn an_outage_tells_once_per_job_and_never_for_a_paused_job() {
    let scenario = Scenario::new();
    let dir = scenario.dir.path();
    let told = dir.join("told.jsonl");
    scenario.write_jobs(&format!(
        "[defaults]\nnotify = [\"exec:cat >> {told}\"]\nnotify_on = [\"skipped\"]\n\
         [jobs.tick]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n\
         [jobs.held]\nschedule = \"* * * * * *\"\ncommand = \"true\"\n",
        told = told.display()
    ));
    let flags = ["--misfire-threshold", "1s"];
    let mut replica = scenario.replica("r1", &flags);
    let ran = |job: &str| {
        let history = cli(&scenario.server, dir, &["history", job, "--json"]);
        history.code == Some(0) && history.stdout.contains("succeeded")
    };
    assert!(
        wait_until(Duration::from_secs(10), || ran("tick") && ran("held")),
        "{}",
        replica.log()
    );
    cli(&scenario.server, dir, &["pause", "held"]).success();
    assert_eq!(replica.terminate(Duration::from_secs(10)), Some(0));
    // Down past the misfire threshold (1 s): a time, as an absence is, for the fires due
    // meanwhile to be later than the threshold when the replica is back.
    std::thread::sleep(Duration::from_secs(3));
    let back_ms = scenario.redis_now_ms();
    let replica = scenario.replica("r1", &flags);
    let skipped = |job: &str| {
        documents(&told)
            .into_iter()
            .filter(|notice| notice["job"] == job && notice["event"] == "skipped")
            .collect::<Vec<_>>()
    };
    assert!(
        wait_until(Duration::from_secs(15), || !skipped("tick").is_empty()),
        "no notice of the missed fires:\n{}",
        replica.log()
    );
    // Every fire of the outage judged (a fire after it has run) and every notice sent.
    let after_ms = (scenario.redis_now_ms() / 1000 + 1) * 1000;
    assert!(
        wait_until(Duration::from_secs(15), || scenario
            .run_field(&format!("tick@{after_ms}"), "state")
            .as_deref()
            == Some("succeeded")
            && owed(&scenario) == 0),
        "the fire after the outage did not run, or notices are still owed:\n{}",
        replica.log()
    );
    // The fires the outage missed are judged together when they come due, and tell once. On
    // a loaded machine the fires after them may each tell of themselves too, as the docs say
    // (docs/guide.md, "Notices"; docs/semantics.md): one due on time while the late one still
    // runs is skipped as its overlap, and one made ready within the threshold that starts
    // later than the threshold (after waiting for the job's slot) is missed then.
    let field_ms = |run: &str, field: &str| {
        scenario
            .run_field(run, field)
            .and_then(|ms| ms.parse::<i64>().ok())
    };
    let run_of = |notice: &serde_json::Value| {
        notice["run"]
            .as_str()
            .expect("a notice names its run")
            .to_owned()
    };
    let mut tick = skipped("tick");
    tick.sort_by_key(|notice| field_ms(&run_of(notice), "finished_ms"));
    let runs: std::collections::BTreeSet<_> = tick.iter().map(run_of).collect();
    assert_eq!(runs.len(), tick.len(), "a fire told twice: {tick:?}");
    let (outage, after) = tick.split_first().expect("a notice of the outage");
    assert_eq!(outage["reason"], "missed", "{outage}");
    assert!(
        outage["fire_ms"].as_i64().is_some_and(|ms| ms < back_ms),
        "the first notice is of a fire due while the replica was down (back at {back_ms}): \
         {outage}"
    );
    for notice in after {
        let run = run_of(notice);
        let skipped_ms = field_ms(&run, "finished_ms").expect("a skipped run's time");
        let told_of_itself = match notice["reason"].as_str() {
            Some("missed") => {
                field_ms(&run, "missed_after_ms").is_some_and(|after| skipped_ms > after)
            }
            Some("overlap") => {
                let fire_ms = notice["fire_ms"].as_i64().expect("a fire's time");
                (1..=5).any(|before| {
                    let earlier = format!("tick@{}", fire_ms - before * 1000);
                    field_ms(&earlier, "started_ms").is_some_and(|ms| ms <= skipped_ms)
                        && field_ms(&earlier, "finished_ms").is_some_and(|ms| ms >= skipped_ms)
                })
            }
            _ => false,
        };
        assert!(
            told_of_itself,
            "a notice besides the outage's, neither of a fire made ready in time and found \
             missed when it would start nor of an overlap with a run then running: {notice}\n\
             all: {tick:?}"
        );
    }
    assert_eq!(
        skipped("held"),
        Vec::<serde_json::Value>::new(),
        "a paused job tells nothing"
    );
}

/// A replica stopped while a run that fails is under way tells of that run before it exits:
/// the notice does not wait for another replica, or for this one to start again.
#[test]
fn a_replica_that_stops_sends_the_notices_of_its_last_runs_first() {
    let scenario = Scenario::new();
    let dir = scenario.dir.path();
    let told = dir.join("told.jsonl");
    let started = dir.join("started");
    scenario.write_jobs(&format!(
        "[jobs.last]\ncommand = \"touch {started}; sleep 1; exit 1\"\n\
         notify = [\"exec:cat >> {told}\"]\n",
        started = started.display(),
        told = told.display()
    ));
    let mut replica = scenario.replica("r1", &["--shutdown-grace", "10s"]);
    scenario.trigger("last");
    assert!(
        wait_until(Duration::from_secs(10), || started.exists()),
        "{}",
        replica.log()
    );
    assert_eq!(replica.terminate(Duration::from_secs(15)), Some(0));
    let notices = documents(&told);
    assert_eq!(
        notices.len(),
        1,
        "told before it exited:\n{}",
        replica.log()
    );
    assert_eq!(notices[0]["event"], "dead");
    assert_eq!(owed(&scenario), 0);
}
