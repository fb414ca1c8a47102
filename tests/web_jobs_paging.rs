//! The jobs page with more jobs than a page from a real `redcron web` on a real Redis: a page
//! at a time in the order `redcron jobs` lists them, every job reached once by the next links,
//! a filter by part of a name (in any case) or by state kept across pages, a stale or hostile
//! query answered as a page that escapes it; and the API's jobs read narrowed the same way.

use std::collections::HashSet;

use redis::Commands;

use crate::util::keys;
use crate::util::redis_server::RedisServer;
use crate::util::store::{connect, jobs};
use crate::util::web::{WebProcess, next_link};

/// How many jobs a page shows (the page's own constant).
const PAGE: usize = 100;

/// The jobs published: `job000`..`job249`, and `nightly-report`.
fn job_names() -> Vec<String> {
    let mut names: Vec<String> = (0..250).map(|n| format!("job{n:03}")).collect();
    names.push("nightly-report".to_owned());
    names
}

/// A Redis with [`job_names`] published as a leader publishes them (no replica runs them), and
/// a `redcron web` on it.
fn published() -> (RedisServer, tempfile::TempDir, WebProcess) {
    let server = RedisServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let toml: String = job_names()
        .iter()
        .map(|name| format!("[jobs.{name}]\nschedule = \"0 3 1 1 *\"\ncommand = \"true\"\n"))
        .collect();
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    runtime.block_on(async {
        let store = connect(&server).await;
        store
            .publish_definitions(&jobs(&toml))
            .await
            .expect("publish");
    });
    let web = WebProcess::start(&server.url(), dir.path(), &[]);
    (server, dir, web)
}

/// The jobs a page lists, in order.
fn listed(html: &str) -> Vec<String> {
    html.split("<th scope=\"row\"><a href=\"/jobs/")
        .skip(1)
        .filter_map(|rest| rest.split_once('"').map(|(name, _)| name.to_owned()))
        .collect()
}

/// `GET path`, which must answer a page; its body.
#[track_caller]
fn page(web: &WebProcess, path: &str) -> String {
    let answer = web.get(path);
    assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    answer.body
}

/// Follows the next links from `path` to the last page: each page's jobs, in order.
#[track_caller]
fn every_page(web: &WebProcess, path: &str) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut next = Some(path.to_owned());
    while let Some(path) = next {
        let body = page(web, &path);
        pages.push(listed(&body));
        next = next_link(&body);
        assert!(pages.len() <= 10, "the next links do not end: {path}");
    }
    pages
}

#[test]
fn the_jobs_page_pages_through_every_job_once_in_the_listings_order() {
    let (_server, _dir, web) = published();
    let first = page(&web, "/jobs");
    assert!(
        first.contains("251 jobs declared; job000 to job099 shown."),
        "{first}"
    );
    let pages = every_page(&web, "/jobs");
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [PAGE, PAGE, 51]);
    let mut expected = job_names();
    expected.sort();
    assert_eq!(pages.concat(), expected, "each job once, in order");

    // A pasted link shows the same slice; the page before it links back.
    let second = page(&web, "/jobs?after=job099");
    assert_eq!(listed(&second), pages[1]);
    assert!(
        second.contains("<a rel=\"prev\" href=\"/jobs\">"),
        "{second}"
    );
    let third = page(&web, "/jobs?after=job199");
    assert!(
        third.contains("<a rel=\"prev\" href=\"/jobs?after=job099\">"),
        "{third}"
    );
    // A keyset: a job that is not there still starts the page after where it would be.
    assert_eq!(listed(&page(&web, "/jobs?after=job0985"))[0], "job099");
}

#[test]
fn the_jobs_filter_finds_a_job_by_part_of_its_name_and_keeps_across_pages() {
    let (server, _dir, web) = published();
    let found = page(&web, "/jobs?q=NIGHTLY-R");
    assert_eq!(listed(&found), ["nightly-report"]);
    assert!(found.contains("1 of 251 jobs declared match."), "{found}");
    assert!(found.contains("value=\"NIGHTLY-R\""), "{found}");

    // `OB`, in any case, is in the name of every job but nightly-report: 250 jobs over three
    // pages, the filter in each page's link to the next.
    let first = page(&web, "/jobs?q=OB");
    assert!(first.contains("250 of 251 jobs declared match"), "{first}");
    let next = next_link(&first).expect("a second page");
    assert_eq!(next, "/jobs?q=OB&after=job099");
    let pages = every_page(&web, "/jobs?q=OB");
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [PAGE, PAGE, 50]);
    let shown: Vec<String> = pages.concat();
    assert!(
        shown.iter().all(|name| name.starts_with("job")),
        "{shown:?}"
    );
    assert_eq!(shown.iter().collect::<HashSet<_>>().len(), 250);

    let mut redis = server.connection();
    let () = redis.sadd(keys().paused(), "job042").expect("SADD");
    let paused = page(&web, "/jobs?state=paused");
    assert_eq!(listed(&paused), ["job042"]);
    assert!(
        paused.contains("<strong class=\"paused\">paused</strong>"),
        "{paused}"
    );
}

