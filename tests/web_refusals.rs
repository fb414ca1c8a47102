//! What a browser gets from a real `redcron web` when a page is refused or missing: a page in
//! the layout that says what is needed (with the challenges of the credentials the server
//! takes, Basic making the browser ask for a password), while the API under `/api/v1` keeps its
//! JSON; and the console's root reached with a trailing slash under a base path, or from the
//! server's own root.

use std::time::{Duration, Instant};

use crate::util::redcron_in;
use crate::util::scenario::Scenario;
use crate::util::web::WebProcess;

/// A console whose auth file has a viewer `vera` and an operator `otto`, by password.
fn with_users(scenario: &Scenario, extra: &[&str]) -> WebProcess {
    let dir = scenario.dir.path();
    let hash = |secret: &str| {
        redcron_in(dir, &["web", "hash"], secret)
            .success()
            .trim()
            .to_owned()
    };
    let auth = format!(
        "[[user]]\nname = \"vera\"\npassword_hash = \"{}\"\nrole = \"viewer\"\n\n\
         [[user]]\nname = \"otto\"\npassword_hash = \"{}\"\nrole = \"operator\"\n",
        hash("vera's password\n"),
        hash("otto's password\n"),
    );
    std::fs::write(dir.join("auth.toml"), auth).expect("write the auth file");
    let mut args = vec!["--auth-file", "auth.toml"];
    args.extend(extra);
    WebProcess::start(&scenario.server.url(), dir, &args)
}

#[test]
fn a_page_refused_is_a_page_that_says_what_is_needed_and_the_api_keeps_json() {
    let scenario = Scenario::new();
    let web = with_users(&scenario, &[]);

    // Not signed in: the browser is asked for a user and password.
    for path in ["/", "/workflows", "/no-such-page"] {
        let page = web.get(path);
        assert_eq!(
            (page.status, page.code()),
            (401, "unauthenticated".to_owned()),
            "{path}"
        );
        assert!(page.is_page(), "{path}: {}", page.body);
        assert!(
            page.body.contains("<h1>Sign in needed</h1>"),
            "{}",
            page.body
        );
        assert!(page.body.contains("not signed in"), "{}", page.body);
        assert!(
            page.headers["www-authenticate"]
                .to_str()
                .is_ok_and(|challenge| challenge.starts_with("Basic ")),
            "{path}: {:?}",
            page.headers
        );
    }
    let api = web.get("/api/v1/status");
    assert_eq!(
        (api.status, api.code()),
        (401, "unauthenticated".to_owned())
    );
    assert!(!api.is_page(), "{}", api.body);

    // A viewer reads, and is told an action is an operator's.
    let as_vera = |request: reqwest::RequestBuilder| {
        web.send(request.basic_auth("vera", Some("vera's password")))
    };
    let page = as_vera(web.client().get(web.url("/")));
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("signed in as vera"), "{}", page.body);
    let token = page.csrf_cookie();
    let refused = as_vera(
        web.client()
            .post(web.url("/hold/release"))
            .header("cookie", format!("redcron_csrf={token}"))
            .header("origin", format!("http://127.0.0.1:{}", web.port))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("csrf={token}")),
    );
    assert_eq!(
        (refused.status, refused.code()),
        (403, "forbidden".to_owned())
    );
    assert!(refused.is_page(), "{}", refused.body);
    assert!(
        refused.body.contains("<h1>Not allowed</h1>"),
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains("only an operator may act"),
        "{}",
        refused.body
    );
    assert!(
        refused.body.contains("signed in as vera"),
        "{}",
        refused.body
    );

    // Signed in, a missing page is a 404 in the layout with a way back; the API's is JSON.
    let missing = as_vera(web.client().get(web.url("/no-such-page")));
    assert_eq!(missing.status, 404);
    assert!(missing.is_page(), "{}", missing.body);
    assert!(
        missing.body.contains("Back to the overview"),
        "{}",
        missing.body
    );
    let missing = as_vera(web.client().get(web.url("/workflows/no-such-instance")));
    assert_eq!(
        (missing.status, missing.code()),
        (404, "unknown-workflow".to_owned())
    );
    assert!(
        missing.body.contains("Back to the workflows"),
        "{}",
        missing.body
    );
    let api = as_vera(web.client().get(web.url("/api/v1/no-such-route")));
    assert_eq!((api.status, api.code()), (404, "no-route".to_owned()));
    assert!(!api.is_page());
}

