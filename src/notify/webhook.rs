//! Web address targets: the document POSTed as JSON, signed when the replica has a secret.

use std::time::Duration;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use super::{DeliveryError, Document};

/// The replica's environment variable holding the secret webhooks are signed with. Commands
/// the replica starts do not see it.
pub const WEBHOOK_SECRET_ENV: &str = "REDCRON_WEBHOOK_SECRET";

/// The header carrying the signature: `sha256=` and the hex HMAC-SHA256 of the body, keyed
/// with the secret.
pub const SIGNATURE_HEADER: &str = "X-Redcron-Signature";

/// The header carrying the notice's id, the same on every try: a receiver drops a repeat by it.
const NOTICE_HEADER: &str = "X-Redcron-Notice";

/// `sha256=<hex>`: the HMAC-SHA256 of `body` keyed with `secret`, as [`SIGNATURE_HEADER`]
/// carries it.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).expect("HMAC takes a key of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// The client webhooks are posted with: each request bounded by `timeout`, connection
/// included; no redirects (a notice goes where the file says).
pub(super) fn client(timeout: Duration) -> Result<reqwest::Client, String> {
    crate::tls::install_provider();
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("redcron/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|error| format!("cannot build the HTTP client: {error}"))
}

/// POSTs `document` to `url`; delivered on any 2xx answer.
pub(super) async fn post(
    client: &reqwest::Client,
    url: &str,
    document: &Document,
    secret: Option<&[u8]>,
) -> Result<(), DeliveryError> {
    let body = document.to_json();
    let mut request = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .header(NOTICE_HEADER, &document.notice);
    if let Some(secret) = secret {
        request = request.header(SIGNATURE_HEADER, signature(secret, body.as_bytes()));
    }
    let response = request.body(body).send().await.map_err(|error| {
        // reqwest's message alone says little ("error sending request"): its source says why.
        let error = error.without_url();
        let mut message = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            message = format!("{message}: {cause}");
            source = cause.source();
        }
        DeliveryError::Transient(format!("POST {url}: {message}"))
    })?;
    let status = response.status();
    if status.is_success() {
        return Ok(());
    }
    let problem = format!("POST {url}: the receiver answered {status}");
    // 408 and 429 ask to come back later, 5xx may pass; any other answer refuses the notice,
    // a redirect too: it is not followed (a notice goes where the file says), so it would
    // never pass.
    if status.is_server_error()
        || status == reqwest::StatusCode::REQUEST_TIMEOUT
        || status == reqwest::StatusCode::TOO_MANY_REQUESTS
    {
        Err(DeliveryError::Transient(problem))
    } else {
        Err(DeliveryError::Refused(problem))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 4231, test case 2.
    #[test]
    fn the_signature_is_the_hmac_sha256_of_the_body() {
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
