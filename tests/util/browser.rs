//! A real browser for the console's tests: Debian's headless `chromium`, driven over WebDriver
//! through its own `chromedriver`, with the helpers a test of a page needs (open, find, click,
//! fill, submit, wait, screenshot) and an accessibility check run by axe-core inside the page.

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use axum::http::Method;
use fantoccini::error::CmdError;
use fantoccini::wd::WebDriverCompatibleCommand;
use fantoccini::{Client, ClientBuilder, Locator, elements::Element};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use tempfile::TempDir;

use super::wait::wait_until_async;

mod accessibility;

/// The viewport every page is shown in, width and height in CSS pixels at a scale of 1, so
/// screenshots and layouts are the same on every machine.
pub const VIEWPORT: (u32, u32) = (1280, 800);

/// How long a `wait_for` helper waits for what a page shows: long next to a page's reaction,
/// so a loaded machine still passes.
const WAIT: Duration = Duration::from_secs(15);

/// How long `chromedriver` may take to say which port it listens on.
const DRIVER_START: Duration = Duration::from_secs(30);

/// The colour scheme the page is told the system prefers (`prefers-color-scheme`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColorScheme {
    Light,
    Dark,
}

impl ColorScheme {
    /// Its name in CSS and in the DevTools protocol; also a screenshot's suffix.
    pub fn name(self) -> &'static str {
        match self {
            ColorScheme::Light => "light",
            ColorScheme::Dark => "dark",
        }
    }
}

/// How a [`Browser`] starts.
#[derive(Debug, Clone, Copy)]
pub struct BrowserOptions {
    /// Whether pages run their scripts: off, a test sees what a visitor without JavaScript
    /// sees (the console must work so).
    pub javascript: bool,
    /// The scheme pages see until [`Browser::set_color_scheme`] changes it.
    pub color_scheme: ColorScheme,
}

impl Default for BrowserOptions {
    fn default() -> Self {
        Self {
            javascript: true,
            color_scheme: ColorScheme::Light,
        }
    }
}

/// A headless chromium of this test alone, behind its own `chromedriver`.
///
/// Dropping it kills the driver and every chromium process it started (they share the
/// driver's process group), and removes the browser's profile, also when the test panics.
pub struct Browser {
    client: Client,
    // Dropped after the client: the driver must outlive the session's last request.
    driver: Driver,
}

impl Browser {
    /// Starts a browser with the default options: JavaScript on, light scheme.
    ///
    /// # Panics
    /// When `chromium` or `chromedriver` is missing (the message says how to install them), or
    /// when the browser does not start (the message includes the driver's log).
    pub async fn start() -> Self {
        Self::start_with(BrowserOptions::default()).await
    }

