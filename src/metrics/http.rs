//! Request metrics for every listener, and the access line: the duration of each request by
//! surface, operation and outcome, its count by status and error code, the requests in
//! flight, and the body bytes in and out. A request is timed until the last byte of its
//! answer leaves (or the client goes away), not until the handler returns, so a slow download
//! counts as slow; the access line (`served`) is written then too, in the request's span,
//! with the bytes each way.
//!
//! The operation is a name from a fixed list (the native routes below, or the S3 operation
//! `s3s` resolved, which the gateway's access check notes in [`S3Op`]), never the path, so
//! the label stays bounded whatever clients send.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use http_body::{Body as _, Frame, SizeHint};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::Instant;

/// The S3 operation of a request the gateway served, filled in by its access check. Present
/// in every request's extensions; empty when the request never reached the S3 gateway.
#[derive(Clone, Default)]
pub struct S3Op(Arc<S3OpInner>);

#[derive(Default)]
struct S3OpInner {
    /// The request was handed to the S3 gateway.
    handed: std::sync::atomic::AtomicBool,
    /// The operation `s3s` resolved (unset when it refused the request before resolving one).
    name: OnceLock<String>,
}

impl S3Op {
    /// The request is the S3 gateway's (called before it is handed over).
    pub fn handed(extensions: &http::Extensions) {
        if let Some(op) = extensions.get::<S3Op>() {
            op.0.handed.store(true, Ordering::Relaxed);
        }
    }

    /// The operation `s3s` resolved for the request.
    pub fn resolved(extensions: &http::Extensions, name: &str) {
        if let Some(op) = extensions.get::<S3Op>() {
            op.0.handed.store(true, Ordering::Relaxed);
            let _ = op.0.name.set(name.to_string());
        }
    }
}

/// Where the request's log span is kept for the access line, once the span is made (by the
/// listener's trace layer, inside this one).
#[derive(Clone, Default)]
pub struct AccessSpan(Arc<OnceLock<tracing::Span>>);

impl AccessSpan {
    /// Keeps `span` as the one the access line of the request of `extensions` is written in.
    pub fn keep(extensions: &http::Extensions, span: &tracing::Span) {
        if let Some(slot) = extensions.get::<AccessSpan>() {
            let _ = slot.0.set(span.clone());
        }
    }
}

/// The middleware: outermost on every router, so refusals by the other layers count too.
pub async fn track(mut req: Request, next: Next) -> Response {
    let s3 = S3Op::default();
    req.extensions_mut().insert(s3.clone());
    let span = AccessSpan::default();
    req.extensions_mut().insert(span.clone());
    let received = Arc::new(AtomicU64::new(0));
    let left = Arc::new(AtomicBool::new(false));
    let mut tracker = Tracker {
        started: Instant::now(),
        method: req.method().clone(),
        path: req.uri().path().to_string(),
        query: req.uri().query().unwrap_or("").to_string(),
        s3,
        span,
        received: received.clone(),
        left: left.clone(),
        sent: 0,
        status: None,
        code: None,
        finished: false,
        bodiless: false,
        length: None,
    };
    metrics::gauge!(super::REQUESTS_IN_FLIGHT).increment(1.0);
    let req = req.map(|b| {
        Body::new(Counted {
            inner: b,
            received,
            left,
        })
    });
    // Dropped here, if the client leaves before the answer (the tracker records "aborted").
    let resp = next.run(req).await;
    tracker.status = Some(resp.status().as_u16());
    tracker.code = resp
        .extensions()
        .get::<super::codes::ErrorCode>()
        .map(|c| c.0.clone());
    // hyper stops polling a body once it has sent its Content-Length, and sends none for a
    // HEAD, a 204 or a 304: such an answer is finished without a last poll.
    tracker.bodiless =
        tracker.method == Method::HEAD || matches!(resp.status().as_u16(), 204 | 304);
    tracker.length = resp
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok());
    resp.map(|b| Body::new(Tracked { inner: b, tracker }))
}

