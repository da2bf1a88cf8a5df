//! Fault injection for the API server: refuse connections (as if the server were down),
//! add latency, fail a fraction of requests with 500 or 429, and cut open watch streams.
//! Set from the library ([`Faults`], via `RunningEmulator::faults()`) or over HTTP with
//! the admin endpoint `/emulator/faults` (see the crate README).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{Value, json};

#[derive(Debug, Default)]
struct Settings {
    refuse: bool,
    /// When set, the refusal lifts itself at this instant.
    refuse_until: Option<Instant>,
    latency: Duration,
    fail_fraction: f64,
    fail_code: u16,
    /// Accumulates the fraction so failures are spread exactly and deterministically.
    acc: f64,
}

struct Inner {
    settings: Mutex<Settings>,
    /// Bumped to end every open watch.
    cut: tokio::sync::watch::Sender<u64>,
}

/// Shared fault settings (cheap to clone). Every setter takes effect for the next request.
#[derive(Clone)]
pub struct Faults(Arc<Inner>);

impl Default for Faults {
    fn default() -> Self {
        Faults(Arc::new(Inner {
            settings: Mutex::new(Settings {
                fail_code: 500,
                ..Default::default()
            }),
            cut: tokio::sync::watch::channel(0).0,
        }))
    }
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Faults({})", self.describe())
    }
}

/// What the middleware does with one request.
pub(crate) enum Verdict {
    Pass { latency: Duration },
    Respond(Response),
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, Settings> {
        self.0.settings.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Refuses every connection (new connections are closed at once; requests on open
    /// connections get 503 with `Connection: close`) and cuts open watches, as if the
    /// API server were down. `false` brings it back.
    pub fn refuse_all(&self, on: bool) {
        {
            let mut s = self.lock();
            s.refuse = on;
            s.refuse_until = None;
        }
        if on {
            self.cut_watches();
        }
    }

    /// Refuses everything for `d`, then recovers by itself.
    pub fn refuse_for(&self, d: Duration) {
        self.refuse_all(true);
        self.lock().refuse_until = Some(Instant::now() + d);
    }

    /// Delays every request by `d` before it is served.
    pub fn latency(&self, d: Duration) {
        self.lock().latency = d;
    }

    /// Fails this fraction (0.0–1.0) of requests with `code`: 500 (InternalError) or
    /// 429 (TooManyRequests, with `Retry-After: 1`). Failures are spread evenly: 0.5
    /// fails every second request.
    pub fn fail_fraction(&self, fraction: f64, code: u16) {
        let mut s = self.lock();
        s.fail_fraction = fraction.clamp(0.0, 1.0);
        s.fail_code = code;
        s.acc = 0.0;
    }

    /// Ends every open watch stream now (clients see the watch close and re-watch).
    pub fn cut_watches(&self) {
        self.0.cut.send_modify(|n| *n += 1);
    }

    /// Removes every fault.
    pub fn clear(&self) {
        let mut s = self.lock();
        *s = Settings {
            fail_code: 500,
            ..Default::default()
        };
    }

    /// Whether connections are being refused now.
    pub fn refusing(&self) -> bool {
        let mut s = self.lock();
        if let Some(until) = s.refuse_until
            && Instant::now() >= until
        {
            s.refuse = false;
            s.refuse_until = None;
        }
        s.refuse
    }

    /// The current settings as JSON (what the admin endpoint shows).
    pub fn describe(&self) -> Value {
        let refusing = self.refusing();
        let s = self.lock();
        json!({
            "refuseAll": refusing,
            "latencyMs": s.latency.as_millis() as u64,
            "failFraction": s.fail_fraction,
            "failCode": s.fail_code,
        })
    }

    pub(crate) fn verdict(&self) -> Verdict {
        if self.refusing() {
            let mut r = status_response(
                503,
                "ServiceUnavailable",
                "the server is currently unable to handle the request (injected fault: refusing all requests)",
            );
            r.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return Verdict::Respond(r);
        }
        let mut s = self.lock();
        if s.fail_fraction > 0.0 {
            s.acc += s.fail_fraction;
            if s.acc >= 1.0 - 1e-9 {
                s.acc -= 1.0;
                let mut r = if s.fail_code == 429 {
                    status_response(
                        429,
                        "TooManyRequests",
                        "the server has received too many requests and has asked us to try again later (injected fault)",
                    )
                } else {
                    status_response(
                        s.fail_code,
                        "InternalError",
                        "Internal error occurred: injected fault",
                    )
                };
                if s.fail_code == 429 {
                    r.headers_mut()
                        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                }
                return Verdict::Respond(r);
            }
        }
        Verdict::Pass { latency: s.latency }
    }

    /// Wraps a watch response so that `cut_watches` ends it.
    pub(crate) fn cuttable(&self, resp: Response) -> Response {
        let mut rx = self.0.cut.subscribe();
        rx.mark_unchanged();
        let (parts, body) = resp.into_parts();
        let cut = async move {
            let _ = rx.changed().await;
        };
        let stream = body.into_data_stream().take_until(Box::pin(cut));
        Response::from_parts(parts, Body::from_stream(stream))
    }

    /// The admin endpoint: GET shows the settings; POST/PUT a JSON object with any of
    /// `refuseAll` (bool), `forMs` (with refuseAll: lift it after this long), `latencyMs`,
    /// `failFraction` and `failCode`, `cutWatches` (true), `clear` (true).
    pub(crate) fn admin(&self, method: &axum::http::Method, body: &[u8]) -> Response {
        if method == axum::http::Method::POST || method == axum::http::Method::PUT {
            let Ok(v) = serde_json::from_slice::<Value>(body) else {
                return status_response(400, "BadRequest", "the body must be a JSON object");
            };
            if v["clear"] == true {
                self.clear();
            }
            if let Some(ms) = v["latencyMs"].as_u64() {
                self.latency(Duration::from_millis(ms));
            }
            if let Some(f) = v["failFraction"].as_f64() {
                let code = v["failCode"].as_u64().unwrap_or(500) as u16;
                if code != 500 && code != 429 {
                    return status_response(400, "BadRequest", "failCode must be 500 or 429");
                }
                self.fail_fraction(f, code);
            }
            if v["cutWatches"] == true {
                self.cut_watches();
            }
            match (v["refuseAll"].as_bool(), v["forMs"].as_u64()) {
                (Some(true), Some(ms)) => self.refuse_for(Duration::from_millis(ms)),
                (Some(on), _) => self.refuse_all(on),
                _ => {}
            }
        }
        (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/json")],
            self.describe().to_string(),
        )
            .into_response()
    }
}

fn status_response(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": message, "reason": reason, "code": code});
    let code = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (
        code,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

/// A TCP listener that closes new connections at once while the faults refuse them.
pub(crate) struct RefusingListener {
    inner: tokio::net::TcpListener,
    faults: Faults,
}

impl RefusingListener {
    pub(crate) fn new(inner: tokio::net::TcpListener, faults: Faults) -> Self {
        RefusingListener { inner, faults }
    }
}

impl axum::serve::Listener for RefusingListener {
    type Io = tokio::net::TcpStream;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let (io, addr) = axum::serve::Listener::accept(&mut self.inner).await;
            if self.faults.refusing() {
                // Reset (linger 0) before any byte is read, like a server that is down.
                let _ = io.set_zero_linger();
                drop(io);
                continue;
            }
            return (io, addr);
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}
