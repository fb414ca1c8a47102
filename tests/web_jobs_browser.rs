//! The Jobs and Job pages in a real browser against a real `redcron web`, Redis and replica: a
//! job paused by a click, a triggered run shown by the page's own refresh, both pages accessible
//! in both schemes and photographed; and the whole console gone through without JavaScript, as
//! an operator would, every action a form.

use std::path::Path;
use std::time::Duration;

use redis::Commands;
use serde_json::Value;

use crate::util::browser::{Browser, BrowserOptions, ColorScheme};
use crate::util::replica::ReplicaProcess;
use crate::util::scenario::Scenario;
use crate::util::wait::{wait_for, wait_until, wait_until_async};
use crate::util::web::WebProcess;
use crate::util::{cli, keys};

/// Jobs as a namespace has them: two at fixed times in their own zones, one on crontab's
/// either-day rule, one every 2 s, one every 3 s that fails every third run (its count kept in
/// `WORKDIR`), one that dies, and `greet`, run when triggered, which waits for the file
/// `WORKDIR/release` and then prints its payload.
const JOBS: &str = r#"
[jobs.backup]
schedule = "15 3 * * *"
timezone = "Europe/Berlin"
command = "true"

[jobs.report]
schedule = "0 9 * * 1-5"
timezone = "America/New_York"
command = "true"

[jobs.cleanup]
schedule = "0 4 1,15 * sun"
command = "true"

[jobs.heartbeat]
schedule = "@every 2s"
command = "echo ok"

[jobs.billing]
schedule = "@every 3s"
command = "n=$(cat count 2>/dev/null || echo 0); echo $((n + 1)) > count; echo synced batch $n; test $((n % 3)) -ne 2"
workdir = "WORKDIR"

[jobs.doomed]
command = "echo out of luck; exit 3"

[jobs.greet]
command = "while [ ! -e release ]; do sleep 0.1; done; cat"
workdir = "WORKDIR"
"#;

/// A Redis with replica `r1` leading and every job of [`JOBS`] published, and a console.
fn console() -> (Scenario, ReplicaProcess, WebProcess) {
    let scenario = Scenario::new();
    scenario.write_jobs(&JOBS.replace("WORKDIR", &scenario.dir.path().display().to_string()));
    let mut replicas = scenario.replicas_with_a_leader(&["r1"], &[]);
    let published = wait_until(Duration::from_secs(15), || {
        let out = cli(&scenario.server, scenario.dir.path(), &["jobs", "--json"]);
        [
            "backup",
            "report",
            "cleanup",
            "heartbeat",
            "billing",
            "doomed",
            "greet",
        ]
        .iter()
        .all(|job| out.stdout.contains(&format!("\"{job}\"")))
    });
    assert!(published, "the jobs were never published");
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    (scenario, replicas.remove(0), web)
}

/// Waits until `GET path` answers a page `done` accepts.
#[track_caller]
fn wait_for_page(web: &WebProcess, path: &str, done: impl Fn(&str) -> bool) {
    let mut last = String::new();
    let shown = wait_for(Duration::from_secs(30), || {
        last = web.get(path).body;
        done(&last).then_some(())
    });
    assert!(
        shown.is_some(),
        "GET {path} never showed what was expected; last:\n{last}"
    );
}

/// Whether Redis holds `job` paused.
fn paused(scenario: &Scenario, job: &str) -> bool {
    scenario
        .server
        .connection()
        .sismember(keys().paused(), job)
        .expect("SISMEMBER")
}

/// The row of `job` on the jobs page, as a CSS selector.
fn row(job: &str) -> String {
    format!("tr:has(> th a[href=\"/jobs/{job}\"])")
}

/// Runs `script` in the page shown (the driver's scripts run with the page's own off); its value.
async fn execute(browser: &Browser, script: &str) -> Value {
    browser
        .client()
        .execute(script, vec![])
        .await
        .unwrap_or_else(|error| panic!("{script} fails: {error}"))
}

/// How many redirects led to the page shown: 1 after a form's POST answered with a 303.
async fn redirects(browser: &Browser) -> Value {
    execute(
        browser,
        "return performance.getEntriesByType('navigation')[0].redirectCount;",
    )
    .await
}

/// Asserts the page shown is the console's page titled `heading`, naming leader `r1`.
async fn assert_page(browser: &Browser, heading: &str) {
    browser.wait_for_text(heading).await;
    assert_eq!(
        browser.text("main h1").await,
        heading,
        "{}",
        browser.url().await
    );
    let mut named = Vec::new();
    for strong in browser.find_all("header .where strong").await {
        named.push(strong.text().await.expect("its text"));
    }
    assert_eq!(
        named,
        ["test", "r1"],
        "the namespace and the leader on {}",
        browser.url().await
    );
}

