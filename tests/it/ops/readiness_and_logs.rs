//! Operating fencegate (docs/operations.md, "Health and readiness" and "Logs"): `/readyz` on
//! both listeners, 503 naming the broken check while a backend is unusable (an fs bucket
//! directory gone, an s3 store that stops answering) and 200 again once it is back; JSON logs
//! carrying the request span's fields; and SIGTERM letting a request in flight finish before
//! the process exits.

use crate::common;
use common::moto::Moto;
use common::Server;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "admin-bearer-token-for-the-ops-tests-01";

async fn readyz(c: &reqwest::Client, url: &str) -> (u16, String) {
    let resp = c.get(url).send().await.unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Polls `/readyz` until it answers `want` (the background watch and the probe share the
/// checks, but each probe runs them afresh, so this takes one probe unless the store hangs).
async fn readyz_becomes(c: &reqwest::Client, url: &str, want: u16) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (status, body) = readyz(c, url).await;
        if status == want {
            return body;
        }
        assert!(Instant::now() < deadline, "{url}: still {status}: {body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn readyz_names_an_unusable_fs_bucket_and_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let admin_port = common::moto::free_port();
    let config = format!(
        "[admin]\nlisten = \"127.0.0.1:{admin_port}\"\nbearer_token_file = \"{}\"\n",
        token_file.display()
    );
    let data = dir.path().join("data");
    let s = Server::start(&data, Some(&config));
    let c = common::client();
    let admin = format!("http://127.0.0.1:{admin_port}");
    // Unauthenticated on both listeners, as /healthz; /metrics next to it is not.
    assert_eq!(readyz(&c, &s.url("/readyz")).await, (200, "ok\n".into()));
    assert_eq!(
        readyz(&c, &format!("{admin}/readyz")).await,
        (200, "ok\n".into())
    );
    assert_eq!(
        c.get(format!("{admin}/metrics"))
            .send()
            .await
            .unwrap()
            .status(),
        401
    );

    let bucket_dir = data.join("objects").join("default");
    let away = data.join("objects").join("moved-away");
    std::fs::rename(&bucket_dir, &away).unwrap();
    std::fs::write(&bucket_dir, b"not a directory").unwrap();
    for url in [s.url("/readyz"), format!("{admin}/readyz")] {
        let (status, body) = readyz(&c, &url).await;
        assert_eq!(status, 503, "{body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "unready");
        let failed = v["failed"].as_array().unwrap();
        assert_eq!(failed.len(), 1, "{body}");
        assert_eq!(failed[0]["check"], "bucket:default");
        assert!(failed[0]["backend"].is_string(), "{body}");
        let error = failed[0]["error"].as_str().unwrap();
        assert!(error.contains("is not a directory"), "{error}");
        let fence = v["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["check"] == "fence_table")
            .unwrap();
        assert_eq!(fence["ok"], true, "{body}");
    }
    // The gauge follows the probe.
    let metrics = c
        .get(format!("{admin}/metrics"))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("fencegate_ready{check=\"bucket:default\"} 0"),
        "{metrics}"
    );

    std::fs::remove_file(&bucket_dir).unwrap();
    std::fs::rename(&away, &bucket_dir).unwrap();
    assert_eq!(readyz(&c, &s.url("/readyz")).await, (200, "ok\n".into()));
}

#[tokio::test]
async fn readyz_fails_while_the_s3_store_hangs_and_recovers() {
    let moto = Moto::start();
    moto.create_bucket("fencegate-ready").await;
    let config = format!(
        "[backends.store]\nkind = \"s3\"\nendpoint = \"{}\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\nunsafe_no_conditional_writes = true\n\n[buckets.default]\nbackend = \"store\"\nbackend_bucket = \"fencegate-ready\"\n",
        moto.endpoint()
    );
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), Some(&config));
    let c = common::client();
    let url = s.url("/readyz");
    assert_eq!(readyz(&c, &url).await, (200, "ok\n".into()));

    // SIGSTOP: the store accepts connections and never answers, the worst case for a probe.
    let pid = moto.pid().unwrap() as i32;
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let started = Instant::now();
    let (status, body) = readyz(&c, &url).await;
    let took = started.elapsed();
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(status, 503, "{body}");
    assert!(took < Duration::from_secs(5), "the probe took {took:?}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["failed"][0]["check"], "bucket:default", "{body}");
    assert_eq!(v["failed"][0]["backend"], "store", "{body}");
    assert!(
        !body.contains("\"test\""),
        "no credentials in the answer: {body}"
    );
    // The abandoned probe is in the backend's metrics too, where an alert on a store's
    // errors looks.
    let metrics = c
        .get(s.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.lines().any(|l| l.starts_with(
            "fencegate_backend_errors_total{backend=\"store\",operation=\"check_ready\",kind=\"timeout\"}"
        ) && !l.ends_with(" 0")),
        "{metrics}"
    );

    readyz_becomes(&c, &url, 200).await;
}

/// Starts the binary with `args` and its stderr collected; returns the child, the address it
/// listens on (read from its JSON log) and the lines so far.
fn start_json(
    data: &std::path::Path,
    args: &[&str],
) -> (
    std::process::Child,
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    let mut child = Command::new(common::binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data)
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let kept = lines.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) {
                let message = v["message"].as_str().unwrap_or("");
                if message.starts_with("fencegate is listening") {
                    let _ = tx.send(v["addr"].as_str().unwrap().parse().unwrap());
                }
            }
            kept.lock().unwrap().push(line);
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("no JSON listening line: {:?}", lines.lock().unwrap()));
    (child, addr, lines)
}

