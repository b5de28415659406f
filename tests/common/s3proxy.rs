//! A misbehaving S3 store for tests: an HTTP proxy in front of moto that can drop the
//! conditional headers (a store that accepts If-Match and ignores it), throttle writes, or
//! apply a conditional write and then never answer (a commit whose outcome is unknown).

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
}

pub struct S3Proxy {
    pub port: u16,
    mode: Arc<AtomicU8>,
}

impl S3Proxy {
    pub async fn start(upstream: String) -> S3Proxy {
        let mode = Arc::new(AtomicU8::new(Mode::Pass as u8));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = (upstream, mode.clone(), reqwest::Client::new());
        let app = axum::Router::new().fallback(forward).with_state(state);
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        S3Proxy { port, mode }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }
}

type ProxyState = (String, Arc<AtomicU8>, reqwest::Client);

async fn forward(State((upstream, mode, client)): State<ProxyState>, req: Request) -> Response {
    let mode = mode.load(Ordering::SeqCst);
    let conditional =
        req.headers().contains_key("if-match") || req.headers().contains_key("if-none-match");
    if mode == Mode::ThrottleWrites as u8 && req.method() == "PUT" {
        return Response::builder()
            .status(503)
            .body(Body::from("<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"))
            .unwrap();
    }
    if mode == Mode::SwallowConditionalWrites as u8 && conditional {
        tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
    }
    let url = format!(
        "{upstream}{}",
        req.uri().path_and_query().map_or("/", |p| p.as_str())
    );
    let mut out = client.request(req.method().clone(), url);
    for (name, value) in req.headers() {
        let drop = name == "host"
            || (mode == Mode::DropConditions as u8
                && (name == "if-match" || name == "if-none-match"));
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
    for (name, value) in resp.headers() {
        builder = builder.header(name, value);
    }
    builder
        .body(Body::from(resp.bytes().await.unwrap()))
        .unwrap()
}
