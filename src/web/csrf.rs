//! The console's forms against cross-site request forgery: a random token in a same-site,
//! HTTP-only cookie, which every form repeats in a hidden field (double submit). Another site
//! can make a browser send the cookie with a forged POST, but cannot read it to fill the field.

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::{HeaderMap, StatusCode, header};

use super::auth::{Operator, Refused};
use super::body::bytes_of;
use super::query::{Query, Takes, parse_form};
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
/// read-only, same origin), then the hidden field must repeat the cookie's token, and each
/// other field is checked as a query's parameters are (one the form does not take is a 400
/// `bad-body`). What a page's action handler takes.
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

/// What the token's field takes: the cookie's token, 32 hexadecimal digits.
const TOKEN: Takes = Takes::Text {
    what: "this browser's form token",
    longest: 32,
};

impl<T: Query + Send> FromRequest<WebState> for CheckedForm<T> {
    type Rejection = Refused;

    async fn from_request(request: Request, state: &WebState) -> Result<Self, Refused> {
        let (mut parts, body) = request.into_parts();
        let operator = Operator::from_request_parts(&mut parts, state).await?;
        let cookie = token_of(&parts.headers);
        let request = Request::from_parts(parts, body);
        let bytes = bytes_of(request, state).await.map_err(Refused)?;
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
        let form = parse_form(&bytes, &[(FIELD, TOKEN)]).map_err(Refused)?;
        Ok(CheckedForm { operator, form })
    }
}
