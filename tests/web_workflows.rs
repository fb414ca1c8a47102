//! The console's workflow pages from a real `redcron web` on a real Redis with a real replica
//! running a declared workflow: the instances and their filters, an instance's steps as a
//! graph and a table with each step's input and output shown as text, a failed instance run
//! again through its form, refused on a read-only console, and the empty state.

use std::time::Duration;

use crate::util::browser::{Browser, ColorScheme};
use crate::util::scenario::Scenario;
use crate::util::wait::wait_for;
use crate::util::web::WebProcess;
use crate::util::{cli, one_document};

/// `prepare` writes hostile text, `flaky` fails until a file FIXED exists, `publish` follows.
fn stops(scenario: &Scenario) -> String {
    let fixed = scenario.dir.path().join("FIXED");
    format!(
        "[jobs.prepare]\ncommand = \"printf '<script>alert(1)</script>'\"\n\
         [jobs.flaky]\ncommand = \"test -e {}\"\n\
         [jobs.publish]\ncommand = \"true\"\n\
         [workflows.stops]\nsteps = [\"prepare\", \"flaky\", \"publish\"]\n",
        fixed.display()
    )
}

/// Starts workflow `name` with `payload` once a replica has published it: the instance id.
fn start(scenario: &Scenario, name: &str, payload: &str) -> String {
    let started = wait_for(Duration::from_secs(15), || {
        let out = cli(
            &scenario.server,
            scenario.dir.path(),
            &["workflow", "start", name, "--payload", payload, "--json"],
        );
        (out.code == Some(0)).then_some(out.stdout)
    })
    .expect("the workflow was published and started");
    one_document(&started)["id"]
        .as_str()
        .expect("an id")
        .to_owned()
}

/// Waits until the API says the instance is in `state`.
#[track_caller]
fn wait_state(web: &WebProcess, id: &str, state: &str) {
    let path = format!("/api/v1/workflows/{id}");
    let reached = wait_for(Duration::from_secs(30), || {
        (web.get(&path).json()["state"] == state).then_some(())
    });
    assert!(
        reached.is_some(),
        "{id} never {state}: {}",
        web.get(&path).body
    );
}

