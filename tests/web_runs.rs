//! The Runs, Run and Dead letters pages from a real `redcron web` on a real Redis with a real
//! replica: runs in each state, filters, paging and the search box; a run's timeline after a
//! retry and its output, hostile or large, as text; the dead letters' forms and their checks.

use std::path::Path;
use std::time::{Duration, Instant};

use redis::Commands;

use crate::util::keys;
use crate::util::scenario::Scenario;
use crate::util::wait::{wait_for, wait_until};
use crate::util::web::{Answer, WebProcess, next_link};

/// `greet` ends at once, `slow` runs until the test ends, `parked` waits in a queue no replica
/// serves, `ticker` prints a line every 300 ms for 12 s, `flaky` fails its first attempt and succeeds its second (a marker in the scenario's
/// directory, `WORKDIR`, says which), `doomed` dies at once.
const JOBS: &str = r#"
[jobs.greet]
command = "echo hello"

[jobs.slow]
command = "sleep 60"

[jobs.parked]
command = "true"
queue = "nowhere"

[jobs.flaky]
command = "if [ -e flaky.marker ]; then echo second; else touch flaky.marker; echo first; exit 4; fi"
workdir = "WORKDIR"
retries = 1
backoff = "1s"

[jobs.ticker]
command = "for i in $(seq 1 40); do echo line $i; sleep 0.3; done"

[jobs.doomed]
command = "echo '<script>alert(1)</script>'; printf 'bin\\377ary\\n'; exit 3"
"#;

/// A Redis with replica `r1` leading and every job of [`JOBS`] published, and a console.
fn console(extra: &[&str]) -> (Scenario, crate::util::replica::ReplicaProcess, WebProcess) {
    let scenario = Scenario::new();
    scenario.write_jobs(&JOBS.replace("WORKDIR", &scenario.dir.path().display().to_string()));
    let mut replicas = scenario.replicas_with_a_leader(&["r1"], &["--queues", "default"]);
    let published = wait_until(Duration::from_secs(10), || {
        let out = crate::util::cli(&scenario.server, scenario.dir.path(), &["jobs", "--json"]);
        ["greet", "slow", "parked", "ticker", "flaky", "doomed"]
            .iter()
            .all(|job| out.stdout.contains(&format!("\"{job}\"")))
    });
    assert!(published, "the jobs were never published");
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), extra);
    (scenario, replicas.remove(0), web)
}

/// Triggers `job` through the API: its run id.
#[track_caller]
fn trigger(web: &WebProcess, job: &str, body: Option<&str>) -> String {
    let answer = web.post(&format!("/api/v1/jobs/{job}/trigger"), body);
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()["id"].as_str().expect("a run id").to_owned()
}

/// Waits until `GET path` answers a page `done` accepts; returns it.
#[track_caller]
fn wait_for_page(web: &WebProcess, path: &str, done: impl Fn(&str) -> bool) -> String {
    let mut last = String::new();
    wait_for(Duration::from_secs(20), || {
        let answer = web.get(path);
        last = answer.body;
        (answer.status == 200 && done(&last)).then(|| last.clone())
    })
    .unwrap_or_else(|| panic!("GET {path} never showed what was expected; last:\n{last}"))
}

/// The ids a page of runs links, in order.
fn linked_runs(html: &str) -> Vec<String> {
    html.split("<th scope=\"row\"><a href=\"/runs/")
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(id, _)| id.to_owned()))
        .collect()
}

/// The form token cookie a page gave.
#[track_caller]
fn token(answer: &Answer) -> String {
    answer.csrf_cookie()
}

/// Posts `form` (with the token) to `path` as the browser does from the console's own page,
/// without following the redirect.
fn post_form(web: &WebProcess, token: &str, path: &str, form: &str) -> Answer {
    web.submit_form(path, token, token, form)
}

/// How many re-drives the events stream holds.
fn redrives(scenario: &Scenario) -> usize {
    crate::util::scenario::event_entries(scenario)
        .iter()
        .filter(|entry| entry.get::<String>("reason").as_deref() == Some("redrive"))
        .count()
}

