//! The console's HTML pages: one file per page, each a handler that reads through the client
//! and renders its `main` into the one [`layout`](layout::page). Every link and form is under
//! the request's [`PageContext::prefix`]; every action is a form POST that a
//! [`CheckedForm`](super::csrf::CheckedForm) checks, answered with a redirect (303) to a page.

mod activity;
mod dead;
mod job;
mod jobs;
mod layout;
mod overview;
mod refusals;
mod run;
mod runs;
mod workflows;

use axum::Router;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};

use super::auth::{Caller, Refused, Role};
use super::query::{SHOWN_PATH, shown};
use super::server::check_base_path;
use super::{WebState, csrf};

pub(crate) use layout::Leader;
pub(super) use refusals::html_errors;

/// The pages' routes, relative to where the console is mounted.
pub(super) fn routes() -> Router<WebState> {
    Router::new()
        .route("/", get(overview::page))
        .route("/hold/release", post(overview::release))
        .route("/jobs", get(jobs::page))
        .route("/jobs/{job}", get(job::page))
        .route("/jobs/{job}/pause", post(jobs::pause))
        .route("/jobs/{job}/resume", post(jobs::resume))
        .route("/jobs/{job}/trigger", post(jobs::trigger))
        .route("/runs", get(runs::page))
        .route("/runs/{*id}", get(run::page))
        .route("/dead", get(dead::page))
        .route("/dead/retry", get(dead::confirm).post(dead::retry_many))
        .route("/dead/purge", post(dead::purge))
        .route("/dead/{id}/retry", post(dead::retry))
        .route("/workflows", get(workflows::list))
        .route("/workflows/{id}", get(workflows::instance))
        .route("/workflows/{id}/retry", post(workflows::retry))
}

/// The longest `X-Forwarded-Prefix` believed, bytes: a sane path a proxy mounts the console
/// under; a longer one is ignored.
pub(crate) const LONGEST_PREFIX: usize = 256;

/// What every page knows of its request: who asks, where the console is, and the form token.
pub(crate) struct PageContext {
    /// The caller, for what the page offers them.
    pub(crate) caller: Caller,
    /// Where the console's root is, as the browser sees it (`""` or `/redcron`): the start of
    /// every link and form action.
    pub(crate) prefix: String,
    /// The namespace served, as the header and title name it; `None` on a page refused
    /// before the caller is known to be let in (401, 403), which names neither it nor the
    /// leader.
    pub(crate) namespace: Option<String>,
    /// Whether the page offers actions: an operator's, on a server that is not read-only.
    pub(crate) may_act: bool,
    /// The token the page's forms repeat.
    pub(crate) csrf_token: String,
    /// Whether the browser has no token yet: the page's answer gives it one.
    pub(crate) new_token: bool,
    /// The leader, read once for the request: every page's header names it.
    pub(crate) leader: Leader,
}

impl PageContext {
    /// `path` (which starts with `/`) under the console's root, as a link or form action. The
    /// root itself is the prefix without a slash (`/redcron`), as a nested router serves it.
    pub(crate) fn link(&self, path: &str) -> String {
        match path {
            "/" if !self.prefix.is_empty() => self.prefix.clone(),
            _ => format!("{}{path}", self.prefix),
        }
    }
}

impl FromRequestParts<WebState> for PageContext {
    type Rejection = Refused;

    async fn from_request_parts(parts: &mut Parts, state: &WebState) -> Result<Self, Refused> {
        let caller = Caller::from_request_parts(parts, state).await?;
        let mut context = PageContext::new(&parts.headers, state, caller);
        // Redis out of reach answers the page at once (drawn by `html_errors`), so that a
        // page waits for one Redis response timeout at most, not one per read.
        context.leader = Leader::read(state).await.map_err(Refused)?;
        Ok(context)
    }
}

impl PageContext {
    /// What a page of a request with `headers` knows, drawn for `caller`; the leader not
    /// read yet.
    fn new(headers: &HeaderMap, state: &WebState, caller: Caller) -> Self {
        // A proxy's prefix is believed only when told to (--trust-proxy): otherwise any client
        // could make the console's links point elsewhere. One longer than a path a proxy
        // mounts would lengthen every link of the page by itself: it is ignored.
        let forwarded = state
            .trusts_proxy()
            .then(|| headers.get("x-forwarded-prefix"))
            .flatten()
            .and_then(|value| value.to_str().ok())
            .map(|prefix| prefix.trim_end_matches('/'))
            .filter(|prefix| {
                !prefix.is_empty()
                    && prefix.len() <= LONGEST_PREFIX
                    && check_base_path(prefix).is_ok()
            })
            .unwrap_or_default();
        let prefix = format!("{forwarded}{}", state.base_path());
        let (csrf_token, new_token) = match csrf::token_of(headers) {
            Some(token) => (token, false),
            None => (csrf::new_token(), true),
        };
        PageContext {
            may_act: caller.role == Role::Operator && !state.read_only(),
            caller,
            prefix,
            namespace: Some(state.namespace().to_owned()),
            csrf_token,
            new_token,
            leader: Leader::Unread,
        }
    }
}

/// `name` (a job's, a run's id) as one segment of a link's path: every byte but the
/// unreserved ones percent-encoded, so that a name with `/`, `?` or `#` links to its own page.
pub(crate) fn segment(name: &str) -> String {
    name.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(byte).to_string()
            }
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// A path the console has no page for (yet), in the layout, with a way back; under `/api/`,
/// the API's error.
pub(crate) async fn not_found(context: Result<PageContext, Refused>, uri: Uri) -> Response {
    if uri.path().starts_with("/api/") {
        return super::api::no_route(uri).await.into_response();
    }
    let context = match context {
        Ok(context) => context,
        Err(refused) => return refused.into_response(),
    };
    let main = maud::html! {
        h1 { "Not found" }
        p { "The console has no page at " code { (shown(uri.path(), SHOWN_PATH)) } "." }
        p { a href=(context.link("/")) { "Back to the overview" } }
    };
    layout::page(&context, StatusCode::NOT_FOUND, "Not found", main)
}