#[test]
fn an_instance_is_drawn_as_a_graph_and_a_failed_one_runs_again_through_its_form() {
    let scenario = Scenario::new();
    scenario.write_jobs(&stops(&scenario));
    let _replicas = scenario.replicas_with_a_leader(&["r1"], &[]);
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let id = start(
        &scenario,
        "stops",
        r#"{"note": "<img src=x onerror=alert(2)>"}"#,
    );
    wait_state(&web, &id, "failed");

    // The instances, newest first, filtered by state and workflow.
    let list = web.get("/workflows");
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(list.is_page());
    let escaped_id = id.replace('/', "%2F");
    for expected in [
        format!("href=\"/workflows/{escaped_id}\">{id}</a>"),
        "<td class=\"state-failed\">failed</td>".to_owned(),
        "<option value=\"stops\">stops</option>".to_owned(),
    ] {
        assert!(
            list.body.contains(&expected),
            "{expected} missing:\n{}",
            list.body
        );
    }
    let succeeded = web.get("/workflows?state=succeeded");
    assert!(!succeeded.body.contains(&id), "{}", succeeded.body);
    assert!(
        succeeded.body.contains("No instance matches"),
        "{}",
        succeeded.body
    );
    assert!(
        web.get("/workflows?workflow=stops&state=failed")
            .body
            .contains(&id)
    );
    let bad = web.get("/workflows?state=lost");
    assert_eq!((bad.status, bad.is_page()), (400, true), "{}", bad.body);

    // The instance: a box per step with its state, a path per need, a table below.
    let page = web.get(&format!("/workflows/{escaped_id}"));
    assert_eq!(page.status, 200, "{}", page.body);
    let html = &page.body;
    for expected in [
        "<h1>Workflow stops</h1>",
        "leader <strong>r1</strong>",
        "<svg class=\"graph\"",
        "<g class=\"step step-succeeded\"><title>step prepare (job prepare): succeeded</title>",
        "<g class=\"step step-failed\"><title>step flaky (job flaky): failed</title>",
        "<g class=\"step step-skipped\"><title>step publish (job publish): skipped</title>",
        "aria-label=\"instance ",
        "Run again from the failed steps",
        // The step's output and its input, as text.
        "<pre>&lt;script&gt;alert(1)&lt;/script&gt;</pre>",
        "&lt;img src=x onerror=alert(2)&gt;",
    ] {
        assert!(html.contains(expected), "{expected} missing:\n{html}");
    }
    assert_eq!(html.matches("<path class=\"edge\"").count(), 2, "{html}");
    assert!(!html.contains("<script>alert"), "{html}");
    assert!(!html.contains("<img src=x"), "{html}");

    // A read-only console shows the instance and offers no retry, and refuses one posted.
    let read_only = WebProcess::start(
        &scenario.server.url(),
        scenario.dir.path(),
        &["--read-only"],
    );
    let shown = read_only.get(&format!("/workflows/{escaped_id}"));
    assert!(
        !shown.body.contains("Run again from the failed steps"),
        "{}",
        shown.body
    );
    let token = shown.csrf_cookie();
    let refused = read_only.submit_form(
        &format!("/workflows/{escaped_id}/retry"),
        &token,
        &token,
        "",
    );
    assert_eq!(
        (refused.status, refused.code()),
        (403, "read-only".to_owned())
    );
    assert!(refused.is_page(), "{}", refused.body);
    // A forged form (no token of this browser's) is refused too.
    let token = page.csrf_cookie();
    let forged = web.submit_form(
        &format!("/workflows/{escaped_id}/retry"),
        &token,
        "guess",
        "",
    );
    assert_eq!(
        (forged.status, forged.code()),
        (403, "cross-origin".to_owned())
    );
    assert_eq!(
        web.get(&format!("/api/v1/workflows/{id}")).json()["state"],
        "failed"
    );

    // Mended, and run again through the form: the instance goes on to succeed.
    std::fs::write(scenario.dir.path().join("FIXED"), "").expect("fix");
    let retried = web.submit_form(
        &format!("/workflows/{escaped_id}/retry"),
        &token,
        &token,
        "",
    );
    assert_eq!(retried.status, 303, "{}", retried.body);
    let retries: Vec<_> = crate::util::scenario::actions(&scenario, None)
        .into_iter()
        .filter(|(action, ..)| action == "retry-workflow")
        .collect();
    assert!(
        matches!(&retries[..], [(_, actor, run, 1)]
            if actor == "anonymous" && run.starts_with(&format!("{id}/flaky"))),
        "{retries:?}"
    );
    assert_eq!(
        retried.headers["location"],
        format!("/workflows/{escaped_id}"),
        "back to the instance"
    );
    let instance = web.get(&format!("/workflows/{escaped_id}"));
    assert!(
        instance.body.contains("<h1>Workflow stops</h1>"),
        "{}",
        instance.body
    );
    wait_state(&web, &id, "succeeded");
    let done = web.get(&format!("/workflows/{escaped_id}")).body;
    assert_eq!(
        done.matches("step-succeeded\"><title>").count(),
        3,
        "{done}"
    );
    assert!(!done.contains("Run again from the failed steps"), "{done}");
}

