//! The process's TLS provider. The HTTP clients (webhooks, the S3 archive) are built with rustls
//! and no provider of their own, so that one library, ring (the one `rediss://` uses too), does
//! all of the process's TLS; each installs it before building its client.

/// Installs ring as the process's TLS provider; one installed already is as good.
pub(crate) fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
