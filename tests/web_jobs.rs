//! The jobs page and a job's page from a real `redcron web` on a real Redis with real replicas:
//! what they show, their actions through forms (with who did them recorded), a read-only
//! console, and hostile names, payloads and output shown as text.

use std::collections::HashMap;
use std::time::Duration;

use redis::Commands;

use crate::util::keys;
use crate::util::scenario::Scenario;
use crate::util::wait::wait_for;
use crate::util::web::{Answer, WebProcess};

/// A job with the default settings that fires every second, one that runs when triggered
/// (both copy their payload to their output), and one that runs at night in Berlin.
const JOBS: &str = "[jobs.tick]\nschedule = \"@every 1s\"\ncommand = \"cat\"\n\n\
                    [jobs.greet]\ncommand = \"cat\"\n\n\
                    [jobs.nightly]\nschedule = \"15 3 * * *\"\ntimezone = \"Europe/Berlin\"\n\
                    command = \"true\"\n";

/// The form token a page's answer gave the browser.
#[track_caller]
fn token(answer: &Answer) -> String {
    answer.csrf_cookie()
}

/// Posts `form` to `path` as the browser does from one of the console's pages, the cookie's
/// `token` repeated in the form; the redirect is not followed.
fn post_form(web: &WebProcess, path: &str, token: &str, form: &str) -> Answer {
    post_forged(web, path, token, token, form)
}

/// As [`post_form`], the form carrying `field` where the cookie carries `cookie`.
fn post_forged(web: &WebProcess, path: &str, cookie: &str, field: &str, form: &str) -> Answer {
    web.submit_form(path, cookie, field, form)
}

/// The newest events of the stream, newest first, each as its fields.
fn events(redis: &mut redis::Connection) -> Vec<HashMap<String, String>> {
    let reply: redis::streams::StreamRangeReply = redis
        .xrevrange_count(keys().events(), "+", "-", 100)
        .expect("XREVRANGE");
    reply
        .ids
        .into_iter()
        .map(|entry| {
            entry
                .map
                .into_iter()
                .filter_map(|(field, value)| {
                    redis::from_redis_value::<String>(value)
                        .ok()
                        .map(|value| (field, value))
                })
                .collect()
        })
        .collect()
}

/// Waits until the replicas have published each of `jobs`: until then a trigger or a pause of
/// one is refused as of an unknown job.
#[track_caller]
fn wait_published(web: &WebProcess, jobs: &[&str]) {
    for job in jobs {
        let published = wait_for(Duration::from_secs(15), || {
            (web.get(&format!("/api/v1/jobs/{job}")).status == 200).then_some(())
        });
        assert!(published.is_some(), "{job} was never published");
    }
}

#[test]
fn the_jobs_page_lists_each_job_with_its_schedule_next_fire_and_outcomes() {
    let scenario = Scenario::new();
    scenario.write_jobs(JOBS);
    let _replicas = scenario.replicas_with_a_leader(&["r1"], &[]);
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    // Once tick's runs have ended, its strip colours them.
    let page = wait_for(Duration::from_secs(20), || {
        let page = web.get("/jobs");
        (page.status == 200 && page.body.contains("class=\"outcome-succeeded\"")).then_some(page)
    })
    .unwrap_or_else(|| panic!("no outcome on the jobs page:\n{}", web.get("/jobs").body));
    let html = &page.body;
    for expected in [
        "<h1>Jobs</h1>",
        "aria-current=\"page\"",
        "href=\"/jobs/tick\">tick</a>",
        "href=\"/jobs/greet\">greet</a>",
        // The schedule in words, and as written beside them.
        "<span class=\"words\">Every second</span> <code>@every 1s</code>",
        "<span class=\"words\">At 03:15 every day, Europe/Berlin</span> <code>15 3 * * *</code>",
        "on demand",
        "<time datetime=",
        "class=\"chart durations\"",
        "action=\"/jobs/tick/pause\"",
        "action=\"/jobs/greet/trigger\"",
        "name=\"payload\"",
        "data-refresh",
    ] {
        assert!(html.contains(expected), "{expected} missing from:\n{html}");
    }
    // The overview charts the same outcomes, and how late tick's fires started.
    let overview = web.get("/").body;
    for expected in [
        "class=\"chart fires\"",
        "Fire lag over the last hour",
        "p50 <strong>",
    ] {
        assert!(
            overview.contains(expected),
            "{expected} missing from:\n{overview}"
        );
    }
}

#[test]
fn a_namespace_with_no_job_says_where_to_declare_one() {
    let scenario = Scenario::new();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let page = web.get("/jobs");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body
            .contains("No job declared: put a schedule file in the directory"),
        "{}",
        page.body
    );
}

