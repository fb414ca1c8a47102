//! A real `redcron web` process on a free loopback port, and an HTTP client to ask it.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::redis_server::free_port;
use super::wait::wait_for;

/// A `redcron web` process, killed on drop.
pub struct WebProcess {
    child: Child,
    /// Where it listens.
    pub port: u16,
    /// The path it serves under (`""` or `/redcron`).
    pub base_path: String,
    log: std::path::PathBuf,
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
}

/// One answer: its status, headers and body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Answer {
    /// The body as JSON.
    #[track_caller]
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|error| panic!("not JSON ({error}): {}", self.body))
    }

    /// The form token the answer's cookie gives the browser, after checking the cookie is
    /// same-site and out of a script's reach.
    #[track_caller]
    pub fn csrf_cookie(&self) -> String {
        let cookie = self
            .headers
            .get("set-cookie")
            .and_then(|value| value.to_str().ok())
            .unwrap_or_else(|| panic!("no cookie set: {:?}", self.headers));
        assert!(
            cookie.contains("SameSite=Strict") && cookie.contains("HttpOnly"),
            "{cookie}"
        );
        cookie
            .split(';')
            .next()
            .and_then(|pair| pair.strip_prefix("redcron_csrf="))
            .expect("the token cookie")
            .to_owned()
    }

    /// Whether the answer is an HTML page in the console's layout.
    pub fn is_page(&self) -> bool {
        self.headers
            .get("content-type")
            .and_then(|kind| kind.to_str().ok())
            .is_some_and(|kind| kind.starts_with("text/html"))
            && self.body.contains("<nav aria-label=\"Main\">")
    }

    /// The error code of an error answer: the API's JSON, or a page's refusal (its
    /// `data-code`).
    #[track_caller]
    pub fn code(&self) -> String {
        if self.is_page() {
            return self
                .body
                .split_once("data-code=\"")
                .and_then(|(_, rest)| rest.split_once('"'))
                .map(|(code, _)| code.to_owned())
                .unwrap_or_else(|| panic!("a page with no error code: {}", self.body));
        }
        self.json()["error"]["code"]
            .as_str()
            .unwrap_or_else(|| panic!("no error code: {}", self.body))
            .to_owned()
    }
}

impl WebProcess {
    /// Starts `redcron web` on the Redis at `url`, namespace `test`, with `extra` options
    /// (`--base-path` among them is remembered for [`Self::url`]), in `dir`; waits until it
    /// answers.
    pub fn start(url: &str, dir: &Path, extra: &[&str]) -> Self {
        let port = free_port();
        let log = dir.join(format!("web-{port}.log"));
        let listen = format!("127.0.0.1:{port}");
        let child = Command::new(env!("CARGO_BIN_EXE_redcron"))
            .args([
                "web",
                "--listen",
                &listen,
                "--redis",
                url,
                "--namespace",
                "test",
            ])
            .args(extra)
            .current_dir(dir)
            .env_remove("REDIS_URL")
            .env("REDCRON_CONFIG", "/dev/null")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .expect("spawn redcron web");
        let base_path = extra
            .iter()
            .position(|arg| *arg == "--base-path")
            .map(|at| extra[at + 1].to_owned())
            .unwrap_or_default();
        let mut web = Self {
            child,
            port,
            base_path,
            log,
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime"),
            client: {
                // reqwest's TLS needs a provider even for plain HTTP; a second install is a no-op.
                let _ = rustls::crypto::ring::default_provider().install_default();
                reqwest::Client::new()
            },
        };
        let answered = wait_for(Duration::from_secs(10), || {
            if let Ok(Some(status)) = web.child.try_wait() {
                panic!("redcron web exited with {status}:\n{}", web.log());
            }
            std::net::TcpStream::connect(("127.0.0.1", port)).ok()
        });
        assert!(
            answered.is_some(),
            "redcron web never listened:\n{}",
            web.log()
        );
        web
    }

    /// What it logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The URL of `path` (which starts with `/`) under the base path; `/` is the base path
    /// itself, as the console links it.
    pub fn url(&self, path: &str) -> String {
        let path = if path == "/" && !self.base_path.is_empty() {
            ""
        } else {
            path
        };
        format!("http://127.0.0.1:{}{}{path}", self.port, self.base_path)
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Answer {
        self.send(self.client.get(self.url(path)))
    }

    /// `POST path` with `body` as JSON, if any.
    pub fn post(&self, path: &str, body: Option<&str>) -> Answer {
        let mut request = self.client.post(self.url(path));
        if let Some(body) = body {
            request = request
                .header("content-type", "application/json")
                .body(body.to_owned());
        }
        self.send(request)
    }

    /// Submits one of the console's forms as a browser does from this server's own page: the
    /// cookie holding `cookie`, the form's token field `field` and then `form`'s fields
    /// (`a=1&b=2`, or empty). The redirect it is answered with is not followed: the caller
    /// asserts its 303 and where it leads (a refusal is answered without one).
    pub fn submit_form(&self, path: &str, cookie: &str, field: &str, form: &str) -> Answer {
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("a client");
        let body = if form.is_empty() {
            format!("csrf={field}")
        } else {
            format!("csrf={field}&{form}")
        };
        self.send(
            client
                .post(self.url(path))
                .header("cookie", format!("redcron_csrf={cookie}"))
                .header("origin", format!("http://127.0.0.1:{}", self.port))
                .header("content-type", "application/x-www-form-urlencoded")
                .body(body),
        )
    }

    /// The server's peak resident memory so far (`VmHWM`), KiB.
    pub fn peak_kib(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the server's /proc status");
        status
            .lines()
            .find_map(|line| line.strip_prefix("VmHWM:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmHWM in /proc status")
    }

    /// Sends `request` (built on [`Self::client`]) and reads the whole answer.
    pub fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        self.runtime.block_on(async {
            let response = request.send().await.expect("the request is answered");
            let status = response.status().as_u16();
            let headers = response.headers().clone();
            let body = response.text().await.expect("the body is read");
            Answer {
                status,
                headers,
                body,
            }
        })
    }

    /// The client requests are built on (to add headers of one's own).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }
}

impl Drop for WebProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The address of a page's link to its next page (`rel="next"`), as the browser follows it;
/// `None` on the last page.
pub fn next_link(html: &str) -> Option<String> {
    html.split("<a rel=\"next\" href=\"")
        .nth(1)
        .and_then(|rest| rest.split_once('"'))
        .map(|(link, _)| link.replace("&amp;", "&"))
}
