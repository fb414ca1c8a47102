//! Serving the router on a listener until shutdown, and the base path it is served under.

use axum::Router;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;

use super::error::{ApiError, WebError};
use super::query::{SHOWN_PATH, shown};
use crate::shutdown::Shutdown;

/// Serves `app` on `listener` under `base_path` (`""` for the root) until `shutdown` is
/// cancelled; a request outside the base path gets the API's 404 `no-route` naming the base
/// path, but for `/` and the base path with a trailing slash, which are sent to the console's
/// root.
///
/// # Errors
/// The base path is not one a URL can start with ([`WebError::BasePath`]), or the listener
/// fails.
pub async fn serve(
    listener: tokio::net::TcpListener,
    app: Router,
    base_path: &str,
    shutdown: Shutdown,
) -> Result<(), ServeError> {
    let app = if base_path.is_empty() {
        app
    } else {
        check_base_path(base_path)?;
        // The root with a slash (`/redcron/`) is how people type it, and the server's own root
        // is where they start: both lead to the console's root. The first redirect is relative,
        // so it holds behind a proxy's prefix too.
        let last = base_path.rsplit('/').next().unwrap_or_default();
        let to_root = format!("../{last}");
        let root = base_path.to_owned();
        let outside = base_path.to_owned();
        Router::new()
            .route(
                &format!("{base_path}/"),
                get(move || async move { Redirect::permanent(&to_root) }),
            )
            .route("/", get(move || async move { Redirect::to(&root) }))
            .nest(base_path, app)
            .fallback(move |uri: Uri| async move { outside_base_path(&outside, &uri) })
            .layer(axum::middleware::map_response(super::secure_headers))
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .map_err(ServeError::Listen)
}

/// The answer to a path outside the base path: the API's 404 `no-route`, which names where
/// the console is, where it was an empty 404.
fn outside_base_path(base_path: &str, uri: &Uri) -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no-route",
        format!(
            "no route {}: the console and its API are under {base_path}",
            shown(uri.path(), SHOWN_PATH)
        ),
    )
    .into_response()
}

/// Why serving stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The server was told something it cannot serve.
    #[error(transparent)]
    Setting(#[from] WebError),
    /// The listener failed.
    #[error("serving: {0}")]
    Listen(std::io::Error),
}

/// Refuses a base path a link could not start with: what a proxy forwards is `/a/b`, and a
/// trailing slash or a quote would make every link of the console wrong or unsafe, as would
/// an empty, `.` or `..` segment: `//host` makes every link lead to another server.
pub fn check_base_path(base_path: &str) -> Result<(), WebError> {
    let fine = base_path.strip_prefix('/').is_some_and(|path| {
        path.split('/')
            .all(|segment| !matches!(segment, "" | "." | ".."))
    }) && base_path
        .chars()
        .all(|character| character.is_ascii_alphanumeric() || "-_./".contains(character));
    if fine {
        Ok(())
    } else {
        Err(WebError::BasePath(base_path.to_owned()))
    }
}