#[test]
fn a_jobs_page_shows_its_definition_fires_history_and_last_output() {
    let scenario = Scenario::new();
    scenario.write_jobs(JOBS);
    let _replicas = scenario.replicas_with_a_leader(&["r1"], &[]);
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    wait_published(&web, &["greet"]);
    let triggered = crate::util::cli(
        &scenario.server,
        scenario.dir.path(),
        &["trigger", "greet", "--payload", "{\"to\":\"ana\"}"],
    );
    assert_eq!(triggered.code, Some(0), "{}", triggered.stderr);
    let page = wait_for(Duration::from_secs(20), || {
        let page = web.get("/jobs/greet");
        page.body
            .contains("{&quot;to&quot;:&quot;ana&quot;}")
            .then_some(page)
    })
    .unwrap_or_else(|| {
        panic!(
            "no output on the job's page:\n{}",
            web.get("/jobs/greet").body
        )
    });
    let html = &page.body;
    assert_eq!(page.status, 200);
    for expected in [
        "<title>Job greet · redcron test</title>",
        "Job <code>greet</code>",
        "None: the job runs only when triggered.",
        "<th scope=\"row\"><a href=\"/runs/",
        "class=\"outcome-succeeded\"",
        "<pre class=\"output\">",
        "command = &quot;cat&quot;",
        "Recent actions",
    ] {
        assert!(html.contains(expected), "{expected} missing from:\n{html}");
    }
    let tick = web.get("/jobs/tick").body;
    assert_eq!(
        tick.split("<h2 id=\"fires-h\">")
            .nth(1)
            .map_or(0, |fires| fires
                .split("</ol>")
                .next()
                .unwrap_or_default()
                .matches("<li>")
                .count()),
        10,
        "ten fires ahead:\n{tick}"
    );

    let nightly = web.get("/jobs/nightly").body;
    assert!(
        nightly.contains(
            "<span class=\"words\">At 03:15 every day, Europe/Berlin</span> <code>15 3 * * *</code>"
        ),
        "the schedule in words on the job's page:\n{nightly}"
    );

    let unknown = web.get("/jobs/nothing-here");
    assert_eq!(unknown.status, 404);
    assert!(
        unknown.body.contains("<nav aria-label=\"Main\">"),
        "{}",
        unknown.body
    );
    assert!(
        unknown
            .body
            .contains("No replica declares a job of that name")
    );
}

#[test]
fn pause_resume_and_trigger_forms_act_and_record_who_did_it() {
    let scenario = Scenario::new();
    scenario.write_jobs(JOBS);
    let _replicas = scenario.replicas_with_a_leader(&["r1"], &[]);
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let mut redis = scenario.server.connection();
    wait_published(&web, &["tick", "greet"]);
    let page = web.get("/jobs");
    let token = token(&page);

    let paused = post_form(&web, "/jobs/tick/pause", &token, "back=jobs");
    assert_eq!(paused.status, 303, "{}", paused.body);
    assert_eq!(paused.headers["location"], "/jobs");
    let is_paused: bool = redis.sismember(keys().paused(), "tick").expect("SISMEMBER");
    assert!(is_paused, "the form paused tick");
    let page = web.get("/jobs").body;
    assert!(page.contains("action=\"/jobs/tick/resume\""), "{page}");
    assert!(
        page.contains("<strong class=\"paused\">paused</strong>"),
        "{page}"
    );

    let resumed = post_form(&web, "/jobs/tick/resume", &token, "back=job");
    assert_eq!(resumed.status, 303, "{}", resumed.body);
    assert_eq!(resumed.headers["location"], "/jobs/tick");
    let is_paused: bool = redis.sismember(keys().paused(), "tick").expect("SISMEMBER");
    assert!(!is_paused, "the form resumed tick");

    // The command line's pause is recorded as its own.
    let by_cli = crate::util::cli(&scenario.server, scenario.dir.path(), &["pause", "greet"]);
    assert_eq!(by_cli.code, Some(0), "{}", by_cli.stderr);
    let actions: Vec<(String, String, String)> = events(&mut redis)
        .into_iter()
        .filter(|event| event.contains_key("action"))
        .map(|event| {
            let field = |name: &str| event.get(name).cloned().unwrap_or_default();
            (field("job"), field("action"), field("actor"))
        })
        .collect();
    assert_eq!(
        actions,
        [
            ("greet".into(), "pause".into(), "cli".into()),
            ("tick".into(), "resume".into(), "anonymous".into()),
            ("tick".into(), "pause".into(), "anonymous".into()),
        ],
        "newest first"
    );
    let job_page = web.get("/jobs/tick").body;
    assert!(
        job_page.contains("<strong>anonymous</strong> paused the job"),
        "{job_page}"
    );
    assert!(
        job_page.contains("<strong>anonymous</strong> resumed the job"),
        "{job_page}"
    );
    let resume_cli = crate::util::cli(&scenario.server, scenario.dir.path(), &["resume", "greet"]);
    assert_eq!(resume_cli.code, Some(0), "{}", resume_cli.stderr);

    let triggered = post_form(
        &web,
        "/jobs/greet/trigger",
        &token,
        "payload=%7B%22n%22%3A7%7D",
    );
    assert_eq!(triggered.status, 303, "{}", triggered.body);
    assert_eq!(triggered.headers["location"], "/jobs/greet");
    let ran = wait_for(Duration::from_secs(20), || {
        let page = web.get("/jobs/greet").body;
        page.contains("{&quot;n&quot;:7}").then_some(page)
    });
    assert!(ran.is_some(), "{}", web.get("/jobs/greet").body);

    // A form that does not carry the browser's token is refused, and changes nothing.
    let forged = post_forged(
        &web,
        "/jobs/tick/pause",
        &token,
        "0123456789abcdef0123456789abcdef",
        "",
    );
    assert_eq!(forged.status, 403, "{}", forged.body);
    let is_paused: bool = redis.sismember(keys().paused(), "tick").expect("SISMEMBER");
    assert!(!is_paused);
}