#[tokio::test]
async fn json_logs_carry_the_request_span() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("json.toml");
    std::fs::write(&config, "[server]\nlog_format = \"json\"\n").unwrap();
    let config = config.to_str().unwrap().to_string();
    // The flag, and the configuration file without it.
    let runs: [&[&str]; 2] = [&["--log-format", "json"], &["--config", config.as_str()]];
    for (n, args) in runs.into_iter().enumerate() {
        let (mut child, addr, lines) = start_json(&dir.path().join(format!("data{n}")), args);
        let c = common::client();
        let resp = c
            .put(format!("http://{addr}/v1/objects/default/logged.csv"))
            .header("Fencing-Token", "3")
            .body("x")
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        // The closing line is written as the answer leaves.
        let deadline = Instant::now() + Duration::from_secs(10);
        let served = loop {
            let found = lines
                .lock()
                .unwrap()
                .iter()
                .map(|l| {
                    serde_json::from_str::<serde_json::Value>(l)
                        .unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))
                })
                .find(|v| v["message"] == "served" && v["span"]["method"] == "PUT");
            if let Some(v) = found {
                break v;
            }
            assert!(Instant::now() < deadline, "{:?}", lines.lock().unwrap());
            std::thread::sleep(Duration::from_millis(50));
        };
        child.kill().unwrap();
        child.wait().unwrap();
        let span = &served["span"];
        assert_eq!(span["name"], "request", "{served}");
        assert_eq!(span["path"], "/v1/objects/default/logged.csv", "{served}");
        assert_eq!(span["bucket"], "default", "{served}");
        assert_eq!(span["token"], 3, "{served}");
        assert_eq!(span["outcome"], "accepted", "{served}");
        assert_eq!(
            span["request_id"].as_str().map(str::len),
            Some(16),
            "{served}"
        );
        assert_eq!(served["status"], 200, "{served}");
        // What an access log carries: who asked, the bytes each way, the code, the time.
        assert!(
            span["client"]
                .as_str()
                .is_some_and(|c| c.starts_with("127.0.0.1:")),
            "{served}"
        );
        assert_eq!(served["bytes_in"], 1, "{served}");
        assert!(
            served["bytes_out"].as_u64().is_some_and(|n| n > 0),
            "{served}"
        );
        assert_eq!(served["code"], "none", "{served}");
        assert_eq!(served["aborted"], false, "{served}");
        assert!(served["latency_ms"].as_f64().is_some(), "{served}");
        assert_eq!(served["level"], "INFO", "{served}");
        assert!(served["timestamp"].is_string(), "{served}");
        // Every line, start-up included, is one JSON object.
        for line in lines.lock().unwrap().iter() {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            assert!(v.is_object(), "{line}");
        }
    }
}

