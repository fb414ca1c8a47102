//! Who may do what: bearer tokens and HTTP basic users from an auth file, each a viewer (reads)
//! or an operator (actions), the checks an action passes (role, read-only, same origin), and
//! the `Host` a server without an auth file answers.

use std::fmt;
use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use argon2::password_hash::{PasswordHash, PasswordHasher, SaltString};
use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::WebState;
use super::error::{ApiError, WebError};
use super::query::{SHOWN, shown};
use super::verify::Verifier;

/// What a caller may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads every page and API route; acts on nothing.
    Viewer,
    /// Reads, and pauses, resumes, triggers, enqueues, retries and purges.
    Operator,
}

/// The auth file as written: `[[token]]` and `[[user]]` tables.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthFile {
    #[serde(default)]
    token: Vec<TokenEntry>,
    #[serde(default)]
    user: Vec<UserEntry>,
}

/// A bearer token: its name (recorded with what it does) and its SHA-256, never the token.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenEntry {
    name: String,
    sha256: String,
    role: Role,
}

/// An HTTP basic user: the password as an Argon2 hash (PHC string, `redcron web hash`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct UserEntry {
    name: String,
    password_hash: String,
    role: Role,
}

/// What an unknown user's password is verified against: an Argon2 hash (of the default
/// parameters, as `redcron web hash` makes them) that no password is known to match, so that
/// an unknown user is refused in the time a wrong password is, and the time taken does not
/// tell which names the auth file holds.
const UNKNOWN_USER_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$melp2wTI/17bjUV7fMQdIg$0FJLhh046isjKYQJZJJjVrs5hImNIRi9VvVSB3NFJAc";

/// The callers the server knows. Empty means no authentication: everyone is `anonymous`, an
/// operator, which `redcron web` allows only on a loopback address.
#[derive(Clone, Default)]
pub struct Auth {
    /// Each token's name, SHA-256 and role.
    tokens: Vec<(String, [u8; 32], Role)>,
    /// Each user's name, Argon2 hash (checked for form on load) and role.
    users: Vec<(String, String, Role)>,
    /// Where users' passwords are verified: started once the file names a user.
    verifier: Option<Arc<Verifier>>,
}

/// Never shows the hashes, which a log line or a panic could otherwise carry.
impl fmt::Debug for Auth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Auth")
            .field("tokens", &self.tokens.len())
            .field("users", &self.users.len())
            .finish()
    }
}

impl Auth {
    /// Reads an auth file (TOML; its format is in docs/web.md).
    ///
    /// # Errors
    /// The file cannot be read, is not TOML of that shape, holds a hash that is not one,
    /// names a caller twice, or gives two tokens the same hash.
    pub fn load(path: &Path) -> Result<Self, WebError> {
        let text = std::fs::read_to_string(path).map_err(|source| WebError::ReadAuthFile {
            path: path.to_owned(),
            source,
        })?;
        let problem = |problem: String| WebError::AuthFile {
            path: path.to_owned(),
            problem,
        };
        let file: AuthFile = toml::from_str(&text).map_err(|error| problem(error.to_string()))?;
        let mut auth = Auth::default();
        let mut names = std::collections::HashSet::new();
        for entry in file.token {
            let digest = hex::decode(entry.sha256.trim())
                .ok()
                .and_then(|bytes| <[u8; 32]>::try_from(bytes).ok())
                .ok_or_else(|| {
                    problem(format!(
                        "token \"{}\": sha256 is not 64 hexadecimal digits (`redcron web hash \
                         --token` prints it)",
                        entry.name
                    ))
                })?;
            if !names.insert(entry.name.clone()) {
                return Err(problem(format!("\"{}\" is named twice", entry.name)));
            }
            // The same token under two names would be whichever came first, whatever role
            // the second was meant to have.
            if let Some((first, _, _)) = auth.tokens.iter().find(|(_, known, _)| *known == digest) {
                return Err(problem(format!(
                    "token \"{}\" has the sha256 of token \"{first}\": give each token once",
                    entry.name
                )));
            }
            auth.tokens.push((entry.name, digest, entry.role));
        }
        for entry in file.user {
            if let Err(error) = PasswordHash::new(&entry.password_hash) {
                return Err(problem(format!(
                    "user \"{}\": password_hash is no Argon2 hash ({error}; `redcron web hash` \
                     prints one)",
                    entry.name
                )));
            }
            if !names.insert(entry.name.clone()) {
                return Err(problem(format!("\"{}\" is named twice", entry.name)));
            }
            auth.users
                .push((entry.name, entry.password_hash, entry.role));
        }
        if !auth.users.is_empty() {
            auth.verifier = Some(Verifier::start());
        }
        Ok(auth)
    }

