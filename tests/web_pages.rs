//! The console's pages from a real `redcron web` on a real Redis with real replicas: the
//! layout, the overview and its empty states, links under a base path and a proxy's prefix,
//! the overview's one form (release a hold) with its checks, and hostile text shown as text.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use redcron::store::RESPONSE_TIMEOUT;
use redis::Commands;

use crate::util::keys;
use crate::util::scenario::Scenario;
use crate::util::wait::wait_for;
use crate::util::web::WebProcess;

const JOBS: &str = "[jobs.greet]\ncommand = \"cat\"\n";

/// Every `href`, `src` and `action` of `html`.
fn links(html: &str) -> Vec<String> {
    ["href=\"", "src=\"", "action=\""]
        .iter()
        .flat_map(|attribute| {
            html.split(attribute)
                .skip(1)
                .filter_map(|rest| rest.split_once('"').map(|(link, _)| link.to_owned()))
        })
        .collect()
}

#[test]
fn the_overview_shows_the_leader_its_replicas_and_queues_in_the_layout() {
    let scenario = Scenario::new();
    // A Redis set as the docs ask, so that nothing is to be warned of.
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("appendonly")
        .arg("yes")
        .query(&mut scenario.server.connection())
        .expect("CONFIG SET");
    scenario.write_jobs(JOBS);
    let _replicas = scenario.replicas_with_a_leader(&["r1"], &[]);
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let page = wait_for(Duration::from_secs(10), || {
        let page = web.get("/");
        (page.status == 200 && page.body.contains("state-alive")).then_some(page)
    })
    .expect("the overview shows a live replica");
    let html = &page.body;
    assert!(
        page.headers["content-type"]
            .to_str()
            .is_ok_and(|kind| kind.starts_with("text/html"))
    );
    assert!(
        page.headers["content-security-policy"]
            .to_str()
            .is_ok_and(|csp| csp.contains("script-src 'self'"))
    );
    for expected in [
        "<h1>Overview</h1>",
        "namespace <strong>test</strong>",
        "leader <strong>r1</strong>",
        "Leader: <strong>r1</strong>",
        "<th scope=\"row\">r1</th>",
        "aria-current=\"page\"",
        ">Dead letters</a>",
        ">Workflows</a>",
        concat!("redcron ", env!("CARGO_PKG_VERSION")),
        "None: every replica beats",
    ] {
        assert!(html.contains(expected), "{expected} missing from:\n{html}");
    }
    assert!(!html.contains("<script>"), "no inline script: {html}");
    // The stylesheet and the script are served from the binary, cached for good.
    for link in links(html)
        .iter()
        .filter(|link| link.starts_with("/assets/"))
    {
        let asset = web.get(link);
        assert_eq!(asset.status, 200, "{link}");
        assert!(
            asset.headers["cache-control"]
                .to_str()
                .is_ok_and(|cache| cache.contains("immutable"))
        );
    }
    assert_eq!(web.get("/assets/style-000000000000.css").status, 404);
}

/// A namespace no replica ran in, on a Redis without AOF and with an eviction policy: the
/// overview says how to start, that the namespace may be the wrong one, and that Redis loses
/// data, as `status` does.
#[test]
fn an_empty_namespace_says_how_to_start() {
    let scenario = Scenario::new();
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("allkeys-lru")
        .query(&mut scenario.server.connection())
        .expect("CONFIG SET");
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let page = web.get("/");
    assert_eq!(page.status, 200, "{}", page.body);
    for expected in [
        "No leader",
        "No replica has beaten: start one",
        "No run waits in a queue.",
        "No run ended in the last 24 hours",
        "No replica has run in namespace <strong>test</strong>",
        "Redis is set to lose data: appendonly is off",
        "Redis is set to lose data: maxmemory-policy is allkeys-lru",
    ] {
        assert!(
            page.body.contains(expected),
            "{expected} missing from:\n{}",
            page.body
        );
    }
    assert!(
        !page.body.contains("None: every replica beats"),
        "{}",
        page.body
    );
    let status = crate::util::cli(&scenario.server, scenario.dir.path(), &["status"]);
    assert!(
        status
            .stdout
            .contains("REDIS LOSES DATA: appendonly is off")
            && status
                .stdout
                .contains("REDIS LOSES DATA: maxmemory-policy is allkeys-lru"),
        "{}",
        status.stdout
    );
    let json = crate::util::cli(&scenario.server, scenario.dir.path(), &["status", "--json"]);
    let document = crate::util::one_document(&json.stdout);
    assert_eq!(
        document["redis_settings"].as_array().map(Vec::len),
        Some(2),
        "{document}"
    );
}

