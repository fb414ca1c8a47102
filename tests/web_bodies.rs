//! What a real `redcron web` makes of a hostile body, form, header or path, and of routes that
//! take no query: each refused in the house's words, naming the field or parameter and what it
//! takes, with no answer repeating more than a few dozen bytes of what was sent; a body past
//! the bound is a 413; an empty retry of many is refused; the auth file takes a token once and
//! the `Authorization` scheme in any case; and a path outside the base path is the API's 404.

use crate::util::redcron_in;
use crate::util::scenario::Scenario;
use crate::util::web::{Answer, WebProcess};

/// A megabyte of one letter: what a hostile client sends where a name goes.
fn megabyte() -> String {
    "a".repeat(1 << 20)
}

/// `answer` is a refusal of `status` and `code` whose text says each of `said`, and no
/// longer than `bound` bytes.
#[track_caller]
fn refused(answer: &Answer, status: u16, code: &str, said: &[&str], bound: usize) {
    assert_eq!(
        (answer.status, answer.code().as_str()),
        (status, code),
        "{}",
        answer.body.chars().take(400).collect::<String>()
    );
    let text = answer.body.replace("&quot;", "\"").replace("\\\"", "\"");
    for words in said {
        assert!(text.contains(words), "{text:?} lacks {words:?}");
    }
    assert!(
        answer.body.len() < bound,
        "{} bytes: {}",
        answer.body.len(),
        answer.body.chars().take(400).collect::<String>()
    );
}