#[tokio::test]
async fn sigterm_lets_a_request_in_flight_finish_then_exits() {
    let dir = tempfile::tempdir().unwrap();
    let mut s = Server::start(
        &dir.path().join("data"),
        Some("[server]\nshutdown_grace_secs = 20\n"),
    );
    let mut conn = std::net::TcpStream::connect(s.addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head = format!(
        "PUT /v1/objects/default/draining HTTP/1.1\r\nHost: {}\r\nFencing-Token: 1\r\nContent-Length: 10\r\nConnection: close\r\n\r\nfirst",
        s.addr
    );
    conn.write_all(head.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let signalled = Instant::now();
    unsafe { libc::kill(s.pid() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(700));
    // Still serving the request in flight (new connections are no longer accepted).
    assert!(
        s.wait_exit(Duration::from_millis(100)).is_none(),
        "exited mid-request"
    );
    conn.write_all(b"-half").unwrap();
    let mut answer = String::new();
    conn.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let status = s
        .wait_exit(Duration::from_secs(10))
        .expect("fencegate exited once its last request was answered");
    assert!(status.success(), "{status}");
    assert!(
        signalled.elapsed() < Duration::from_secs(15),
        "it waited for the grace instead of the request"
    );
    assert!(s.log_lines(&["shutdown grace"]).is_empty());
    // The write was committed, not cut short: a restart reads it back.
    drop(s);
    let s = Server::start(&dir.path().join("data"), None);
    let (status, body) =
        common::get_bytes(&common::client(), &s.object_url("default", "draining")).await;
    assert_eq!((status, body.as_slice()), (200, &b"first-half"[..]));
}

/// One request, one id: the text log's span names a single `request_id`, the one the S3
/// gateway answered in `x-amz-request-id`.
#[tokio::test]
async fn the_log_names_the_request_id_the_client_got() {
    let dir = tempfile::tempdir().unwrap();
    let s = common::Server::start(&dir.path().join("data"), None);
    let c = common::client();
    let resp = c.get(s.url("/default/absent-object")).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    let id = resp.headers()["x-amz-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    let lines = s.awaited_log_lines(&["served", "absent-object"], 1);
    let line = &lines[0];
    assert_eq!(line.matches("request_id=").count(), 1, "{line}");
    assert!(line.contains(&format!("request_id={id}")), "{id}: {line}");
}

/// A client's mistakes are no operator's errors: a bad signature, an unknown key, an
/// unimplemented operation and a bad bucket name are each logged once, below ERROR.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_errors_are_not_logged_as_errors() {
    let dir = tempfile::tempdir().unwrap();
    let s = common::Server::start(&dir.path().join("data"), None);
    let bad = common::moto::client_with(&s.url(""), "fencegate", "wrong-secret");
    let unknown = common::moto::client_with(&s.url(""), "nobody", "x");
    let good = common::moto::client_with(&s.url(""), "fencegate", "fencegate-dev-secret");
    assert!(bad
        .list_objects_v2()
        .bucket("default")
        .send()
        .await
        .is_err());
    assert!(unknown
        .list_objects_v2()
        .bucket("default")
        .send()
        .await
        .is_err());
    assert!(good
        .get_bucket_analytics_configuration()
        .bucket("default")
        .id("a")
        .send()
        .await
        .is_err());
    assert!(good
        .create_bucket()
        .bucket("Bad_Name")
        .send()
        .await
        .is_err());
    // The bad signature is audited, naming the key it claimed, as the unknown key is.
    let audited = s.awaited_log_lines(&["fencegate::audit", "S3 authentication failed"], 2);
    assert!(
        audited
            .iter()
            .any(|l| l.contains("SignatureDoesNotMatch") && l.contains("access_key=\"fencegate\"")),
        "{audited:?}"
    );
    // Each was served, and its line is written as the answer leaves.
    let served = s.awaited_log_lines(&["served", "status=4"], 3);
    assert!(served.len() >= 3, "{served:?}");
    let log = s.log.lock().unwrap().clone();
    let errors: Vec<&String> = log.iter().filter(|l| l.contains(" ERROR ")).collect();
    assert!(errors.is_empty(), "{errors:#?}");
}

/// Start-up says what an operator must act on, and nothing else: no warning about a default
/// that was lowered to fit, and no secret in a log line.
#[tokio::test]
async fn start_up_lines_warn_only_about_what_was_set() {
    let dir = tempfile::tempdir().unwrap();
    let s = common::Server::start(&dir.path().join("data"), None);
    let lines = s.awaited_log_lines(&["fencegate is listening"], 1);
    assert_eq!(lines.len(), 1);
    let log = s.log.lock().unwrap().clone();
    for line in &log {
        assert!(!line.contains("fencegate-dev-secret"), "{line}");
        assert!(
            !(line.contains(" WARN ") && line.contains("max_connections")),
            "{line}"
        );
    }
}

/// The access line reads plainly: latency rounded, a lease route's name as `lease=`, and the
/// client's user agent.
#[tokio::test]
async fn the_served_line_names_the_lease_and_the_user_agent() {
    let dir = tempfile::tempdir().unwrap();
    let s = common::Server::start(&dir.path().join("data"), None);
    let c = reqwest::Client::builder()
        .user_agent("worker/1.0")
        .build()
        .unwrap();
    // A user agent that tries to write fields of its own into the line is quoted and escaped.
    let forged_agent = "x\" principal=\"admin\" status=200 \u{202e}";
    let forged = c
        .get(s.url("/v1/objects/default/forged"))
        .header(
            "user-agent",
            reqwest::header::HeaderValue::from_bytes(forged_agent.as_bytes()).unwrap(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 404);
    let lines = s.awaited_log_lines(&["served", "forged"], 1);
    assert!(!lines[0].contains(" principal=\"admin\""), "{}", lines[0]);
    assert!(!lines[0].contains('\u{202e}'), "{}", lines[0]);
    let resp = c
        .post(s.url("/v1/leases/nightly-report"))
        .body(r#"{"holder": "w", "ttl_ms": 60000}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let lines = s.awaited_log_lines(&["served", "nightly-report"], 1);
    let line = &lines[0];
    assert!(
        line.contains("lease=\"nightly-report\"") || line.contains("lease=nightly-report"),
        "{line}"
    );
    assert!(!line.contains("key="), "{line}");
    assert!(line.contains("user_agent=\"worker/1.0\""), "{line}");
    assert!(line.contains("client=127.0.0.1:"), "{line}");
    let latency = line
        .split("latency_ms=")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap();
    let decimals = latency.split('.').nth(1).map_or(0, str::len);
    assert!(decimals <= 3, "{latency}");
}

/// A refusal's access line names its code and the principal, and a download's its bytes, which
/// are counted to the last one sent.
#[tokio::test]
async fn the_served_line_names_the_code_the_principal_and_the_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let s = common::Server::start(&dir.path().join("data"), None);
    let c = common::client();
    let body: &'static [u8] = Box::leak(vec![b'x'; 300_000].into_boxed_slice());
    assert_eq!(
        common::put(&c, &s.object_url("default", "big"), Some("5"), body)
            .await
            .0,
        200
    );
    assert_eq!(
        common::put(&c, &s.object_url("default", "big"), Some("4"), b"late")
            .await
            .0,
        409
    );
    let got = c.get(s.url("/default/big")).send().await.unwrap();
    assert_eq!(got.bytes().await.unwrap().len(), body.len());
    let stale = s.awaited_log_lines(&["served", "status=409"], 1);
    assert!(
        stale[0].contains("code=\"StaleFencingToken\""),
        "{}",
        stale[0]
    );
    let read = s.awaited_log_lines(&["served", "path=/default/big"], 1);
    assert!(read[0].contains("bytes_out=300000"), "{}", read[0]);
    assert!(read[0].contains("principal=\"dev-mode\""), "{}", read[0]);
    assert!(read[0].contains("code=\"none\""), "{}", read[0]);
}

/// One unusable bucket takes `/readyz` down, but `/readyz?bucket=NAME` answers per bucket, so
/// a load balancer in front of the healthy one keeps it; `?verbose` lists every check. Neither
/// body names a path, as they answer anyone.
#[tokio::test]
async fn readiness_per_bucket_and_verbose_name_no_paths() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = "[buckets.default]\n[buckets.healthy]\nfencing = \"optional\"\n";
    let s = Server::start(&data, Some(config));
    let c = common::client();
    assert_eq!(
        readyz(&c, &s.url("/readyz?bucket=healthy")).await,
        (200, "ok\n".into())
    );
    let bucket_dir = data.join("objects").join("default");
    std::fs::rename(&bucket_dir, data.join("objects").join("moved-away")).unwrap();
    std::fs::write(&bucket_dir, b"not a directory").unwrap();
    assert_eq!(readyz(&c, &s.url("/readyz")).await.0, 503);
    assert_eq!(
        readyz(&c, &s.url("/readyz?bucket=healthy")).await,
        (200, "ok\n".into())
    );
    let (status, body) = readyz(&c, &s.url("/readyz?bucket=default")).await;
    assert_eq!(status, 503, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let names: Vec<&str> = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["check"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fence_table", "bucket:default", "clock"], "{body}");
    let (status, body) = readyz(&c, &s.url("/readyz?verbose")).await;
    assert_eq!(status, 503, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["status"], "unready");
    assert_eq!(v["checks"].as_array().unwrap().len(), 4, "{body}");
    for (_, body) in [
        readyz(&c, &s.url("/readyz?bucket=default")).await,
        readyz(&c, &s.url("/readyz?verbose")).await,
    ] {
        assert!(!body.contains(data.to_str().unwrap()), "{body}");
        assert!(!body.contains("error"), "{body}");
    }
    let (status, body) = readyz(&c, &s.url("/readyz?bucket=nowhere")).await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("NoSuchBucket"), "{body}");
}