#[test]
fn a_page_not_built_is_a_404_in_the_layout() {
    let scenario = Scenario::new();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let page = web.get("/no-such-page");
    assert_eq!(page.status, 404);
    assert!(
        page.body.contains("<nav aria-label=\"Main\">"),
        "{}",
        page.body
    );
    assert!(page.body.contains("Back to the overview"), "{}", page.body);
}

#[test]
fn every_link_starts_with_the_base_path_and_a_trusted_proxys_prefix() {
    let scenario = Scenario::new();
    let url = scenario.server.url();
    let web = WebProcess::start(&url, scenario.dir.path(), &["--base-path", "/redcron"]);
    let html = web.get("/").body;
    let all = links(&html);
    assert!(all.len() >= 7, "{all:?}");
    assert!(
        all.iter().any(|link| link == "/redcron"),
        "the root: {all:?}"
    );
    assert!(
        all.iter().all(|link| link.starts_with("/redcron")),
        "{all:?}"
    );
    assert_eq!(web.get("/no-such-page").status, 404);
    // The icon a browser asks for with its first page is served, not a 404.
    let icon = web.get("/favicon.ico");
    assert_eq!(icon.status, 200, "{}", icon.body);
    assert_eq!(
        icon.headers["content-type"].to_str().ok(),
        Some("image/svg+xml")
    );
    assert!(icon.body.starts_with("<svg "), "{}", icon.body);

    // A proxy's prefix is ignored unless the server is told to trust it.
    let forwarded = |web: &WebProcess| {
        web.send(
            web.client()
                .get(web.url("/"))
                .header("x-forwarded-prefix", "/ops"),
        )
        .body
    };
    assert!(
        links(&forwarded(&web))
            .iter()
            .all(|link| link.starts_with("/redcron"))
    );
    let trusting = WebProcess::start(
        &url,
        scenario.dir.path(),
        &["--base-path", "/redcron", "--trust-proxy"],
    );
    let all = links(&forwarded(&trusting));
    assert!(
        all.iter().all(|link| link.starts_with("/ops/redcron")),
        "{all:?}"
    );
    // A prefix that would lead the links to another server, or out of the console, is ignored.
    for hostile in ["//evil.example", "/ops/..", "/ops//x", "/./ops"] {
        let answer = trusting.send(
            trusting
                .client()
                .get(trusting.url("/"))
                .header("x-forwarded-prefix", hostile),
        );
        let all = links(&answer.body);
        assert!(
            all.len() >= 7 && all.iter().all(|link| link.starts_with("/redcron")),
            "{hostile}: {all:?}"
        );
    }
}

#[test]
fn a_hold_is_released_by_an_operators_form_and_never_by_a_forged_one() {
    let scenario = Scenario::new();
    let held = crate::util::cli(
        &scenario.server,
        scenario.dir.path(),
        &["hold", "--for", "10m"],
    );
    assert_eq!(held.code, Some(0), "{}", held.stderr);
    let read_only = WebProcess::start(
        &scenario.server.url(),
        scenario.dir.path(),
        &["--read-only"],
    );
    let page = read_only.get("/");
    assert!(page.body.contains("The namespace is held"), "{}", page.body);
    assert!(
        !page.body.contains("Release the hold"),
        "a read-only console offers no action"
    );

    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let page = web.get("/");
    assert!(page.body.contains("Release the hold"), "{}", page.body);
    let token = page.csrf_cookie();
    assert!(
        page.body
            .contains(&format!("name=\"csrf\" value=\"{token}\""))
    );
    let post = |cookie: &str, field: &str, origin: &str| {
        web.send(
            web.client()
                .post(web.url("/hold/release"))
                .header("cookie", format!("redcron_csrf={cookie}"))
                .header("origin", origin)
                .header("content-type", "application/x-www-form-urlencoded")
                .body(format!("csrf={field}")),
        )
    };
    let own = format!("http://127.0.0.1:{}", web.port);
    // Another site's page: the browser sends the cookie, but the site cannot read it.
    let forged = post(&token, "guess", &own);
    assert_eq!(
        (forged.status, forged.code()),
        (403, "cross-origin".to_owned())
    );
    let cross = post(&token, &token, "https://evil.example");
    assert_eq!(
        (cross.status, cross.code()),
        (403, "cross-origin".to_owned())
    );
    let status = crate::util::cli(&scenario.server, scenario.dir.path(), &["status", "--json"]);
    assert!(
        !status.stdout.contains("\"held_ms\":null"),
        "still held: {}",
        status.stdout
    );

    let released = web.send(
        web.client()
            .post(web.url("/hold/release"))
            .header("cookie", format!("redcron_csrf={token}"))
            .header("origin", &own)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("csrf={token}")),
    );
    assert_eq!(
        released.status, 200,
        "followed the redirect to the overview: {}",
        released.body
    );
    assert!(released.body.contains("<h1>Overview</h1>"));
    let status = crate::util::cli(&scenario.server, scenario.dir.path(), &["status", "--json"]);
    assert!(
        status.stdout.contains("\"held_ms\":null"),
        "{}",
        status.stdout
    );
    // The hold and its release, each with who asked: the command line, the console's form.
    let recorded: Vec<(String, String)> = crate::util::scenario::actions(&scenario, None)
        .into_iter()
        .map(|(action, actor, _, _)| (action, actor))
        .collect();
    assert_eq!(
        recorded,
        [
            ("hold".to_owned(), "cli".to_owned()),
            ("release".to_owned(), "anonymous".to_owned())
        ]
    );
}