#[test]
fn a_body_refused_names_the_field_in_plain_words_and_repeats_a_few_dozen_bytes_at_most() {
    let scenario = Scenario::new();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let long = megabyte();
    let bad_body = |path: &str, body: &str, said: &[&str]| {
        refused(&web.post(path, Some(body)), 400, "bad-body", said, 1024);
    };
    bad_body(
        "/api/v1/jobs/greet/trigger",
        &format!(r#"{{"payload": 1, "{long}": 1}}"#),
        &["unknown field \"aaaa", "this route takes payload, priority"],
    );
    bad_body(
        "/api/v1/jobs/greet/trigger",
        &format!(r#"{{"priority": "{long}"}}"#),
        &["priority must be one of high, normal, low"],
    );
    bad_body(
        "/api/v1/dead/retry",
        &format!(r#"{{"job": "{long}"}}"#),
        &["job must be a job's name of at most 128 bytes; this one is 1048576 bytes"],
    );
    for body in ["{1: 2}", "null", "[1]", "\"x\""] {
        bad_body(
            "/api/v1/jobs/greet/trigger",
            body,
            &["the body must be a JSON object, or nothing"],
        );
    }
    bad_body(
        "/api/v1/jobs/greet/enqueue",
        r#"{"delay_ms": -5}"#,
        &["delay_ms must be a whole number of milliseconds"],
    );
    bad_body(
        "/api/v1/dead/purge",
        r#"{"older_than_ms": "7d"}"#,
        &["older_than_ms must be a whole number of milliseconds"],
    );
    // A route that takes no field refuses one, as one that takes some does.
    for path in [
        "/api/v1/jobs/greet/pause",
        "/api/v1/jobs/greet/resume",
        "/api/v1/dead/greet@1/retry",
        "/api/v1/workflows/flow@1/retry",
    ] {
        bad_body(
            path,
            r#"{"x": 1}"#,
            &["unknown field \"x\": this route takes none"],
        );
    }
    // No body, or one naming nothing, retries nothing: a retry of many says what it retries.
    for body in [None, Some("{}"), Some(r#"{"all": false}"#)] {
        refused(
            &web.post("/api/v1/dead/retry", body),
            400,
            "bad-body",
            &["{\"all\": true}"],
            1024,
        );
    }
    // Both would retry one job's where the body also asked for every one: one or the other.
    refused(
        &web.post("/api/v1/dead/retry", Some(r#"{"all": true, "job": "x"}"#)),
        400,
        "bad-body",
        &["give one of job and all"],
        1024,
    );
    assert_eq!(
        web.post("/api/v1/dead/retry", Some(r#"{"all": true}"#))
            .status,
        200
    );
    // Past the bound, a body is too large, not a bad one.
    let huge = format!(r#"{{"payload": "{}"}}"#, "x".repeat(3 << 20));
    refused(
        &web.post("/api/v1/jobs/greet/trigger", Some(&huge)),
        413,
        "body-too-large",
        &["longer than the 2097152 bytes this server reads"],
        1024,
    );
}

#[test]
fn a_form_refused_names_the_field_as_a_query_does() {
    let scenario = Scenario::new();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    let token = web.get("/dead").csrf_cookie();
    let form = |path: &str, fields: &str| web.submit_form(path, &token, &token, fields);
    refused(
        &form("/dead/retry", "job=&count=abc"),
        400,
        "bad-body",
        &["count must be a whole number, not \"abc\""],
        8192,
    );
    // An age the form takes as text and no age is said in the page's warnings.
    let not_an_age = form("/dead/purge", "older_than=abc");
    assert_eq!(not_an_age.status, 400, "{}", not_an_age.body);
    assert!(
        not_an_age
            .body
            .contains("older_than must be an age such as 30m or 7d, not &quot;abc&quot;"),
        "{}",
        not_an_age.body
    );
    refused(
        &form(
            "/dead/purge",
            &format!("older_than={}", "9".repeat(1_000_000)),
        ),
        400,
        "bad-body",
        &["older_than must be an age such as 30m or 7d of at most 64 bytes"],
        8192,
    );
    // A field a form does not take is refused, as a parameter is.
    for path in ["/jobs/greet/pause", "/hold/release", "/dead/greet@1/retry"] {
        refused(
            &form(path, "x=1"),
            400,
            "bad-body",
            &["unknown field \"x\""],
            8192,
        );
    }
    // A payload typed in a text box keeps its lines.
    let answer = form("/jobs/greet/trigger", "payload=%7B%0D%0A%7D");
    assert_ne!(answer.code(), "bad-body", "{}", answer.body);
}

#[test]
fn a_header_refused_is_not_repeated_whole_and_a_long_forwarded_prefix_is_ignored() {
    let scenario = Scenario::new();
    let web = WebProcess::start(
        &scenario.server.url(),
        scenario.dir.path(),
        &["--trust-proxy"],
    );
    let long = "a".repeat(60_000);
    let pause = || web.client().post(web.url("/api/v1/jobs/greet/pause"));
    refused(
        &web.send(pause().header("origin", format!("http://{long}"))),
        403,
        "cross-origin",
        &["refused: the request came from http://aaa"],
        1024,
    );
    refused(
        &web.send(pause().header("sec-fetch-site", long.clone())),
        403,
        "cross-origin",
        &["another site"],
        1024,
    );
    refused(
        &web.send(pause().header("host", long.clone())),
        403,
        "untrusted-host",
        &["not to \"aaa"],
        1024,
    );
    // What follows the address is a port only when it is digits.
    let port = web.url("/").rsplit(':').next().expect("a port").to_owned();
    refused(
        &web.send(
            web.client()
                .get(web.url("/api/v1/status"))
                .header("host", format!("127.0.0.1:{port}@evil.example")),
        ),
        403,
        "untrusted-host",
        &["evil.example"],
        1024,
    );
    // A forwarded prefix up to 256 bytes starts every link; a longer one is ignored.
    let at_bound = format!("/{}", "p".repeat(255));
    let page = web.send(
        web.client()
            .get(web.url("/jobs"))
            .header("x-forwarded-prefix", &at_bound),
    );
    assert!(
        page.body.contains(&format!("href=\"{at_bound}/jobs")),
        "{}",
        page.body
    );
    let page = web.send(
        web.client()
            .get(web.url("/jobs"))
            .header("x-forwarded-prefix", format!("/{long}")),
    );
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains("/aaaa"), "{}", page.body);
    assert!(page.body.contains("href=\"/jobs"), "{}", page.body);
}

#[test]
fn a_route_that_takes_no_query_refuses_one_and_a_bad_segment_names_nothing_in_plain_words() {
    let scenario = Scenario::new();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    for path in [
        "/?x=%FF&x=2",
        "/api/v1/status?x=1",
        "/jobs/greet?x=1",
        "/api/v1/jobs/greet?x=1",
        "/runs/greet@1?x=1",
        "/api/v1/runs/greet@1?x=1",
        "/api/v1/dead/greet@1?x=1",
        "/workflows/flow@1?x=1",
        "/api/v1/workflows/flow@1?x=1",
    ] {
        let answer = web.get(path);
        assert_eq!(answer.is_page(), !path.starts_with("/api/"), "{path}");
        refused(
            &answer,
            400,
            "bad-query",
            &["unknown parameter \"x\": this address takes none"],
            8192,
        );
    }
    for path in ["/jobs/a%00b", "/api/v1/jobs/a%00b", "/runs/a%1Fb"] {
        let answer = web.get(path);
        refused(&answer, 404, "no-route", &["control character U+00"], 8192);
        assert!(
            !answer
                .body
                .bytes()
                .any(|byte| byte.is_ascii_control() && byte != b'\n'),
            "{path}: {:?}",
            answer.body
        );
    }
    for path in ["/jobs/%FF%FE", "/api/v1/jobs/%FF%FE"] {
        let answer = web.get(path);
        refused(
            &answer,
            404,
            "no-route",
            &["percent-escapes are not UTF-8"],
            8192,
        );
        assert!(!answer.body.contains("Invalid URL"), "{}", answer.body);
    }
    // The longest parameter of an address too long is measured with its name.
    refused(
        &web.get(&format!("/api/v1/jobs?{}=1", "k".repeat(9000))),
        414,
        "uri-too-long",
        &[
            "its longest parameter, \"kkkk",
            "is 9002 bytes with its name",
        ],
        1024,
    );
}

#[test]
fn the_auth_file_takes_a_token_once_and_the_scheme_in_any_case() {
    let scenario = Scenario::new();
    let dir = scenario.dir.path();
    let sha = redcron_in(dir, &["web", "hash", "--token"], "deploy-token").success();
    let token = |name: &str, role: &str| {
        format!(
            "[[token]]\nname = \"{name}\"\nsha256 = \"{}\"\nrole = \"{role}\"\n",
            sha.trim()
        )
    };
    std::fs::write(
        dir.join("twice.toml"),
        format!(
            "{}{}",
            token("reader", "viewer"),
            token("deploy", "operator")
        ),
    )
    .expect("write the auth file");
    let refused_at_start = redcron_in(
        dir,
        &[
            "web",
            "--listen",
            "127.0.0.1:0",
            "--redis",
            &scenario.server.url(),
            "--auth-file",
            "twice.toml",
        ],
        "",
    )
    .failure(2);
    assert!(
        refused_at_start.contains("token \"deploy\" has the sha256 of token \"reader\""),
        "{refused_at_start}"
    );

    std::fs::write(dir.join("auth.toml"), token("deploy", "operator")).expect("write");
    let web = WebProcess::start(&scenario.server.url(), dir, &["--auth-file", "auth.toml"]);
    let status = |authorization: &str| {
        web.send(
            web.client()
                .get(web.url("/api/v1/status"))
                .header("authorization", authorization),
        )
    };
    for scheme in ["bearer", "BEARER", "Bearer"] {
        let answer = status(&format!("{scheme} deploy-token"));
        assert_eq!(answer.status, 200, "{scheme}: {}", answer.body);
    }
    refused(
        &status("Bearer "),
        401,
        "unauthenticated",
        &["the bearer token is empty"],
        1024,
    );
    refused(
        &status("Digest x"),
        401,
        "unauthenticated",
        &["neither Bearer nor Basic"],
        1024,
    );
}

#[test]
fn a_path_outside_the_base_path_is_the_apis_404_naming_it() {
    let scenario = Scenario::new();
    let web = WebProcess::start(
        &scenario.server.url(),
        scenario.dir.path(),
        &["--base-path", "/redcron"],
    );
    let root = web.url("/");
    let server = root.strip_suffix("/redcron").expect("under the base path");
    for path in ["/jobs", "/api/v1/status"] {
        let answer = web.send(web.client().get(format!("{server}{path}")));
        refused(
            &answer,
            404,
            "no-route",
            &[&format!(
                "no route {path}: the console and its API are under /redcron"
            )],
            1024,
        );
        assert!(answer.headers.contains_key("content-security-policy"));
    }
}