#[test]
fn the_runs_page_lists_each_state_filters_pages_and_finds_a_run_by_id() {
    let (_scenario, _replica, web) = console(&[]);
    let active = trigger(&web, "slow", None);
    let ready = trigger(&web, "parked", None);
    let finished = trigger(&web, "greet", None);
    let mut due = Vec::new();
    for hours in 1..=52 {
        let body = format!(r#"{{"delay_ms": {}}}"#, hours * 3_600_000);
        let answer = web.post("/api/v1/jobs/greet/enqueue", Some(&body));
        due.push(answer.json()["id"].as_str().expect("an id").to_owned());
    }
    let finished_page = wait_for_page(&web, "/runs?state=finished", |html| {
        html.contains(&finished)
    });
    assert!(finished_page.contains("state-succeeded"), "{finished_page}");
    let page = wait_for_page(&web, "/runs", |html| html.contains("state-active"));
    assert!(page.contains("<h1>Runs</h1>"), "{page}");
    let first = linked_runs(&page);
    assert_eq!(first.len(), 50, "a page holds 50 runs: {first:?}");
    assert_eq!(first[0], active, "running first");
    // The next page starts where the first ended, with the filter it was asked with.
    let next = next_link(&page).expect("a next page link");
    let second = linked_runs(&web.get(&next).body);
    assert_eq!(second.len(), 4, "{next}: {second:?}");
    let all: Vec<String> = first.into_iter().chain(second).collect();
    assert!(all.contains(&ready), "{all:?}");
    let due_listed: Vec<String> = all
        .into_iter()
        .filter(|id| *id != active && *id != ready)
        .collect();
    assert_eq!(due_listed, due, "each due run once, soonest first");

    let ids = |path: &str| linked_runs(&web.get(path).body);
    assert_eq!(ids("/runs?state=active"), [active.as_str()]);
    assert_eq!(ids("/runs?state=ready&job=&queue="), [ready.as_str()]);
    assert_eq!(ids("/runs?queue=nowhere"), [ready.as_str()]);
    assert_eq!(ids("/runs?job=slow"), [active.as_str()]);
    assert_eq!(ids("/runs?state=due&job=slow"), Vec::<String>::new());
    let unknown = web.get("/runs?job=nosuchjob");
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert!(unknown.body.contains("nosuchjob"), "{}", unknown.body);

    // The search box: an exact id goes to its page, another says there is none.
    let found = web.get(&format!("/runs?id={active}"));
    assert_eq!(found.status, 200, "{}", found.body);
    assert!(
        found.body.contains(&format!("Run <code>{active}</code>")),
        "{}",
        found.body
    );
    assert!(found.body.contains("data-live-output"), "{}", found.body);
    let missing = web.get("/runs?id=greet%40nothing");
    assert_eq!(missing.status, 404, "{}", missing.body);
    assert!(
        missing.body.contains("no run &quot;greet@nothing&quot;"),
        "{}",
        missing.body
    );
}

#[test]
fn the_runs_page_pages_ended_runs_by_outcome_within_a_time_window() {
    let (scenario, _replica, web) = console(&[]);
    let doomed = trigger(&web, "doomed", None);
    let lines: String = (0..55).map(|_| "{\"job\": \"greet\"}\n").collect();
    let url = scenario.server.url();
    let args = [
        "enqueue",
        "--from",
        "-",
        "--redis",
        &url,
        "--namespace",
        "test",
    ];
    crate::util::redcron_in(scenario.dir.path(), &args, &lines).success();
    let succeeded = |web: &WebProcess| {
        web.get("/api/v1/runs?state=succeeded&limit=1000").json()["runs"]
            .as_array()
            .map_or(0, Vec::len)
    };
    assert!(
        wait_until(Duration::from_secs(30), || succeeded(&web) == 55),
        "the 55 runs never all succeeded: {}",
        succeeded(&web)
    );

    // Failed: the dead run alone.
    let failed = wait_for_page(&web, "/runs?state=failed", |html| html.contains(&doomed));
    assert_eq!(linked_runs(&failed), [doomed.as_str()]);
    assert!(failed.contains("state-dead"), "{failed}");

    // Succeeded in the last hour: 50, then the next page from the link, which keeps the
    // window in its cursor and its query.
    let page = web.get("/runs?state=succeeded&since=1h").body;
    let first = linked_runs(&page);
    assert_eq!(first.len(), 50, "{page}");
    let next = next_link(&page).expect("a next page link");
    assert!(
        next.contains("state=succeeded") && next.contains("since=1h") && next.contains("cursor="),
        "{next}"
    );
    let second = linked_runs(&web.get(&next).body);
    assert_eq!(second.len(), 5, "{next}: {second:?}");
    let mut all: Vec<String> = first.into_iter().chain(second).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 55, "each run once: {all:?}");
    assert!(!all.contains(&doomed));

    // A window that ends before the runs did holds none of them.
    let before = web
        .get("/runs?state=finished&until=2020-01-01T00:00:00Z")
        .body;
    assert!(linked_runs(&before).is_empty(), "{before}");
    assert!(before.contains("No run matches."), "{before}");
    let bad = web.get("/runs?state=succeeded&since=soonish");
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("soonish"), "{}", bad.body);
}

