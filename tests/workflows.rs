//! Workflows run by real replicas: a cron-fired workflow once per fire across three replicas
//! with the leader killed, a replica killed right after acking a step, a DAG's fan-out and
//! fan-in in order with payloads passed on, and a dead step that stops its instance until
//! `dead retry` resumes it.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use crate::util::redis_server::RedisServer;
use crate::util::replica::ReplicaProcess;
use crate::util::scenario::Scenario;
use crate::util::schemas::{Schemas, json_lines};
use crate::util::{cli, keys, one_document, wait_until, wait_until_async};
use serde_json::Value;

/// A scenario whose schedules define workflows, and what tests ask of its workflows.
struct Workflows {
    scenario: Scenario,
}

impl Workflows {
    /// A scenario whose only schedule file is `schedules`, with `LEDGER` in it naming the
    /// ledger that every step appends `<run id> start|end <ms>` to.
    fn new(schedules: &str) -> Self {
        let scenario = Scenario::new();
        scenario.write_jobs(
            &schedules.replace("LEDGER", &scenario.ledger_path().display().to_string()),
        );
        Self { scenario }
    }

    fn cli(&self, args: &[&str]) -> String {
        cli(&self.scenario.server, self.scenario.dir.path(), args).success()
    }

    /// `redcron workflow start name args...`, tried again until a replica has published the
    /// workflow: the instance id.
    fn start(&self, name: &str, args: &[&str], log: &dyn Fn() -> String) -> String {
        let mut said = String::new();
        let mut all = vec!["workflow", "start", name];
        all.extend(args);
        assert!(
            wait_until(Duration::from_secs(15), || {
                let out = cli(&self.scenario.server, self.scenario.dir.path(), &all);
                said = format!("{}{}", out.stdout.trim(), out.stderr);
                out.code == Some(0)
            }),
            "{name} never started: {said}\n{}",
            log()
        );
        said
    }

    /// `redcron workflow status id --json`: the instance.
    fn instance(&self, id: &str) -> Value {
        let shown = one_document(&self.cli(&["workflow", "status", id, "--json"]));
        shown["workflows"][0].clone()
    }

    /// The status of each step of an instance.
    fn statuses(&self, id: &str) -> HashMap<String, String> {
        self.instance(id)["steps"]
            .as_array()
            .expect("steps")
            .iter()
            .map(|step| {
                (
                    step["name"].as_str().expect("name").to_owned(),
                    step["status"].as_str().expect("status").to_owned(),
                )
            })
            .collect()
    }

    /// Waits until the instance is no longer running; its state.
    fn wait_finished(&self, id: &str, limit: Duration, log: &dyn Fn() -> String) -> String {
        let mut state = String::new();
        assert!(
            wait_until(limit, || {
                state = self.instance(id)["state"]
                    .as_str()
                    .expect("state")
                    .to_owned();
                state != "running"
            }),
            "{id} still running: {}\n{}",
            self.instance(id),
            log()
        );
        state
    }

    /// `redcron runs show run --json`.
    fn run(&self, run: &str) -> Value {
        one_document(&self.cli(&["runs", "show", run, "--json"]))
    }
}

/// A step's command: appends its start and end to the ledger around `work`, and exits as
/// `work` did.
fn recorded(work: &str) -> String {
    format!(
        "echo \\\"$REDCRON_RUN_ID start $(date +%s%3N)\\\" >> LEDGER; {work}; status=$?; \
         echo \\\"$REDCRON_RUN_ID end $(date +%s%3N)\\\" >> LEDGER; exit $status"
    )
}

/// The ledger: run id -> its (start ms, end ms) pairs, in order.
fn ledger(path: &Path) -> HashMap<String, Vec<(i64, Option<i64>)>> {
    let mut runs: HashMap<String, Vec<(i64, Option<i64>)>> = HashMap::new();
    for line in std::fs::read_to_string(path).unwrap_or_default().lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        let [run, what, ms] = words[..] else {
            panic!("ledger line {line:?}");
        };
        let ms: i64 = ms.parse().expect("ms");
        let entries = runs.entry(run.to_owned()).or_default();
        match what {
            "start" => entries.push((ms, None)),
            _ => {
                if let Some(last) = entries.last_mut() {
                    last.1 = Some(ms);
                }
            }
        }
    }
    runs
}

