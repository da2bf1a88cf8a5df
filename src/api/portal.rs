//! The portal: the single-page app built into `web/dist` (`scripts/portal.sh`), served at `/`
//! after every API route.
//!
//! - `/assets/*` are Vite's content-hashed files: cached for a year, and a missing one is a 404.
//! - Any other path that names a file (`/favicon.svg`) is that file, revalidated each time.
//! - Every other path is `index.html`, so a deep link such as
//!   `/projects/team-a/deployments/qwen` opens the app, which routes it in the browser.
//! - Paths under `/api`, `/graphql`, `/healthz`, `/readyz` and `/metrics` never fall back to
//!   the app: an unknown API path stays a problem+json 404.

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use tower::ServiceExt;
use tower_http::services::{ServeDir, ServeFile};

use super::AppState;

/// Hashed assets never change under their name.
const IMMUTABLE: &str = "public, max-age=31536000, immutable";
/// `index.html` and the unhashed files must be revalidated, so a new build shows at once.
const REVALIDATE: &str = "no-cache";
/// The app loads nothing from elsewhere and runs no inline script. It talks to its own
/// origin and, with single sign-on, to the identity provider's (discovery, keys, tokens):
/// `{connect}` is that list.
fn content_security_policy(connect: &str) -> String {
    format!(
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; \
         connect-src {connect}; object-src 'none'; base-uri 'none'; form-action 'self'; \
         frame-ancestors 'none'"
    )
}

/// `'self'`, and the identity provider's origin when the portal signs in with it.
fn connect_sources(state: &AppState) -> String {
    let provider = state
        .auth
        .sign_in()
        .oidc
        .and_then(|oidc| reqwest::Url::parse(&oidc.issuer).ok())
        .map(|issuer| issuer.origin())
        .filter(|origin| origin.is_tuple())
        .map(|origin| origin.ascii_serialization());
    match provider {
        Some(origin) => format!("'self' {origin}"),
        None => "'self'".into(),
    }
}

const API_PREFIXES: &[&str] = &["/api", "/graphql", "/healthz", "/readyz", "/metrics"];

/// The router's fallback: the portal, or a problem+json 404 for an unknown API path.
pub async fn portal(State(state): State<AppState>, request: Request) -> Response {
    let uri = request.uri().clone();
    let path = uri.path();
    let api_path = API_PREFIXES
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")));
    if api_path || !matches!(*request.method(), Method::GET | Method::HEAD) {
        return super::rest::not_found(uri).await;
    }
    let dir = &state.web_dir;
    let index = dir.join("index.html");
    if !index.is_file() {
        return not_built(dir);
    }
    let asset = path.starts_with("/assets/");
    let response = if asset {
        ServeDir::new(dir).oneshot(request).await
    } else {
        ServeDir::new(dir)
            .fallback(ServeFile::new(index))
            .oneshot(request)
            .await
    };
    let mut response = match response {
        Ok(response) => response.map(Body::new),
        Err(never) => match never {},
    };
    if response.status() == StatusCode::NOT_FOUND {
        return super::rest::not_found(uri).await;
    }
    let headers = response.headers_mut();
    let cache = if asset { IMMUTABLE } else { REVALIDATE };
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    let html = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/html"));
    if html {
        headers.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_str(&content_security_policy(&connect_sources(&state)))
                .expect("an origin is a valid header value"),
        );
        headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    }
    response
}

fn not_built(dir: &std::path::Path) -> Response {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        [(header::CACHE_CONTROL, REVALIDATE)],
        Html(format!(
            "<!doctype html><html lang=\"en\"><title>modelplane</title><p>The portal is not built in \
             <code>{}</code>: run <code>scripts/portal.sh</code> (the README's run command does), or \
             point <code>MODELPLANE_WEB_DIR</code> at a built <code>web/dist</code>. The API works \
             without it: <a href=\"/api/docs\">/api/docs</a>.</p>",
            html_escape(&dir.display().to_string())
        )),
    )
        .into_response()
}

fn html_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
