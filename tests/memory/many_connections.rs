//! Ten thousand concurrent connections: fencegate keeps serving, its memory stays bounded, and
//! nothing is written.

use crate::common;
use common::{client, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CONNECTIONS: usize = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_connections_are_served_in_bounded_memory() {
    // SAFETY: reads and writes only the struct passed in.
    let limit = unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        lim.rlim_cur as usize
    };
    assert!(
        limit > CONNECTIONS + 100,
        "this test needs {} open files; the hard limit here is {limit} (raise it with ulimit -Hn)",
        CONNECTIONS + 100
    );
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let mut open = Vec::with_capacity(CONNECTIONS);
    for i in 0..CONNECTIONS {
        let mut conn = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        // Half send a complete request and keep the connection; half stall mid-headers.
        let request = if i % 2 == 0 {
            format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", s.addr)
        } else {
            "PUT /v1/objects/default/k HTTP/1.1\r\nFencing-Token: 1\r\n".to_string()
        };
        conn.write_all(request.as_bytes()).await.unwrap();
        open.push(conn);
    }
    let mut answered = 0;
    for conn in open.iter_mut().step_by(2) {
        let mut buf = [0u8; 64];
        let n = conn.read(&mut buf).await.unwrap();
        assert!(
            buf[..n].starts_with(b"HTTP/1.1 200"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        answered += 1;
    }
    assert_eq!(answered, CONNECTIONS / 2);
    // With all of them open, a new client is still served.
    let c = client();
    assert_eq!(
        c.get(s.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16(),
        200
    );
    let peak = s.peak_rss_kib();
    eprintln!("peak RSS with {CONNECTIONS} connections: {peak} KiB");
    assert!(peak < 512 * 1024, "peak RSS {peak} KiB");
    drop(open);
    assert!(
        common::fence(&c, &s, "default", "k").await["highest"].is_null(),
        "nothing was written"
    );
}

/// `[server] max_connections`: past it, new clients wait in the backlog (nothing refused, no
/// descriptor spent), and are served as soon as a connection closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_max_connections_new_clients_wait_their_turn() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(
        &dir.path().join("data"),
        Some("[server]\nmax_connections = 2\n"),
    );
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut conn = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        conn.write_all(format!("GET /healthz HTTP/1.1\r\nHost: {}\r\n\r\n", s.addr).as_bytes())
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let n = conn.read(&mut buf).await.unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        held.push(conn);
    }
    let c = reqwest::Client::builder()
        .timeout(std::time::Duration::from_millis(800))
        .build()
        .unwrap();
    assert!(
        c.get(s.url("/healthz")).send().await.is_err(),
        "a third client waits"
    );
    assert_eq!(s.log_lines(&["connection limit is reached"]).len(), 1);
    held.pop();
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    let resp = client().get(s.url("/healthz")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
}
