//! The client never follows a redirect, and prints no secret: against a stand-in server that
//! grants a lease (with its secret and S3 credentials) and answers everything else with a 307
//! to a second listener, which records whether anything reached it.

use fencegate_client::{AcquireOptions, Client, Error, Lease};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

const LEASE_SECRET: &str = "lease-secret-never-printed-4242";
const S3_SECRET: &str = "s3-secret-never-printed-1717";
const KEY_SECRET: &str = "key-secret-never-printed-0303";

/// A listener that only records whether a connection arrived; it answers nothing.
fn elsewhere() -> (String, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let reached = Arc::new(AtomicBool::new(false));
    let flag = reached.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            flag.store(true, Ordering::SeqCst);
            drop(conn);
        }
    });
    (url, reached)
}

/// Reads one request (its head and a `Content-Length` body); returns its method and path.
fn read_request(conn: &mut BufReader<TcpStream>) -> Option<(String, String)> {
    let mut line = String::new();
    conn.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut length = 0;
    loop {
        let mut header = String::new();
        if conn.read_line(&mut header).ok()? == 0 || header == "\r\n" {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            if name.eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok()?;
            }
        }
    }
    let mut body = vec![0; length];
    conn.read_exact(&mut body).ok()?;
    Some((method, path))
}

/// The stand-in: an acquire (`POST /v1/leases/...`) is granted; every other request is sent
/// on to `target` with a 307, as a hijacked or misconfigured endpoint might.
fn redirecting(target: &str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let target = target.to_string();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            let target = target.clone();
            std::thread::spawn(move || {
                let mut conn = BufReader::new(conn);
                while let Some((method, path)) = read_request(&mut conn) {
                    let answer = if method == "POST" && path.starts_with("/v1/leases/") {
                        let grant = serde_json::json!({
                            "token": 7, "ttl_ms": 60_000, "expires_at_ms": 1,
                            "scope": "object:default/k", "lease_secret": LEASE_SECRET,
                            "s3_credentials": {
                                "access_key_id": "FGLEASE", "secret_access_key": S3_SECRET,
                                "bucket": "default", "scope": "object:default/k",
                            },
                        })
                        .to_string();
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{grant}",
                            grant.len()
                        )
                    } else {
                        format!(
                            "HTTP/1.1 307 Temporary Redirect\r\nLocation: {target}{path}\r\nContent-Length: 0\r\n\r\n"
                        )
                    };
                    if conn.get_mut().write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    url
}

/// The lease `name`, bound to default/k with S3 credentials, as the stand-in grants it.
async fn granted(fg: &Client, name: &str) -> Lease {
    let options = AcquireOptions::default()
        .bind("default", "k")
        .s3_credentials();
    fg.acquire(name, "w1", Duration::from_secs(60), options)
        .await
        .expect("the stand-in grants the acquire")
}

fn assert_redirected(result: Result<impl std::fmt::Debug, Error>, location: &str) {
    let e = result.expect_err("a 307 is an error");
    let Error::Redirected {
        status,
        location: got,
    } = &e
    else {
        panic!("a 307 must be Error::Redirected naming {location}: {e:?}");
    };
    assert_eq!((*status, got.as_str()), (307, location));
    let text = format!("{e} {e:?}");
    assert!(
        text.contains(location),
        "the error names the Location: {text}"
    );
    for secret in [LEASE_SECRET, S3_SECRET, KEY_SECRET] {
        assert!(!text.contains(secret), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_is_an_error_and_nothing_follows_it() {
    let (target, reached) = elsewhere();
    let base = redirecting(&target);
    let fg = Client::new(&base)
        .with_key("AKIDREDIRECT", KEY_SECRET)
        .with_timeout(Duration::from_secs(5));

    assert_redirected(
        fg.put("default", "k", 7, "object bytes").await,
        &format!("{target}/v1/objects/default/k"),
    );
    assert_redirected(
        fg.get("default", "k").await,
        &format!("{target}/v1/objects/default/k"),
    );
    assert_redirected(
        fg.advance("default", "k", 8).await,
        &format!("{target}/v1/fences/default/k"),
    );

    let lease = granted(&fg, "job").await;
    assert_eq!(lease.secret(), LEASE_SECRET);
    assert_redirected(
        lease.put("default", "k", "object bytes").await,
        &format!("{target}/v1/objects/default/k"),
    );
    assert_redirected(
        lease.delete("default", "k").await,
        &format!("{target}/v1/objects/default/k"),
    );
    // The release carries the lease's secret in its body: the call the audit saw re-sent.
    assert_redirected(lease.release().await, &format!("{target}/v1/leases/job"));

    // Had any of them been followed, the second listener would have seen a connection by now.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !reached.load(Ordering::SeqCst),
        "a request followed the redirect to {target}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_output_holds_no_secret() {
    let (target, _) = elsewhere();
    let base = redirecting(&target);
    let fg = Client::new(&base).with_key("AKIDDEBUG", KEY_SECRET);
    let lease = granted(&fg, "shown").await;
    let creds = lease.s3_credentials().expect("asked for").clone();
    assert_eq!(creds.secret_access_key, S3_SECRET);
    let shown = [
        format!("{creds:?}"),
        format!("{creds:#?}"),
        format!("{lease:?}"),
        format!("{fg:?}"),
    ];
    assert!(shown[0].contains("FGLEASE"), "{}", shown[0]);
    assert!(shown[2].contains("shown"), "{}", shown[2]);
    assert!(shown[3].contains("AKIDDEBUG"), "{}", shown[3]);
    for text in &shown {
        for secret in [LEASE_SECRET, S3_SECRET, KEY_SECRET] {
            assert!(!text.contains(secret), "{secret} printed in {text}");
        }
    }
}