    /// Starts a browser with `options`.
    ///
    /// # Panics
    /// As [`Browser::start`].
    pub async fn start_with(options: BrowserOptions) -> Self {
        let tools = Tools::find(&std::env::var_os("PATH").unwrap_or_default());
        let driver = Driver::start(&tools.chromedriver);
        let profile = driver.dir.path().join("profile");
        let mut arguments = vec![
            "--headless".to_owned(),
            format!("--window-size={},{}", VIEWPORT.0, VIEWPORT.1),
            format!("--user-data-dir={}", profile.display()),
            // The same pixels on every machine: no scaling, no scrollbars over the content.
            "--force-device-scale-factor=1".to_owned(),
            "--hide-scrollbars".to_owned(),
            // A container's /dev/shm is often 64 MB, which a page can fill and crash the tab.
            "--disable-dev-shm-usage".to_owned(),
        ];
        // Chromium refuses to start as root with its sandbox, which needs an unprivileged user
        // to drop to; the tests run as root in CI containers, on pages they serve themselves.
        if nix::unistd::geteuid().is_root() {
            arguments.push("--no-sandbox".to_owned());
        }
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": tools.chromium, "args": arguments },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!("a JSON object literal")
        };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{}", driver.port))
            .await
            .unwrap_or_else(|error| {
                panic!(
                    "chromium does not start through chromedriver: {error}\n{}",
                    driver.log()
                )
            });
        let browser = Self { client, driver };
        // The window's size leaves the page what the browser's own frame does not take, which
        // differs between builds: the viewport is set itself.
        browser
            .cdp(
                "Emulation.setDeviceMetricsOverride",
                json!({
                    "width": VIEWPORT.0,
                    "height": VIEWPORT.1,
                    "deviceScaleFactor": 1,
                    "mobile": false,
                }),
            )
            .await;
        if !options.javascript {
            // The DevTools switch turns off the page's own scripts only: the driver's, which
            // find elements and run the accessibility check, still run.
            browser
                .cdp(
                    "Emulation.setScriptExecutionDisabled",
                    json!({ "value": true }),
                )
                .await;
        }
        browser.set_color_scheme(options.color_scheme).await;
        browser
    }

    /// The process group of its driver and chromium processes, for a test of the clean-up.
    pub fn process_group(&self) -> i32 {
        i32::try_from(self.driver.child.id()).expect("a pid fits an i32")
    }

    /// The WebDriver client, for what the helpers here do not cover.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Tells the pages, from now on and across navigations, that the system prefers `scheme`:
    /// the DevTools protocol's media emulation, so one browser shows a page in both schemes
    /// (chromium's `--force-dark-mode` and `--blink-settings=preferredColorScheme` switches
    /// would hold for the browser's whole life).
    pub async fn set_color_scheme(&self, scheme: ColorScheme) {
        self.cdp(
            "Emulation.setEmulatedMedia",
            json!({ "features": [{ "name": "prefers-color-scheme", "value": scheme.name() }] }),
        )
        .await;
    }

    /// Opens `url` and waits for it to load.
    pub async fn open(&self, url: &str) {
        self.client
            .goto(url)
            .await
            .unwrap_or_else(|error| panic!("cannot open {url}: {error}"));
    }

    /// The URL of the page shown.
    pub async fn url(&self) -> String {
        self.client
            .current_url()
            .await
            .map(|url| url.to_string())
            .unwrap_or_else(|error| panic!("no current URL: {error}"))
    }

    /// The element `css` selects, which must be on the page now.
    pub async fn find(&self, css: &str) -> Element {
        match self.client.find(Locator::Css(css)).await {
            Ok(element) => element,
            Err(error) => panic!("no element {css:?} on {}: {error}", self.url().await),
        }
    }

    /// Every element `css` selects (none is no error).
    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        self.client
            .find_all(Locator::Css(css))
            .await
            .unwrap_or_else(|error| panic!("cannot look for {css:?}: {error}"))
    }

    /// The innermost element whose text contains `text`, which must be on the page now.
    pub async fn find_text(&self, text: &str) -> Element {
        match self.client.find(Locator::XPath(&text_xpath(text))).await {
            Ok(element) => element,
            Err(error) => panic!("no text {text:?} on {}: {error}", self.url().await),
        }
    }

    /// The visible text of the element `css` selects.
    pub async fn text(&self, css: &str) -> String {
        self.on_fresh(css, "read the text of", async |element| {
            element.text().await
        })
        .await
    }

    /// Clicks the element `css` selects (a link or a button: it waits for nothing after).
    pub async fn click(&self, css: &str) {
        self.on_fresh(css, "click", async |element| element.click().await)
            .await;
    }

    /// Replaces the value of the field `css` selects with `value`, typed as a person would.
    pub async fn fill(&self, css: &str, value: &str) {
        self.on_fresh(css, "type into", async |field| {
            field.clear().await?;
            field.send_keys(value).await
        })
        .await;
    }

    /// Does `act` to the element `css` selects, looked up again when the page replaced it
    /// between the look-up and the act, or when it could not take the act yet (not laid out):
    /// the console's script swaps a refreshed section whole, every 2 s, and a slow driver call
    /// may fall across a swap.
    ///
    /// # Panics
    /// When it fails otherwise, or fails so at every look within [`WAIT`].
    async fn on_fresh<T>(
        &self,
        css: &str,
        doing: &str,
        mut act: impl AsyncFnMut(Element) -> Result<T, CmdError>,
    ) -> T {
        let deadline = std::time::Instant::now() + WAIT;
        loop {
            match act(self.find(css).await).await {
                Ok(done) => return done,
                Err(error)
                    if (error.is_stale_element_reference()
                        || error.is_element_not_interactable())
                        && std::time::Instant::now() < deadline => {}
                Err(error) => panic!("cannot {doing} {css:?} on {}: {error}", self.url().await),
            }
        }
    }

    /// Submits the form `css` selects as its submit button would (so without JavaScript too),
    /// and waits for the page it leads to.
    pub async fn submit(&self, css: &str) {
        let button = format!("{css} [type=submit], {css} button:not([type])");
        self.click(&button).await;
    }

    /// Waits for an element `css` selects to appear.
    ///
    /// # Panics
    /// When none appears in time, naming the selector and the page.
    pub async fn wait_for(&self, css: &str) -> Element {
        let mut found = None;
        wait_until_async(WAIT, async || {
            found = self.client.find(Locator::Css(css)).await.ok();
            found.is_some()
        })
        .await;
        match found {
            Some(element) => element,
            None => panic!(
                "no element {css:?} appeared on {} within {WAIT:?}",
                self.url().await
            ),
        }
    }

    /// Waits for `text` to appear anywhere on the page; the innermost element showing it.
    ///
    /// # Panics
    /// When it does not appear in time, naming the text and the page.
    pub async fn wait_for_text(&self, text: &str) -> Element {
        let xpath = text_xpath(text);
        let mut found = None;
        wait_until_async(WAIT, async || {
            found = self.client.find(Locator::XPath(&xpath)).await.ok();
            found.is_some()
        })
        .await;
        match found {
            Some(element) => element,
            None => panic!(
                "no text {text:?} appeared on {} within {WAIT:?}",
                self.url().await
            ),
        }
    }

    /// The computed value of the CSS `property` of the element `css` selects, as the page's
    /// `getComputedStyle` gives it (a colour as `rgb(...)`).
    pub async fn computed_style(&self, css: &str, property: &str) -> String {
        let element = self.find(css).await;
        let value = self
            .client
            .execute(
                "return getComputedStyle(arguments[0]).getPropertyValue(arguments[1])",
                vec![json!(element), json!(property)],
            )
            .await
            .unwrap_or_else(|error| panic!("no {property} of {css:?}: {error}"));
        match value {
            Value::String(value) => value,
            other => panic!("{property} of {css:?} is no string: {other}"),
        }
    }

    /// The page's top saved as `dir/name.png` for the documents (see [`Self::screenshot`]),
    /// small enough to keep in the repository: under 200 KB.
    pub async fn photograph(&self, dir: &Path, name: &str) {
        // An accessibility check moves the focus down the page: the picture shows its top.
        if let Err(error) = self.client.execute("window.scrollTo(0, 0);", vec![]).await {
            panic!("cannot scroll {} to its top: {error}", self.url().await);
        }
        let shot = self.screenshot(dir, name).await;
        let size = std::fs::metadata(&shot).map(|meta| meta.len()).unwrap_or(0);
        assert!(size < 200_000, "{} is {size} bytes", shot.display());
    }

    /// Saves what the viewport shows as `dir/name.png` (the directory made when missing); the
    /// file's path.
    pub async fn screenshot(&self, dir: &Path, name: &str) -> PathBuf {
        let png = match self.client.screenshot().await {
            Ok(png) => png,
            Err(error) => panic!("no screenshot of {}: {error}", self.url().await),
        };
        std::fs::create_dir_all(dir)
            .unwrap_or_else(|error| panic!("cannot make {}: {error}", dir.display()));
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, png)
            .unwrap_or_else(|error| panic!("cannot write {}: {error}", path.display()));
        path
    }

    /// The scheme the page shown sees, as it sees it.
    pub async fn current_scheme(&self) -> ColorScheme {
        let dark = self
            .client
            .execute(
                "return matchMedia('(prefers-color-scheme: dark)').matches",
                Vec::new(),
            )
            .await
            .unwrap_or_else(|error| panic!("cannot ask the page for its scheme: {error}"));
        if dark == Value::Bool(true) {
            ColorScheme::Dark
        } else {
            ColorScheme::Light
        }
    }

    /// Sends one DevTools command to the page through the driver.
    async fn cdp(&self, command: &'static str, params: Value) {
        self.client
            .issue_cmd(Cdp { command, params })
            .await
            .unwrap_or_else(|error| panic!("the DevTools command {command} failed: {error}"));
    }
}