    /// Whether any caller is configured: without one, the server serves everyone.
    pub fn is_configured(&self) -> bool {
        !self.tokens.is_empty() || !self.users.is_empty()
    }

    /// Who sent `headers`: a token's or a user's name and role, `anonymous` (an operator)
    /// when no authentication is configured. A user's password is verified on the
    /// [`Verifier`]'s threads: Argon2 is slow and large on purpose, and would hold up the
    /// runtime's other requests, or its memory.
    async fn caller(&self, headers: &HeaderMap) -> Result<Caller, ApiError> {
        if !self.is_configured() {
            return Ok(Caller {
                name: "anonymous".to_owned(),
                role: Role::Operator,
                bearer: false,
            });
        }
        let unauthenticated = |message: &str| {
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthenticated",
                message.to_owned(),
            )
        };
        let Some(value) = headers
            .get(header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
        else {
            return Err(unauthenticated(
                "this server needs a bearer token or a user's password (Authorization header)",
            ));
        };
        // The scheme's name is case-insensitive (RFC 7235), its credentials after a space.
        let (scheme, credentials) = value.trim().split_once(' ').unwrap_or((value.trim(), ""));
        let credentials = credentials.trim();
        if scheme.eq_ignore_ascii_case("bearer") {
            if credentials.is_empty() {
                return Err(unauthenticated(
                    "the bearer token is empty: send Authorization: Bearer TOKEN",
                ));
            }
            let digest: [u8; 32] = Sha256::digest(credentials.as_bytes()).into();
            // Every entry is compared, each in constant time, so that the time taken tells
            // nothing of which bytes matched.
            let found = self.tokens.iter().fold(None, |found, (name, hash, role)| {
                let equal = constant_time_eq(hash, &digest);
                found.or(equal.then_some((name, *role)))
            });
            return found
                .map(|(name, role)| Caller {
                    name: name.clone(),
                    role,
                    bearer: true,
                })
                .ok_or_else(|| unauthenticated("the bearer token is not one this server knows"));
        }
        if scheme.eq_ignore_ascii_case("basic") {
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(credentials)
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok());
            let Some((user, password)) = decoded.as_deref().and_then(|text| text.split_once(':'))
            else {
                return Err(unauthenticated(
                    "the basic credentials are not base64 of user:password",
                ));
            };
            let known = self.users.iter().find(|(name, _, _)| name == user);
            let hash = known.map_or(UNKNOWN_USER_HASH, |(_, hash, _)| hash.as_str());
            let verified = match &self.verifier {
                Some(verifier) => verifier.verify(user, hash, password).await,
                None => false,
            };
            if verified && let Some((name, _, role)) = known {
                return Ok(Caller {
                    name: name.clone(),
                    role: *role,
                    bearer: false,
                });
            }
            return Err(unauthenticated("unknown user or wrong password"));
        }
        Err(unauthenticated(
            "the Authorization header is neither Bearer nor Basic",
        ))
    }
}

/// Whether `a` and `b` are equal, in a time that does not depend on where they differ.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y)) == 0
}

/// The Argon2 hash (PHC string) of `secret`, for a user's `password_hash`.
///
/// # Errors
/// Argon2 refuses the input (a secret too long for it).
pub fn hash_password(secret: &str) -> Result<String, String> {
    let salt =
        SaltString::encode_b64(&rand::random::<[u8; 16]>()).map_err(|error| error.to_string())?;
    argon2::Argon2::default()
        .hash_password(secret.as_bytes(), &salt)
        .map(|hash| hash.to_string())
        .map_err(|error| error.to_string())
}

/// The SHA-256 of `token`, hexadecimal, for a token's `sha256`.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Who made a request: what a read handler takes, so that no route can forget to ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The token's or user's name, or `anonymous`: what the events stream records.
    pub name: String,
    /// What the caller may do.
    pub role: Role,
    /// Whether a bearer token said who: a browser never sends one by itself, so a request
    /// with one cannot be forged by another site.
    bearer: bool,
}

impl Caller {
    /// Who a refused request is drawn for: nobody signed in, offered no action.
    pub(crate) fn nobody() -> Self {
        Caller {
            name: String::new(),
            role: Role::Viewer,
            bearer: false,
        }
    }
}

