//! A page's refusals and errors drawn for a browser: whatever a page's handler or extractor
//! answers as an [`ApiError`] (not signed in, not allowed, read-only, a forged form, no such
//! job, run or workflow, Redis out of reach) becomes a page in the layout that says what is
//! needed, with its status (a 401's challenge is added after, by `auth::challenge`); under
//! `/api/` the answer stays the API's JSON.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::Response;
use maud::html;

use super::{Leader, PageContext, layout};
use crate::web::auth::Identified;
use crate::web::{ApiError, Caller, WebState};

/// Draws the [`ApiError`] a page answered in the layout; passes every other answer on.
pub(crate) async fn html_errors(
    State(state): State<WebState>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_owned();
    if path.starts_with("/api/") || path.starts_with("/assets/") {
        return next.run(request).await;
    }
    let identified = Identified::default();
    request.extensions_mut().insert(identified.clone());
    let headers = request.headers().clone();
    let mut response = next.run(request).await;
    let Some(error) = response.extensions_mut().remove::<ApiError>() else {
        return response;
    };
    // The page says who is signed in when the credentials were good, whatever else failed:
    // as the page's extractors found them, if they asked.
    let caller = identified
        .caller(state.auth(), &headers)
        .await
        .unwrap_or_else(|_| Caller::nobody());
    let mut context = PageContext::new(&headers, &state, caller);
    // A refusal (401, 403) is drawn before anything says the caller may read the namespace:
    // it neither reads Redis (which anyone could make it do) nor names the namespace or the
    // leader. Otherwise the leader is read only for a page drawn here (a page its handler drew
    // read it itself), and not when a read found Redis out of reach, which would make the
    // page wait for a second response timeout: the header says the leader is unknown.
    if matches!(
        error.status,
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
    ) {
        context.namespace = None;
    } else if error.status != StatusCode::SERVICE_UNAVAILABLE {
        context.leader = Leader::read(&state).await.unwrap_or(Leader::Unread);
    }
    drawn(&context, &error, &path)
}

/// The page of `error`, met at `path`.
fn drawn(context: &PageContext, error: &ApiError, path: &str) -> Response {
    let title = match error.status {
        StatusCode::UNAUTHORIZED => "Sign in needed",
        StatusCode::FORBIDDEN => "Not allowed",
        StatusCode::NOT_FOUND => "Not found",
        status if status.is_server_error() => "Cannot be shown now",
        _ => "Cannot be done",
    };
    let main = html! {
        h1 { (title) }
        p.refusal data-code=(error.code) { (error.message) }
        @match error.status {
            StatusCode::UNAUTHORIZED => p {
                "This console is for the users and tokens of its auth file: sign in with a user's \
                 name and password when the browser asks, or send a token as "
                code { "Authorization: Bearer" } "."
            },
            StatusCode::FORBIDDEN if error.code == "cross-origin" => p {
                "Reload the page you came from and try again: its form is older than this \
                 browser's token, or another site sent it."
            },
            StatusCode::SERVICE_UNAVAILABLE => p {
                "Redis cannot be read now: the page shows the namespace again once Redis answers."
            },
            _ => {},
        }
        p {
            @if path.starts_with("/workflows/") {
                a href=(context.link("/workflows")) { "Back to the workflows" } " · "
            }
            a href=(context.link("/")) { "Back to the overview" }
        }
    };
    layout::page(context, error.status, title, main)
}
