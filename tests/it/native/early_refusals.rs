//! An early refusal (a stale token answered before the body is read) leaves its connection in a
//! defined state on both surfaces, when the client pipelines as botocore does: `Expect:
//! 100-continue` with the body in the same write, then the next request on the same
//! connection. A small unread body is drained and the connection carries on; a large one gets
//! `Connection: close`, the answer arrives whole, and the connection ends. The next request is
//! never parsed from leftover body bytes, and the refused write changes nothing.

use crate::common;
use common::Server;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// Reads one final answer (skipping `100 Continue`): its status, whether it says
/// `Connection: close`, and its body.
fn answer(r: &mut BufReader<TcpStream>) -> (u16, bool, Vec<u8>) {
    loop {
        let mut status = String::new();
        r.read_line(&mut status).unwrap();
        let code: u16 = status
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        let (mut close, mut length) = (false, 0usize);
        loop {
            let mut line = String::new();
            r.read_line(&mut line).unwrap();
            let line = line.trim_end().to_ascii_lowercase();
            if line.is_empty() {
                break;
            }
            close |= line == "connection: close";
            if let Some(v) = line.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        if (100..200).contains(&code) {
            continue;
        }
        let mut body = vec![0; length];
        r.read_exact(&mut body).unwrap();
        return (code, close, body);
    }
}

fn refused_then_follow_up(addr: std::net::SocketAddr, path: &str, size: usize) {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut w = stream.try_clone().unwrap();
    let mut r = BufReader::new(stream);
    let mut request = format!(
        "PUT {path} HTTP/1.1\r\nHost: x\r\nFencing-Token: 3\r\nContent-Length: {size}\r\nExpect: 100-continue\r\n\r\n"
    )
    .into_bytes();
    request.extend(std::iter::repeat_n(b'z', size));
    // A server that closes early may reset the rest of the write: what it answered is read.
    let _ = w.write_all(&request);
    let (status, close, body) = answer(&mut r);
    assert_eq!(status, 409, "{}", String::from_utf8_lossy(&body));
    if close {
        // The answer said the connection ends, and it ends right after the answer.
        let mut rest = Vec::new();
        let _ = r.read_to_end(&mut rest);
        assert!(rest.is_empty(), "bytes after a closing answer: {rest:?}");
        assert!(size > 64 * 1024, "a small body is drained, not closed on");
        return;
    }
    w.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let (status, _, body) = answer(&mut r);
    assert_eq!(
        status,
        200,
        "the follow-up on a kept connection: {}",
        String::from_utf8_lossy(&body)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_refusal_leaves_its_connection_defined() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = common::client();
    for path in ["/v1/objects/default/k", "/default/k"] {
        let put = c
            .put(s.url(path))
            .header("Fencing-Token", "5")
            .body("kept")
            .send()
            .await
            .unwrap();
        assert!(put.status().is_success());
    }
    let addr = s.addr;
    tokio::task::spawn_blocking(move || {
        for path in ["/v1/objects/default/k", "/default/k"] {
            for size in [10, 60 * 1024, 64 * 1024 + 1, 1 << 20, 4 << 20] {
                for _ in 0..20 {
                    refused_then_follow_up(addr, path, size);
                }
            }
        }
    })
    .await
    .unwrap();
    // Nothing of the refused writes landed.
    let (status, body) = common::get_bytes(&c, &s.url("/v1/objects/default/k")).await;
    assert_eq!((status, body.as_slice()), (200, b"kept".as_slice()));
}