/// Who made a request, found once for it: a page's extractors and its refusal (drawn by
/// `pages::html_errors`, which puts this in the request's extensions) share it, so that a
/// password is verified once a request.
#[derive(Clone, Default)]
pub(crate) struct Identified(Arc<tokio::sync::OnceCell<Result<Caller, ApiError>>>);

impl Identified {
    /// The caller of `headers`, found by `auth` on the first call and remembered.
    pub(crate) async fn caller(
        &self,
        auth: &Auth,
        headers: &HeaderMap,
    ) -> Result<Caller, ApiError> {
        self.0.get_or_init(|| auth.caller(headers)).await.clone()
    }
}

impl FromRequestParts<WebState> for Caller {
    type Rejection = Refused;

    async fn from_request_parts(parts: &mut Parts, state: &WebState) -> Result<Self, Refused> {
        let identified = parts
            .extensions
            .get::<Identified>()
            .cloned()
            .unwrap_or_default();
        identified
            .caller(state.auth(), &parts.headers)
            .await
            .map_err(Refused)
    }
}

/// A caller allowed to act: an operator, on a server that is not read-only, and (without a
/// bearer token) from a page of this server's own origin. What an action handler takes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator(pub Caller);

impl FromRequestParts<WebState> for Operator {
    type Rejection = Refused;

    async fn from_request_parts(parts: &mut Parts, state: &WebState) -> Result<Self, Refused> {
        let caller = Caller::from_request_parts(parts, state).await?;
        if state.read_only() {
            return Err(Refused(ApiError::new(
                StatusCode::FORBIDDEN,
                "read-only",
                "this server is read-only (--read-only): it takes no action",
            )));
        }
        if caller.role != Role::Operator {
            return Err(Refused(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                format!("\"{}\" is a viewer: only an operator may act", caller.name),
            )));
        }
        if !caller.bearer {
            same_origin(&parts.headers).map_err(Refused)?;
        }
        Ok(Operator(caller))
    }
}

/// Refuses a request another site's page made the browser send: a browser sends
/// `Sec-Fetch-Site` and `Origin` with every cross-origin POST, and a page cannot forge them.
fn same_origin(headers: &HeaderMap) -> Result<(), ApiError> {
    let forged = |why: String| ApiError::new(StatusCode::FORBIDDEN, "cross-origin", why);
    let text = |name| {
        headers
            .get(name)
            .and_then(|value: &HeaderValue| value.to_str().ok())
    };
    if let Some(site) = text("sec-fetch-site")
        && !matches!(site, "same-origin" | "none")
    {
        return Err(forged(format!(
            "refused: the request came from another site (Sec-Fetch-Site: {})",
            shown(site, SHOWN)
        )));
    }
    if let Some(origin) = text(header::ORIGIN.as_str()) {
        let host = text(header::HOST.as_str()).unwrap_or_default();
        let origin_host = origin.split_once("://").map_or(origin, |(_, rest)| rest);
        if origin_host != host {
            return Err(forged(format!(
                "refused: the request came from {}, not from this server ({})",
                shown(origin, SHOWN),
                shown(host, SHOWN)
            )));
        }
    }
    Ok(())
}