/// One request's measurements, recorded when it is dropped: with the answer's body once sent
/// (or abandoned), or with the request's future if the client left before an answer.
struct Tracker {
    started: Instant,
    method: Method,
    path: String,
    /// The admin's fence changes are told apart by their query (`advance_to`, `reset_to`).
    query: String,
    s3: S3Op,
    span: AccessSpan,
    received: Arc<AtomicU64>,
    /// The client's connection ended (or was half-closed) while its request body was being
    /// read: the request is `aborted`, whatever fencegate answered.
    left: Arc<AtomicBool>,
    sent: u64,
    status: Option<u16>,
    /// The error code the answer carries ([`super::codes::ErrorCode`]).
    code: Option<String>,
    /// The answer's body reached its end.
    finished: bool,
    /// The answer carries no body on the wire (HEAD, 204, 304).
    bodiless: bool,
    /// The answer's Content-Length, when it declared one.
    length: Option<u64>,
}

impl Drop for Tracker {
    fn drop(&mut self) {
        let (surface, operation) = classify(&self.method, (&self.path, &self.query), &self.s3);
        // The status stays what fencegate answered: a half-closed client still reads it, and a
        // refusal (a bad signature, a stale token) must stay countable by its status.
        let left = self.left.load(Ordering::Relaxed);
        let outcome = match self.status {
            _ if left => "aborted",
            Some(_) if !self.finished => "aborted",
            Some(s) if s < 300 => "2xx",
            Some(s) if s < 400 => "3xx",
            Some(s) if s < 500 => "4xx",
            Some(_) => "5xx",
            None => "aborted",
        };
        let took = self.started.elapsed();
        let received = self.received.load(Ordering::Relaxed);
        let code = super::codes::label(self.code.as_deref());
        let status: metrics::SharedString = match self.status {
            Some(s) => s.to_string().into(),
            None => metrics::SharedString::const_str("none"),
        };
        metrics::counter!(super::REQUESTS, "surface" => surface, "operation" => operation.clone(), "status" => status, "code" => code.clone())
            .increment(1);
        metrics::histogram!(super::REQUEST_DURATION, "surface" => surface, "operation" => operation, "outcome" => outcome)
            .record(took.as_secs_f64());
        metrics::gauge!(super::REQUESTS_IN_FLIGHT).decrement(1.0);
        metrics::counter!(super::REQUEST_BODY_BYTES, "surface" => surface).increment(received);
        metrics::counter!(super::RESPONSE_BODY_BYTES, "surface" => surface).increment(self.sent);
        self.log(took, received, &code, outcome == "aborted");
    }
}

impl Tracker {
    /// The access line, in the request's span (docs/operations.md, "Logs", lists its fields).
    fn log(&self, took: std::time::Duration, received: u64, code: &str, aborted: bool) {
        let Some(span) = self.span.0.get() else {
            return;
        };
        let _entered = span.enter();
        // Microsecond precision: enough to read, nothing to misread.
        let latency_ms = (took.as_secs_f64() * 1_000_000.0).round() / 1000.0;
        match self.status {
            Some(status) => tracing::info!(
                target: "fencegate::api",
                status,
                code,
                bytes_in = received,
                bytes_out = self.sent,
                latency_ms,
                aborted,
                "served"
            ),
            None => tracing::info!(
                target: "fencegate::api",
                bytes_in = received,
                latency_ms,
                aborted,
                "served"
            ),
        }
    }
}

/// A request hyper could not parse and answered itself, before it became a request any layer
/// sees: counted as `surface="other", operation="unparsed"` with the status hyper sent, and
/// logged as an access line of its own, so a header flood or a fuzzer is seen.
pub fn unparsed(peer: std::net::SocketAddr, e: &hyper::Error) {
    let reason = e.to_string();
    let status: u16 = match (e.is_parse_too_large(), reason.contains("URI")) {
        (true, true) => 414,
        (true, false) => 431,
        (false, _) => 400,
    };
    metrics::counter!(super::REQUESTS, "surface" => "other", "operation" => "unparsed", "status" => status.to_string(), "code" => "none")
        .increment(1);
    tracing::info!(
        target: "fencegate::api",
        client = %peer,
        status,
        code = "none",
        operation = "unparsed",
        error = %reason,
        "served"
    );
}

