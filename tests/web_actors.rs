//! Who made a run, against a real Redis, a real replica and real `redcron web` processes: a
//! trigger and an enqueue from the console's form, the API and the command line each record
//! their actor on the runs they make and once in the events stream, a bulk enqueue one entry
//! per thousand runs, and the job's page, the run's page and `runs show` say who.

use std::time::Duration;

use crate::util::scenario::{Scenario, actions};
use crate::util::web::WebProcess;
use crate::util::{cli, one_document, redcron_in, wait_until};

/// A job that runs once per trigger, one that runs on every replica, and one enqueued for
/// later in bulk.
const JOBS: &str = "[jobs.greet]\ncommand = \"cat\"\n\n\
                    [jobs.everywhere]\nschedule = \"@yearly\"\ncommand = \"cat\"\non = \"every\"\n\n\
                    [jobs.later]\ncommand = \"cat\"\n";

#[test]
fn triggers_and_enqueues_record_who_asked_on_the_run_the_job_page_and_runs_show() {
    let scenario = Scenario::new();
    scenario.write_jobs(JOBS);
    let _replicas = scenario.replicas_with_a_leader(&["r1"], &[]);
    let dir = scenario.dir.path();
    let published = wait_until(Duration::from_secs(10), || {
        let out = cli(&scenario.server, dir, &["jobs", "--json"]).stdout;
        ["greet", "everywhere", "later"]
            .iter()
            .all(|job| out.contains(&format!("\"{job}\"")))
    });
    assert!(published, "the jobs were never published");

    // The console without an auth file: its form acts as `anonymous`.
    let console = WebProcess::start(&scenario.server.url(), dir, &[]);
    let token = console.get("/jobs").csrf_cookie();
    let triggered = console.submit_form("/jobs/greet/trigger", &token, &token, "");
    assert_eq!(triggered.status, 303, "{}", triggered.body);
    let by_form = actions(&scenario, Some("greet"));
    assert_eq!(by_form.len(), 1, "{by_form:?}");
    let (action, actor, form_run, runs) = by_form[0].clone();
    assert_eq!(
        (action.as_str(), actor.as_str(), runs),
        ("trigger", "anonymous", 1)
    );
    assert_eq!(
        scenario.run_field(&form_run, "actor").as_deref(),
        Some("anonymous")
    );
    assert_eq!(
        scenario.run_field(&form_run, "triggered").as_deref(),
        Some("1")
    );

    // The API with a token: its name.
    let secret = redcron_in(dir, &["web", "hash", "--token"], "deploy-token").success();
    let auth = format!(
        "[[token]]\nname = \"deploy\"\nsha256 = \"{}\"\nrole = \"operator\"\n",
        secret.trim()
    );
    std::fs::write(dir.join("auth.toml"), auth).expect("write the auth file");
    let api = WebProcess::start(&scenario.server.url(), dir, &["--auth-file", "auth.toml"]);
    let as_deploy =
        |request: reqwest::RequestBuilder| api.send(request.bearer_auth("deploy-token"));
    let fired = as_deploy(
        api.client()
            .post(api.url("/api/v1/jobs/everywhere/trigger")),
    );
    assert_eq!(fired.status, 200, "{}", fired.body);
    let fire_run = fired.json()["runs"][0]["id"]
        .as_str()
        .expect("a run per target")
        .to_owned();
    assert_eq!(
        scenario.run_field(&fire_run, "actor").as_deref(),
        Some("deploy")
    );
    assert_eq!(
        actions(&scenario, Some("everywhere")),
        [("trigger".into(), "deploy".into(), fire_run.clone(), 1)]
    );
    let enqueued = as_deploy(
        api.client()
            .post(api.url("/api/v1/jobs/greet/enqueue"))
            .header("content-type", "application/json")
            .body(r#"{"delay_ms": 3600000}"#),
    );
    assert_eq!(enqueued.status, 200, "{}", enqueued.body);
    let api_run = enqueued.json()["id"].as_str().expect("a run id").to_owned();
    assert_eq!(
        scenario.run_field(&api_run, "actor").as_deref(),
        Some("deploy")
    );
    assert_eq!(scenario.run_field(&api_run, "triggered"), None);

    // The command line: `cli`, on the run and in `runs show`, in text and JSON.
    let cli_run = scenario.trigger("greet");
    assert_eq!(
        scenario.run_field(&cli_run, "actor").as_deref(),
        Some("cli")
    );
    let shown = cli(&scenario.server, dir, &["runs", "show", &cli_run]).success();
    assert!(
        shown
            .lines()
            .any(|line| line.split_whitespace().collect::<Vec<_>>() == ["actor", "cli"]),
        "{shown}"
    );
    let shown = cli(&scenario.server, dir, &["runs", "show", &api_run, "--json"]).success();
    assert_eq!(one_document(&shown)["actor"], "deploy");

    // A bulk enqueue of 2,500 runs: each carries its actor, and the stream holds one entry
    // per script call of a thousand runs, not one per run.
    let lines: String = (0..2_500)
        .map(|n| format!("{{\"job\": \"later\", \"in\": \"1h\", \"payload\": {{\"n\": {n}}}}}\n"))
        .collect();
    let before = actions(&scenario, Some("later")).len();
    let bulk = redcron_in(
        dir,
        &[
            "enqueue",
            "--from",
            "-",
            "--json",
            "--redis",
            &scenario.server.url(),
            "--namespace",
            "test",
        ],
        &lines,
    )
    .success();
    let ids: Vec<String> = one_document(&bulk)["runs"]
        .as_array()
        .expect("the runs made")
        .iter()
        .filter_map(|run| run["id"].as_str().map(str::to_owned))
        .collect();
    assert_eq!(ids.len(), 2_500, "{bulk}");
    for id in [&ids[0], &ids[1_499], &ids[2_499]] {
        assert_eq!(
            scenario.run_field(id, "actor").as_deref(),
            Some("cli"),
            "{id}"
        );
    }
    let bulk_actions = actions(&scenario, Some("later"))[before..].to_vec();
    assert_eq!(bulk_actions.len(), 3, "{bulk_actions:?}");
    assert!(
        bulk_actions
            .iter()
            .all(|(action, actor, _, _)| action == "enqueue" && actor == "cli"),
        "{bulk_actions:?}"
    );
    assert_eq!(
        bulk_actions.iter().map(|(_, _, _, runs)| runs).sum::<u64>(),
        2_500
    );

    // The job's page lists who triggered and enqueued; a run's page says who made it.
    let page = console.get("/jobs/greet").body;
    for said in [
        format!("<strong>anonymous</strong> triggered <a href=\"/runs/{form_run}\">"),
        format!("<strong>deploy</strong> enqueued <a href=\"/runs/{api_run}\">"),
        format!("<strong>cli</strong> triggered <a href=\"/runs/{cli_run}\">"),
    ] {
        assert!(page.contains(&said), "{said} in {page}");
    }
    let page = console.get(&format!("/runs/{form_run}")).body;
    assert!(
        page.contains("Triggered by <strong>anonymous</strong>"),
        "{page}"
    );
    let page = console.get(&format!("/runs/{api_run}")).body;
    assert!(
        page.contains("Enqueued by <strong>deploy</strong>"),
        "{page}"
    );
}