#[test]
fn hostile_text_in_redis_is_shown_as_text() {
    let scenario = Scenario::new();
    let mut redis = scenario.server.connection();
    let now = scenario.redis_now_ms();
    let _: () = redis
        .zadd(keys().replicas(), "evil", now + 60_000)
        .expect("ZADD");
    let _: () = redis
        .hset(
            keys().replica("evil"),
            "version",
            "<script>alert(1)</script>",
        )
        .expect("HSET");
    // A record that is not UTF-8 is no reason for the page to fail.
    let _: () = redis
        .zadd(keys().replicas(), "binary", now + 60_000)
        .expect("ZADD");
    let _: () = redis
        .hset(
            keys().replica("binary"),
            "version",
            b"\xff\xfe<b>".as_slice(),
        )
        .expect("HSET");
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let page = web.get("/");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("<th scope=\"row\">evil</th>"),
        "{}",
        page.body
    );
    assert!(
        page.body.contains("<th scope=\"row\">binary</th>"),
        "{}",
        page.body
    );
    assert!(!page.body.contains("<b>"), "{}", page.body);
    assert!(!page.body.contains("<script>alert(1)"), "{}", page.body);
    assert!(
        page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{}",
        page.body
    );
}

#[test]
fn the_overview_warns_of_a_job_declared_differently_by_two_replicas() {
    let scenario = Scenario::new();
    scenario.write_jobs(JOBS);
    let other = scenario.dir.path().join("other-schedules");
    std::fs::create_dir(&other).expect("mkdir");
    std::fs::write(other.join("jobs.toml"), JOBS.replace("cat", "cat -u")).expect("write");
    let _r1 = scenario.replica("r1", &[]);
    let _r2 = crate::util::replica::ReplicaProcess::start(
        "r2",
        &scenario.server.url(),
        &other,
        scenario.dir.path(),
        &[],
    );
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let warned = wait_for(Duration::from_secs(15), || {
        let page = web.get("/").body;
        page.contains("<strong>greet</strong> is declared differently by")
            .then_some(page)
    });
    assert!(warned.is_some(), "no drift warning:\n{}", web.get("/").body);
}