/// `/admin/leases/{name}`: one segment after the prefix.
fn is_lease_path(path: &str) -> bool {
    path.strip_prefix("/admin/leases/")
        .is_some_and(|name| !name.is_empty() && !name.contains('/'))
}

/// The surface and the operation of a request, from fixed lists.
fn classify(
    method: &Method,
    (path, query): (&str, &str),
    s3: &S3Op,
) -> (&'static str, metrics::SharedString) {
    let native =
        |op: &'static str| -> (&'static str, metrics::SharedString) { ("native", op.into()) };
    let segments = |prefix: &str| path.strip_prefix(prefix).map(|r| r.split('/').count());
    let m = method.as_str();
    if let Some(n) = segments("/v1/objects/") {
        return match (m, n) {
            ("GET", 1) => native("list_objects"),
            ("PUT", n) if n > 1 => native("put_object"),
            ("GET", n) if n > 1 => native("get_object"),
            ("HEAD", n) if n > 1 => native("head_object"),
            ("DELETE", n) if n > 1 => native("delete_object"),
            _ => native("other"),
        };
    }
    if path.starts_with("/v1/fences/") {
        return match m {
            "GET" => native("get_fence"),
            "POST" => native("advance_fence"),
            _ => native("other"),
        };
    }
    if let Some(n) = segments("/v1/leases/") {
        let op = match (m, n) {
            ("POST", 1) => "acquire",
            ("PUT", 1) => "renew",
            ("DELETE", 1) => "release",
            ("GET", 1) => "show",
            _ => "other",
        };
        return ("leases", op.into());
    }
    if path == "/v1" || path.starts_with("/v1/") {
        return native("other");
    }
    let admin =
        |op: &'static str| -> (&'static str, metrics::SharedString) { ("admin", op.into()) };
    if let Some(n) = segments("/admin/fences/") {
        // An advance only raises a fence; a reset lowers it: an alert on resets must see
        // resets alone.
        // Names as the server decodes them: `reset%5Fto` is `reset_to`.
        let names = |name: &str| {
            query.split('&').any(|p| {
                let raw = p.split('=').next().unwrap_or("");
                percent_encoding::percent_decode_str(raw).decode_utf8_lossy() == name
            })
        };
        let op = match (m, n) {
            ("GET", 1) => "list_fences",
            ("GET", _) => "get_fence",
            ("POST", n) if n > 1 && names("reset_to") && !names("advance_to") => "reset_fence",
            ("POST", n) if n > 1 && names("advance_to") && !names("reset_to") => "advance_fence",
            _ => "other",
        };
        return admin(op);
    }
    match (m, path) {
        (_, "/healthz") => return ("health", "healthz".into()),
        (_, "/readyz") => return ("health", "readyz".into()),
        (_, "/metrics") => return admin("metrics"),
        ("GET", "/admin/leases") => return admin("list_leases"),
        ("GET", p) if is_lease_path(p) => return admin("get_lease"),
        ("DELETE", p) if is_lease_path(p) => return admin("revoke_lease"),
        ("POST", "/admin/reload") => return admin("reload"),
        ("GET", "/admin/status") => return admin("status"),
        (_, p) if p == "/admin" || p.starts_with("/admin/") => return admin("other"),
        _ => {}
    }
    if s3.0.handed.load(Ordering::Relaxed) {
        let op = s3.0.name.get().cloned().unwrap_or_else(|| "unknown".into());
        return ("s3", op.into());
    }
    ("other", "no_route".into())
}

/// A request body that counts the bytes it passes, and notes a client that went away in the
/// middle of it.
struct Counted {
    inner: Body,
    received: Arc<AtomicU64>,
    left: Arc<AtomicBool>,
}

