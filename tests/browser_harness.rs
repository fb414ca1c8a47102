//! The browser harness itself, against small pages a test serves on loopback: scripts on and
//! off, both colour schemes, a form, a screenshot, the accessibility check, the clean-up.

use std::path::Path;
use std::time::Duration;

use axum::Router;
use axum::response::Html;
use axum::routing::get;

use crate::util::browser::{Browser, BrowserOptions, ColorScheme, Tools, VIEWPORT, group_alive};
use crate::util::wait_until;

/// A page whose script replaces the text the server sent.
const SCRIPTED: &str = r#"<!doctype html><html lang="en"><title>scripted</title>
<p id="status">sent by the server</p>
<script>document.getElementById("status").textContent = "changed by the script";</script>"#;

/// A page whose text colour depends on the scheme the system prefers.
const THEMED: &str = r#"<!doctype html><html lang="en"><title>themed</title>
<style>
  body { color: rgb(10, 20, 30); background: rgb(255, 255, 255); }
  @media (prefers-color-scheme: dark) { body { color: rgb(200, 210, 220); background: rgb(0, 0, 0); } }
</style>
<main><h1>Themed</h1><p id="text">some text</p></main>"#;

/// A form that posts a name, as the console's actions do.
const FORM: &str = r#"<!doctype html><html lang="en"><title>form</title>
<main><h1>Form</h1>
<form id="greet" method="post" action="/greeted">
  <label for="name">Name</label> <input id="name" name="name" value="nobody">
  <button>Greet</button>
</form></main>"#;

