//! The one layout every page is drawn in: header (namespace, leader), navigation, main, footer.
//! A refused page's header names neither the namespace nor the leader.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::PageContext;
use crate::web::{ApiError, WebState, assets, csrf};

/// The navigation, in order: (path under the prefix, label). The pages a later part builds
/// are linked already; until then they answer the layout's 404.
const NAV: [(&str, &str); 5] = [
    ("/", "Overview"),
    ("/jobs", "Jobs"),
    ("/runs", "Runs"),
    ("/dead", "Dead letters"),
    ("/workflows", "Workflows"),
];

/// The leader as a page's header names it.
pub(crate) enum Leader {
    /// The replica that holds the leader lease.
    Replica(String),
    /// No replica holds it: an election is due.
    None,
    /// Not read: Redis did not answer (or the page was drawn before the read).
    Unread,
}

impl Leader {
    /// The leader now, read through the namespace's client: one read of the lease per page.
    ///
    /// # Errors
    /// Redis is out of reach (a 503): the page's own reads would wait as long again, so the
    /// page is not drawn. A lease that cannot be read otherwise is [`Leader::Unread`].
    pub(crate) async fn read(state: &WebState) -> Result<Self, ApiError> {
        match state.client().leader().await {
            Ok(Some(replica)) => Ok(Leader::Replica(replica)),
            Ok(None) => Ok(Leader::None),
            Err(error) => {
                let error = ApiError::from(error);
                if error.status == StatusCode::SERVICE_UNAVAILABLE {
                    Err(error)
                } else {
                    Ok(Leader::Unread)
                }
            }
        }
    }
}

/// A whole page: `main` in the layout, titled `title`, with the context's leader in the header,
/// answered with `status`. It gives the browser its form token when it has none.
pub(crate) fn page(
    context: &PageContext,
    status: StatusCode,
    title: &str,
    main: Markup,
) -> Response {
    let current = NAV
        .iter()
        .find(|(_, label)| *label == title)
        .map(|(path, _)| *path);
    let markup = html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title {
                    (title) " · redcron"
                    @if let Some(namespace) = &context.namespace { " " (namespace) }
                }
                link rel="stylesheet" href=(context.link(&format!("/assets/{}", assets::name("style"))));
                script src=(context.link(&format!("/assets/{}", assets::name("console")))) defer {}
            }
            body {
                header {
                    a.brand href=(context.link("/")) { "redcron" }
                    @if let Some(namespace) = &context.namespace {
                        span.where {
                            "namespace " strong { (namespace) }
                            " · leader "
                            @match &context.leader {
                                Leader::Replica(replica) => strong { (replica) },
                                Leader::None => "none",
                                Leader::Unread => "unknown",
                            }
                        }
                    }
                    nav aria-label="Main" {
                        ul {
                            @for (path, label) in NAV {
                                li {
                                    @if current == Some(path) {
                                        a href=(context.link(path)) aria-current="page" { (label) }
                                    } @else {
                                        a href=(context.link(path)) { (label) }
                                    }
                                }
                            }
                        }
                    }
                    @if context.caller.name.is_empty() {
                        span.where { "not signed in" }
                    } @else {
                        span.where { "signed in as " (context.caller.name) }
                    }
                }
                main { (main) }
                footer { "redcron " (env!("CARGO_PKG_VERSION")) }
            }
        }
    };
    let mut response = (status, Html(markup.into_string())).into_response();
    if context.new_token
        && let Ok(cookie) =
            HeaderValue::from_str(&csrf::cookie(&context.csrf_token, &context.link("/")))
    {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}