#[test]
fn a_cron_fired_workflow_runs_once_per_fire_across_three_replicas_and_a_leader_kill() {
    let setup = Workflows::new(&format!(
        "[jobs.extract]\ncommand = \"{}\"\n[jobs.load]\ncommand = \"{}\"\n\
         [workflows.tick]\nschedule = \"* * * * * *\"\nsteps = [\"extract\", \"load\"]\n",
        recorded("sleep 0.2"),
        recorded("true")
    ));
    let mut replicas: Vec<ReplicaProcess> = ["r1", "r2", "r3"]
        .iter()
        .map(|id| setup.scenario.replica(id, &[]))
        .collect();
    let logs = ReplicaProcess::logs;
    // Until a replica has declared the workflow, listing it is refused as unknown.
    let instances = |setup: &Workflows| -> Vec<Value> {
        let listed = cli(
            &setup.scenario.server,
            setup.scenario.dir.path(),
            &["workflow", "list", "tick", "-n", "1000", "--json"],
        );
        if listed.code != Some(0) {
            assert!(
                listed.stderr.contains("unknown workflow"),
                "{}",
                listed.stderr
            );
            return Vec::new();
        }
        one_document(&listed.stdout)["workflows"]
            .as_array()
            .expect("workflows")
            .clone()
    };
    assert!(
        wait_until(Duration::from_secs(15), || instances(&setup).len() >= 3),
        "no instances\n{}",
        logs(&replicas)
    );
    // Kill the leader mid-way: another takes over and the fires go on.
    let status = one_document(&setup.cli(&["status", "--json"]));
    let leader = status["leader"]["id"]
        .as_str()
        .expect("a leader")
        .to_owned();
    let index = replicas
        .iter()
        .position(|replica| replica.id == leader)
        .expect("the leader is one of ours");
    replicas[index].kill9();
    let killed_ms = chrono::Utc::now().timestamp_millis();
    assert!(
        wait_until(Duration::from_secs(30), || {
            let status = cli(
                &setup.scenario.server,
                setup.scenario.dir.path(),
                &["status", "--json"],
            );
            status.code == Some(0)
                && one_document(&status.stdout)["leader"]["id"]
                    .as_str()
                    .is_some_and(|id| id != leader)
        }),
        "no replica took over from {leader}\n{}",
        logs(&replicas)
    );
    // Fires up to six seconds past the kill are judged, once a later one has started and each
    // of them has ended.
    let cutoff_ms = (killed_ms / 1000 + 6) * 1000;
    let fire_of = |instance: &Value| -> i64 {
        let id = instance["id"].as_str().expect("id");
        id.strip_prefix("tick@")
            .and_then(|ms| ms.parse().ok())
            .unwrap_or_else(|| panic!("instance id {id} is the fire's run id"))
    };
    assert!(
        wait_until(Duration::from_secs(30), || {
            let instances = instances(&setup);
            instances
                .iter()
                .any(|instance| fire_of(instance) > cutoff_ms)
                && instances
                    .iter()
                    .filter(|instance| fire_of(instance) <= cutoff_ms)
                    .all(|instance| instance["state"] != "running")
        }),
        "the fires up to {cutoff_ms} did not all end\n{}",
        logs(&replicas)
    );

    let ledger = ledger(&setup.scenario.ledger_path());
    let mut fires: Vec<i64> = Vec::new();
    let mut killed_runs = 0;
    for instance in instances(&setup) {
        let id = instance["id"].as_str().expect("id");
        let fire = fire_of(&instance);
        if fire > cutoff_ms {
            continue;
        }
        fires.push(fire);
        assert_eq!(instance["state"], "succeeded", "{instance}");
        // Each step ran once, and ended, but for one the killed leader ran: it ran again
        // elsewhere, as at-least-once delivery says, whether its first start never ended (killed
        // mid-run) or ended before its success was recorded (killed in between).
        let mut spans = Vec::new();
        for step in ["extract", "load"] {
            let runs = &ledger[&format!("{id}/{step}")];
            let (first, last) = (runs[0], runs[runs.len() - 1]);
            let end = last
                .1
                .unwrap_or_else(|| panic!("{id}/{step} did not end: {runs:?}"));
            killed_runs += runs.len() - 1;
            spans.push((first.0, end));
        }
        assert!(spans[0].1 <= spans[1].0, "{id}: load after extract");
    }
    fires.sort_unstable();
    assert!(fires.len() >= 8, "{fires:?}");
    for pair in fires.windows(2) {
        assert_eq!(pair[1] - pair[0], 1000, "a fire is missing: {fires:?}");
    }
    let runs_started: usize = ledger
        .iter()
        .filter(|(run, _)| {
            run.strip_prefix("tick@")
                .and_then(|rest| rest.split('/').next())
                .and_then(|ms| ms.parse::<i64>().ok())
                .is_some_and(|fire| fires.contains(&fire))
        })
        .map(|(_, starts)| starts.len())
        .sum();
    assert!(
        killed_runs <= 1,
        "only the killed leader's run, if any, ran twice"
    );
    assert_eq!(
        runs_started,
        fires.len() * 2 + killed_runs,
        "two step runs per fire"
    );
}

