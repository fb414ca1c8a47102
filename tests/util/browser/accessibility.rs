//! Whether the page shown is accessible: axe-core's rules run inside it, and a check of its
//! keyboard focus that axe-core leaves out.

use fantoccini::key::Key;
use serde_json::{Value, json};

use super::Browser;

/// axe-core 4.14.1 (the npm package `axe-core`, MPL-2.0; its licences beside it), vendored so
/// that a test never fetches anything: `npm pack axe-core@VERSION` and copy `axe.min.js`,
/// `LICENSE` and `LICENSE-3RD-PARTY.txt` to update it.
const AXE: &str = include_str!("../../fixtures/axe-core/axe.min.js");

/// The most elements the focus check tabs through: a page's controls, not a table's rows.
const FOCUS_CHECKED: usize = 100;

/// Runs in the page: puts the focus before its first element, lists its keyboard-focusable
/// elements (in `window.__focusable`) with how each looks unfocused; answers how many.
const FOCUS_SNAPSHOT: &str = r#"
const selector = "a[href], button, input:not([type=hidden]), select, textarea, summary, [tabindex]";
const looks = element => {
    const style = getComputedStyle(element);
    return ["outline-style", "outline-width", "outline-color", "box-shadow", "border-color",
        "background-color", "color", "text-decoration-line"]
        .map(property => style.getPropertyValue(property)).join("|");
};
// Tab goes on from where focus last was: the walk starts from an element put first.
const start = document.createElement("span");
start.tabIndex = -1;
document.body.prepend(start);
start.focus();
window.__focusStart = start;
window.__focusable = [...document.querySelectorAll(selector)]
    .filter(element => element.tabIndex >= 0 && !element.disabled && element.getClientRects().length > 0)
    .slice(0, arguments[0])
    .map(element => ({ element, unfocused: looks(element) }));
window.__looks = looks;
return window.__focusable.length;
"#;

/// Runs in the page after a Tab: the focused element's name when it looks as it did unfocused,
/// else null.
const FOCUS_UNCHANGED: &str = r#"
const focused = document.activeElement;
const entry = window.__focusable.find(entry => entry.element === focused);
if (!entry || window.__looks(focused) !== entry.unfocused) return null;
const name = focused.id ? `#${focused.id}` : focused.getAttribute("name") ? `[name=${focused.getAttribute("name")}]` : `"${focused.textContent.trim().slice(0, 40)}"`;
return `${focused.tagName.toLowerCase()} ${name}`;
"#;

impl Browser {
    /// The accessibility violations axe-core finds on the page shown, in its current scheme:
    /// the WCAG 2 A and AA rules (labels, contrast, names) and its best practices (headings in
    /// order, landmarks), each as `rule: what is wrong (where)`.
    pub async fn accessibility_violations(&self) -> Vec<String> {
        self.client
            .execute(AXE, Vec::new())
            .await
            .unwrap_or_else(|error| panic!("cannot load axe-core into the page: {error}"));
        let result = self
            .client
            .execute_async(
                r#"const done = arguments[arguments.length - 1];
                axe.run(document, {
                    runOnly: { type: "tag", values: ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "best-practice"] },
                    resultTypes: ["violations"],
                })
                    .then(results => done(results.violations.map(violation =>
                        `${violation.id}: ${violation.help} (${violation.nodes
                            .map(node => node.target.join(" ")).join(", ")})`)))
                    .catch(error => done({ error: String(error) }));"#,
                Vec::new(),
            )
            .await
            .unwrap_or_else(|error| panic!("axe-core did not run: {error}"));
        match serde_json::from_value(result.clone()) {
            Ok(violations) => violations,
            Err(_) => panic!("axe-core failed on {}: {result}", self.url().await),
        }
    }

    /// The keyboard-focusable elements of the page shown that look the same focused as not
    /// (WCAG 2.4.7, which axe-core cannot check): it tabs through them as a keyboard user
    /// would, comparing outline, shadow, border, colours and underline. Each as `focus-visible:
    /// nothing shows the focus (element)`.
    pub async fn focus_violations(&self) -> Vec<String> {
        let count = self
            .client
            .execute(FOCUS_SNAPSHOT, vec![json!(FOCUS_CHECKED)])
            .await
            .unwrap_or_else(|error| panic!("cannot list the page's controls: {error}"));
        let count = count.as_u64().unwrap_or(0);
        let mut violations = Vec::new();
        for _ in 0..count {
            let focused = self
                .client
                .active_element()
                .await
                .unwrap_or_else(|error| panic!("no focused element: {error}"));
            focused
                .send_keys(&char::from(Key::Tab).to_string())
                .await
                .unwrap_or_else(|error| panic!("cannot press Tab: {error}"));
            let unchanged = self
                .client
                .execute(FOCUS_UNCHANGED, Vec::new())
                .await
                .unwrap_or_else(|error| panic!("cannot read the focused control: {error}"));
            if let Value::String(element) = unchanged {
                violations.push(format!(
                    "focus-visible: nothing shows the focus ({element})"
                ));
            }
        }
        self.client
            .execute(
                "window.__focusStart.remove(); document.activeElement?.blur();",
                Vec::new(),
            )
            .await
            .unwrap_or_else(|error| panic!("cannot leave the page as it was: {error}"));
        violations
    }

    /// Fails, naming each violation, unless the page shown is accessible in its current
    /// scheme: axe-core finds nothing ([`Browser::accessibility_violations`]) and every control
    /// shows its keyboard focus ([`Browser::focus_violations`]).
    pub async fn assert_accessible(&self) {
        let mut violations = self.accessibility_violations().await;
        violations.extend(self.focus_violations().await);
        assert!(
            violations.is_empty(),
            "{} is not accessible in the {} scheme:\n{}",
            self.url().await,
            self.current_scheme().await.name(),
            violations.join("\n")
        );
    }
}