/// In a browser with its scripts: a job paused by a click and shown paused; a run triggered
/// with a payload through the job page's form, shown on that page by its refresh, without a
/// reload; both pages accessible in both schemes, photographed for the documentation.
#[test]
fn in_a_browser_a_click_pauses_a_job_and_a_triggered_run_shows_without_a_reload() {
    let (scenario, _replica, web) = console();
    // Strips with a failure in them, for the pictures.
    wait_for_page(&web, "/jobs", |html| {
        html.contains("class=\"outcome-dead\"") && html.contains("class=\"outcome-succeeded\"")
    });
    let base = web.url("");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let browser = runtime.block_on(Browser::start());
    runtime.block_on(async {
        browser.open(&format!("{base}/jobs")).await;
        assert_page(&browser, "Jobs").await;
        for (job, words, written) in [
            ("backup", "At 03:15 every day, Europe/Berlin", "15 3 * * *"),
            (
                "report",
                "At 09:00 on Monday to Friday, America/New_York",
                "0 9 * * 1-5",
            ),
            (
                "cleanup",
                "At 04:00 on day 1 and 15 of the month and on Sunday, UTC",
                "0 4 1,15 * sun",
            ),
            ("heartbeat", "Every 2 seconds", "@every 2s"),
        ] {
            assert_eq!(browser.text(&format!("{} .words", row(job))).await, words);
            assert_eq!(
                browser.text(&format!("{} td code", row(job))).await,
                written
            );
        }
        browser.click("button[aria-label=\"Pause backup\"]").await;
        browser
            .wait_for(&format!("{} strong.paused", row("backup")))
            .await;
        browser
            .wait_for("button[aria-label=\"Resume backup\"]")
            .await;
        assert!(browser.url().await.ends_with("/jobs"));
    });
    assert!(paused(&scenario, "backup"), "the click paused backup");

    runtime.block_on(async {
        browser.open(&format!("{base}/jobs/greet")).await;
        assert_page(&browser, "Job greet").await;
        execute(&browser, "window.formPage = true;").await;
        browser
            .fill("form.trigger input[name=payload]", r#"{"to":"browser"}"#)
            .await;
        browser.submit("form.trigger").await;
        // The trigger answers with the job's page again: a new document, without the mark.
        assert!(
            wait_until_async(Duration::from_secs(15), async || {
                execute(&browser, "return window.formPage === undefined;").await
                    == Value::Bool(true)
            })
            .await,
            "the trigger form led to no page"
        );
        assert_page(&browser, "Job greet").await;
        assert_eq!(
            redirects(&browser).await,
            1,
            "the trigger answered with a redirect"
        );
        // The run waits for the release file: nothing has ended yet.
        assert!(
            browser
                .text("#history")
                .await
                .contains("No run of this job has ended yet"),
            "{}",
            browser.text("#history").await
        );
        execute(&browser, "window.stillHere = true;").await;
        std::fs::write(scenario.dir.path().join("release"), "").expect("the release file");
        browser.wait_for("#history td.outcome-succeeded").await;
        browser.wait_for("#output pre.output").await;
        assert_eq!(
            browser.text("#output pre.output").await,
            r#"{"to":"browser"}"#
        );
        assert_eq!(
            execute(&browser, "return window.stillHere === true;").await,
            Value::Bool(true),
            "the run showed without a reload"
        );

        // Into the build directory, not docs/images: a test run must not change the tree. The
        // pictures the docs show are copied from there by hand when the pages change.
        let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("console");
        for (path, name) in [("/jobs", "jobs"), ("/jobs/billing", "job")] {
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
    });
}

/// Without JavaScript, through the whole console as an operator goes: the overview, the jobs,
/// a job paused and resumed and triggered (each a form's POST answered with a 303 to a page
/// that shows it), the run's page once a reload shows it ended, the runs of that job, a dead
/// run retried, the workflows.
#[test]
fn without_javascript_an_operator_goes_through_the_whole_console() {
    let (scenario, _replica, web) = console();
    std::fs::write(scenario.dir.path().join("release"), "").expect("the release file");
    let doomed = wait_for(Duration::from_secs(15), || {
        let answer = web.post("/api/v1/jobs/doomed/trigger", None);
        (answer.status == 200).then(|| answer.json()["id"].as_str().map(str::to_owned))
    })
    .flatten()
    .expect("doomed was triggered");
    wait_for_page(&web, "/dead", |html| html.contains(&doomed));
    let base = web.url("");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let browser = runtime.block_on(Browser::start_with(BrowserOptions {
        javascript: false,
        ..BrowserOptions::default()
    }));
    runtime.block_on(async {
        browser.open(&base).await;
        assert_page(&browser, "Overview").await;
        assert!(browser.text("main").await.contains("Leader: r1"));

        browser.click("nav a[href=\"/jobs\"]").await;
        assert_page(&browser, "Jobs").await;
        assert_eq!(
            browser.text(&format!("{} .words", row("report"))).await,
            "At 09:00 on Monday to Friday, America/New_York"
        );

        // The filter form is a GET: part of a name, in any case, finds its job alone.
        browser.fill("#job-q", "EPOR").await;
        browser.submit("form.filters").await;
        browser.wait_for_text("1 of 7 jobs declared match").await;
        assert!(browser.url().await.contains("/jobs?q=EPOR"));
        let mut shown = Vec::new();
        for link in browser.find_all("table.jobs tbody th a").await {
            shown.push(link.text().await.expect("its text"));
        }
        assert_eq!(shown, ["report"]);

        browser.click("button[aria-label=\"Pause report\"]").await;
        browser
            .wait_for(&format!("{} strong.paused", row("report")))
            .await;
        assert_page(&browser, "Jobs").await;
        assert_eq!(
            redirects(&browser).await,
            1,
            "the pause answered with a redirect"
        );
        // Back to the page it was taken on, its filter kept.
        assert!(browser.url().await.ends_with("/jobs?q=EPOR"));

        browser.click("button[aria-label=\"Resume report\"]").await;
        browser
            .wait_for("button[aria-label=\"Pause report\"]")
            .await;
        assert_eq!(
            redirects(&browser).await,
            1,
            "the resume answered with a redirect"
        );
        assert!(
            browser
                .find_all(&format!("{} strong.paused", row("report")))
                .await
                .is_empty(),
            "report is shown active again"
        );

        browser.click("nav a[href=\"/jobs\"]").await;
        assert_page(&browser, "Jobs").await;
        let form = format!("{} form.trigger", row("greet"));
        browser
            .fill(&format!("{form} input[name=payload]"), r#"{"to":"plain"}"#)
            .await;
        browser.submit(&form).await;
        assert_page(&browser, "Job greet").await;
        assert_eq!(
            redirects(&browser).await,
            1,
            "the trigger answered with a redirect"
        );

        // The page does not refresh itself: a reload shows the run once it ended.
        let mut run_link = None;
        let ended = wait_until_async(Duration::from_secs(30), async || {
            browser.client().refresh().await.expect("a reload");
            run_link = match browser.find_all("#history th a").await.first() {
                Some(link) => link.attr("href").await.ok().flatten(),
                None => None,
            };
            run_link.is_some()
        })
        .await;
        assert!(
            ended,
            "no run of greet ended: {}",
            browser.text("main").await
        );
        let run_link = run_link.expect("a run's link");
        let run = run_link.trim_start_matches("/runs/").replace("%40", "@");
        browser
            .click(&format!("#history th a[href=\"{run_link}\"]"))
            .await;
        assert_page(&browser, &format!("Run {run}")).await;
        assert_eq!(browser.text("dd.state-succeeded").await, "succeeded");
        assert_eq!(browser.text("#payload pre").await, r#"{"to":"plain"}"#);
        assert_eq!(browser.text("#output pre").await, r#"{"to":"plain"}"#);

        browser.click("nav a[href=\"/runs\"]").await;
        assert_page(&browser, "Runs").await;
        browser.click("#state option[value=finished]").await;
        browser.fill("#job", "greet").await;
        browser.submit("form[aria-label=\"Filter the runs\"]").await;
        browser.wait_for_text(&run).await;
        let url = browser.url().await;
        assert!(
            url.contains("state=finished") && url.contains("job=greet"),
            "{url}"
        );
        let listed = browser.text("main table").await;
        assert!(
            !listed.contains("heartbeat") && !listed.contains("billing@"),
            "only greet's runs: {listed}"
        );

        browser.click("nav a[href=\"/dead\"]").await;
        assert_page(&browser, "Dead letters").await;
        browser.find_text(&doomed).await;
        browser
            .click(&format!("button[aria-label=\"Retry {doomed}\"]"))
            .await;
        assert_page(&browser, "Dead letters").await;
        assert_eq!(
            redirects(&browser).await,
            1,
            "the retry answered with a redirect"
        );

        browser.click("nav a[href=\"/workflows\"]").await;
        assert_page(&browser, "Workflows").await;
        assert!(
            browser.text("main").await.contains("No workflow declared"),
            "{}",
            browser.text("main").await
        );
    });
    let redriven = wait_until(Duration::from_secs(15), || {
        crate::util::scenario::event_entries(&scenario)
            .iter()
            .any(|entry| {
                entry.get::<String>("reason").as_deref() == Some("redrive")
                    && entry.get::<String>("run").as_deref() == Some(doomed.as_str())
            })
    });
    assert!(redriven, "the retry re-drove {doomed}");
}

/// A page that refreshes itself says so when its refreshes fail (the server gone), rather
/// than go on showing what it showed as if it were live.
#[test]
fn in_a_browser_a_page_whose_refreshes_fail_says_it_is_not_up_to_date() {
    let (_scenario, _replica, web) = console();
    let base = web.url("");
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let browser = runtime.block_on(Browser::start());
    runtime.block_on(async {
        browser.open(&format!("{base}/")).await;
        assert_page(&browser, "Overview").await;
    });
    assert!(
        runtime.block_on(browser.find_all("#stale")).is_empty(),
        "stale while the server answers"
    );
    drop(web);
    runtime.block_on(async {
        browser.wait_for("#stale").await;
        let said = browser.text("#stale").await;
        assert!(
            said.starts_with("Not up to date since ") && said.contains("cannot be reached"),
            "{said}"
        );
    });
}