#[test]
fn a_stale_or_hostile_jobs_query_is_a_page_that_says_so() {
    let (_server, _dir, web) = published();
    let none = page(&web, "/jobs?q=%3Cscript%3Ealert(1)%3C%2Fscript%3E");
    assert!(listed(&none).is_empty());
    assert!(
        none.contains("No job matches the filter: <a href=\"/jobs\">every job</a>."),
        "{none}"
    );
    assert!(!none.contains("<script>alert"), "{none}");
    assert!(
        none.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{none}"
    );

    // Longer than any job's name: refused as such, not looked for.
    let long = "a".repeat(129);
    let answer = web.get(&format!("/jobs?q={long}"));
    assert_eq!(
        (answer.status, answer.code()),
        (400, "bad-query".to_owned())
    );
    assert!(answer.is_page(), "{}", answer.body);
    assert!(
        answer
            .body
            .contains("q must be a job's name of at most 128 bytes"),
        "{}",
        answer.body
    );
    assert!(!answer.body.contains(&long), "{}", answer.body);

    let past = page(&web, "/jobs?after=zzz");
    assert!(listed(&past).is_empty());
    assert!(
        past.contains("No more jobs after <code>zzz</code>: <a href=\"/jobs\">every job</a>."),
        "{past}"
    );
    assert!(past.contains("rel=\"prev\""), "{past}");
}

#[test]
fn the_api_lists_every_job_unless_asked_for_part_of_them_a_page_at_a_time() {
    let (_server, _dir, web) = published();
    let names = |path: &str| -> Vec<String> {
        let answer = web.get(path);
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        answer.json()["jobs"]
            .as_array()
            .expect("a list of jobs")
            .iter()
            .map(|job| job["job"].as_str().expect("a name").to_owned())
            .collect()
    };
    let mut expected = job_names();
    expected.sort();
    assert_eq!(names("/api/v1/jobs"), expected, "every job unless told");

    let mut paged = Vec::new();
    let mut path = "/api/v1/jobs?q=OB&limit=100".to_owned();
    loop {
        let page = names(&path);
        let Some(last) = page.last().cloned() else {
            break;
        };
        assert!(page.len() <= 100);
        paged.extend(page);
        path = format!("/api/v1/jobs?q=OB&limit=100&after={last}");
    }
    assert_eq!(paged, expected[..250], "each job holding ob once, in order");

    for refused in [
        "/api/v1/jobs?limit=0",
        "/api/v1/jobs?limit=1001",
        "/api/v1/jobs?page=2",
    ] {
        let answer = web.get(refused);
        assert_eq!(answer.status, 400, "{refused}: {}", answer.body);
        assert_eq!(answer.json()["error"]["code"], "bad-query", "{refused}");
    }
}

#[test]
fn a_pause_on_a_page_of_jobs_goes_back_to_that_page_and_a_forged_back_to_the_first() {
    let (server, _dir, web) = published();
    let page = web.get("/jobs?q=OB&after=job099");
    assert!(
        page.body
            .contains("name=\"back\" value=\"jobs?q=OB&amp;after=job099\""),
        "{}",
        page.body
    );
    let token = page.csrf_cookie();
    let paused = web.submit_form(
        "/jobs/job150/pause",
        &token,
        &token,
        "back=jobs%3Fq%3DOB%26after%3Djob099",
    );
    assert_eq!(paused.status, 303, "{}", paused.body);
    assert_eq!(paused.headers["location"], "/jobs?q=OB&after=job099");
    let is_paused: bool = server
        .connection()
        .sismember(keys().paused(), "job150")
        .expect("SISMEMBER");
    assert!(is_paused);

    let resumed = web.submit_form(
        "/jobs/job150/resume",
        &token,
        &token,
        "back=jobs%2F%2Fevil.example%3Fq%3D%22%3E%3Cscript%3E",
    );
    assert_eq!(resumed.status, 303, "{}", resumed.body);
    assert_eq!(resumed.headers["location"], "/jobs");
}
