//! The HTTP API of `redcron web` against a real Redis and real replicas: every route, its
//! errors and codes, pages by cursor, under a base path, read-only, authenticated, and refusing
//! a forged cross-origin action.

use std::time::Duration;

use serde_json::Value;

use crate::util::scenario::Scenario;
use crate::util::wait::wait_for;
use crate::util::web::{Answer, WebProcess};
use crate::util::{redcron_in, wait_until};

/// A job that succeeds with its payload as output, and one that dies at once.
const JOBS: &str = "[jobs.greet]\ncommand = \"cat\"\n\n[jobs.doomed]\ncommand = \"exit 3\"\n";

/// A Redis with a replica that leads and declares [`JOBS`], waited for until both are
/// published.
fn declared() -> (Scenario, crate::util::replica::ReplicaProcess) {
    let scenario = Scenario::new();
    scenario.write_jobs(JOBS);
    let mut replicas = scenario.replicas_with_a_leader(&["r1"], &[]);
    let published = wait_until(Duration::from_secs(10), || {
        let out = crate::util::cli(&scenario.server, scenario.dir.path(), &["jobs", "--json"]);
        out.stdout.contains("\"greet\"") && out.stdout.contains("\"doomed\"")
    });
    assert!(published, "the jobs were never published");
    (scenario, replicas.remove(0))
}

/// Waits until `GET path` answers 200 with a document `done` accepts; returns it.
#[track_caller]
fn wait_for_document(web: &WebProcess, path: &str, done: impl Fn(&Value) -> bool) -> Value {
    let mut last = String::new();
    wait_for(Duration::from_secs(15), || {
        let answer = web.get(path);
        last = answer.body.clone();
        (answer.status == 200 && done(&answer.json())).then(|| answer.json())
    })
    .unwrap_or_else(|| panic!("GET {path} never answered as expected; last: {last}"))
}

