//! The console's stylesheet and script, built into the binary and served under a name that
//! holds their hash, so that a browser keeps them for a year and never serves a stale one; and
//! its icon.

use std::sync::LazyLock;

use axum::extract::Path;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// One file served from the binary.
struct Asset {
    /// Its name without the hash: `style`, `console`.
    stem: &'static str,
    /// `css` or `js`.
    extension: &'static str,
    content_type: &'static str,
    body: &'static str,
}

const ASSETS: [Asset; 2] = [
    Asset {
        stem: "style",
        extension: "css",
        content_type: "text/css; charset=utf-8",
        body: include_str!("style.css"),
    },
    Asset {
        stem: "console",
        extension: "js",
        content_type: "text/javascript; charset=utf-8",
        body: include_str!("console.js"),
    },
];

/// Each asset's served name, `style-<12 hex of its SHA-256>.css`, in the order of [`ASSETS`].
static NAMES: LazyLock<Vec<String>> = LazyLock::new(|| {
    ASSETS
        .iter()
        .map(|asset| {
            let digest = hex::encode(Sha256::digest(asset.body.as_bytes()));
            format!("{}-{}.{}", asset.stem, &digest[..12], asset.extension)
        })
        .collect()
});

/// The served name of the asset `stem` (a name of [`ASSETS`]).
pub(crate) fn name(stem: &str) -> &'static str {
    let at = ASSETS
        .iter()
        .position(|asset| asset.stem == stem)
        .expect("only the console's own assets are linked");
    &NAMES[at]
}

/// `GET /assets/{name}`: the asset of that name, cached for a year since its name changes
/// with it; any other name is a 404.
pub(crate) async fn serve(Path(name): Path<String>) -> Response {
    let Some(at) = NAMES.iter().position(|served| *served == name) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let asset = &ASSETS[at];
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=31536000, immutable"),
            ),
        ],
        asset.body,
    )
        .into_response()
}

/// The console's icon: a red dot, small enough to be written here.
const FAVICON: &str = "<svg xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 16 16\">\
                       <circle cx=\"8\" cy=\"8\" r=\"7\" fill=\"#c0392b\"/></svg>";

/// `GET /favicon.ico`: the console's icon, as SVG, which a browser asks for with its first
/// page and would otherwise be answered a 404 for (a line in the log of every visit).
pub(crate) async fn favicon() -> Response {
    (
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("image/svg+xml"),
            ),
            (
                header::CACHE_CONTROL,
                HeaderValue::from_static("public, max-age=86400"),
            ),
        ],
        FAVICON,
    )
        .into_response()
}