#[test]
fn a_read_only_console_says_so_on_a_page_and_in_the_api() {
    let scenario = Scenario::new();
    let web = with_users(&scenario, &["--read-only"]);
    let as_otto = |request: reqwest::RequestBuilder| {
        web.send(request.basic_auth("otto", Some("otto's password")))
    };
    let token = as_otto(web.client().get(web.url("/"))).csrf_cookie();
    let refused = as_otto(
        web.client()
            .post(web.url("/hold/release"))
            .header("cookie", format!("redcron_csrf={token}"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(format!("csrf={token}")),
    );
    assert_eq!(
        (refused.status, refused.code()),
        (403, "read-only".to_owned())
    );
    assert!(refused.is_page(), "{}", refused.body);
    assert!(
        refused.body.contains("this server is read-only"),
        "{}",
        refused.body
    );
    let api = as_otto(web.client().post(web.url("/api/v1/dead/purge")));
    assert_eq!((api.status, api.code()), (403, "read-only".to_owned()));
    assert!(!api.is_page());
}

#[test]
fn the_root_with_a_trailing_slash_and_the_servers_root_lead_to_the_overview() {
    let scenario = Scenario::new();
    let web = WebProcess::start(
        &scenario.server.url(),
        scenario.dir.path(),
        &["--base-path", "/ops/redcron"],
    );
    for url in [
        format!("http://127.0.0.1:{}/ops/redcron/", web.port),
        format!("http://127.0.0.1:{}/", web.port),
        web.url("/"),
    ] {
        let page = web.send(web.client().get(&url));
        assert_eq!(page.status, 200, "{url}: {}", page.body);
        assert!(
            page.body.contains("<h1>Overview</h1>"),
            "{url}: {}",
            page.body
        );
    }
    let no_follow = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let moved = web.send(no_follow.get(format!("http://127.0.0.1:{}/ops/redcron/", web.port)));
    assert_eq!(moved.status, 308, "{moved:?}");
    assert_eq!(moved.headers["location"], "../redcron");
    // Outside the console there is still nothing.
    let outside = web.send(
        web.client()
            .get(format!("http://127.0.0.1:{}/elsewhere", web.port)),
    );
    assert_eq!(outside.status, 404);
}

#[test]
fn a_401_challenges_for_the_credentials_the_auth_file_holds() {
    let scenario = Scenario::new();
    let dir = scenario.dir.path();
    let hash = |args: &[&str], secret: &str| {
        let mut all = vec!["web", "hash"];
        all.extend(args);
        redcron_in(dir, &all, secret).success().trim().to_owned()
    };
    let token = format!(
        "[[token]]\nname = \"deploy\"\nsha256 = \"{}\"\nrole = \"operator\"\n",
        hash(&["--token"], "operator-token\n")
    );
    let user = format!(
        "[[user]]\nname = \"otto\"\npassword_hash = \"{}\"\nrole = \"operator\"\n",
        hash(&[], "otto's password\n")
    );
    let bearer = "Bearer realm=\"redcron\"";
    let basic = "Basic realm=\"redcron\", charset=\"UTF-8\"";
    for (file, holds, challenges) in [
        ("tokens.toml", token.clone(), vec![bearer]),
        ("users.toml", user.clone(), vec![basic]),
        ("both.toml", format!("{token}\n{user}"), vec![bearer, basic]),
    ] {
        std::fs::write(dir.join(file), holds).expect("write the auth file");
        let web = WebProcess::start(&scenario.server.url(), dir, &["--auth-file", file]);
        // A page and the API, without credentials and with wrong ones.
        let answers = [
            web.get("/"),
            web.get("/api/v1/jobs"),
            web.send(web.client().get(web.url("/jobs")).bearer_auth("guess")),
        ];
        for answer in answers {
            assert_eq!(answer.status, 401, "{file}: {}", answer.body);
            let given: Vec<&str> = answer
                .headers
                .get_all("www-authenticate")
                .iter()
                .map(|value| value.to_str().expect("a challenge is text"))
                .collect();
            assert_eq!(given, challenges, "{file}");
        }
    }
}

#[test]
fn without_an_auth_file_only_a_request_addressed_to_this_machine_is_answered() {
    let scenario = Scenario::new();
    let web = WebProcess::start(&scenario.server.url(), scenario.dir.path(), &[]);
    // What a page of evil.example sends once its DNS name resolves to 127.0.0.1: its own name
    // as Host and Origin, which the same-origin check alone took for this server's.
    let evil = format!("evil.example:{}", web.port);
    let as_evil = |request: reqwest::RequestBuilder| {
        web.send(
            request
                .header("host", &evil)
                .header("origin", format!("http://{evil}")),
        )
    };
    for refused in [
        as_evil(web.client().post(web.url("/api/v1/jobs/x/pause"))),
        as_evil(web.client().get(web.url("/api/v1/status"))),
        as_evil(web.client().get(web.url("/"))),
    ] {
        assert_eq!(
            (refused.status, refused.code()),
            (403, "untrusted-host".to_owned()),
            "{}",
            refused.body
        );
        assert!(refused.body.contains("--auth-file"), "{}", refused.body);
    }
    for host in [
        format!("localhost:{}", web.port),
        format!("127.0.0.1:{}", web.port),
        format!("[::1]:{}", web.port),
    ] {
        let read = web.send(
            web.client()
                .get(web.url("/api/v1/status"))
                .header("host", &host),
        );
        assert_eq!(read.status, 200, "{host}: {}", read.body);
    }

    // With an auth file the credentials decide, whatever name the server is reached by.
    let web = with_users(&scenario, &[]);
    let read = web.send(
        web.client()
            .get(web.url("/api/v1/status"))
            .header("host", format!("redcron.example:{}", web.port))
            .basic_auth("vera", Some("vera's password")),
    );
    assert_eq!(read.status, 200, "{}", read.body);
}

/// An unknown user is refused as a wrong password is: the same 401, page and challenge, after
/// an Argon2 verification alike (against a hash no password matches), so that neither what nor
/// when the server answers tells which users its auth file holds.
#[test]
fn an_unknown_user_is_refused_as_a_wrong_password_is() {
    let scenario = Scenario::new();
    let web = with_users(&scenario, &[]);
    let timed = |user: &str| {
        let started = Instant::now();
        let answer = web.send(
            web.client()
                .get(web.url("/jobs"))
                .basic_auth(user, Some("not the password")),
        );
        (answer, started.elapsed())
    };
    // Each is asked in turn, a few times, and the fastest answers are compared: load only ever
    // slows an answer down, so each one's fastest is the nearest to what it costs, and both
    // cost a verification when an unknown user is verified too. Answered without one, an
    // unknown user took a hundredth of a wrong password's time (5 ms against 1.7 s in a test
    // build): its fastest of three would have to be slowed fifty times to reach a quarter.
    let (mut wrong_took, mut unknown_took) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let (wrong, took) = timed("vera");
        wrong_took.push(took);
        let (unknown, took) = timed("nobody");
        unknown_took.push(took);
        assert_eq!(wrong.status, 401, "{}", wrong.body);
        assert_eq!(unknown.status, 401, "{}", unknown.body);
        assert_eq!(wrong.body, unknown.body);
        assert_eq!(
            wrong
                .headers
                .get_all("www-authenticate")
                .iter()
                .collect::<Vec<_>>(),
            unknown
                .headers
                .get_all("www-authenticate")
                .iter()
                .collect::<Vec<_>>()
        );
    }
    let fastest = |took: &[Duration]| took.iter().min().copied().unwrap_or_default();
    assert!(
        fastest(&unknown_took) * 4 > fastest(&wrong_took),
        "an unknown user answered in {unknown_took:?}, a wrong password in {wrong_took:?}"
    );
}

/// A refused page (401, 403) names neither the namespace nor the leader, and one refused to a
/// caller not signed in is drawn without reading Redis, which anyone could otherwise make the
/// server do as often as they liked.
#[test]
fn a_refused_page_neither_reads_redis_nor_names_the_namespace() {
    let scenario = Scenario::new();
    let web = with_users(&scenario, &[]);
    let as_vera = |request: reqwest::RequestBuilder| {
        web.send(request.basic_auth("vera", Some("vera's password")))
    };
    // Signed in, the header names them: what the refusals below must not.
    let read = as_vera(web.client().get(web.url("/jobs")));
    assert_eq!(read.status, 200, "{}", read.body);
    assert!(
        read.body.contains("namespace <strong>test</strong>"),
        "{}",
        read.body
    );
    assert!(read.body.contains(" · leader "), "{}", read.body);

    scenario.server.reset_command_calls();
    let mut refused = Vec::new();
    for _ in 0..10 {
        refused.push(web.get("/jobs"));
    }
    let calls = scenario.server.command_calls();
    let read_by_the_server: u64 = calls
        .iter()
        .filter(|(command, _)| !command.starts_with("info") && !command.starts_with("config"))
        .map(|(_, calls)| calls)
        .sum();
    assert_eq!(read_by_the_server, 0, "{calls:?}");
    // A viewer refused an action is told so on a page that names neither either.
    refused.push(as_vera(web.client().post(web.url("/jobs/greet/pause"))));
    for page in &refused {
        assert!(matches!(page.status, 401 | 403), "{}", page.body);
        assert!(page.is_page(), "{}", page.body);
        assert!(!page.body.contains("namespace"), "{}", page.body);
        assert!(!page.body.contains("leader"), "{}", page.body);
        assert!(!page.body.contains("redcron test"), "{}", page.body);
    }
    assert_eq!(refused[10].status, 403, "{}", refused[10].body);
}

/// Wrong passwords sent at once are verified two at a time on the server's own threads: its
/// peak memory grows by a bound that does not depend on how many are sent (about 155 MiB in
/// a debug build for 16 or for 48), where each ran on a thread of its own (16 at once took
/// it from 50 to 496 MB), and each is refused.
#[test]
fn wrong_passwords_sent_at_once_are_verified_a_few_at_a_time() {
    const GUESSES: usize = 48;
    use base64::Engine;
    use std::io::{Read, Write};
    let scenario = Scenario::new();
    let web = with_users(&scenario, &[]);
    assert_eq!(web.get("/api/v1/status").status, 401);
    let before = web.peak_kib();
    let port = web.port;
    let guesses: Vec<_> = (0..GUESSES)
        .map(|guess| {
            std::thread::spawn(move || {
                let credentials =
                    base64::engine::general_purpose::STANDARD.encode(format!("otto:guess {guess}"));
                let mut stream =
                    std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
                write!(
                    stream,
                    "GET /api/v1/status HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
                     Authorization: Basic {credentials}\r\nConnection: close\r\n\r\n"
                )
                .expect("send");
                let mut answer = String::new();
                stream.read_to_string(&mut answer).expect("answer");
                answer
            })
        })
        .collect();
    for guess in guesses {
        let answer = guess.join().expect("a guess");
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    }
    let grown_mib = (web.peak_kib() - before) / 1024;
    assert!(
        grown_mib < 200,
        "{GUESSES} wrong passwords at once grew the server's peak memory by {grown_mib} MiB"
    );
}