/// Every page's header names the leader the page's request read: the pages that read the
/// namespace for themselves, those that read a run or a list of runs, and the pages of a
/// refusal or of a path with no page.
#[test]
fn every_page_names_the_leader_in_its_header() {
    let scenario = Scenario::new();
    scenario.write_jobs(
        "[jobs.greet]\ncommand = \"cat\"\n\
         [jobs.doomed]\ncommand = \"exit 3\"\nretries = 0\n\
         [workflows.pair]\nsteps = [\"greet\"]\n",
    );
    let _replicas = scenario.replicas_with_a_leader(&["r1"], &[]);
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let trigger = |job: &str| {
        wait_for(Duration::from_secs(15), || {
            let answer = web.post(&format!("/api/v1/jobs/{job}/trigger"), None);
            (answer.status == 200).then(|| answer.json()["id"].as_str().map(str::to_owned))
        })
        .flatten()
        .unwrap_or_else(|| panic!("{job} was never published and triggered"))
    };
    let run = trigger("greet");
    let dead = trigger("doomed");
    assert!(
        wait_for(Duration::from_secs(20), || web
            .get("/dead")
            .body
            .contains(&dead)
            .then_some(()))
        .is_some(),
        "{dead} never died"
    );
    let started = wait_for(Duration::from_secs(15), || {
        let out = crate::util::cli(
            &scenario.server,
            scenario.dir.path(),
            &["workflow", "start", "pair", "--json"],
        );
        (out.code == Some(0)).then(|| {
            crate::util::one_document(&out.stdout)["id"]
                .as_str()
                .map(str::to_owned)
        })
    })
    .flatten()
    .expect("the workflow was published and started");

    for (path, status) in [
        ("/".to_owned(), 200),
        ("/jobs".to_owned(), 200),
        ("/jobs/greet".to_owned(), 200),
        ("/jobs/nope".to_owned(), 404),
        ("/runs".to_owned(), 200),
        (format!("/runs/{run}"), 200),
        ("/runs/nope".to_owned(), 404),
        ("/dead".to_owned(), 200),
        ("/dead/retry".to_owned(), 200),
        ("/workflows".to_owned(), 200),
        (format!("/workflows/{}", started.replace('/', "%2F")), 200),
        // A refusal drawn for the browser, and a path with no page.
        ("/workflows/nope".to_owned(), 404),
        ("/no-such-page".to_owned(), 404),
    ] {
        let page = web.get(&path);
        assert_eq!(page.status, status, "GET {path}:\n{}", page.body);
        assert!(page.is_page(), "GET {path} is no page:\n{}", page.body);
        assert!(
            page.body
                .contains("namespace <strong>test</strong> · leader <strong>r1</strong>"),
            "GET {path} does not name the leader:\n{}",
            page.body
        );
    }
}

/// With Redis out of reach, a page says so in the layout, and its header that the leader is
/// not known, rather than that there is none.
#[test]
fn with_redis_out_of_reach_the_header_says_the_leader_is_unknown() {
    let mut scenario = Scenario::new();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let page = web.get("/jobs");
    assert!(page.body.contains("· leader none"), "{}", page.body);
    scenario.server.kill9();
    let down = wait_for(Duration::from_secs(30), || {
        let page = web.get("/jobs");
        (page.status == 503).then_some(page)
    })
    .expect("a 503 page while Redis is down");
    assert!(down.is_page(), "{}", down.body);
    for expected in ["Redis cannot be read now", "· leader unknown"] {
        assert!(
            down.body.contains(expected),
            "{expected} missing from:\n{}",
            down.body
        );
    }
}

/// With Redis frozen, a page answers its 503 within one Redis response timeout, not one per
/// read (the header's leader, then the page's own), and the pages come back with Redis.
#[test]
fn with_redis_frozen_a_page_answers_within_one_response_timeout() {
    let scenario = Scenario::new();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    assert_eq!(web.get("/jobs").status, 200);
    scenario.server.signal(Signal::SIGSTOP);
    for path in ["/", "/jobs", "/runs/greet@1"] {
        let started = Instant::now();
        let page = web.get(path);
        let took = started.elapsed();
        assert_eq!(page.status, 503, "{path}: {}", page.body);
        assert!(
            page.body.contains("leader unknown"),
            "{path}: {}",
            page.body
        );
        // A gross bound, for a loaded machine: well past one timeout, short of two.
        assert!(
            took < RESPONSE_TIMEOUT * 2 - Duration::from_secs(2),
            "{path} answered after {took:?}"
        );
    }
    // The API's status as well, which once asked a frozen Redis a second time.
    let started = Instant::now();
    let status = web.get("/api/v1/status");
    let took = started.elapsed();
    assert_eq!(status.status, 503, "{}", status.body);
    assert_eq!(status.json()["error"]["code"], "redis-unavailable");
    assert!(
        took < RESPONSE_TIMEOUT * 2 - Duration::from_secs(2),
        "/api/v1/status answered after {took:?}"
    );
    scenario.server.signal(Signal::SIGCONT);
    let back = wait_for(Duration::from_secs(30), || {
        let page = web.get("/jobs");
        (page.status == 200).then_some(page)
    });
    assert!(back.is_some(), "no page once Redis answers again");
}