#[test]
fn the_workflows_json_is_the_command_lines() {
    let scenario = Scenario::new();
    scenario.write_jobs(&stops(&scenario));
    let _replica = scenario.replica("r1", &[]);
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let id = start(&scenario, "stops", "{}");
    wait_state(&web, &id, "failed");
    let listed = web.get("/api/v1/workflows?workflow=stops").json();
    let shown = one_document(
        &cli(
            &scenario.server,
            scenario.dir.path(),
            &["workflow", "status", &id, "--json"],
        )
        .stdout,
    );
    assert_eq!(listed["workflows"][0], shown["workflows"][0]);
    assert_eq!(listed["damaged"], serde_json::json!([]));
    assert_eq!(
        web.get(&format!("/api/v1/workflows/{id}")).json(),
        shown["workflows"][0]
    );
    // A step's run id holds a `/`: its run is found as written, escaped or not.
    let step_run = shown["workflows"][0]["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find_map(|step| step["run"].as_str()))
        .expect("a step with a run")
        .to_owned();
    assert!(step_run.contains('/'), "{step_run}");
    for path in [
        format!("/api/v1/runs/{step_run}"),
        format!("/api/v1/runs/{}", step_run.replace('/', "%2F")),
    ] {
        let run = web.get(&path);
        assert_eq!(run.status, 200, "{path}: {}", run.body);
        assert_eq!(run.json()["id"], step_run.as_str(), "{path}");
    }
    assert_eq!(web.get(&format!("/runs/{step_run}")).status, 200);
    let unknown = web.get("/api/v1/workflows?workflow=nothing");
    assert_eq!(
        (unknown.status, unknown.code()),
        (404, "unknown-workflow".to_owned())
    );
    std::fs::write(scenario.dir.path().join("FIXED"), "").expect("fix");
    let retried = web.send(
        web.client()
            .post(web.url(&format!("/api/v1/workflows/{id}/retry")))
            .header("origin", format!("http://127.0.0.1:{}", web.port)),
    );
    assert_eq!(retried.status, 200, "{}", retried.body);
    assert_eq!(
        retried.json(),
        serde_json::json!({ "id": id, "steps": ["flaky"], "paused_jobs": [] })
    );
    wait_state(&web, &id, "succeeded");
}

#[test]
fn without_a_workflow_the_page_says_how_to_declare_one_and_an_unknown_instance_is_a_404_page() {
    let scenario = Scenario::new();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let page = web.get("/workflows");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("aria-current=\"page\">Workflows</a>"),
        "{}",
        page.body
    );
    for expected in [
        "No workflow declared",
        "[workflows.NAME]",
        "docs/guide.md#workflows",
    ] {
        assert!(
            page.body.contains(expected),
            "{expected} missing:\n{}",
            page.body
        );
    }
    let missing = web.get("/workflows/no-such-instance");
    assert_eq!(
        (missing.status, missing.code()),
        (404, "unknown-workflow".to_owned())
    );
    assert!(missing.is_page(), "{}", missing.body);
    assert!(
        missing.body.contains("Back to the workflows"),
        "{}",
        missing.body
    );
    let api = web.get("/api/v1/workflows/no-such-instance");
    assert_eq!(
        (api.status, api.code()),
        (404, "unknown-workflow".to_owned())
    );
    assert!(!api.is_page());
    assert_eq!(
        web.get("/api/v1/workflows").json(),
        serde_json::json!({ "workflows": [], "damaged": [] })
    );
}

#[test]
fn an_instance_page_and_the_overview_are_accessible_in_both_schemes() {
    let scenario = Scenario::new();
    scenario.write_jobs(&stops(&scenario));
    let _replicas = scenario.replicas_with_a_leader(&["r1"], &[]);
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let id = start(&scenario, "stops", r#"{"image": "cat.png"}"#);
    wait_state(&web, &id, "failed");
    let shots = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("console");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let browser = Browser::start().await;
        for (page, name) in [
            (web.url(&format!("/workflows/{id}")), "workflow"),
            (web.url("/"), "overview"),
        ] {
            browser.open(&page).await;
            for scheme in [ColorScheme::Light, ColorScheme::Dark] {
                browser.set_color_scheme(scheme).await;
                browser.assert_accessible().await;
                if name == "workflow" {
                    let failed = browser
                        .computed_style("svg.graph .step-failed rect", "stroke")
                        .await;
                    let expected = match scheme {
                        ColorScheme::Light => "rgb(207, 34, 46)",
                        ColorScheme::Dark => "rgb(248, 81, 73)",
                    };
                    assert_eq!(failed, expected, "the failed step's colour in {scheme:?}");
                }
                let shot = browser
                    .screenshot(&shots, &format!("{name}-{}", scheme.name()))
                    .await;
                let size = std::fs::metadata(&shot).expect("the screenshot").len();
                assert!(size < 200_000, "{}: {size} bytes", shot.display());
            }
        }
    });
}
