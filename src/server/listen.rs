//! The accept loop every listener runs: TCP, then TLS when `[server.tls]` is set, then HTTP/1.1
//! with hyper, serving an axum router. On shutdown it stops accepting and lets the connections
//! in flight finish their requests. A connection fencegate closes lingers (`linger.rs`).

use super::linger::Lingering;
use super::tls::Tls;
use crate::shutdown::Shutdown;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// A client that opens a connection and never finishes its TLS handshake is cut off.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest wait for a request's head, and between requests on a kept-alive connection.
const HEADER_TIMEOUT: Duration = Duration::from_secs(60);
/// The first byte of every TLS connection (a handshake record).
const TLS_HANDSHAKE: u8 = 0x16;

/// What every listener shares: the connection budget and the shutdown grace.
#[derive(Clone)]
pub struct Limits {
    /// One permit per open connection, over every listener.
    pub connections: Arc<Semaphore>,
    /// How long a shutdown waits for the requests in flight. Past it the process exits
    /// anyway: a commit cut short is a crash, which the commit protocol survives, and a client
    /// trickling its body cannot hold a shutdown for as long as it likes.
    pub grace: Duration,
    /// The most a connection's read buffer may hold: the headers must fit (so it follows
    /// `[server] max_header_bytes`), and a body streams through it. hyper's own default (about
    /// 400 KiB) held 80 MiB for 200 concurrent uploads (BENCHMARKS.md, S9).
    pub read_buffer: usize,
}

impl Limits {
    /// The read buffer for a header limit: twice the limit, so that headers over it still
    /// reach fencegate's own 431 with its explanation; only past twice the limit does hyper
    /// answer a bare 431.
    pub fn read_buffer_for(max_header_bytes: usize) -> usize {
        max_header_bytes.saturating_mul(2).max(64 * 1024)
    }
}

/// Serves `router` on `listener` until the shutdown starts, then waits up to the grace for
/// the requests in flight.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Tls>,
    shutdown: Shutdown,
    limits: Limits,
) {
    let graceful = GracefulShutdown::new();
    let shutdown = shutdown.requested();
    tokio::pin!(shutdown);
    // Accept failures (out of descriptors, say) and a full connection budget are logged at
    // most every 10 s, with a count.
    let mut failed_since_log = 0u64;
    let mut last_log: Option<std::time::Instant> = None;
    let mut last_full_log: Option<std::time::Instant> = None;
    loop {
        // A connection budget spent: stop accepting (clients wait in the backlog) rather than
        // run out of descriptors, which would also stop the commits' own files.
        let permit = match limits.connections.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                if last_full_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                    tracing::warn!("the connection limit is reached ([server] max_connections); new clients wait until a connection closes");
                    last_full_log = Some(std::time::Instant::now());
                }
                tokio::select! {
                    p = limits.connections.clone().acquire_owned() => p.expect("the semaphore is never closed"),
                    _ = &mut shutdown => break,
                }
            }
        };
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(pair) => pair,
                Err(e) => {
                    failed_since_log += 1;
                    if last_log.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                        tracing::warn!(error = %e, failures = failed_since_log, "accept failed; if the error is \"Too many open files\", raise the descriptor limit (ulimit -n, LimitNOFILE)");
                        failed_since_log = 0;
                        last_log = Some(std::time::Instant::now());
                    }
                    // Back off rather than spin.
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let router = router.clone();
        let watcher = graceful.watcher();
        let tls = tls.as_ref().map(Tls::acceptor);
        let read_buffer = limits.read_buffer;
        tokio::spawn(async move {
            match tls {
                None => {
                    let stream = Lingering::new(stream, permit);
                    serve_connection(TokioIo::new(stream), (router, peer), watcher, read_buffer)
                        .await
                }
                Some(acceptor) => {
                    if !speaks_tls(&stream).await {
                        refuse_plain_http(stream).await;
                        drop(permit);
                        return;
                    }
                    let stream = Lingering::new(stream, permit);
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let io = TokioIo::new(tls);
                            serve_connection(io, (router, peer), watcher, read_buffer).await
                        }
                        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                    }
                }
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(limits.grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            grace_secs = limits.grace.as_secs(),
            "requests still in flight after the shutdown grace ([server] shutdown_grace_secs); stopping anyway"
        );
    }
}

/// Serves one connection's requests, each told the client's address (its log span's
/// `client`).
async fn serve_connection<I>(
    io: TokioIo<I>,
    (router, peer): (Router, std::net::SocketAddr),
    watcher: Watcher,
    read_buffer: usize,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .max_buf_size(read_buffer);
    let service = tower::util::MapRequest::new(
        router,
        move |mut req: http::Request<hyper::body::Incoming>| {
            req.extensions_mut().insert(crate::http::ClientAddr(peer));
            req
        },
    );
    let conn = builder.serve_connection(io, TowerToHyperService::new(service));
    if let Err(e) = watcher.watch(conn).await {
        if e.is_parse() {
            // hyper answered it itself (400, 414 or 431) before any layer saw a request.
            crate::metrics::http::unparsed(peer, &e);
        } else {
            tracing::debug!(error = %e, "connection ended with an error");
        }
    }
}

/// Does the client start a TLS handshake? (Waits for its first byte, within the timeout.)
async fn speaks_tls(stream: &TcpStream) -> bool {
    let mut first = [0u8; 1];
    matches!(
        tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut first)).await,
        Ok(Ok(1)) if first[0] == TLS_HANDSHAKE
    )
}

/// A plain-HTTP request on a TLS port gets an answer that says what to do, then the
/// connection is closed; nothing of it reaches a handler.
async fn refuse_plain_http(mut stream: TcpStream) {
    let body =
        "{\"error\":\"TlsRequired\",\"message\":\"this port speaks TLS only; use https://\"}\n";
    let answer = format!(
        "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.write_all(answer.as_bytes())).await;
    let _ = stream.shutdown().await;
}
