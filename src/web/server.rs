//! Serving the router on a listener until shutdown, and the base path it is served under.

use axum::Router;

use super::error::WebError;
use crate::shutdown::Shutdown;

/// Serves `app` on `listener` under `base_path` (`""` for the root) until `shutdown` is
/// cancelled; a request outside the base path gets a 404.
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
        Router::new().nest(base_path, app)
    };
    axum::serve(listener, app)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .map_err(ServeError::Listen)
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
/// trailing slash or a quote would make every link of the console wrong or unsafe.
pub fn check_base_path(base_path: &str) -> Result<(), WebError> {
    let fine = base_path.starts_with('/')
        && !base_path.ends_with('/')
        && base_path
            .chars()
            .all(|character| character.is_ascii_alphanumeric() || "-_./".contains(character));
    if fine {
        Ok(())
    } else {
        Err(WebError::BasePath(base_path.to_owned()))
    }
}
