//! A misbehaving S3 store for tests: an HTTP proxy in front of a store that can drop the
//! conditional headers (a store that accepts If-Match and ignores it), throttle writes, refuse
//! them, or apply a conditional write and then never answer (a commit whose outcome is
//! unknown).

use axum::body::Body;
use axum::extract::{Request, State};
use axum::response::Response;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
#[repr(u8)]
pub enum Mode {
    Pass = 0,
    /// Remove If-Match / If-None-Match before forwarding.
    DropConditions = 1,
    /// Answer every PUT with 503 SlowDown.
    ThrottleWrites = 2,
    /// Forward conditional writes, then hold the response forever.
    StallConditionalWrites = 3,
    /// Hold conditional writes forever without forwarding them.
    SwallowConditionalWrites = 4,
    /// Hold conditional writes (not forwarded yet) until [`S3Proxy::release`]: a commit
    /// paused between its intent and the store, as a paused instance's would be.
    HoldConditionalWrites = 5,
    /// As `HoldThenDropConditions`, then forwarded without their conditions and without a
    /// presigned request's signature and expiry (a negative control: a store that ignores
    /// conditions and deadlines; ministack accepts unsigned requests).
    HoldAndDropConditions = 6,
    /// Answer every PUT (PutObject, UploadPart) with the ETag of other bytes: a store that
    /// kept something else than it was sent.
    WrongPutEtags = 7,
    /// Answer every PUT with 400 KeyTooLongError: a store refusing what the request carried.
    RefusePuts = 8,
    /// Answer every PUT with 403 AccessDenied: a store refusing fencegate itself.
    DenyPuts = 9,
    /// Hold every request forever without forwarding it: a stopped store (SIGSTOP).
    SwallowAll = 10,
    /// Judge a conditional PutObject by a HEAD, wait a little, then forward it without its
    /// conditions: right for one request at a time, wrong for two at once (a check, then a
    /// write, with no lock between them).
    CheckThenWrite = 11,
    /// Answer 412 to each conditional PutObject of the probe's racers (their bodies begin
    /// `fencegate probe race, writer`), whatever the object: no writer wins a race.
    RefuseRacingPuts = 12,
    /// Answer every UploadPart 503: a store failing in the middle of a multipart upload.
    FailUploadParts = 13,
    /// Forward every request after 150 ms: a slow store, for interrupting what runs on it.
    Slow = 14,
    /// Answer every PUT, HEAD and DELETE of an object with 307 to the same key with
    /// `-elsewhere` appended, on the store itself: a redirect that a client following it
    /// would obey by writing (or reading) another key.
    RedirectObjects = 15,
    /// As `HoldConditionalWrites` (presigned writes too, conditional or not), then forwarded
    /// without their conditions but signed as sent: a paused instance's request reaching a
    /// store that ignores conditions and refuses expired presigned requests.
    HoldThenDropConditions = 16,
    /// UploadPart 1 is refused (400) after 300 ms; every other UploadPart is read whole, then
    /// reaches the store a second later whether or not its sender is still there, as a store
    /// goes on with a request it has received. Those that reach it after the upload's abort
    /// are counted ([`S3Proxy::parts_after_abort`]).
    LateUploadParts = 17,
}

pub struct S3Proxy {
    pub port: u16,
    mode: Arc<AtomicU8>,
    held: Arc<std::sync::atomic::AtomicUsize>,
    release: tokio::sync::watch::Sender<bool>,
    late: Arc<LateParts>,
}

/// What [`Mode::LateUploadParts`] saw: whether an upload was aborted, and how many parts
/// reached the store after that.
#[derive(Default)]
struct LateParts {
    aborted: std::sync::atomic::AtomicBool,
    after_abort: std::sync::atomic::AtomicUsize,
}

impl S3Proxy {
    pub async fn start(upstream: String) -> S3Proxy {
        let mode = Arc::new(AtomicU8::new(Mode::Pass as u8));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (release, released) = tokio::sync::watch::channel(false);
        let late = Arc::new(LateParts::default());
        let state = ProxyState {
            upstream,
            mode: mode.clone(),
            client: reqwest::Client::new(),
            held: held.clone(),
            released,
            late: late.clone(),
        };
        let app = axum::Router::new().fallback(forward).with_state(state);
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        S3Proxy {
            port,
            mode,
            held,
            release,
            late,
        }
    }

