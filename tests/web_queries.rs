//! What a real `redcron web` makes of a hostile query on every route that reads one: a value
//! longer than what it names can be, not UTF-8, holding a control character, not one of the
//! words it takes, a number out of range, a parameter the route does not take, all refused
//! with a 400 that names the parameter (the API's JSON, the layout on a page); an address too
//! long is a 414 in the same shapes; no answer grows with what was sent; and `/api/v1/jobs`
//! filters by state as the jobs page does.

use std::time::Duration;

use crate::util::scenario::Scenario;
use crate::util::wait::wait_for;
use crate::util::web::{Answer, WebProcess};

/// The message of an error answer: the API's, or a page's refusal as its text shows.
#[track_caller]
fn message(answer: &Answer) -> String {
    if answer.is_page() {
        return answer
            .body
            .split_once("<p class=\"refusal\"")
            .and_then(|(_, rest)| rest.split_once('>'))
            .and_then(|(_, rest)| rest.split_once("</p>"))
            .map(|(text, _)| text.replace("&quot;", "\""))
            .unwrap_or_else(|| panic!("a page with no refusal: {}", answer.body));
    }
    answer.json()["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("no message: {}", answer.body))
        .to_owned()
}

/// `GET path` refused with `status` and `code`, as the API's JSON under `/api/` and a page in
/// the layout elsewhere, saying `said`; its body no longer than `bound`.
#[track_caller]
fn refused(web: &WebProcess, path: &str, status: u16, code: &str, said: &[&str]) {
    let answer = web.get(path);
    let shown: String = path.chars().take(120).collect();
    assert_eq!(
        (answer.status, answer.code().as_str()),
        (status, code),
        "{shown}: {}",
        answer.body
    );
    assert_eq!(answer.is_page(), !path.starts_with("/api/"), "{shown}");
    let message = message(&answer);
    for words in said {
        assert!(
            message.contains(words),
            "{shown}: {message:?} lacks {words:?}"
        );
    }
    // What was sent is repeated in a few dozen bytes at most, a few hundred of a path: the
    // page is its layout.
    let bound = if answer.is_page() { 8192 } else { 1024 };
    assert!(
        answer.body.len() < bound,
        "{shown}: {} bytes: {}",
        answer.body.len(),
        answer.body
    );
}

#[test]
fn a_value_no_route_takes_is_refused_naming_the_parameter_and_what_it_takes() {
    let scenario = Scenario::new();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let long = "a".repeat(129);
    for prefix in ["/api/v1", ""] {
        let cases: Vec<(String, &[&str])> = vec![
            // Longer than any job's name: refused, where it was repeated in every row.
            (
                format!("/jobs?after={long}"),
                &[
                    "after must be a job's name of at most 128 bytes",
                    "129 bytes",
                ],
            ),
            (
                format!("/jobs?q={long}"),
                &["q must be a job's name of at most 128 bytes"],
            ),
            ("/jobs?after=%FF%FE".into(), &["after must be", "not UTF-8"]),
            (
                "/jobs?q=a%00".into(),
                &["q must be", "control character U+0000"],
            ),
            (
                "/jobs?state=bogus".into(),
                &["state must be one of paused, drifting", "\"bogus\""],
            ),
            (
                "/runs?state=bogus".into(),
                &["state must be one of active, ready, due, succeeded, failed, finished"],
            ),
            (format!("/runs?job={long}"), &["job must be a job's name"]),
            (
                format!("/runs?queue={long}"),
                &["queue must be a queue's name"],
            ),
            (
                format!("/runs?replica={long}"),
                &["replica must be a replica's id"],
            ),
            (
                format!("/runs?since={}", "1".repeat(65)),
                &["since must be"],
            ),
            (
                format!("/runs?cursor={}", "a".repeat(2049)),
                &["cursor must be"],
            ),
            (
                format!("/runs?id={}", "a".repeat(257)),
                &["id must be a run's id"],
            ),
            ("/runs?until=%FF".into(), &["until must be", "not UTF-8"]),
            (
                "/workflows?state=bogus".into(),
                &["state must be one of running, succeeded, failed"],
            ),
            (format!("/workflows?workflow={long}"), &["workflow must be"]),
            (
                "/workflows?colour=red".into(),
                &["unknown parameter \"colour\""],
            ),
        ];
        for (path, said) in cases {
            refused(&web, &format!("{prefix}{path}"), 400, "bad-query", said);
        }
    }
    // The API's own.
    for (path, said) in [
        (
            "/api/v1/jobs?limit=abc",
            "limit must be a whole number from 1 to 1000, not \"abc\"",
        ),
        (
            "/api/v1/runs?limit=0",
            "limit must be a whole number from 1 to 1000, not \"0\"",
        ),
        (
            "/api/v1/dead?limit=-1",
            "limit must be a whole number from 1 to 1000, not \"-1\"",
        ),
        (
            "/api/v1/history?failed=yes",
            "failed must be true or false, not \"yes\"",
        ),
        ("/api/v1/history?job=a%01", "control character U+0001"),
        ("/api/v1/runs?state=due&state=ready", "state is given twice"),
    ] {
        refused(&web, path, 400, "bad-query", &[said]);
    }
    // The pages' own.
    for (path, said) in [
        ("/dead?job=%FF", "job must be a job's name"),
        (
            "/dead?limit=5",
            "unknown parameter \"limit\": this address takes job",
        ),
    ] {
        refused(&web, path, 400, "bad-query", &[said]);
    }
}

#[test]
fn an_address_too_long_is_a_414_in_the_apis_shape_or_the_layout_and_repeats_none_of_it() {
    let scenario = Scenario::new();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let long = "a".repeat(60_000);
    for path in [
        format!("/api/v1/jobs?after={long}"),
        format!("/jobs?after={long}"),
        format!("/api/v1/runs?limit=5&job={long}"),
        format!("/dead?job={long}"),
    ] {
        refused(
            &web,
            &path,
            414,
            "uri-too-long",
            &["more than the 8192 this server reads", "bytes"],
        );
    }
    refused(
        &web,
        &format!("/api/v1/jobs?limit=5&after={long}"),
        414,
        "uri-too-long",
        &["its longest parameter, \"after\", is 60006 bytes with its name"],
    );
    // A job's name in the path is bounded the same way.
    refused(
        &web,
        &format!("/api/v1/jobs/{long}"),
        414,
        "uri-too-long",
        &["the address is"],
    );
    // Under the bound, a segment longer than any id names nothing, and is not repeated whole.
    let name = "a".repeat(4000);
    refused(
        &web,
        &format!("/api/v1/jobs/{name}"),
        404,
        "no-route",
        &["4000 bytes, where the longest id is 256"],
    );
    refused(
        &web,
        &format!("/runs/{name}"),
        404,
        "no-route",
        &["names no job"],
    );
}

#[test]
fn the_apis_jobs_filter_by_state_as_the_jobs_page_does() {
    let scenario = Scenario::new();
    scenario.write_jobs(
        "[jobs.greet]\ncommand = \"true\"\n\n[jobs.doomed]\ncommand = \"exit 3\"\n\n\
         [jobs.idle]\ncommand = \"true\"\n",
    );
    let _replica = scenario.replicas_with_a_leader(&["r1"], &[]);
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let names = |path: &str| -> Option<Vec<String>> {
        let answer = web.get(path);
        (answer.status == 200).then(|| {
            answer.json()["jobs"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|job| job["job"].as_str().map(str::to_owned))
                .collect()
        })
    };
    let published = wait_for(Duration::from_secs(15), || {
        names("/api/v1/jobs").filter(|names| names.len() == 3)
    });
    assert_eq!(
        published,
        Some(vec!["doomed".into(), "greet".into(), "idle".into()])
    );
    for job in ["greet", "idle"] {
        let paused = web.post(&format!("/api/v1/jobs/{job}/pause"), None);
        assert_eq!(paused.status, 200, "{}", paused.body);
    }
    assert_eq!(
        names("/api/v1/jobs?state=paused"),
        Some(vec!["greet".into(), "idle".into()])
    );
    // With the other filters, as the page's links keep them.
    assert_eq!(
        names("/api/v1/jobs?state=paused&q=I&after=greet"),
        Some(vec!["idle".into()])
    );
    assert_eq!(names("/api/v1/jobs?state=drifting"), Some(Vec::new()));
    assert_eq!(names("/api/v1/jobs?state="), names("/api/v1/jobs"));
    let page = web.get("/jobs?state=paused");
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("2 of 3 jobs declared match"),
        "{}",
        page.body
    );
}