/// A page with nothing axe-core finds wrong, in either scheme.
const ACCESSIBLE: &str = r#"<!doctype html><html lang="en"><title>accessible</title>
<style>
  body { color: #111; background: #fff; }
  @media (prefers-color-scheme: dark) { body { color: #eee; background: #111; } }
</style>
<main><h1>Jobs</h1><h2>Backup</h2>
<form method="post" action="/greeted"><label for="q">Search</label> <input id="q" name="q">
<button>Search</button></form></main>"#;

/// An input without a label, and a heading level skipped (h1, then h3).
const INACCESSIBLE: &str = r#"<!doctype html><html lang="en"><title>inaccessible</title>
<main><h1>Jobs</h1><h3>Backup</h3><input id="unlabelled" name="q"></main>"#;

/// Readable in the light scheme, grey on grey in the dark one.
const DARK_CONTRAST: &str = r#"<!doctype html><html lang="en"><title>dark contrast</title>
<style>
  body { color: #111; background: #fff; }
  @media (prefers-color-scheme: dark) { body { color: #555; background: #444; } }
</style>
<main><h1>Jobs</h1><p id="faint">hard to read at night</p></main>"#;

/// A button whose focus the page hides, beside a link that shows it as browsers do.
const FOCUS_HIDDEN: &str = r#"<!doctype html><html lang="en"><title>focus hidden</title>
<style>#quiet:focus, #quiet:focus-visible { outline: none; }</style>
<main><h1>Jobs</h1><a id="shown" href="/accessible">All jobs</a>
<button id="quiet">Pause</button></main>"#;

/// Serves the pages above on a free loopback port of this test's runtime; its base URL.
async fn serve_pages() -> String {
    let app = Router::new()
        .route("/scripted", get(Html(SCRIPTED)))
        .route("/themed", get(Html(THEMED)))
        .route("/form", get(Html(FORM)))
        .route("/greeted", axum::routing::post(greeted))
        .route("/accessible", get(Html(ACCESSIBLE)))
        .route("/inaccessible", get(Html(INACCESSIBLE)))
        .route("/dark-contrast", get(Html(DARK_CONTRAST)))
        .route("/focus-hidden", get(Html(FOCUS_HIDDEN)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the pages' server");
    let address = listener.local_addr().expect("its address");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{address}")
}

/// Answers a posted form with what it received (`+` for a space, as forms send it).
async fn greeted(body: String) -> Html<String> {
    Html(format!(
        r#"<!doctype html><html lang="en"><title>greeted</title><p id="received">received {}</p>"#,
        body.replace('+', " ")
    ))
}

#[tokio::test]
async fn page_scripts_run_with_javascript_on_and_not_with_it_off() {
    let base = serve_pages().await;

    let browser = Browser::start().await;
    browser.open(&format!("{base}/scripted")).await;
    browser.wait_for_text("changed by the script").await;
    drop(browser);

    let browser = Browser::start_with(BrowserOptions {
        javascript: false,
        ..BrowserOptions::default()
    })
    .await;
    // A form posts without scripts, as the console's actions must.
    browser.open(&format!("{base}/form")).await;
    browser.fill("#name", "Ada Lovelace").await;
    browser.submit("#greet").await;
    let received = browser.wait_for("#received").await;
    assert_eq!(
        received.text().await.expect("its text"),
        "received name=Ada Lovelace"
    );
    // Still off after two navigations; the page has loaded, its inline script with it, when
    // `open` returns.
    browser.open(&format!("{base}/scripted")).await;
    assert_eq!(browser.text("#status").await, "sent by the server");
}

#[tokio::test]
async fn colour_scheme_switches_the_pages_computed_colours() {
    let base = serve_pages().await;
    let browser = Browser::start_with(BrowserOptions {
        color_scheme: ColorScheme::Dark,
        ..BrowserOptions::default()
    })
    .await;
    browser.open(&format!("{base}/themed")).await;
    assert_eq!(browser.current_scheme().await, ColorScheme::Dark);
    assert_eq!(
        browser.computed_style("#text", "color").await,
        "rgb(200, 210, 220)"
    );

    browser.set_color_scheme(ColorScheme::Light).await;
    // Kept across a navigation, as a screenshot of each page in one scheme needs.
    browser.open(&format!("{base}/themed")).await;
    assert_eq!(browser.current_scheme().await, ColorScheme::Light);
    assert_eq!(
        browser.computed_style("#text", "color").await,
        "rgb(10, 20, 30)"
    );
}

#[tokio::test]
async fn form_is_filled_and_submitted_and_its_answer_found_by_text() {
    let base = serve_pages().await;
    let browser = Browser::start().await;
    browser.open(&format!("{base}/form")).await;
    assert_eq!(
        browser
            .find("#name")
            .await
            .prop("value")
            .await
            .expect("its value"),
        Some("nobody".to_owned())
    );
    let label = browser.find_text("Name").await;
    assert_eq!(label.tag_name().await.expect("its tag"), "label");
    assert_eq!(browser.find_all("#greet input").await.len(), 1);
    browser.fill("#name", "Grace").await;
    browser.submit("#greet").await;
    let answer = browser.wait_for_text("received name=Grace").await;
    assert_eq!(
        answer.attr("id").await.expect("its id"),
        Some("received".to_owned())
    );
    assert!(browser.url().await.ends_with("/greeted"));
}

#[tokio::test]
async fn screenshot_is_a_png_of_the_viewport() {
    let base = serve_pages().await;
    let dir = tempfile::tempdir().expect("a directory for the screenshot");
    let browser = Browser::start().await;
    browser.open(&format!("{base}/themed")).await;
    let path = browser
        .screenshot(&dir.path().join("shots"), "themed-light")
        .await;
    assert_eq!(path, dir.path().join("shots").join("themed-light.png"));
    let (width, height) = png_size(&path);
    assert_eq!(
        (width, height),
        VIEWPORT,
        "the screenshot shows the viewport"
    );
}

#[tokio::test]
async fn accessibility_check_names_an_unlabelled_input_a_skipped_heading_and_faint_dark_text() {
    let base = serve_pages().await;
    let browser = Browser::start().await;

    browser.open(&format!("{base}/accessible")).await;
    browser.assert_accessible().await;
    browser.set_color_scheme(ColorScheme::Dark).await;
    browser.assert_accessible().await;

    browser.set_color_scheme(ColorScheme::Light).await;
    browser.open(&format!("{base}/inaccessible")).await;
    let violations = browser.accessibility_violations().await;
    assert!(
        violations
            .iter()
            .any(|violation| violation.starts_with("label:") && violation.contains("#unlabelled")),
        "the unlabelled input is named: {violations:#?}"
    );
    assert!(
        violations
            .iter()
            .any(|violation| violation.starts_with("heading-order:") && violation.contains("h3")),
        "the skipped heading level is named: {violations:#?}"
    );

    browser.open(&format!("{base}/dark-contrast")).await;
    assert_eq!(
        browser.accessibility_violations().await,
        Vec::<String>::new()
    );
    browser.set_color_scheme(ColorScheme::Dark).await;
    let violations = browser.accessibility_violations().await;
    assert!(
        violations
            .iter()
            .any(|violation| violation.starts_with("color-contrast:")
                && violation.contains("#faint")),
        "the faint text of the dark scheme is named: {violations:#?}"
    );
}

#[tokio::test]
async fn focus_check_names_a_control_whose_focus_does_not_show() {
    let base = serve_pages().await;
    let browser = Browser::start().await;
    browser.open(&format!("{base}/focus-hidden")).await;
    assert_eq!(
        browser.focus_violations().await,
        vec!["focus-visible: nothing shows the focus (button #quiet)".to_owned()]
    );
    let assertion = tokio::spawn(async move { browser.assert_accessible().await })
        .await
        .expect_err("the page is not accessible");
    let message = assertion.into_panic();
    let message = message
        .downcast_ref::<String>()
        .expect("a message naming the violation");
    assert!(message.contains("button #quiet"), "{message}");
}

#[test]
fn browser_and_driver_end_when_dropped_even_by_a_panic() {
    let (sender, receiver) = std::sync::mpsc::channel();
    let test = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        runtime.block_on(async {
            let base = serve_pages().await;
            let browser = Browser::start().await;
            browser.open(&format!("{base}/themed")).await;
            sender
                .send(browser.process_group())
                .expect("the test waits for the group");
            panic!("a test fails with its browser open");
        })
    });
    assert!(test.join().is_err(), "the test panicked");
    let group = receiver.recv().expect("the browser started");
    assert!(
        wait_until(Duration::from_secs(10), || !group_alive(group)),
        "chromedriver or a chromium of group {group} still runs after the panic"
    );
}

#[test]
fn missing_browser_fails_saying_how_to_install_it() {
    let empty = tempfile::tempdir().expect("a directory with no browser in it");
    let path = empty.path().as_os_str().to_owned();
    let panic = std::panic::catch_unwind(|| Tools::find(&path)).err();
    let message = panic
        .as_ref()
        .and_then(|panic| panic.downcast_ref::<String>())
        .expect("a browser test fails without chromium");
    assert!(
        message.contains("need chromium and chromedriver")
            && message.contains("sudo apt-get install -y chromium chromium-driver")
            && message.contains("scripts/install-test-tools"),
        "{message}"
    );
}

/// The width and height of the PNG at `path`, after checking its structure: the signature,
/// then chunks whose lengths add up to the file, from `IHDR` to `IEND`.
fn png_size(path: &Path) -> (u32, u32) {
    let bytes = std::fs::read(path).expect("the screenshot is written");
    let signature = b"\x89PNG\r\n\x1a\n";
    assert!(
        bytes.starts_with(signature),
        "not a PNG: {}",
        path.display()
    );
    let be = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().expect("four bytes"));
    let mut at = signature.len();
    let mut kinds = Vec::new();
    while at + 8 <= bytes.len() {
        let length = be(at) as usize;
        kinds.push(bytes[at + 4..at + 8].to_vec());
        // length, kind, data, CRC
        at += 12 + length;
    }
    assert_eq!(at, bytes.len(), "the chunks fill the file exactly");
    assert_eq!(kinds.first().map(Vec::as_slice), Some(&b"IHDR"[..]));
    assert_eq!(kinds.last().map(Vec::as_slice), Some(&b"IEND"[..]));
    assert!(
        kinds.iter().any(|kind| kind == b"IDAT"),
        "it has image data"
    );
    (be(16), be(20))
}