#[track_caller]
fn expect(answer: &Answer, status: u16, code: &str) {
    assert_eq!(answer.status, status, "{}", answer.body);
    assert_eq!(answer.code(), code, "{}", answer.body);
    assert!(
        !answer.json()["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .is_empty(),
        "an error says what went wrong: {}",
        answer.body
    );
}

/// Every route of the API, as a script would use it: reads, trigger with a payload, the
/// run's outcome, history, a dead run retried and purged, and the errors on the way.
fn every_route(extra: &[&str]) {
    let (scenario, _replica) = declared();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), extra);

    let status = web.get("/api/v1/status");
    assert_eq!(status.status, 200, "{}", status.body);
    let status = status.json();
    assert_eq!(status["leader"]["id"], "r1", "{status}");
    assert!(status["replicas"].as_array().is_some_and(|r| r.len() == 1));
    for header in [
        "content-security-policy",
        "x-content-type-options",
        "referrer-policy",
    ] {
        assert!(
            web.get("/api/v1/jobs").headers.contains_key(header),
            "{header}"
        );
    }

    let jobs = web.get("/api/v1/jobs").json();
    let names: Vec<&str> = jobs["jobs"]
        .as_array()
        .expect("a list of jobs")
        .iter()
        .filter_map(|job| job["job"].as_str())
        .collect();
    assert_eq!(names, ["doomed", "greet"], "{jobs}");
    assert_eq!(web.get("/api/v1/jobs/greet").json()["command"], "cat");
    expect(&web.get("/api/v1/jobs/nope"), 404, "unknown-job");
    expect(
        &web.post("/api/v1/jobs/nope/trigger", None),
        404,
        "unknown-job",
    );
    expect(&web.get("/api/v1/nothing-here"), 404, "no-route");

    // A trigger with a payload runs the job, which prints it back.
    let triggered = web.post(
        "/api/v1/jobs/greet/trigger",
        Some(r#"{"payload": {"who": "<script>alert(1)</script>"}}"#),
    );
    assert_eq!(triggered.status, 200, "{}", triggered.body);
    let run_id = triggered.json()["id"]
        .as_str()
        .expect("a run id")
        .to_owned();
    let run = wait_for_document(&web, &format!("/api/v1/runs/{run_id}"), |run| {
        run["state"] == "succeeded"
    });
    assert_eq!(run["job"], "greet");
    assert!(
        run["output"]
            .as_str()
            .is_some_and(|out| out.contains("<script>")),
        "{run}"
    );
    expect(&web.get("/api/v1/runs/greet@1"), 404, "unknown-run");
    let history = web.get("/api/v1/history?job=greet").json();
    assert_eq!(history["runs"][0]["id"], run_id.as_str(), "{history}");
    expect(&web.get("/api/v1/history?job=nope"), 404, "unknown-job");
    expect(&web.get("/api/v1/history?colour=red"), 400, "bad-query");

    // Bad bodies and payloads are the caller's mistake.
    expect(
        &web.post("/api/v1/jobs/greet/trigger", Some("{not json")),
        400,
        "bad-body",
    );
    let huge = format!(r#"{{"payload": "{}"}}"#, "x".repeat(1_100_000));
    expect(
        &web.post("/api/v1/jobs/greet/enqueue", Some(&huge)),
        400,
        "bad-payload",
    );
    expect(
        &web.post("/api/v1/jobs/greet/enqueue", Some(r#"{"at_ms": 1000}"#)),
        400,
        "bad-time",
    );

    // A unique run refuses a second while the first waits.
    let unique = r#"{"delay_ms": 3600000, "unique_key": "once"}"#;
    let waiting = web.post("/api/v1/jobs/greet/enqueue", Some(unique));
    assert_eq!(waiting.status, 200);
    let waiting = waiting.json()["id"].as_str().expect("a run id").to_owned();
    expect(
        &web.post("/api/v1/jobs/greet/enqueue", Some(unique)),
        409,
        "unique-conflict",
    );

    // Pause and resume say what the job was.
    let paused = web.post("/api/v1/jobs/greet/pause", None).json();
    assert_eq!(
        (paused["paused"].clone(), paused["was_paused"].clone()),
        (true.into(), false.into())
    );
    assert_eq!(web.get("/api/v1/status").json()["jobs"][1]["paused"], true);
    let resumed = web.post("/api/v1/jobs/greet/resume", None).json();
    assert_eq!(resumed["was_paused"], true, "{resumed}");

    // A dead run is listed, retried (and dies again), retried by filter, then purged.
    let doomed = web.post("/api/v1/jobs/doomed/trigger", None).json()["id"]
        .as_str()
        .expect("a run id")
        .to_owned();
    let dead = wait_for_document(&web, "/api/v1/dead", |dead| {
        dead["runs"][0]["id"] == doomed.as_str()
    });
    assert_eq!(dead["runs"][0]["exit_code"], 3, "{dead}");
    assert_eq!(
        web.get(&format!("/api/v1/dead/{doomed}")).json()["state"],
        "dead"
    );
    let retried = web
        .post(&format!("/api/v1/dead/{doomed}/retry"), None)
        .json();
    assert_eq!(retried["retried"][0], doomed.as_str(), "{retried}");
    // Only a dead run is retried: one waiting is no dead run. (The retried run is no test of
    // it: it may already have died again.)
    expect(
        &web.post(&format!("/api/v1/dead/{waiting}/retry"), None),
        404,
        "unknown-run",
    );
    wait_for_document(&web, "/api/v1/dead", |dead| {
        dead["runs"][0]["id"] == doomed.as_str()
    });
    let retried = web
        .post("/api/v1/dead/retry", Some(r#"{"job": "doomed"}"#))
        .json();
    assert_eq!(retried["retried"][0], doomed.as_str(), "{retried}");
    wait_for_document(&web, "/api/v1/dead", |dead| {
        dead["runs"][0]["id"] == doomed.as_str()
    });
    let purged = web.post("/api/v1/dead/purge", Some("{}")).json();
    assert_eq!(purged["purged"], 1, "{purged}");
    assert_eq!(
        web.get("/api/v1/dead").json()["runs"],
        Value::Array(Vec::new())
    );
}

#[test]
fn every_route_answers_in_the_command_lines_shapes() {
    every_route(&[]);
}

#[test]
fn every_route_answers_under_a_base_path() {
    every_route(&["--base-path", "/redcron"]);
}

#[test]
fn routes_outside_the_base_path_are_not_served() {
    let (scenario, _replica) = declared();
    let web = WebProcess::start(
        &scenario.server.url(),
        scenario.dir.path(),
        &["--base-path", "/redcron"],
    );
    let outside = web.send(
        web.client()
            .get(format!("http://127.0.0.1:{}/api/v1/jobs", web.port)),
    );
    assert_eq!(outside.status, 404, "{}", outside.body);
    assert_eq!(web.get("/api/v1/jobs").status, 200);
}

#[test]
fn runs_are_paged_by_a_cursor_each_once_in_order() {
    let (scenario, _replica) = declared();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let mut made = Vec::new();
    for hours in 1..=5 {
        let body = format!(r#"{{"delay_ms": {}}}"#, hours * 3_600_000);
        let answer = web.post("/api/v1/jobs/greet/enqueue", Some(&body));
        made.push(answer.json()["id"].as_str().expect("an id").to_owned());
    }
    let mut seen = Vec::new();
    let mut path = "/api/v1/runs?state=due&limit=2".to_owned();
    loop {
        let page = web.get(&path).json();
        let runs = page["runs"].as_array().expect("a page of runs");
        assert!(runs.len() <= 2, "{page}");
        seen.extend(
            runs.iter()
                .map(|run| run["id"].as_str().expect("an id").to_owned()),
        );
        match page["next_cursor"].as_str() {
            Some(cursor) => path = format!("/api/v1/runs?state=due&limit=2&cursor={cursor}"),
            None => break,
        }
    }
    // Due soonest first: the order they were made in.
    assert_eq!(seen, made);
    expect(&web.get("/api/v1/runs?cursor=gone@1"), 400, "bad-cursor");
    expect(&web.get("/api/v1/runs?limit=0"), 400, "bad-query");
}

#[test]
fn a_read_only_server_refuses_every_action_and_serves_every_read() {
    let (scenario, _replica) = declared();
    let web = WebProcess::start(
        &scenario.server.url(),
        scenario.dir.path(),
        &["--read-only"],
    );
    for path in [
        "/api/v1/jobs/greet/pause",
        "/api/v1/jobs/greet/resume",
        "/api/v1/jobs/greet/trigger",
        "/api/v1/jobs/greet/enqueue",
        "/api/v1/dead/greet@1/retry",
        "/api/v1/dead/retry",
        "/api/v1/dead/purge",
    ] {
        expect(&web.post(path, None), 403, "read-only");
    }
    for path in [
        "/api/v1/status",
        "/api/v1/jobs",
        "/api/v1/runs",
        "/api/v1/history",
        "/api/v1/dead",
    ] {
        assert_eq!(web.get(path).status, 200, "{path}");
    }
    let paused = crate::util::cli(&scenario.server, scenario.dir.path(), &["status", "--json"]);
    assert!(
        paused.stdout.contains("\"paused\":false"),
        "{}",
        paused.stdout
    );
}

#[test]
fn a_forged_cross_origin_action_is_refused() {
    let (scenario, _replica) = declared();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let forged = web.send(
        web.client()
            .post(web.url("/api/v1/jobs/greet/pause"))
            .header("origin", "https://evil.example")
            .header("sec-fetch-site", "cross-site"),
    );
    expect(&forged, 403, "cross-origin");
    assert_eq!(web.get("/api/v1/jobs/greet").status, 200);
    let status = web.get("/api/v1/status").json();
    assert_eq!(status["jobs"][1]["paused"], false, "{status}");
    let own = web.send(
        web.client()
            .post(web.url("/api/v1/jobs/greet/pause"))
            .header("origin", format!("http://127.0.0.1:{}", web.port))
            .header("sec-fetch-site", "same-origin"),
    );
    assert_eq!(own.status, 200, "{}", own.body);
}

#[test]
fn an_enqueue_further_out_than_a_year_is_refused_and_the_runs_stay_listed() {
    let (scenario, _replica) = declared();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    // Past what a Redis score holds exactly: such a due time, once in the due set, made every
    // listing of the due runs fail to read it back.
    for body in [
        r#"{"delay_ms": 18446744073709551615}"#,
        r#"{"at_ms": 9223372036854775807}"#,
        r#"{"delay_ms": 31622400001}"#,
    ] {
        expect(
            &web.post("/api/v1/jobs/greet/enqueue", Some(body)),
            400,
            "bad-time",
        );
    }
    let year = web.post(
        "/api/v1/jobs/greet/enqueue",
        Some(r#"{"delay_ms": 31622400000}"#),
    );
    assert_eq!(year.status, 200, "{}", year.body);
    let listed = web.get("/api/v1/runs?state=due");
    assert_eq!(listed.status, 200, "{}", listed.body);
    assert_eq!(
        listed.json()["runs"][0]["id"],
        year.json()["id"],
        "{}",
        listed.body
    );
}

#[test]
fn an_enqueues_uniqueness_and_a_time_long_past_are_held_as_the_command_lines_are() {
    let (scenario, _replica) = declared();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    for (body, field) in [
        (
            r#"{"unique": true, "unique_for_ms": 18446744073709551615}"#,
            "unique_for_ms",
        ),
        (r#"{"unique": true, "unique_for_ms": 0}"#, "unique_for_ms"),
        (
            r#"{"at_ms": -9223372036854775808, "past_ok": true}"#,
            "at_ms",
        ),
        (r#"{"at_ms": -1, "past_ok": true}"#, "at_ms"),
    ] {
        let refused = web.post("/api/v1/jobs/greet/enqueue", Some(body));
        expect(&refused, 400, "bad-time");
        assert!(refused.body.contains(field), "{body}: {}", refused.body);
    }
    let hour_ago = chrono::Utc::now().timestamp_millis() - 3_600_000;
    let past = web.post(
        "/api/v1/jobs/greet/enqueue",
        Some(&format!(
            r#"{{"at_ms": {hour_ago}, "past_ok": true, "unique": true, "unique_for_ms": 60000}}"#
        )),
    );
    assert_eq!(past.status, 200, "{}", past.body);
}

#[test]
fn a_path_a_query_or_a_method_a_route_cannot_take_is_refused_in_the_apis_shape_or_the_layout() {
    let scenario = Scenario::new();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    for path in [
        "/api/v1/jobs/%FF",
        "/api/v1/runs/%FF%FE",
        "/api/v1/dead/%FF/retry",
    ] {
        let answer = if path.ends_with("/retry") {
            web.post(path, None)
        } else {
            web.get(path)
        };
        expect(&answer, 404, "no-route");
    }
    // A GET of an action: a link to a form's action, or a script that forgot its method.
    let wrong = web.get("/api/v1/jobs/greet/pause");
    expect(&wrong, 405, "method-not-allowed");
    assert_eq!(
        wrong
            .headers
            .get("allow")
            .and_then(|allow| allow.to_str().ok()),
        Some("POST"),
        "{:?}",
        wrong.headers
    );
    for (path, status, code) in [
        ("/jobs/greet/pause", 405, "method-not-allowed"),
        ("/jobs/%FF", 404, "no-route"),
        ("/runs/%FF", 404, "no-route"),
        ("/runs?state=due&state=ready", 400, "bad-query"),
        ("/dead?job=a&job=b", 400, "bad-query"),
    ] {
        let answer = web.get(path);
        assert_eq!(answer.status, status, "{path}: {}", answer.body);
        assert!(answer.is_page(), "{path}: {}", answer.body);
        assert_eq!(answer.code(), code, "{path}");
    }
}

#[test]
fn tokens_and_users_act_as_their_roles_allow() {
    let (scenario, _replica) = declared();
    let dir = scenario.dir.path();
    let hash = |args: &[&str], secret: &str| {
        let mut all = vec!["web", "hash"];
        all.extend(args);
        redcron_in(dir, &all, secret).success().trim().to_owned()
    };
    let auth = format!(
        "[[token]]\nname = \"dashboard\"\nsha256 = \"{}\"\nrole = \"viewer\"\n\n\
         [[token]]\nname = \"deploy\"\nsha256 = \"{}\"\nrole = \"operator\"\n\n\
         [[user]]\nname = \"alice\"\npassword_hash = \"{}\"\nrole = \"operator\"\n",
        hash(&["--token"], "viewer-token\n"),
        hash(&["--token"], "operator-token\n"),
        hash(&[], "alice's password\n"),
    );
    std::fs::write(dir.join("auth.toml"), auth).expect("write the auth file");
    let web = WebProcess::start(&scenario.server.url(), dir, &["--auth-file", "auth.toml"]);
    let anonymous = web.get("/api/v1/jobs");
    expect(&anonymous, 401, "unauthenticated");
    assert!(anonymous.headers.contains_key("www-authenticate"));
    let wrong = web.send(
        web.client()
            .get(web.url("/api/v1/jobs"))
            .bearer_auth("guess"),
    );
    expect(&wrong, 401, "unauthenticated");

    let viewer = |request: reqwest::RequestBuilder| web.send(request.bearer_auth("viewer-token"));
    assert_eq!(
        viewer(web.client().get(web.url("/api/v1/jobs"))).status,
        200
    );
    expect(
        &viewer(web.client().post(web.url("/api/v1/jobs/greet/pause"))),
        403,
        "forbidden",
    );
    let operator = web.send(
        web.client()
            .post(web.url("/api/v1/jobs/greet/pause"))
            .bearer_auth("operator-token"),
    );
    assert_eq!(operator.status, 200, "{}", operator.body);
    let alice = web.send(
        web.client()
            .post(web.url("/api/v1/jobs/greet/resume"))
            .basic_auth("alice", Some("alice's password")),
    );
    assert_eq!(alice.json()["was_paused"], true, "{}", alice.body);
    let mallory = web.send(
        web.client()
            .get(web.url("/api/v1/jobs"))
            .basic_auth("alice", Some("guess")),
    );
    expect(&mallory, 401, "unauthenticated");
}

#[test]
fn a_retry_records_who_asked_in_the_events_stream() {
    let (scenario, _replica) = declared();
    let dir = scenario.dir.path();
    let token = redcron_in(dir, &["web", "hash", "--token"], "deploy-token").success();
    let auth = format!(
        "[[token]]\nname = \"deploy\"\nsha256 = \"{}\"\nrole = \"operator\"\n",
        token.trim()
    );
    std::fs::write(dir.join("auth.toml"), auth).expect("write the auth file");
    let web = WebProcess::start(&scenario.server.url(), dir, &["--auth-file", "auth.toml"]);
    let post = |path: &str| web.send(web.client().post(web.url(path)).bearer_auth("deploy-token"));
    let doomed = post("/api/v1/jobs/doomed/trigger").json()["id"]
        .as_str()
        .expect("a run id")
        .to_owned();
    let dead = |web: &WebProcess| {
        wait_for(Duration::from_secs(15), || {
            let dead = web.send(
                web.client()
                    .get(web.url("/api/v1/dead"))
                    .bearer_auth("deploy-token"),
            );
            (dead.json()["runs"][0]["id"] == doomed.as_str()).then_some(())
        })
        .expect("the run died");
    };
    dead(&web);
    // `/dead` takes the page's `job` filter.
    let of_job = |job: &str| {
        web.send(
            web.client()
                .get(web.url(&format!("/api/v1/dead?job={job}")))
                .bearer_auth("deploy-token"),
        )
        .json()["runs"]
            .clone()
    };
    assert_eq!(of_job("doomed")[0]["id"], doomed.as_str());
    assert_eq!(of_job("greet"), serde_json::json!([]));
    assert_eq!(post(&format!("/api/v1/dead/{doomed}/retry")).status, 200);
    dead(&web);
    // A retry of many names what it retries: no body retries nothing.
    assert_eq!(post("/api/v1/dead/retry").status, 400);
    let all = web.send(
        web.client()
            .post(web.url("/api/v1/dead/retry"))
            .bearer_auth("deploy-token")
            .header("content-type", "application/json")
            .body(r#"{"all": true}"#),
    );
    assert_eq!(all.status, 200, "{}", all.body);
    let actors: Vec<String> = crate::util::scenario::event_entries(&scenario)
        .iter()
        .filter(|entry| entry.get::<String>("reason").as_deref() == Some("redrive"))
        .map(|entry| entry.get::<String>("actor").unwrap_or_default())
        .collect();
    assert_eq!(actors, ["deploy", "deploy"]);
}

#[test]
fn a_public_address_without_authentication_is_refused() {
    let scenario = Scenario::new();
    let url = scenario.server.url();
    let refused = redcron_in(
        scenario.dir.path(),
        &[
            "web",
            "--listen",
            "0.0.0.0:0",
            "--redis",
            &url,
            "--namespace",
            "test",
        ],
        "",
    )
    .failure(2);
    assert!(refused.contains("--auth-file"), "{refused}");
    assert!(refused.contains("0.0.0.0"), "{refused}");
}

#[test]
fn redis_out_of_reach_is_a_503_and_the_server_recovers() {
    let (mut scenario, _replica) = declared();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    assert_eq!(web.get("/api/v1/jobs").status, 200);
    scenario.server.kill9();
    let down = wait_for(Duration::from_secs(15), || {
        let answer = web.get("/api/v1/jobs");
        (answer.status == 503).then_some(answer)
    })
    .expect("a 503 while Redis is down");
    assert_eq!(down.code(), "redis-unavailable", "{}", down.body);
}
