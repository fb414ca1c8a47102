//! The console's forms against cross-site request forgery: a random token in a same-site,
//! HTTP-only cookie, which every form repeats in a hidden field (double submit). Another site
//! can make a browser send the cookie with a forged POST, but cannot read it to fill the field.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{HeaderMap, StatusCode, header};
use serde::de::DeserializeOwned;

use super::auth::{Operator, Refused};
use super::{ApiError, WebState};

/// The cookie's name.
pub(crate) const COOKIE: &str = "redcron_csrf";

/// The form field that repeats it.
pub(crate) const FIELD: &str = "csrf";

/// The token the request's cookie holds, if it holds one of the form this server gives.
pub(crate) fn token_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|cookies| cookies.split(';'))
        .filter_map(|cookie| cookie.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.to_owned())
        .filter(|value| value.len() == 32 && value.bytes().all(|byte| byte.is_ascii_hexdigit()))
}

/// A new token: 128 random bits, hexadecimal.
pub(crate) fn new_token() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// The `Set-Cookie` value that gives `token` to the pages under `root` (`/`, `/redcron`).
pub(crate) fn cookie(token: &str, root: &str) -> String {
    format!("{COOKIE}={token}; Path={root}; SameSite=Strict; HttpOnly")
}

/// A form an operator posted from one of this server's pages: the [`Operator`] checks (role,
/// read-only, same origin), then the hidden field must repeat the cookie's token. What a
/// page's action handler takes.
pub(crate) struct CheckedForm<T> {
    /// Who posted it.
    pub(crate) operator: Operator,
    /// The form's other fields.
    pub(crate) form: T,
}

/// The field every form carries, beside its own ones.
#[derive(serde::Deserialize)]
struct Token {
    #[serde(rename = "csrf")]
    token: String,
}

impl<T: DeserializeOwned + Send> FromRequest<WebState> for CheckedForm<T> {
    type Rejection = Refused;

    async fn from_request(request: Request, state: &WebState) -> Result<Self, Refused> {
        let (mut parts, body) = request.into_parts();
        let operator = Operator::from_request_parts(&mut parts, state).await?;
        let cookie = token_of(&parts.headers);
        let request = Request::from_parts(parts, body);
        let bytes = axum::body::Bytes::from_request(request, state)
            .await
            .map_err(|rejection| {
                Refused(ApiError::bad_request("bad-body", rejection.body_text()))
            })?;
        let forged = || {
            Refused(ApiError::new(
                StatusCode::FORBIDDEN,
                "cross-origin",
                "refused: the form does not carry this browser's token; reload the page and \
                 try again",
            ))
        };
        let Token { token } = serde_urlencoded::from_bytes(&bytes).map_err(|_| forged())?;
        if cookie.as_deref() != Some(token.as_str()) {
            return Err(forged());
        }
        let form = serde_urlencoded::from_bytes(&bytes).map_err(|error| {
            Refused(ApiError::bad_request(
                "bad-body",
                format!("the form is not what this action takes: {error}"),
            ))
        })?;
        Ok(CheckedForm { operator, form })
    }
}