/// The XPath of the innermost elements whose text contains `text`. XPath 1 has no escapes:
/// a text with both quotes is joined with `concat`.
fn text_xpath(text: &str) -> String {
    let literal = if !text.contains('"') {
        format!("\"{text}\"")
    } else if !text.contains('\'') {
        format!("'{text}'")
    } else {
        let parts: Vec<String> = text.split('"').map(|part| format!("\"{part}\"")).collect();
        format!("concat({})", parts.join(", '\"', "))
    };
    format!(
        "//*[contains(normalize-space(.), {literal}) and not(*[contains(normalize-space(.), {literal})])]"
    )
}

/// A Chrome DevTools Protocol command, sent through chromedriver's `goog/cdp/execute`.
#[derive(Debug)]
struct Cdp {
    command: &'static str,
    params: Value,
}

impl WebDriverCompatibleCommand for Cdp {
    fn endpoint(
        &self,
        base_url: &url::Url,
        session_id: Option<&str>,
    ) -> Result<url::Url, url::ParseError> {
        // Sent only on a client that connected, which has a session.
        let session = session_id.unwrap_or_default();
        base_url.join(&format!("session/{session}/goog/cdp/execute"))
    }

    fn method_and_body(&self, _request_url: &url::Url) -> (Method, Option<String>) {
        let body = json!({ "cmd": self.command, "params": self.params });
        (Method::POST, Some(body.to_string()))
    }
}