    /// [`Mode::LateUploadParts`]: the parts that reached the store after an abort.
    pub fn parts_after_abort(&self) -> usize {
        self.late.after_abort.load(Ordering::SeqCst)
    }

    /// How many conditional writes [`Mode::HoldConditionalWrites`] holds now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::SeqCst)
    }

    /// Forwards every held write (and stops holding).
    pub fn release(&self) {
        self.set(Mode::Pass);
        let _ = self.release.send(true);
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }
}

#[derive(Clone)]
struct ProxyState {
    upstream: String,
    mode: Arc<AtomicU8>,
    client: reqwest::Client,
    held: Arc<std::sync::atomic::AtomicUsize>,
    released: tokio::sync::watch::Receiver<bool>,
    late: Arc<LateParts>,
}

async fn forward(State(state): State<ProxyState>, req: Request) -> Response {
    let of_upload = req.uri().query().unwrap_or("").contains("uploadId");
    if state.mode.load(Ordering::SeqCst) == Mode::LateUploadParts as u8 && of_upload {
        return late_upload_part(state, req).await;
    }
    let ProxyState {
        upstream,
        mode,
        client,
        held,
        mut released,
        late: _,
    } = state;
    let mode = mode.load(Ordering::SeqCst);
    let conditional =
        req.headers().contains_key("if-match") || req.headers().contains_key("if-none-match");
    // A cluster-mode commit or delete is presigned; on a store that ignores conditions it
    // carries none, and is held all the same.
    let presigned = req.uri().query().unwrap_or("").contains("X-Amz-Expires");
    let hold = match mode {
        m if m == Mode::HoldConditionalWrites as u8 => conditional,
        m if m == Mode::HoldAndDropConditions as u8 || m == Mode::HoldThenDropConditions as u8 => {
            conditional || presigned
        }
        _ => false,
    };
    if hold && req.method() != "GET" && req.method() != "HEAD" {
        held.fetch_add(1, Ordering::SeqCst);
        let _ = released.wait_for(|r| *r).await;
        held.fetch_sub(1, Ordering::SeqCst);
    }
    if mode == Mode::ThrottleWrites as u8 && req.method() == "PUT" {
        return Response::builder()
            .status(503)
            .body(Body::from("<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"))
            .unwrap();
    }
    if (mode == Mode::RefusePuts as u8 || mode == Mode::DenyPuts as u8) && req.method() == "PUT" {
        let (status, code) = if mode == Mode::RefusePuts as u8 {
            (400, "KeyTooLongError")
        } else {
            (403, "AccessDenied")
        };
        return Response::builder()
            .status(status)
            .header("content-type", "application/xml")
            .body(Body::from(format!(
                "<Error><Code>{code}</Code><Message>refused by the test proxy</Message></Error>"
            )))
            .unwrap();
    }
    if mode == Mode::SwallowAll as u8
        || (mode == Mode::SwallowConditionalWrites as u8 && conditional)
    {
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    }
    let upload = req.uri().query().unwrap_or("").contains("uploadId");
    let object_call = ["PUT", "HEAD", "DELETE"].contains(&req.method().as_str());
    if mode == Mode::RedirectObjects as u8 && object_call && !upload {
        return Response::builder()
            .status(307)
            .header(
                "location",
                format!("{upstream}{}-elsewhere", req.uri().path()),
            )
            .body(Body::empty())
            .unwrap();
    }
    if mode == Mode::Slow as u8 {
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
    }
    if mode == Mode::FailUploadParts as u8 && req.method() == "PUT" && upload {
        return Response::builder()
            .status(503)
            .body(Body::from("<Error><Code>ServiceUnavailable</Code><Message>failed by the test proxy</Message></Error>"))
            .unwrap();
    }
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    if mode == Mode::RefuseRacingPuts as u8
        && conditional
        && parts.method == "PUT"
        && body.starts_with(b"fencegate probe race, writer")
    {
        return Response::builder()
            .status(412)
            .header("content-type", "application/xml")
            .body(Body::from("<Error><Code>PreconditionFailed</Code><Message>refused by the test proxy</Message></Error>"))
            .unwrap();
    }
    let req = Request::from_parts(parts, Body::from(body));
    // A PutObject (a PUT without uploadId) or a CompleteMultipartUpload (a POST with one).
    let check_then_write = mode == Mode::CheckThenWrite as u8
        && conditional
        && ((req.method() == "PUT" && !upload) || (req.method() == "POST" && upload));
    if check_then_write {
        let head = client
            .head(format!("{upstream}{}", req.uri().path()))
            .send()
            .await
            .unwrap();
        let current = head
            .headers()
            .get("etag")
            .map(|e| e.to_str().unwrap().to_string());
        let met = match (req.headers().get("if-match"), head.status().is_success()) {
            (Some(want), true) => current.as_deref() == want.to_str().ok(),
            (Some(_), false) => false,
            (None, exists) => !exists,
        };
        if !met {
            return Response::builder()
                .status(412)
                .header("content-type", "application/xml")
                .body(Body::from("<Error><Code>PreconditionFailed</Code><Message>At least one of the pre-conditions you specified did not hold</Message></Error>"))
                .unwrap();
        }
        tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    }
    let unsign = mode == Mode::HoldAndDropConditions as u8;
    let query = req.uri().query().map(|q| {
        q.split('&')
            .filter(|p| !(unsign && p.to_ascii_lowercase().starts_with("x-amz-")))
            .collect::<Vec<_>>()
            .join("&")
    });
    let url = match query.filter(|q| !q.is_empty()) {
        Some(q) => format!("{upstream}{}?{q}", req.uri().path()),
        None => format!("{upstream}{}", req.uri().path()),
    };
    let req_method = req.method().clone();
    let mut out = client.request(req.method().clone(), url);
    for (name, value) in req.headers() {
        // The Host header stays: a presigned request signs it.
        let drop = (mode == Mode::DropConditions as u8
            || mode == Mode::HoldAndDropConditions as u8
            || mode == Mode::HoldThenDropConditions as u8
            || check_then_write)
            && (name == "if-match" || name == "if-none-match");
        if !drop {
            out = out.header(name, value);
        }
    }
    let body = axum::body::to_bytes(req.into_body(), usize::MAX)
        .await
        .unwrap();
    let resp = out.body(body).send().await.unwrap();
    if mode == Mode::StallConditionalWrites as u8 && conditional {
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    }
    let mut builder = Response::builder().status(resp.status().as_u16());
    let wrong_etag = mode == Mode::WrongPutEtags as u8 && req_method == "PUT";
    for (name, value) in resp.headers() {
        if wrong_etag && name == "etag" {
            builder = builder.header(name, "\"0123456789abcdef0123456789abcdef\"");
        } else {
            builder = builder.header(name, value);
        }
    }
    builder
        .body(Body::from(resp.bytes().await.unwrap()))
        .unwrap()
}