#[test]
fn a_run_page_shows_its_timeline_after_a_retry_and_a_gone_run_is_a_404() {
    let (_scenario, _replica, web) = console(&[]);
    let run = trigger(
        &web,
        "flaky",
        Some(r#"{"payload": {"note": "<b>bold</b>"}}"#),
    );
    let page = wait_for_page(&web, &format!("/runs/{run}"), |html| {
        html.contains("state-succeeded")
    });
    // Both attempts' ends are on the timeline, oldest first, with their exit codes.
    let retrying = page.find("<strong>retrying</strong>").expect(&page);
    let succeeded = page.find("<strong>succeeded</strong>").expect(&page);
    assert!(retrying < succeeded, "{page}");
    assert!(
        page.contains("<strong>latest attempt started</strong>"),
        "{page}"
    );
    for expected in [
        "exit code <span class=\"value\">4</span>",
        "duration <span class=\"value\">",
        "worker <span class=\"value\">r1",
    ] {
        assert!(page.contains(expected), "{expected} missing from:\n{page}");
    }
    assert!(
        page.contains("<pre tabindex=\"0\">second\n</pre>"),
        "{page}"
    );
    assert!(page.contains("&lt;b&gt;bold&lt;/b&gt;"), "{page}");
    assert!(!page.contains("<b>bold"), "{page}");

    let gone = web.get("/runs/greet@1");
    assert_eq!(gone.status, 404, "{}", gone.body);
    assert!(
        gone.body.contains("<nav aria-label=\"Main\">"),
        "{}",
        gone.body
    );
    assert!(gone.body.contains("retention"), "{}", gone.body);
}

#[test]
fn a_planned_fire_the_runs_page_links_has_a_page_saying_when_it_is_due() {
    let scenario = Scenario::new();
    scenario.write_jobs("[jobs.tick]\nschedule = \"*/5 * * * * *\"\ncommand = \"true\"\n");
    let _replicas = scenario.replicas_with_a_leader(&["r1"], &[]);
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    // The furthest fire the leader planned, a minute ahead: still without a record when read.
    let page = wait_for_page(&web, "/runs?state=due", |html| linked_runs(html).len() >= 5);
    let planned = linked_runs(&page).pop().expect("a planned fire");
    let answer = web.get(&format!("/runs/{planned}"));
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert!(
        answer
            .body
            .contains("A planned fire of job <a href=\"/jobs/tick\">tick</a>, due <time"),
        "{}",
        answer.body
    );
}

#[test]
fn hostile_output_is_text_and_a_megabyte_of_it_is_served_quickly() {
    let (scenario, _replica, web) = console(&[]);
    let doomed = trigger(&web, "doomed", None);
    let page = wait_for_page(&web, &format!("/runs/{doomed}"), |html| {
        html.contains("state-dead")
    });
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    assert!(!page.contains("<script>alert"), "{page}");
    assert!(
        page.contains("bin\u{fffd}ary"),
        "invalid UTF-8 shown replaced: {page}"
    );

    // A record's output as large as another writer could make it.
    let mut redis = scenario.server.connection();
    let big = "<i>x</i>\n".repeat(100_000);
    let _: () = redis
        .hset(keys().run(&doomed), "output", &big)
        .expect("HSET");
    let started = Instant::now();
    let page = web.get(&format!("/runs/{doomed}"));
    let took = started.elapsed();
    assert_eq!(page.status, 200);
    assert!(page.body.len() > 1_000_000, "{}", page.body.len());
    assert!(!page.body.contains("<i>x"), "shown as text");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn dead_runs_are_retried_one_and_all_through_forms_and_purged() {
    let (scenario, _replica, web) = console(&[]);
    let first = trigger(&web, "doomed", None);
    let second = trigger(&web, "doomed", None);
    let both_dead = |web: &WebProcess| {
        wait_for_page(web, "/dead?job=doomed", |html| {
            html.contains(&first) && html.contains(&second)
        })
    };
    let page = both_dead(&web);
    assert!(page.contains("<h1>Dead letters</h1>"), "{page}");
    assert!(page.contains("<td>doomed</td>"), "{page}");
    // A dead run's page links its job and its dead letters, and offers the same retry.
    let run_page = web.get(&format!("/runs/{second}"));
    assert_eq!(run_page.status, 200, "{}", run_page.body);
    for expected in [
        "<a href=\"/jobs/doomed\">doomed</a>".to_owned(),
        "<a href=\"/dead?job=doomed\">dead letters of doomed</a>".to_owned(),
        format!("action=\"/dead/{second}/retry\""),
    ] {
        assert!(
            run_page.body.contains(&expected),
            "{expected}: {}",
            run_page.body
        );
    }
    let answer = web.get("/dead?job=doomed");
    let token = token(&answer);

    let retried = post_form(&web, &token, &format!("/dead/{first}/retry?job=doomed"), "");
    assert_eq!(retried.status, 303, "{}", retried.body);
    assert_eq!(
        retried.headers["location"].to_str().ok(),
        Some("/dead?job=doomed")
    );
    let redriven =
        |count: usize| wait_until(Duration::from_secs(15), || redrives(&scenario) == count);
    assert!(redriven(1), "the run was re-driven");

    // Retry all: the confirm step says how many, and a count that changed retries nothing.
    both_dead(&web);
    let confirm = web.get("/dead/retry?job=doomed");
    assert_eq!(confirm.status, 200);
    assert!(
        confirm
            .body
            .contains("Retry <strong>2</strong> dead runs of job <strong>doomed</strong>"),
        "{}",
        confirm.body
    );
    let changed = post_form(&web, &token, "/dead/retry", "job=doomed&count=3");
    assert_eq!(changed.status, 409, "{}", changed.body);
    assert!(
        changed.body.contains("nothing was retried"),
        "{}",
        changed.body
    );
    assert_eq!(redrives(&scenario), 1, "nothing more was re-driven");
    let all = post_form(&web, &token, "/dead/retry", "job=doomed&count=2");
    assert_eq!(all.status, 303, "{}", all.body);
    assert!(redriven(3), "both runs were re-driven");

    // Purge: those dead longer than an age; a bad age is said, a forged form refused.
    both_dead(&web);
    let forged = web.send(
        web.client()
            .post(web.url("/dead/purge"))
            .header("cookie", format!("redcron_csrf={token}"))
            .header("origin", format!("http://127.0.0.1:{}", web.port))
            .header("content-type", "application/x-www-form-urlencoded")
            .body("csrf=guess&older_than=0s"),
    );
    assert_eq!(forged.status, 403, "{}", forged.body);
    let bad = post_form(&web, &token, "/dead/purge", "older_than=soon");
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(
        bad.body
            .contains("older_than must be an age such as 30m or 7d"),
        "{}",
        bad.body
    );
    let kept = post_form(&web, &token, "/dead/purge", "older_than=1h");
    assert_eq!(kept.status, 303, "{}", kept.body);
    assert!(web.get("/dead").body.contains(&first));
    let purged = post_form(&web, &token, "/dead/purge", "older_than=0s");
    assert_eq!(purged.status, 303, "{}", purged.body);
    assert!(web.get("/dead").body.contains("No dead run"));
    let purges: Vec<_> = crate::util::scenario::actions(&scenario, None)
        .into_iter()
        .filter(|(action, ..)| action == "purge")
        .collect();
    assert!(
        matches!(&purges[..], [(_, actor, run, 1..)] if actor == "anonymous" && !run.is_empty()),
        "{purges:?}"
    );
}

#[test]
fn a_read_only_console_offers_no_dead_letter_action_and_refuses_one() {
    let (scenario, _replica, _web) = console(&[]);
    let web = WebProcess::start(
        &scenario.server.url(),
        scenario.dir.path(),
        &["--read-only"],
    );
    let run = scenario.trigger("doomed");
    let page = wait_for_page(&web, "/dead", |html| html.contains(&run));
    for action in ["Retry", "Purge", "method=\"post\""] {
        assert!(!page.contains(action), "{action} offered:\n{page}");
    }
    let token = token(&web.get("/dead"));
    let refused = post_form(&web, &token, &format!("/dead/{run}/retry"), "");
    assert_eq!(refused.status, 403, "{}", refused.body);
    assert_eq!(scenario.run_state(&run).0.as_deref(), Some("dead"));
}

/// In a real browser: a running run's output grows on its page without a reload and the page
/// shows how it ended; the same page without JavaScript; a dead run retried by a click; the
/// three pages accessible in both schemes, photographed for the documentation.
#[test]
fn in_a_browser_the_output_grows_live_and_a_dead_run_is_retried_by_a_click() {
    use crate::util::browser::{Browser, BrowserOptions, ColorScheme};

    let (scenario, _replica, web) = console(&[]);
    let doomed = trigger(&web, "doomed", None);
    wait_for_page(&web, "/dead", |html| html.contains(&doomed));
    let base = web.url("");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    // The browser first: it may take seconds to start on a loaded machine, and the run must
    // still run when its page opens.
    let browser = runtime.block_on(Browser::start());
    let ticking = trigger(&web, "ticker", None);
    runtime.block_on(async {
        browser.open(&format!("{base}/runs/{ticking}")).await;
        browser.wait_for("[data-live-output]").await;
        // A mark in the window: a reload would lose it.
        browser
            .client()
            .execute("window.stillHere = true;", vec![])
            .await
            .expect("the mark is set");
        let mut seen = Vec::new();
        let grew = crate::util::wait::wait_until_async(Duration::from_secs(20), async || {
            let text = browser.text("#live-output").await;
            if seen.last() != Some(&text) {
                seen.push(text.clone());
            }
            text.contains("line 8")
        })
        .await;
        assert!(grew, "the output never reached line 8: {seen:?}");
        assert!(seen.len() >= 2, "the output grew in place: {seen:?}");
        let kept = browser
            .client()
            .execute("return window.stillHere === true;", vec![])
            .await
            .expect("the mark is read");
        assert_eq!(
            kept,
            serde_json::Value::Bool(true),
            "no reload while it ran"
        );
        browser.wait_for(".state-succeeded").await;
        assert!(browser.text("#output pre").await.contains("line 40"));

        // Into the build directory, not docs/images: a test run must not change the tree. The
        // pictures the docs show are copied from there by hand when the pages change.
        let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console");
        for (path, name) in [
            ("/runs?state=finished".to_owned(), "runs"),
            (format!("/runs/{ticking}"), "run"),
            ("/dead".to_owned(), "dead"),
        ] {
            browser.open(&format!("{base}{path}")).await;
            for scheme in [ColorScheme::Light, ColorScheme::Dark] {
                browser.set_color_scheme(scheme).await;
                browser.assert_accessible().await;
                browser
                    .photograph(&shots, &format!("{name}-{}", scheme.name()))
                    .await;
            }
            browser.set_color_scheme(ColorScheme::Light).await;
        }

        browser.open(&format!("{base}/dead")).await;
        browser
            .click(&format!("button[aria-label=\"Retry {doomed}\"]"))
            .await;

        let plain = Browser::start_with(BrowserOptions {
            javascript: false,
            ..BrowserOptions::default()
        })
        .await;
        plain.open(&format!("{base}/runs/{ticking}")).await;
        assert!(plain.text("#output pre").await.contains("line 40"));
        assert!(plain.text("#timeline").await.contains("succeeded"));
    });
    assert!(
        wait_until(Duration::from_secs(15), || redrives(&scenario) == 1),
        "the click re-drove the dead run"
    );
}

/// A run whose replica was killed mid-run: its page says, while the run's lease holds it, that
/// the replica is lost and what becomes of the run, where it showed a run going on.
#[test]
fn a_run_whose_replica_was_killed_says_the_replica_is_lost() {
    let (_scenario, mut replica, web) = console(&[]);
    let run = trigger(&web, "slow", None);
    let path = format!("/runs/{run}");
    let running = wait_for_page(&web, &path, |page| page.contains("state-active"));
    assert!(!running.contains("lost-replica"), "{running}");
    replica.kill9();
    let lost = wait_for_page(&web, &path, |page| page.contains("id=\"lost-replica\""));
    assert!(
        lost.contains("Replica <strong>r1</strong> that runs this attempt")
            && lost.contains("the run is started again without using a retry"),
        "{lost}"
    );
    assert!(lost.contains("state-active"), "{lost}");
}

/// A filter the indexes do not serve, matching one run behind thousands of others: the Runs
/// page reads on past pages that keep none, and never says "No run matches" while a next page
/// may hold one.
#[test]
fn a_filtered_runs_page_reads_on_past_runs_it_does_not_keep() {
    let (scenario, _replica, web) = console(&[]);
    let soon = chrono::Utc::now() + chrono::Duration::hours(1);
    let later = soon + chrono::Duration::hours(2);
    let mut lines: String = (0..3_000)
        .map(|_| {
            format!(
                "{{\"job\": \"greet\", \"at\": \"{}\"}}\n",
                soon.to_rfc3339()
            )
        })
        .collect();
    lines.push_str(&format!(
        "{{\"job\": \"parked\", \"at\": \"{}\"}}\n",
        later.to_rfc3339()
    ));
    let file = scenario.dir.path().join("runs.jsonl");
    std::fs::write(&file, lines).expect("write the runs");
    let file = file.display().to_string();
    let enqueued = crate::util::cli(
        &scenario.server,
        scenario.dir.path(),
        &["enqueue", "--from", &file],
    );
    assert_eq!(enqueued.code, Some(0), "{}", enqueued.stderr);
    let mut path = "/runs?state=due&queue=nowhere".to_owned();
    let mut found = false;
    for _ in 0..100 {
        let page = web.get(&path);
        assert_eq!(page.status, 200, "{}", page.body);
        let next = next_link(&page.body);
        assert!(
            !(page.body.contains("No run matches.") && next.is_some()),
            "an empty page says nothing matches while a next page reads on:\n{}",
            page.body
        );
        if page.body.contains("/runs/") && linked_runs(&page.body).len() == 1 {
            found = true;
            break;
        }
        match next {
            Some(next) => path = next,
            None => break,
        }
    }
    assert!(found, "the parked run was never listed");
}