/// Whether a request body's error is its connection ending: hyper's incomplete message (the
/// client closed it; hyper does not keep half-closed connections, so no answer can reach the
/// client) or a reset. A malformed chunk or a stall is the client's mistake, not its absence.
fn client_left(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(err) = cause {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_incomplete_message() {
                return true;
            }
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind::*;
            if matches!(
                io.kind(),
                ConnectionReset | ConnectionAborted | BrokenPipe | UnexpectedEof
            ) {
                return true;
            }
        }
        cause = err.source();
    }
    false
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.received
                        .fetch_add(data.len() as u64, Ordering::Relaxed);
                }
            }
            Poll::Ready(Some(Err(e))) if client_left(e) => {
                self.left.store(true, Ordering::Relaxed);
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that counts the bytes it passes and carries the request's [`Tracker`],
/// which records when the body is dropped.
struct Tracked {
    inner: Body,
    tracker: Tracker,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.tracker.sent += data.len() as u64;
                }
                if this.inner.is_end_stream() {
                    this.tracker.finished = true;
                }
            }
            Poll::Ready(None) => this.tracker.finished = true,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        // An empty body (a 204, a HEAD, most refusals) may never be polled, and hyper stops
        // at the Content-Length without the poll that would find the end.
        let t = &mut self.tracker;
        if self.inner.is_end_stream() || t.bodiless || t.length == Some(t.sent) {
            t.finished = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(method: Method, path: &str) -> (&'static str, String) {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let (s, o) = classify(&method, (path, query), &S3Op::default());
        (s, o.to_string())
    }

    #[test]
    fn operations_come_from_fixed_lists() {
        let cases = [
            (
                Method::PUT,
                "/v1/objects/b/k/deep/key",
                ("native", "put_object"),
            ),
            (Method::GET, "/v1/objects/b", ("native", "list_objects")),
            (Method::HEAD, "/v1/objects/b/k", ("native", "head_object")),
            (Method::POST, "/v1/fences/b/k", ("native", "advance_fence")),
            (Method::POST, "/v1/leases/nightly", ("leases", "acquire")),
            (Method::DELETE, "/admin/leases/x", ("admin", "revoke_lease")),
            (Method::GET, "/admin/leases/x", ("admin", "get_lease")),
            (Method::GET, "/admin/leases/x/y", ("admin", "other")),
            (Method::GET, "/admin/status", ("admin", "status")),
            (Method::GET, "/admin/fences/b", ("admin", "list_fences")),
            (
                Method::GET,
                "/admin/fences/b/k/deep",
                ("admin", "get_fence"),
            ),
            (
                Method::POST,
                "/admin/fences/b/k?advance_to=9",
                ("admin", "advance_fence"),
            ),
            (
                Method::POST,
                "/admin/fences/b/k?reset_to=3",
                ("admin", "reset_fence"),
            ),
            (
                Method::POST,
                "/admin/fences/b/k?advance_to=9&reset_to=3",
                ("admin", "other"),
            ),
            (
                Method::POST,
                "/admin/fences/b/k?reset%5Fto=3",
                ("admin", "reset_fence"),
            ),
            (Method::GET, "/readyz", ("health", "readyz")),
            (Method::GET, "/metrics", ("admin", "metrics")),
            (Method::PATCH, "/v1/objects/b/k", ("native", "other")),
            (Method::GET, "/some-bucket/a/key", ("other", "no_route")),
        ];
        for (method, path, (surface, operation)) in cases {
            assert_eq!(op(method, path), (surface, operation.to_string()), "{path}");
        }
        let s3 = S3Op::default();
        let mut ext = http::Extensions::new();
        ext.insert(s3.clone());
        S3Op::handed(&ext);
        assert_eq!(
            classify(&Method::GET, ("/b/k", ""), &s3).1.to_string(),
            "unknown"
        );
        S3Op::resolved(&ext, "GetObject");
        let (surface, operation) = classify(&Method::GET, ("/b/k", ""), &s3);
        assert_eq!(
            (surface, operation.to_string().as_str()),
            ("s3", "GetObject")
        );
    }
}