/// [`Mode::LateUploadParts`], for a request of a multipart upload.
async fn late_upload_part(state: ProxyState, req: Request) -> Response {
    let query = req.uri().query().unwrap_or("").to_string();
    let url = format!("{}{}?{query}", state.upstream, req.uri().path());
    let method = req.method().clone();
    let headers = req.headers().clone();
    let body = axum::body::to_bytes(req.into_body(), usize::MAX)
        .await
        .unwrap();
    let part = method == "PUT";
    if method == "DELETE" {
        state.late.aborted.store(true, Ordering::SeqCst);
    }
    if part && query.split('&').any(|p| p == "partNumber=1") {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        return Response::builder()
            .status(400)
            .header("content-type", "application/xml")
            .body(Body::from("<Error><Code>InvalidArgument</Code><Message>refused by the test proxy</Message></Error>"))
            .unwrap();
    }
    // Spawned: the store goes on with a request it has received, whether or not its sender
    // is still there.
    let task = tokio::spawn(async move {
        if part {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
        let mut out = state.client.request(method, url);
        for (name, value) in &headers {
            out = out.header(name, value);
        }
        let resp = out.body(body).send().await.unwrap();
        if part && state.late.aborted.load(Ordering::SeqCst) {
            state.late.after_abort.fetch_add(1, Ordering::SeqCst);
        }
        let mut builder = Response::builder().status(resp.status().as_u16());
        for (name, value) in resp.headers() {
            builder = builder.header(name, value);
        }
        builder
            .body(Body::from(resp.bytes().await.unwrap()))
            .unwrap()
    });
    task.await.unwrap()
}