#[test]
fn a_replica_killed_right_after_acking_a_step_leaves_the_next_steps_to_run_once_elsewhere() {
    // compress runs only on `a` (its queue), the other steps only on `b`.
    let setup = Workflows::new(&format!(
        "[jobs.compress]\ncommand = \"{}\"\nqueue = \"first\"\n\
         [jobs.watermark]\ncommand = \"{}\"\n[jobs.upload]\ncommand = \"{}\"\n\
         [workflows.images]\nsteps = [\"compress\", \"watermark\", \"upload\"]\n",
        recorded("sleep 0.3"),
        recorded("sleep 0.3"),
        recorded("true")
    ));
    let mut a = setup.scenario.replica("a", &["--queues", "first"]);
    let _b = setup.scenario.replica("b", &["--queues", "default"]);
    let logs = [
        setup.scenario.dir.path().join("a.log"),
        setup.scenario.dir.path().join("b.log"),
    ];
    let log = || {
        logs.iter()
            .map(|path| std::fs::read_to_string(path).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let id = setup.start("images", &["--payload", "{\"image\":\"cat.png\"}"], &log);
    assert!(
        wait_until(Duration::from_secs(15), || setup.statuses(&id)["compress"]
            == "succeeded"),
        "{}\n{}",
        setup.instance(&id),
        log()
    );
    a.kill9();
    // The ack that marked compress enqueued watermark in the same call.
    let instance = setup.instance(&id);
    let watermark = &instance["steps"][1];
    assert_eq!(watermark["name"], "watermark");
    assert!(watermark["run"].is_string(), "{instance}");

    assert_eq!(
        setup.wait_finished(&id, Duration::from_secs(20), &log),
        "succeeded"
    );
    let ledger = ledger(&setup.scenario.ledger_path());
    for step in ["compress", "watermark", "upload"] {
        let runs = &ledger[&format!("{id}/{step}")];
        assert_eq!(runs.len(), 1, "{step} ran {runs:?}\n{}", log());
    }
    for step in ["watermark", "upload"] {
        let worker = setup.run(&format!("{id}/{step}"))["worker"].clone();
        assert!(
            worker
                .as_str()
                .is_some_and(|worker| worker.starts_with("b/")),
            "{step} ran on {worker}"
        );
    }
    // What scripts read is what docs/cli.md says.
    let schemas = Schemas::of_the_docs();
    schemas.assert_matches(
        "workflows.json",
        &one_document(&setup.cli(&["workflow", "status", &id, "--json"])),
    );
    let listed = json_lines(&setup.cli(&["workflow", "list", "images", "--jsonl"]));
    schemas.assert_lines_match("workflows.json", "workflows", &listed);
    assert_eq!(listed.len(), 1);
    let again = one_document(&setup.cli(&["workflow", "start", "images", "--json"]));
    schemas.assert_matches("workflow-started.json", &again);
    assert_ne!(again["id"], id.as_str(), "each start is a new instance");
    // With `a` gone, nothing serves compress's queue: its run waits there, queued, and the
    // steps after it wait for it, pending.
    let waiting = again["id"].as_str().expect("id");
    assert_eq!(
        setup.statuses(waiting),
        HashMap::from(
            [
                ("compress", "queued"),
                ("watermark", "pending"),
                ("upload", "pending")
            ]
            .map(|(step, status)| (step.to_owned(), status.to_owned()))
        )
    );
    // jobs tells the workflow's job from a job, with its steps.
    let jobs = one_document(&setup.cli(&["jobs", "--json"]));
    schemas.assert_matches("jobs.json", &jobs);
    let workflow_of = |name: &str| {
        jobs["jobs"]
            .as_array()
            .and_then(|jobs| jobs.iter().find(|job| job["job"] == name))
            .map(|job| job["workflow"].clone())
    };
    assert_eq!(
        workflow_of("images"),
        Some(serde_json::json!("compress -> watermark -> upload")),
        "{jobs}"
    );
    assert_eq!(workflow_of("compress"), Some(serde_json::Value::Null));
    let images = jobs["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|job| job["job"] == "images"))
        .unwrap_or_else(|| panic!("{jobs}"));
    assert_eq!(
        images["command"],
        serde_json::Value::Null,
        "it runs steps: {jobs}"
    );
    let status = one_document(&setup.cli(&["status", "--json"]));
    schemas.assert_matches("status.json", &status);
    let in_status = status["jobs"]
        .as_array()
        .and_then(|jobs| jobs.iter().find(|job| job["job"] == "images"))
        .map(|job| job["workflow"].clone());
    assert_eq!(
        in_status,
        Some(serde_json::json!("compress -> watermark -> upload")),
        "{status}"
    );
    for command in ["jobs", "status"] {
        let table = setup.cli(&[command]);
        assert!(
            table
                .lines()
                .any(|line| line.starts_with("images (workflow)")),
            "{command}: {table}"
        );
    }

    let shown = setup.cli(&["workflow", "status", &id]);
    let row = shown.lines().nth(1).expect("a row");
    assert!(
        row.starts_with("images") && row.contains(&id) && row.matches("succeeded").count() == 4,
        "{shown}"
    );

    // A step's run id is said to be one, with its instance.
    let step = cli(
        &setup.scenario.server,
        setup.scenario.dir.path(),
        &["workflow", "status", &format!("{id}/compress")],
    )
    .failure(2);
    assert!(
        step.contains(&format!(
            "is the run of step \"compress\" of instance {id}: see `redcron workflow status {id}`"
        )),
        "{step}"
    );

    // A damaged instance is named on standard error; it hides no other instance.
    let () = redis::Commands::hset(
        &mut setup.scenario.server.connection(),
        keys().workflow(waiting),
        "status:compress",
        "weird",
    )
    .expect("HSET");
    let listed = cli(
        &setup.scenario.server,
        setup.scenario.dir.path(),
        &["workflow", "list", "images"],
    );
    assert_eq!(listed.code, Some(0), "{}", listed.stderr);
    assert!(listed.stdout.contains(&id), "{}", listed.stdout);
    assert!(
        listed
            .stderr
            .contains(&format!("instance {waiting} cannot be read, left out")),
        "{}",
        listed.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dag_fans_out_and_in_in_order_and_each_step_receives_what_its_needs_passed_on() {
    let setup = Workflows::new(&format!(
        "[jobs.fetch]\ncommand = \"{}\"\n[jobs.left]\ncommand = \"{}\"\n\
         [jobs.right]\ncommand = \"{}\"\n[jobs.merge]\ncommand = \"{}\"\n\
         [workflows.report]\nsteps = [{{ job = \"fetch\" }}, \
         {{ job = \"left\", needs = [\"fetch\"] }}, {{ job = \"right\", needs = [\"fetch\"] }}, \
         {{ job = \"merge\", needs = [\"left\", \"right\"] }}]\n",
        recorded(
            "sleep 0.3; echo fetching >&2; echo '{\\\"rows\\\": 12345678901234567890, \\\"empty\\\": []}'"
        ),
        recorded("sleep 0.5; echo '{\\\"left\\\": 1, \\\"side\\\": \\\"left\\\"}'"),
        recorded("sleep 0.5; echo '{\\\"right\\\": 2, \\\"side\\\": \\\"right\\\"}'"),
        recorded("cat > /dev/null; echo 'not json'"),
    ));
    let r1 = setup.scenario.replica("r1", &["--workers", "4"]);
    let r2 = setup.scenario.replica("r2", &["--workers", "4"]);
    let log = || format!("{}\n{}", r1.log(), r2.log());
    let client = redcron::client::Client::connect(&setup.scenario.server.url(), "test")
        .await
        .expect("connect");
    let payload = serde_json::json!({ "day": "2026-12-05", "side": "none" });
    let mut started = None;
    wait_until_async(Duration::from_secs(15), async || {
        match client.start_workflow("report", Some(&payload)).await {
            Ok(instance) => started = Some(instance),
            Err(redcron::client::ClientError::UnknownWorkflow(_)) => {}
            Err(error) => panic!("{error}"),
        }
        started.is_some()
    })
    .await;
    let id = started.expect("the workflow was published").id;
    let state =
        tokio::task::block_in_place(|| setup.wait_finished(&id, Duration::from_secs(20), &log));
    assert_eq!(state, "succeeded");
    let instance = client
        .workflow(&id)
        .await
        .expect("read")
        .expect("the instance");
    assert!(
        instance
            .steps
            .iter()
            .all(|step| step.status == redcron::store::StepStatus::Succeeded),
        "{instance:?}"
    );

    let ledger = ledger(&setup.scenario.ledger_path());
    let span = |step: &str| {
        let runs = &ledger[&format!("{id}/{step}")];
        assert_eq!(runs.len(), 1, "{step}: {runs:?}");
        (runs[0].0, runs[0].1.expect("ended"))
    };
    let (fetch, left, right, merge) = (span("fetch"), span("left"), span("right"), span("merge"));
    assert!(
        fetch.1 <= left.0 && fetch.1 <= right.0,
        "fan-out after fetch"
    );
    assert!(
        left.0 < right.1 && right.0 < left.1,
        "left and right ran side by side: {left:?} {right:?}"
    );
    assert!(left.1 <= merge.0 && right.1 <= merge.0, "fan-in after both");

    let payload_of = |step: &str| -> Value {
        let run = tokio::task::block_in_place(|| setup.run(&format!("{id}/{step}")));
        serde_json::from_str(run["payload"].as_str().expect("a payload")).expect("JSON")
    };
    assert_eq!(payload_of("fetch"), payload);
    let after_fetch = payload_of("left");
    assert_eq!(after_fetch, payload_of("right"));
    assert_eq!(after_fetch["day"], "2026-12-05");
    assert_eq!(after_fetch["empty"], serde_json::json!([]));
    // Passed on as written, not rounded.
    let raw = tokio::task::block_in_place(|| setup.run(&format!("{id}/left")));
    assert!(
        raw["payload"]
            .as_str()
            .expect("payload")
            .contains("\"rows\":12345678901234567890"),
        "{raw}"
    );
    let merged = payload_of("merge");
    assert_eq!(merged["left"], 1);
    assert_eq!(merged["right"], 2);
    assert_eq!(merged["day"], "2026-12-05");
    // A key both give takes the value of the later need.
    assert_eq!(merged["side"], "right");
}

#[test]
fn a_dead_step_stops_its_workflow_until_dead_retry_resumes_it_or_continue_goes_on() {
    let setup = Workflows::new(&format!(
        "[jobs.prepare]\ncommand = \"{}\"\n\
         [jobs.flaky]\ncommand = \"{}\"\n\
         [jobs.publish]\ncommand = \"{}\"\n\
         [workflows.stops]\nsteps = [\"prepare\", \"flaky\", \"publish\"]\n\
         [workflows.goes-on]\non_failure = \"continue\"\nsteps = [\"prepare\", \"flaky\", \"publish\"]\n",
        recorded("true"),
        recorded("test -e FIXED"),
        recorded("true"),
    ))
    .with_fixed_path();
    let mut replica = setup.scenario.replica("r1", &[]);
    let log = || replica.log();
    let start = |name: &str| setup.start(name, &[], &log);

    let stops = start("stops");
    // What starts an instance takes only an object for its payload, however it is started.
    for args in [
        ["trigger", "stops", "--payload", "[1, 2]"],
        ["enqueue", "stops", "--payload", "\"text\""],
    ] {
        let mut args = args.to_vec();
        if args[0] == "enqueue" {
            args.extend(["--in", "1h"]);
        }
        let refused = cli(&setup.scenario.server, setup.scenario.dir.path(), &args).failure(2);
        assert!(
            refused.contains("a workflow's payload must be a JSON object"),
            "{refused}"
        );
    }
    assert_eq!(
        setup.wait_finished(&stops, Duration::from_secs(15), &log),
        "failed"
    );
    let statuses = setup.statuses(&stops);
    assert_eq!(
        (
            statuses["prepare"].as_str(),
            statuses["flaky"].as_str(),
            statuses["publish"].as_str()
        ),
        ("succeeded", "failed", "skipped")
    );
    assert!(!ledger(&setup.scenario.ledger_path()).contains_key(&format!("{stops}/publish")));

    let goes_on = start("goes-on");
    assert_eq!(
        setup.wait_finished(&goes_on, Duration::from_secs(15), &log),
        "failed"
    );
    assert_eq!(setup.statuses(&goes_on)["publish"], "succeeded");

    // Mend the step, and re-drive its dead run: the instance goes on from it.
    std::fs::write(setup.scenario.dir.path().join("FIXED"), "").expect("fix");
    setup.cli(&["dead", "retry", &format!("{stops}/flaky")]);
    assert_eq!(
        setup.wait_finished(&stops, Duration::from_secs(15), &log),
        "succeeded"
    );
    assert_eq!(setup.statuses(&stops)["publish"], "succeeded");
    let runs = ledger(&setup.scenario.ledger_path());
    assert_eq!(runs[&format!("{stops}/flaky")].len(), 2);
    assert_eq!(runs[&format!("{stops}/publish")].len(), 1);

    // A step whose job is paused when its turn comes is skipped, which stops the instance; once
    // the job is resumed, `workflow retry` runs the instance on from it.
    setup.cli(&["pause", "publish"]);
    let paused = start("stops");
    assert_eq!(
        setup.wait_finished(&paused, Duration::from_secs(15), &log),
        "failed"
    );
    assert_eq!(setup.statuses(&paused)["publish"], "skipped");
    // Retried while the job is still paused, the step is skipped again, and the retry says so.
    let early = cli(
        &setup.scenario.server,
        setup.scenario.dir.path(),
        &["workflow", "retry", &paused],
    );
    assert_eq!(
        (early.code, early.stdout.trim()),
        (
            Some(0),
            format!("{paused}: running again from publish").as_str()
        ),
        "{}",
        early.stderr
    );
    assert!(
        early
            .stderr
            .contains("job \"publish\" is paused: its step is skipped again"),
        "{}",
        early.stderr
    );
    assert_eq!(
        setup.wait_finished(&paused, Duration::from_secs(15), &log),
        "failed"
    );
    assert_eq!(
        setup.run(&format!("{paused}/publish/2"))["state"],
        "skipped"
    );
    setup.cli(&["resume", "publish"]);
    let retried = cli(
        &setup.scenario.server,
        setup.scenario.dir.path(),
        &["workflow", "retry", &paused],
    );
    assert_eq!(
        (retried.code, retried.stdout.trim(), retried.stderr.as_str()),
        (
            Some(0),
            format!("{paused}: running again from publish").as_str(),
            ""
        ),
    );
    assert_eq!(
        setup.wait_finished(&paused, Duration::from_secs(15), &log),
        "succeeded"
    );
    // The step ran again under a run id of its own; the skipped runs keep their records.
    assert_eq!(
        setup.instance(&paused)["steps"][2]["run"],
        format!("{paused}/publish/3")
    );
    assert_eq!(setup.run(&format!("{paused}/publish"))["state"], "skipped");
    assert_eq!(
        setup.run(&format!("{paused}/publish/3"))["state"],
        "succeeded"
    );
    let again = setup.cli(&["workflow", "retry", &paused]);
    assert_eq!(
        again.trim(),
        format!("{paused}: no step failed or was skipped")
    );
    let answered = one_document(&setup.cli(&["workflow", "retry", &paused, "--json"]));
    Schemas::of_the_docs().assert_matches("workflow-retried.json", &answered);
    assert_eq!(
        (&answered["id"], &answered["steps"]),
        (&serde_json::json!(paused), &serde_json::json!([])),
        "{answered}"
    );

    // Once no live replica declares a failed step's job (its replica gone, its definition
    // unpublished), a retry would fail it again at once: it is refused, and its dead run stays.
    assert_eq!(replica.terminate(Duration::from_secs(10)), Some(0));
    let () = redis::Commands::hdel(
        &mut setup.scenario.server.connection(),
        keys().defs(),
        "flaky",
    )
    .expect("HDEL");
    let refused = cli(
        &setup.scenario.server,
        setup.scenario.dir.path(),
        &["workflow", "retry", &goes_on],
    )
    .failure(2);
    assert!(
        refused.contains(&format!(
            "instance {goes_on} was not retried: no live replica declares job \"flaky\""
        )),
        "{refused}"
    );
    let dead = setup.cli(&["dead", "list"]);
    assert!(dead.contains(&format!("{goes_on}/flaky")), "{dead}");
}

#[test]
fn a_step_acked_by_a_replica_that_knows_no_workflows_is_settled_and_its_instance_goes_on() {
    // `first` runs in a queue no replica here serves: the test acks its run as a replica of
    // a version without workflows would, writing the run's state and nothing else.
    let setup = Workflows::new(&format!(
        "[jobs.first]\ncommand = \"true\"\nqueue = \"old\"\n[jobs.second]\ncommand = \"{}\"\n\
         [workflows.mixed]\nsteps = [\"first\", \"second\"]\n",
        recorded("true")
    ));
    // Not the default, every queue of its jobs: it would claim `first` before the test acks it.
    let replica = setup.scenario.replica("r1", &["--queues", "default"]);
    let log = || replica.log();
    let id = setup.start("mixed", &[], &log);
    let keys = crate::util::keys();
    let first = format!("{id}/first");
    let mut redis = setup.scenario.server.connection();
    let _: () = redis::cmd("HSET")
        .arg(keys.run(&first))
        .arg(&["state", "succeeded", "output", "{\"from\": \"old\"}"])
        .query(&mut redis)
        .expect("ack as an old replica would");
    assert_eq!(
        setup.wait_finished(&id, Duration::from_secs(15), &log),
        "succeeded"
    );
    assert_eq!(
        ledger(&setup.scenario.ledger_path())[&format!("{id}/second")].len(),
        1
    );
    let second = setup.run(&format!("{id}/second"));
    assert_eq!(second["payload"], "{\"from\":\"old\"}");
    // Said by the reaper once its settling call returns, which may be after the instance ended.
    assert!(
        wait_until(Duration::from_secs(10), || log()
            .contains("are settled now")),
        "the settling is said\n{}",
        log()
    );
}

impl Workflows {
    /// Points `FIXED` in the schedules at the scenario's own directory.
    fn with_fixed_path(self) -> Self {
        let path = self.scenario.schedules().join("jobs.toml");
        let text = std::fs::read_to_string(&path).expect("read schedules");
        let fixed = self.scenario.dir.path().join("FIXED");
        self.scenario
            .write_jobs(&text.replace("FIXED", &fixed.display().to_string()));
        self
    }
}

#[test]
fn bad_workflow_requests_are_refused_with_what_is_wrong_and_exit_code_2() {
    let setup = Workflows::new("[jobs.a]\ncommand = \"true\"\n");
    let refused =
        |args: &[&str]| cli(&setup.scenario.server, setup.scenario.dir.path(), args).failure(2);
    let unknown = refused(&["workflow", "start", "nope"]);
    assert!(
        unknown.contains("unknown workflow \"nope\": no live replica declares it"),
        "{unknown}"
    );
    let array = refused(&["workflow", "start", "nope", "--payload", "[1]"]);
    assert!(
        array.contains("a workflow's payload must be a JSON object"),
        "{array}"
    );
    let missing = refused(&["workflow", "status", "no-such-id"]);
    assert!(
        missing.contains("no workflow instance \"no-such-id\""),
        "{missing}"
    );
    let listed = one_document(&setup.cli(&["workflow", "list", "--json"]));
    assert_eq!(listed["workflows"], serde_json::json!([]));
    // A name that is no workflow is said to be one, not listed as having no instance.
    let typo = refused(&["workflow", "list", "nope"]);
    assert!(
        typo.contains("unknown workflow \"nope\": no live replica declares it"),
        "{typo}"
    );
    // A job's name is said to be a job's, with what runs it.
    let _replica = setup.scenario.replica("r", &[]);
    let mut said = String::new();
    assert!(
        wait_until(Duration::from_secs(15), || {
            said = cli(
                &setup.scenario.server,
                setup.scenario.dir.path(),
                &["workflow", "start", "a"],
            )
            .stderr;
            said.contains("\"a\" is a job, not a workflow: run it with `redcron trigger a`")
        }),
        "{said}"
    );
    let listed = refused(&["workflow", "list", "a"]);
    assert!(
        listed.contains("\"a\" is a job, not a workflow"),
        "{listed}"
    );
    // A run's id is said to be a run's.
    let triggered = setup.cli(&["trigger", "a"]);
    let run = triggered.split_whitespace().next().expect("a run id");
    let status = refused(&["workflow", "status", run]);
    assert!(
        status.contains(&format!(
            "\"{run}\" is a run of job \"a\", not a workflow instance"
        )),
        "{status}"
    );
}

/// The helpers every script is loaded with, workflows' included, to run on their own.
fn workflow_lua() -> String {
    let include = concat!(env!("CARGO_MANIFEST_DIR"), "/lua/include/");
    ["common.lua", "workflows.lua"]
        .iter()
        .map(|file| std::fs::read_to_string(format!("{include}{file}")).expect("an include"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_workflow_scripts_build_keys_and_step_run_ids_as_the_rust_side_does() {
    let server = RedisServer::start();
    let keys = crate::util::keys();
    let built: Vec<String> = redis::Script::new(&format!(
        "{}\nlocal prefix = ARGV[1]\nreturn {{key_workflow(prefix, 'w@1'), \
         key_workflows_running(prefix), key_defs(prefix), step_run_id('w@1', 'a')}}",
        workflow_lua()
    ))
    .arg(keys.prefix())
    .invoke(&mut server.connection())
    .expect("the helpers run");
    assert_eq!(
        built,
        [
            keys.workflow("w@1"),
            keys.workflows_running(),
            keys.defs(),
            redcron::store::step_run_id("w@1", "a"),
        ]
    );
}

#[test]
fn payloads_are_merged_member_by_member_as_written() {
    let server = RedisServer::start();
    let merge = |objects: &[&str]| -> Option<String> {
        let script = format!("{}\nreturn merge_objects(ARGV)", workflow_lua());
        let script = redis::Script::new(&script);
        let mut invocation = script.prepare_invoke();
        for object in objects {
            invocation.arg(*object);
        }
        invocation
            .invoke(&mut server.connection())
            .expect("the helpers run")
    };
    let passed = |output: &str| -> Option<String> {
        redis::Script::new(&format!(
            "{}\nreturn output_object(ARGV[1])",
            workflow_lua()
        ))
        .arg(output)
        .invoke(&mut server.connection())
        .expect("the helpers run")
    };
    // Commas, colons, braces and escaped quotes inside strings, nesting, a later key winning at
    // the place of the first, numbers and empty arrays as written.
    let merged = merge(&[
        r#"{"a": "x, y}: \"z\" {", "b": {"c": [1, {"d": ","}]}, "n": 12345678901234567890}"#,
        r#"{ "b" : 2, "e": [], "k\"ey/é": "ü\\" }"#,
        "[1, 2]",
        "not json",
    ])
    .expect("an object");
    let value: Value = serde_json::from_str(&merged).expect("JSON");
    assert_eq!(value["a"], r#"x, y}: "z" {"#);
    assert_eq!(value["b"], 2);
    assert_eq!(value["e"], serde_json::json!([]));
    assert_eq!(value["k\"ey/é"], "ü\\");
    assert!(merged.contains("\"n\":12345678901234567890"), "{merged}");
    assert!(
        merged.starts_with("{\"a\":"),
        "the first key keeps its place: {merged}"
    );
    assert_eq!(merge(&["{}", " { } "]).as_deref(), Some("{}"));
    assert_eq!(merge(&["[]", "3", ""]), None);

    assert_eq!(
        passed("working...\n{\"path\": \"/tmp/a b.png\"}\n\n").as_deref(),
        Some("{\"path\": \"/tmp/a b.png\"}")
    );
    assert_eq!(
        passed("{\"early\": 1}\ndone\n"),
        None,
        "only the last line counts"
    );
    assert_eq!(passed("{\"cut\": "), None);
    // What Lua's cjson takes but JSON readers refuse is passed on as nothing.
    for loose in [
        "{\"x\": nan}",
        "{\"x\": inf}",
        "{\"x\": -Infinity}",
        "{\"x\": 0x10}",
        "{\"x\": 01}",
        "{\"x\": \"a\tb\"}",
        "{\"x\": 1.}",
    ] {
        assert_eq!(passed(loose), None, "{loose}");
    }
    assert_eq!(
        passed("{\"x\": -0.5e+3, \"y\": [true, false, null], \"z\": \"\\t\"}").as_deref(),
        Some("{\"x\": -0.5e+3, \"y\": [true, false, null], \"z\": \"\\t\"}")
    );
    assert_eq!(passed(""), None);
}

#[tokio::test]
async fn a_replica_that_declares_a_workflow_planned_as_a_job_starts_its_own() {
    // A deploy turns job x into a workflow: the published definition is still the job's.
    let server = RedisServer::start();
    let store = crate::util::store::connect(&server).await;
    let old =
        crate::util::store::jobs("[jobs.x]\ncommand = \"true\"\n[jobs.y]\ncommand = \"true\"\n");
    store.publish_definitions(&old).await.expect("publish");
    let new =
        crate::util::store::jobs("[jobs.y]\ncommand = \"true\"\n[workflows.x]\nsteps = [\"y\"]\n");
    let own = new.iter().find(|job| job.name == "x").expect("workflow x");

    // Asked by name (`workflow start x`), x is no workflow: a job.
    assert_eq!(
        store
            .start_workflow("x", "by-name", None, None)
            .await
            .expect("start"),
        redcron::store::WorkflowStart::NotAWorkflow
    );
    // A run of x claimed by the new replica starts the workflow it declares.
    assert!(matches!(
        store
            .start_workflow("x", "x@1000", Some("{}"), Some(own))
            .await
            .expect("start"),
        redcron::store::WorkflowStart::Started { .. }
    ));
    let instance = store
        .workflow("x@1000")
        .await
        .expect("read")
        .expect("an instance");
    let steps: Vec<&str> = instance
        .steps
        .iter()
        .map(|step| step.job.as_str())
        .collect();
    assert_eq!(steps, ["y"]);
}

#[tokio::test]
async fn a_start_that_finds_no_workflow_says_what_it_found_and_not_what_is_published_later() {
    // A workflow is published between a start that found none and any later reading of its
    // definition: such a reading would find a workflow the start could not use, and only the
    // start's own reading says what it met. A published workflow whose steps cannot be read is
    // that state kept still: the start finds no workflow, a reading finds one.
    let server = RedisServer::start();
    let store = crate::util::store::connect(&server).await;
    let published =
        crate::util::store::jobs("[jobs.a]\ncommand = \"true\"\n[workflows.w]\nsteps = [\"a\"]\n");
    store
        .publish_definitions(&published)
        .await
        .expect("publish");
    let () = redis::Commands::hset(
        &mut server.connection(),
        keys().defs(),
        "unusable",
        r#"{"name":"unusable","workflow":{"steps":[]}}"#,
    )
    .expect("HSET");
    let start = |name: &'static str| {
        let store = store.clone();
        async move {
            store
                .start_workflow(name, &redcron::store::new_run_id(), None, None)
                .await
                .expect("start")
        }
    };
    assert_eq!(
        start("nothing").await,
        redcron::store::WorkflowStart::UnknownWorkflow
    );
    assert_eq!(
        start("a").await,
        redcron::store::WorkflowStart::NotAWorkflow
    );
    assert_eq!(
        start("unusable").await,
        redcron::store::WorkflowStart::UnknownWorkflow
    );
    assert!(matches!(
        start("w").await,
        redcron::store::WorkflowStart::Started { .. }
    ));

    // The client says what the start found: never that a workflow's name is a job's.
    let client = redcron::client::Client::from_store(store.clone());
    assert!(matches!(
        client.start_workflow("unusable", None).await,
        Err(redcron::client::ClientError::UnknownWorkflow(name)) if name == "unusable"
    ));
    assert!(matches!(
        client.start_workflow("a", None).await,
        Err(redcron::client::ClientError::NotAWorkflow(name)) if name == "a"
    ));
}