/// A running `chromedriver`, in a process group of its own with the chromium it starts.
struct Driver {
    child: Child,
    port: u16,
    /// Its log and the browser's profile, removed with it.
    dir: TempDir,
}

impl Driver {
    /// Starts `chromedriver` on a port it picks itself (so no other test can take it between
    /// a pick and a bind) and reads that port from what it prints.
    ///
    /// It blocks its thread for the moments the driver takes to start: nothing of a test's
    /// runtime has to run meanwhile.
    fn start(chromedriver: &Path) -> Self {
        let dir = tempfile::tempdir().expect("a temporary directory for chromedriver");
        let mut child = Command::new(chromedriver)
            .arg("--port=0")
            .arg(format!("--log-path={}", dir.path().join(LOG).display()))
            // Its own group, which chromium and its helpers join: one signal ends them all.
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("chromedriver does not start: {error}"));
        let stdout = child.stdout.take().expect("stdout is piped");
        let (sender, receiver) = mpsc::channel();
        // Reads on after the port line, so the driver never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(port) = line
                    .strip_prefix("ChromeDriver was started successfully on port ")
                    .and_then(|rest| rest.trim_end_matches('.').parse::<u16>().ok())
                {
                    let _ = sender.send(port);
                }
            }
        });
        let mut driver = Self {
            child,
            port: 0,
            dir,
        };
        driver.port = receiver.recv_timeout(DRIVER_START).unwrap_or_else(|_| {
            panic!(
                "chromedriver did not say its port within {DRIVER_START:?}\n{}",
                driver.log()
            )
        });
        driver
    }

    /// Its log, for a failure's message.
    fn log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join(LOG)).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        format!("chromedriver's log, last lines:\n{}", tail.join("\n"))
    }
}

/// The file of the driver's log, in its directory.
const LOG: &str = "chromedriver.log";

impl Drop for Driver {
    fn drop(&mut self) {
        // The group's id is the driver's pid; chromium's processes are in it too.
        let group = Pid::from_raw(i32::try_from(self.child.id()).expect("a pid fits an i32"));
        let _ = killpg(group, Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// Where the browser and its driver are installed.
pub struct Tools {
    /// The `chromium` binary.
    pub chromium: PathBuf,
    /// The `chromedriver` binary.
    pub chromedriver: PathBuf,
}

impl Tools {
    /// Finds both in the directories of `path` (a `PATH` value).
    ///
    /// # Panics
    /// When one is missing: a browser test fails, never skips, and says how to install them.
    pub fn find(path: &std::ffi::OsStr) -> Self {
        let find = |command: &str| {
            std::env::split_paths(path)
                .map(|dir| dir.join(command))
                .find(|candidate| candidate.is_file())
        };
        match (find("chromium"), find("chromedriver")) {
            (Some(chromium), Some(chromedriver)) => Self {
                chromium,
                chromedriver,
            },
            (chromium, chromedriver) => {
                let missing: Vec<&str> = [("chromium", chromium), ("chromedriver", chromedriver)]
                    .into_iter()
                    .filter(|(_, found)| found.is_none())
                    .map(|(command, _)| command)
                    .collect();
                panic!(
                    "the browser tests need {}, not found on the PATH: install them with \
                     `scripts/install-test-tools`, or with `sudo apt-get install -y chromium \
                     chromium-driver` on Debian",
                    missing.join(" and ")
                )
            }
        }
    }
}

/// Whether a process of the group `group` still runs (a zombie whose parent is gone and that
/// nobody reaped does not): what a test of the clean-up asks after a browser is dropped.
pub fn group_alive(group: i32) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    entries.flatten().any(|entry| {
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // `pid (name) state ppid pgrp ...`: the name may hold spaces and parentheses.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        matches!(fields.as_slice(), [state, _, pgrp, ..]
            if *state != "Z" && pgrp.parse() == Ok(group))
    })
}
