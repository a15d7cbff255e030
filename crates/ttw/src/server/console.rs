//! The operator's console at `/console/`: three static files served by the
//! binary (no CDN, no framework fetched at run time), whose script reads and
//! acts through this server's own `/v1` API with the token the operator
//! types in. It has no route of its own into the database: what a token
//! may not do through the API, it may not do here, and a wrong token is
//! shown nothing.
//!
//! Every value from the API goes into the page as text (`textContent`),
//! never parsed as HTML, and the Content-Security-Policy allows scripts and
//! styles from these files only.

use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::Router;

const PAGE: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/app.js");
const STYLE: &str = include_str!("console/app.css");

/// The console's routes (outside the API's document: they are files, not
/// operations).
pub(crate) fn routes() -> Router {
    Router::new()
        .route(
            "/console",
            get(|| async { Redirect::permanent("/console/") }),
        )
        .route("/console/", get(|| async { file("text/html", PAGE) }))
        .route(
            "/console/app.js",
            get(|| async { file("text/javascript", SCRIPT) }),
        )
        .route(
            "/console/app.css",
            get(|| async { file("text/css", STYLE) }),
        )
}

/// A file of the console, with the headers every one carries.
fn file(kind: &str, body: &'static str) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    if let Ok(kind) = HeaderValue::from_str(&format!("{kind}; charset=utf-8")) {
        headers.insert(header::CONTENT_TYPE, kind);
    }
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    response
}