/// Without an auth file (anyone may act), answers only a request addressed to this machine:
/// its `Host` is `localhost`, a loopback address or the address listened on, with any port.
/// A page of another site whose name its DNS makes resolve to 127.0.0.1 (DNS rebinding) is,
/// to the browser, of the same origin as what it asks: the `Host` it sends is that name, so
/// it is refused here, with the API's 403 `untrusted-host`. With an auth file the credentials
/// decide, and a browser sends none a page of another site could use.
pub(crate) async fn local_host_only(
    State(state): State<WebState>,
    request: Request,
    next: Next,
) -> Response {
    if state.auth().is_configured() {
        return next.run(request).await;
    }
    // HTTP/2 names the host in the URI's authority, HTTP/1.1 in `Host`.
    let host = request.uri().authority().map_or_else(
        || {
            request
                .headers()
                .get(header::HOST)
                .and_then(|value| value.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        },
        |authority| authority.as_str().to_owned(),
    );
    if is_local_host(&host, state.listen()) {
        return next.run(request).await;
    }
    ApiError::new(
        StatusCode::FORBIDDEN,
        "untrusted-host",
        format!(
            "refused: with no auth file this console answers only requests addressed to \
             localhost, a loopback address or the address it listens on, not to \"{}\", so \
             that a page of another site cannot drive it; to serve it under another name (behind \
             a proxy), give it an auth file (--auth-file)",
            shown(&host, SHOWN)
        ),
    )
    .into_response()
}

/// Whether `host` (a `Host` header: a name or address, then maybe `:port`) names this machine:
/// `localhost`, a loopback address, or `listen`, and a port of digits only.
fn is_local_host(host: &str, listen: Option<IpAddr>) -> bool {
    // The name, then what follows it: nothing, or `:` and the port.
    let (name, port) = match host.strip_prefix('[') {
        Some(bracketed) => bracketed.split_once(']').unwrap_or(("", "")),
        None => host
            .find(':')
            .map_or((host, ""), |colon| (&host[..colon], &host[colon..])),
    };
    // `127.0.0.1:7812@evil` is no port: what follows the name is digits or nothing.
    let port_fine = port.is_empty()
        || port.strip_prefix(':').is_some_and(|digits| {
            (1..=5).contains(&digits.len()) && digits.bytes().all(|byte| byte.is_ascii_digit())
        });
    let local = name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<IpAddr>()
            .is_ok_and(|address| address.is_loopback() || Some(address) == listen);
    port_fine && local
}

/// A refusal: the error, answered with its status (a 401's challenge is added by
/// `challenge`, which knows the callers configured).
#[derive(Debug)]
pub struct Refused(pub ApiError);

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        self.0.into_response()
    }
}

/// Adds to a 401 the challenges of the credentials the server takes: `Bearer` (RFC 6750) when
/// its auth file holds tokens, `Basic` when it holds users (which makes a browser ask for a
/// password), both when both. A page's 401 drawn in the layout carries them too: this runs
/// after `pages::html_errors`.
pub(crate) async fn challenge(State(state): State<WebState>, mut response: Response) -> Response {
    if response.status() != StatusCode::UNAUTHORIZED {
        return response;
    }
    let auth = state.auth();
    let headers = response.headers_mut();
    if !auth.tokens.is_empty() {
        headers.append(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"redcron\""),
        );
    }
    if !auth.users.is_empty() {
        headers.append(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"redcron\", charset=\"UTF-8\""),
        );
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_password_hash_verifies_its_password_only_a_few_at_a_time() {
        let hash = hash_password("s3cret").expect("hash");
        let verifier = Verifier::start();
        assert!(verifier.verify("alice", &hash, "s3cret").await);
        assert!(!verifier.verify("alice", &hash, "secret").await);
        assert!(!verifier.verify("bob", UNKNOWN_USER_HASH, "s3cret").await);
        // Many at once are checked in turn, each answered.
        let checks = (0..8).map(|n| {
            let (verifier, hash) = (Arc::clone(&verifier), hash.clone());
            tokio::spawn(async move { verifier.verify("eve", &hash, &format!("guess{n}")).await })
        });
        for check in checks {
            assert!(!check.await.expect("answered"));
        }
        // Remembered once verified: the same password again needs no check.
        assert!(verifier.verify("alice", &hash, "s3cret").await);
    }

    #[test]
    fn only_a_host_naming_this_machine_is_local() {
        let listen = "192.0.2.7".parse().ok();
        for host in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1:8080",
            "127.1.2.3",
            "[::1]:8080",
            "[::1]",
            "192.0.2.7:8080",
        ] {
            assert!(is_local_host(host, listen), "{host}");
        }
        for host in [
            "evil.example:8080",
            "localhost.evil.example",
            "192.0.2.8:8080",
            "[::2]:8080",
            "",
            "127.0.0.1:7812@evil",
            "localhost:80:80",
            "[::1]x",
            "localhost:",
        ] {
            assert!(!is_local_host(host, listen), "{host}");
        }
        assert!(!is_local_host("192.0.2.7", None));
    }

    #[test]
    fn a_cross_site_post_is_refused_and_a_same_origin_one_passes() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        assert_eq!(same_origin(&headers), Ok(()));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("https://evil.example"),
        );
        assert_eq!(
            same_origin(&headers).map_err(|error| error.code),
            Err("cross-origin")
        );
        headers.remove(header::ORIGIN);
        headers.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert_eq!(
            same_origin(&headers).map_err(|error| error.code),
            Err("cross-origin")
        );
    }
}