#[test]
fn a_read_only_console_offers_no_action_and_refuses_one() {
    let scenario = Scenario::new();
    scenario.write_jobs(JOBS);
    let _replicas = scenario.replicas_with_a_leader(&["r1"], &[]);
    let web = WebProcess::start(
        &scenario.server.url(),
        scenario.dir.path(),
        &["--read-only"],
    );
    let list = wait_for(Duration::from_secs(10), || {
        let page = web.get("/jobs");
        page.body.contains("href=\"/jobs/tick\"").then_some(page)
    })
    .expect("the jobs are listed");
    let job = web.get("/jobs/tick");
    // The jobs page's filter is a GET form, which acts on nothing.
    for html in [&list.body, &job.body] {
        assert!(!html.contains("method=\"post\""), "{html}");
        assert!(!html.contains("aria-label=\"Pause"), "{html}");
        assert!(!html.contains("aria-label=\"Trigger"), "{html}");
    }
    assert!(!job.body.contains("<form"), "{}", job.body);
    let token = token(&list);
    let refused = post_form(&web, "/jobs/tick/pause", &token, "");
    assert_eq!(refused.status, 403, "{}", refused.body);
    let mut redis = scenario.server.connection();
    let is_paused: bool = redis.sismember(keys().paused(), "tick").expect("SISMEMBER");
    assert!(!is_paused);
}

#[test]
fn hostile_names_payloads_and_output_are_shown_as_text() {
    let scenario = Scenario::new();
    scenario.write_jobs(JOBS);
    // Before any replica: a leader forgets a definition that no replica declares.
    let mut redis = scenario.server.connection();
    let _: () = redis
        .hset(keys().defs(), "<script>alert(1)</script>", "{not json")
        .expect("HSET");
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let list = web.get("/jobs").body;
    assert!(!list.contains("<script>alert(1)"), "{list}");
    assert!(
        list.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{list}"
    );
    let link = "/jobs/%3Cscript%3Ealert%281%29%3C%2Fscript%3E";
    assert!(
        list.contains(&format!("href=\"{link}\"")),
        "the name is one segment of its link: {list}"
    );
    let page = web.get(link);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("<script>alert(1)"), "{}", page.body);

    let _replicas = scenario.replicas_with_a_leader(&["r1"], &[]);
    wait_published(&web, &["greet"]);
    let hostile = "\"<img src=x onerror=alert(2)>\"";
    let triggered = crate::util::cli(
        &scenario.server,
        scenario.dir.path(),
        &["trigger", "greet", "--payload", hostile],
    );
    assert_eq!(triggered.code, Some(0), "{}", triggered.stderr);
    let page = wait_for(Duration::from_secs(20), || {
        let page = web.get("/jobs/greet").body;
        page.contains("&lt;img src=x onerror=alert(2)&gt;")
            .then_some(page)
    })
    .unwrap_or_else(|| panic!("no output:\n{}", web.get("/jobs/greet").body));
    assert!(!page.contains("<img src=x"), "{page}");
}
