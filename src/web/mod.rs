//! The web console and its HTTP API (`redcron web`): a [`router`] a program can serve or mount
//! under its own path. It keeps no state of its own but the definitions it parsed, by content
//! hash (which cannot disagree with Redis: a definition never changes under its hash): every
//! read and action goes through the [`Client`] the command line uses, and the API's JSON is
//! the command line's `--json`.
//!
//! Patterns the console's parts share:
//! - a read handler takes a [`Caller`] (authenticated, any role), an action handler an
//!   [`Operator`] (an operator, on a server that is not read-only, from this server's own
//!   origin unless a bearer token says who), so that no route can forget to check;
//! - a page is one file of `pages/`: its handler takes a `PageContext` (caller, prefix for
//!   links, form token), reads through the client and draws its `main` into `layout::page`;
//!   its actions are form POSTs whose handler takes a `CheckedForm` (the [`Operator`] checks,
//!   then the form's token against the cookie's) and answers with a redirect to a page;
//! - without an auth file, only a request addressed to this machine is answered
//!   (`auth::local_host_only`), so that no other site's name can reach it in a browser;
//! - every answer carries the headers of [`secure_headers`];
//! - a route's query is read through `query::Params` (`query::NoQuery` on a route that takes
//!   none), which checks every parameter against what the route says it takes, and no address
//!   longer than `query::LONGEST_URI` reaches a route;
//! - an action's JSON body is read through `body::Body`, which checks every field against what
//!   the route says it takes, and a form's fields are checked as a query's are;
//! - an error is an [`ApiError`], answered with its status and a stable code.

mod api;
mod assets;
mod auth;
mod body;
pub mod chart;
mod csrf;
mod error;
pub mod graph;
mod pages;
mod query;
mod server;
pub mod strip;
mod verify;

use std::net::IpAddr;
use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::response::Response;

use crate::cli::status::Definitions;
use crate::client::Client;

pub use auth::{Auth, Caller, Operator, Refused, Role, hash_password, hash_token};
pub use error::{ApiError, WebError};
pub use server::{ServeError, check_base_path, serve};

/// What every request handler reads: the client, and what the server was told at start.
#[derive(Clone)]
pub struct WebState {
    inner: Arc<Settings>,
}

/// The server's settings, fixed at start.
#[derive(Clone)]
struct Settings {
    /// The namespace's client: every read and action goes through it.
    client: Client,
    /// The namespace, as the console shows it.
    namespace: String,
    /// Who may do what.
    auth: Auth,
    /// Every action refused on the server side.
    read_only: bool,
    /// Where the console is mounted, as the server sees it (`""` or `/redcron`).
    base_path: String,
    /// Whether a proxy's `X-Forwarded-Prefix` is believed.
    trust_proxy: bool,
    /// The address listened on, a `Host` answered without an auth file besides `localhost`
    /// and the loopback addresses.
    listen: Option<IpAddr>,
    /// The published definitions parsed so far, by content hash: a definition never changes
    /// under its hash, so the status a page refreshes parses only those deployed since.
    definitions: Arc<Definitions>,
}

impl WebState {
    /// The state of a server reading and steering `namespace` through `client`, with `auth`
    /// deciding who may do what; `read_only` refuses every action.
    pub fn new(client: Client, namespace: impl Into<String>, auth: Auth, read_only: bool) -> Self {
        Self {
            inner: Arc::new(Settings {
                client,
                namespace: namespace.into(),
                auth,
                read_only,
                base_path: String::new(),
                trust_proxy: false,
                listen: None,
                definitions: Arc::default(),
            }),
        }
    }

    /// The same state, for a console mounted under `base_path` (`/redcron`), behind a proxy
    /// whose `X-Forwarded-Prefix` is believed when `trust_proxy`: the pages' links and forms
    /// start with the forwarded prefix, then the base path.
    #[must_use]
    pub fn under(self, base_path: &str, trust_proxy: bool) -> Self {
        let mut settings = Settings::clone(&self.inner);
        settings.base_path = base_path.to_owned();
        settings.trust_proxy = trust_proxy;
        Self {
            inner: Arc::new(settings),
        }
    }

    /// The same state, for a server listening on `address`: without an auth file, a request
    /// may name it as its `Host` besides `localhost` and the loopback addresses.
    #[must_use]
    pub fn listening_on(self, address: IpAddr) -> Self {
        let mut settings = Settings::clone(&self.inner);
        settings.listen = Some(address);
        Self {
            inner: Arc::new(settings),
        }
    }

    pub(crate) fn base_path(&self) -> &str {
        &self.inner.base_path
    }

    pub(crate) fn trusts_proxy(&self) -> bool {
        self.inner.trust_proxy
    }

    pub(crate) fn listen(&self) -> Option<IpAddr> {
        self.inner.listen
    }

    /// The namespace's client.
    pub(crate) fn client(&self) -> &Client {
        &self.inner.client
    }

    /// The published definitions parsed so far, shared by every request.
    pub(crate) fn definitions(&self) -> &Arc<Definitions> {
        &self.inner.definitions
    }

    /// The namespace served.
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    pub(crate) fn auth(&self) -> &Auth {
        &self.inner.auth
    }

    /// Whether every action is refused.
    pub fn read_only(&self) -> bool {
        self.inner.read_only
    }
}

/// The console and the API, relative to where they are mounted: `/api/v1/...`. A program
/// embedding redcron mounts it with [`Router::nest`]; `redcron web --base-path` does the same.
///
/// ```no_run
/// # async fn example() -> Result<(), Box<dyn std::error::Error>> {
/// use redcron::client::Client;
/// use redcron::web::{Auth, WebState, router};
///
/// let client = Client::connect("redis://127.0.0.1/", "redcron").await?;
/// let app = axum::Router::new().nest(
///     "/redcron",
///     router(WebState::new(client, "redcron", Auth::default(), true)),
/// );
/// # let _ = app;
/// # Ok(())
/// # }
/// ```
pub fn router(state: WebState) -> Router {
    Router::new()
        .merge(pages::routes())
        .route("/assets/{name}", axum::routing::get(assets::serve))
        .route("/favicon.ico", axum::routing::get(assets::favicon))
        .nest("/api/v1", api::routes())
        .method_not_allowed_fallback(api::no_method)
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn(query::within_bounds))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            pages::html_errors,
        ))
        .layer(axum::middleware::map_response_with_state(
            state.clone(),
            auth::challenge,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::local_host_only,
        ))
        .with_state(state)
        .layer(axum::middleware::map_response(secure_headers))
}

/// The headers every answer carries: no script but the console's own, no sniffing a JSON
/// answer into a page, no URL of the console (which names jobs and runs) sent to another site.
pub async fn secure_headers(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    response
}
