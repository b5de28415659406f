//! The hostile client, bound by bound: each row of docs/threat-model.md's table "Hardening: what
//! a stranger can hold" driven past its bound against the real binary, by a stranger (no
//! credentials, or the narrow key's id without its secret: every presigned URL shows an id) and
//! by one narrow key (`write` on one bucket, leases named `job-*`). Each test checks the
//! documented refusal, and what fencegate holds meanwhile against a budget: its peak resident
//! memory (VmHWM), its open descriptors, the bytes under its data directory and the rows of its
//! fence table (counted by fencegate's own census, which runs at start-up: each test restarts
//! the instance to read it). Every figure is printed beside its budget, then asserted:
//!
//!     cargo test --release --locked --test memory hostile -- --nocapture
//!
//! The limits are set small ([`config`]) so that each bound is reached within seconds; the
//! defaults differ only in scale.

use super::aws_chunked::one_chunk;
use crate::common;
use common::sign::{self, Creds};
use common::Server;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const MAX_HEADER_BYTES: usize = 16 * 1024;
/// A connection's read buffer: twice `max_header_bytes`, at least 64 KiB (`server::listen`).
const READ_BUFFER_KIB: u64 = 64;
const UNVERIFIED_BUDGET: u64 = 4 << 20;
/// The most one body read before its signature is checked may be (`MAX_UNVERIFIED_BODY`).
const UNVERIFIED_BODY: usize = 1 << 20;
const MAX_BODY_BYTES: u64 = 8 << 20;
const BODY_IDLE_SECS: u64 = 1;
/// How much longer than `body_idle_timeout_secs` the listener lets any body stall.
const BACKSTOP_MARGIN_SECS: u64 = 5;
const MAX_CONNECTIONS: usize = 32;
const MAX_UPLOADS_PER_KEY: usize = 20;
const MAX_PARTS: i32 = 50;
const MAX_LIVE_LEASES: usize = 5;
const MAX_TOMBSTONES: u64 = 50;

/// What any step may add to resident memory beyond what its bound accounts for: the
/// allocator's arenas and caches, tokio's tasks, RocksDB's block cache warming. Small enough
/// that a bound gone missing shows: the steps drive several times it past their bounds.
const SLACK_KIB: u64 = 8 * 1024;
/// What any step may add under the data directory beyond what it stores: RocksDB's own log
/// and write-ahead log records of the rows the step adds.
const SLACK_DISK: u64 = 256 * 1024;
/// Descriptors beyond the connections a step holds: the test's own scrapes, and connections
/// fencegate closed that linger (up to 2 s) inside the budget.
const SLACK_FDS: u64 = 8;

/// The narrow key: it may write one bucket and hold leases named `job-*`, nothing else.
const NARROW: Creds = Creds {
    key: "narrow-key",
    secret: "narrow-secret-0123456",
};
/// A stranger who knows the narrow key's id, not its secret.
const FORGER: Creds = Creds {
    key: "narrow-key",
    secret: "not-the-secret",
};
/// A key that may only delete, in the one bucket: enough to leave tombstones.
const DELETER: Creds = Creds {
    key: "deleter-key",
    secret: "deleter-secret-0123456",
};
/// The admin key the test reads `/metrics` with.
const OPS: Creds = Creds {
    key: "ops-key",
    secret: "ops-secret-0123456",
};

fn config() -> String {
    format!(
        r#"
[server]
max_header_bytes = {MAX_HEADER_BYTES}
max_unverified_body_bytes = {UNVERIFIED_BUDGET}
max_body_bytes = {MAX_BODY_BYTES}
body_idle_timeout_secs = {BODY_IDLE_SECS}
max_connections = {MAX_CONNECTIONS}
max_uploads_per_key = {MAX_UPLOADS_PER_KEY}
max_tombstones_per_bucket = {MAX_TOMBSTONES}

[s3]
max_parts = {MAX_PARTS}

[leases]
max_live_per_key = {MAX_LIVE_LEASES}

[keys.narrow]
access_key_id = "{}"
secret_access_key = "{}"
buckets = {{ "default" = ["write"] }}
lease_names = ["job-*"]

[keys.deleter]
access_key_id = "{}"
secret_access_key = "{}"
buckets = {{ "default" = ["delete"] }}

[keys.ops]
access_key_id = "{}"
secret_access_key = "{}"
admin = true

[buckets.default]
fencing = "optional"
"#,
        NARROW.key, NARROW.secret, DELETER.key, DELETER.secret, OPS.key, OPS.secret
    )
}

/// What a bound may cost: each figure's growth over the idle instance.
struct Budget {
    rss_kib: u64,
    fds: u64,
    disk_bytes: u64,
    fence_rows: u64,
}

/// Figures taken while an attack holds what it can (the most seen, when sampled).
#[derive(Clone, Copy)]
struct Held {
    fds: u64,
    disk_bytes: u64,
}

impl Held {
    fn max(self, other: Held) -> Held {
        Held {
            fds: self.fds.max(other.fds),
            disk_bytes: self.disk_bytes.max(other.disk_bytes),
        }
    }
}

/// One instance under attack, with its idle figures.
struct Hostile {
    dir: tempfile::TempDir,
    s: Server,
    idle_peak_rss_kib: u64,
    idle_fds: u64,
    idle_disk_bytes: u64,
    idle_rows: u64,
}

impl Hostile {
    async fn start() -> Hostile {
        let dir = tempfile::tempdir().unwrap();
        let s = Server::start(&dir.path().join("data"), Some(&config()));
        let idle_rows = fence_rows(&s).await;
        Hostile {
            idle_peak_rss_kib: s.peak_rss_kib(),
            idle_fds: s.open_fds(),
            idle_disk_bytes: common::bytes_below(&s.data_dir),
            idle_rows,
            dir,
            s,
        }
    }

    /// The figures now, while the attack holds.
    fn held(&self) -> Held {
        Held {
            fds: self.s.open_fds(),
            disk_bytes: common::bytes_below(&self.s.data_dir),
        }
    }

    /// Runs `attack` to its end, sampling the figures every 20 ms: the most it held.
    async fn during<T>(&self, attack: impl std::future::Future<Output = T>) -> (T, Held) {
        tokio::pin!(attack);
        let mut most = self.held();
        loop {
            tokio::select! {
                out = &mut attack => return (out, most.max(self.held())),
                _ = tokio::time::sleep(Duration::from_millis(20)) => most = most.max(self.held()),
            }
        }
    }

    /// Checks every figure of `bound` against `budget` (printed first, all of them): the peak
    /// memory so far, the descriptors and bytes on disk while `held` (or now, if more), and the
    /// fence table's rows, counted by the census of a restarted instance.
    async fn check(self, bound: &str, held: Held, budget: Budget) {
        let Hostile {
            dir,
            s,
            idle_peak_rss_kib,
            idle_fds,
            idle_disk_bytes,
            idle_rows,
        } = self;
        let rss = s.peak_rss_kib().saturating_sub(idle_peak_rss_kib);
        let disk = held
            .disk_bytes
            .max(common::bytes_below(&s.data_dir))
            .saturating_sub(idle_disk_bytes);
        let fds = held.fds.saturating_sub(idle_fds);
        let data = s.data_dir.clone();
        drop(s);
        let restarted = Server::start(&data, Some(&config()));
        let rows = fence_rows(&restarted).await.saturating_sub(idle_rows);
        drop((restarted, dir));
        let over: Vec<String> = [
            ("peak RSS growth", rss, budget.rss_kib, "KiB"),
            ("open fds growth", fds, budget.fds, "fds"),
            ("data dir peak growth", disk, budget.disk_bytes, "bytes"),
            ("fence table rows", rows, budget.fence_rows, "rows"),
        ]
        .into_iter()
        .filter_map(|(what, measured, limit, unit)| {
            println!("hostile | {bound} | {what}: {measured} {unit} (budget {limit} {unit})");
            (measured > limit).then(|| format!("{what}: {measured} {unit} > {limit} {unit}"))
        })
        .collect();
        assert!(over.is_empty(), "{bound}: over budget: {over:?}");
    }

    /// A gauge or counter of `/metrics` without labels.
    async fn metric(&self, name: &str) -> Option<f64> {
        metric(&self.s, name).await
    }
}

async fn metric(s: &Server, name: &str) -> Option<f64> {
    let c = common::client();
    let text = sign::send(&c, c.get(s.url("/metrics")), Some(OPS))
        .await
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

/// The fence table's rows, as the census fencegate runs at start-up counted them (the gauge
/// is absent until the census has run, never a stand-in 0).
async fn fence_rows(s: &Server) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(rows) = metric(s, "fencegate_fence_table_rows").await {
            return rows as u64;
        }
        assert!(Instant::now() < deadline, "no fence table census in 20 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Asserts a refusal's status and error code (native JSON or S3 XML), and prints it.
fn refused(bound: &str, what: &str, status: u16, text: &str, want: u16, code: &str) {
    assert_eq!(status, want, "{bound}, {what}: {text}");
    assert!(text.contains(code), "{bound}, {what}: no {code} in {text}");
    println!(
        "hostile | {bound} | {what}: {}",
        format!("{status} {code}").trim_end()
    );
}

/// Prints a duration against its budget, and asserts it.
fn within_time(bound: &str, what: &str, took: Duration, budget: Duration) {
    println!(
        "hostile | {bound} | {what}: {} ms (budget {} ms)",
        took.as_millis(),
        budget.as_millis()
    );
    assert!(took <= budget, "{bound}, {what}: {took:?} > {budget:?}");
}

/// What the server answers on `conn` within `wait`: its status and text (head and body), or
/// `None` when it said nothing (it may have closed the connection).
async fn answer(conn: &mut TcpStream, wait: Duration) -> Option<(u16, String)> {
    let deadline = tokio::time::Instant::now() + wait;
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    while !whole_answer(&got) {
        match tokio::time::timeout_at(deadline, conn.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&got).into_owned();
    let status = text.split_whitespace().nth(1)?.parse().ok()?;
    Some((status, text))
}

/// Whether `got` holds a response's head and as many body bytes as its Content-Length.
fn whole_answer(got: &[u8]) -> bool {
    let text = String::from_utf8_lossy(got);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        return false;
    };
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    body.len() >= length
}

/// Headers past `max_header_bytes`, or more than 100 of them, get 431 before anything else; a
/// stranger who stalls mid-headers holds at most a connection's read buffer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headers_past_the_limit_get_431() {
    const BOUND: &str = "request line and headers";
    let h = Hostile::start().await;
    let addr = h.s.addr;
    // Within twice the limit, fencegate's own 431 explains itself; far past it, the HTTP layer
    // answers a bare one (or closes before the client has sent it all).
    let over = "x".repeat(MAX_HEADER_BYTES * 3 / 2);
    let (status, text) = tokio::task::spawn_blocking(move || {
        common::raw_request(
            addr,
            &format!("GET /healthz HTTP/1.1\r\nX-Big: {over}"),
            b"",
        )
    })
    .await
    .unwrap();
    refused(
        BOUND,
        "1.5 × max_header_bytes",
        status,
        &text,
        431,
        "RequestHeaderSectionTooLarge",
    );
    assert!(text.contains("max_header_bytes"), "{text}");
    let many: String = (0..101).map(|i| format!("\r\nX-H{i}: v")).collect();
    let (status, text) = tokio::task::spawn_blocking(move || {
        common::raw_request(addr, &format!("GET /healthz HTTP/1.1{many}"), b"")
    })
    .await
    .unwrap();
    // The HTTP layer's bare 431, without a code: it stops parsing at the 101st.
    refused(BOUND, "101 headers (bare)", status, &text, 431, "");
    let huge = "x".repeat(1 << 20);
    let (status, _) = tokio::task::spawn_blocking(move || {
        common::raw_request(
            addr,
            &format!("GET /healthz HTTP/1.1\r\nX-Huge: {huge}"),
            b"",
        )
    })
    .await
    .unwrap();
    println!("hostile | {BOUND} | 1 MiB of headers: {status} (0: closed unanswered)");
    assert!(status == 431 || status == 0, "1 MiB of headers: {status}");

    // Connections that stall just under the read buffer, their heads unfinished: each holds
    // its buffer until the header timeout (60 s), no more.
    let stalled = MAX_CONNECTIONS - 4;
    let mut held = Vec::new();
    for _ in 0..stalled {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "GET /healthz HTTP/1.1\r\nX-Pad: {}",
            "x".repeat(READ_BUFFER_KIB as usize * 1024 - 64)
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        held.push(conn);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let figures = h.held();
    drop(held);
    h.check(
        BOUND,
        figures,
        Budget {
            rss_kib: stalled as u64 * READ_BUFFER_KIB + SLACK_KIB,
            fds: stalled as u64 + SLACK_FDS,
            disk_bytes: SLACK_DISK,
            fence_rows: 0,
        },
    )
    .await;
}

/// Bodies read before their signature is checked, sent by a stranger with a key id: one over
/// 1 MiB is refused 400; past `max_unverified_body_bytes` over every connection, 503 SlowDown
/// at once, so that memory holds the budget and the connections' buffers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthenticated_bodies_past_the_budget_get_503() {
    const BOUND: &str = "bodies read before their signature";
    // Within max_connections, with room for the refused ones while they linger (up to 2 s)
    // and for the scrape of /metrics; without the budget they would hold 28 MiB, well past
    // what the memory budget below allows.
    const CONNECTIONS: usize = MAX_CONNECTIONS - 4;
    let h = Hostile::start().await;
    let addr = h.s.addr;
    let path = "/v1/objects/default/forged";

    let mut conn = TcpStream::connect(addr).await.unwrap();
    let len = UNVERIFIED_BODY + 1;
    let head = sign::body_hash_signed_head(addr, path, FORGER, len);
    conn.write_all(head.as_bytes()).await.unwrap();
    // The body is read past and dropped so that the client hears its answer; a write error
    // means the server closed first, which the answer below shows.
    let _ = conn.write_all(&vec![b'x'; len]).await;
    let (status, text) = answer(&mut conn, Duration::from_secs(15))
        .await
        .expect("an answer to a body over 1 MiB");
    refused(
        BOUND,
        "one body of 1 MiB + 1",
        status,
        &text,
        400,
        "AuthorizationHeaderMalformed",
    );

    // Each connection sends the head of a 1 MiB - 1 body; those the budget takes then send all
    // of it but a byte and hold, the others are refused on their head alone.
    let len = UNVERIFIED_BODY - 1;
    let mut held = Vec::new();
    let mut refusals = 0;
    for _ in 0..CONNECTIONS {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        let head = sign::body_hash_signed_head(addr, path, FORGER, len);
        conn.write_all(head.as_bytes()).await.unwrap();
        match answer(&mut conn, Duration::from_millis(300)).await {
            Some((status, text)) => {
                assert!(
                    text.to_ascii_lowercase().contains("retry-after: 1"),
                    "{text}"
                );
                if refusals == 0 {
                    refused(
                        BOUND,
                        "a body past the budget",
                        status,
                        &text,
                        503,
                        "SlowDown",
                    );
                }
                assert_eq!(status, 503, "{text}");
                refusals += 1;
            }
            None => {
                conn.write_all(&vec![b'x'; len - 1]).await.unwrap();
                held.push(conn);
            }
        }
    }
    let fits = UNVERIFIED_BUDGET as usize / len;
    println!(
        "hostile | {BOUND} | {CONNECTIONS} bodies of 1 MiB - 1: {} held, {refusals} refused (budget {fits} held)",
        held.len()
    );
    assert_eq!(held.len(), fits);
    // The budget as fencegate counts it.
    let charged = h.metric("fencegate_unverified_body_bytes").await.unwrap() as u64;
    println!(
        "hostile | {BOUND} | fencegate_unverified_body_bytes: {charged} bytes (budget {UNVERIFIED_BUDGET} bytes)"
    );
    assert!(charged <= UNVERIFIED_BUDGET);
    // Let the held bodies arrive in fencegate's buffers before memory is read.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let figures = h.held();
    drop(held);
    h.check(
        BOUND,
        figures,
        Budget {
            rss_kib: UNVERIFIED_BUDGET / 1024 + CONNECTIONS as u64 * READ_BUFFER_KIB + SLACK_KIB,
            fds: CONNECTIONS as u64 + SLACK_FDS,
            disk_bytes: SLACK_DISK,
            fence_rows: 0,
        },
    )
    .await;
}

/// An aws-chunked body from the narrow key: a length declared over `max_body_bytes` is refused
/// 413 before a byte is read, a chunk declared past the body's own length 400, aws-chunked on
/// any request but PutObject and UploadPart 400; chunks within the limit stream a frame at a
/// time, and a body that ends short leaves nothing on disk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aws_chunked_lengths_past_the_limit_are_refused() {
    const BOUND: &str = "an aws-chunked body";
    const CONNECTIONS: usize = 8;
    let h = Hostile::start().await;
    let url = h.s.url("/default/chunked");
    let (status, text) = one_chunk(url.clone(), NARROW, false, 4 << 30, 4 << 30, 0).await;
    refused(
        BOUND,
        "declared 4 GiB",
        status,
        &text,
        413,
        "EntityTooLarge",
    );
    let (status, text) = one_chunk(url.clone(), NARROW, false, MAX_BODY_BYTES, 4 << 30, 0).await;
    refused(
        BOUND,
        "a 4 GiB chunk in an 8 MiB body",
        status,
        &text,
        400,
        "IncompleteBody",
    );
    assert!(text.contains("runs past"), "{text}");
    let (status, text) = one_chunk(h.s.url("/default"), NARROW, true, 4 << 30, 4 << 30, 0).await;
    refused(
        BOUND,
        "on DeleteObjects",
        status,
        &text,
        400,
        "InvalidRequest",
    );

    // Bodies within the limit that end a MiB short of it, at once: each streams to a staging
    // file, which goes when the body ends short.
    let sent = MAX_BODY_BYTES as usize - (1 << 20);
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|i| {
            let url = h.s.url(&format!("/default/short-{i}"));
            tokio::spawn(one_chunk(
                url,
                NARROW,
                false,
                MAX_BODY_BYTES,
                MAX_BODY_BYTES,
                sent,
            ))
        })
        .collect();
    let (answers, figures) = h.during(futures::future::join_all(tasks)).await;
    for answer in answers {
        let (status, text) = answer.unwrap();
        assert_eq!(status, 400, "a body that ends short: {text}");
    }
    println!("hostile | {BOUND} | {CONNECTIONS} bodies ending 1 MiB short: 400 each");
    let left = common::bytes_below(&h.s.data_dir).saturating_sub(h.idle_disk_bytes);
    println!("hostile | {BOUND} | data dir growth once they ended: {left} bytes (budget {SLACK_DISK} bytes)");
    assert!(
        left <= SLACK_DISK,
        "staging files left behind: {left} bytes"
    );
    h.check(
        BOUND,
        figures,
        Budget {
            // A read buffer and a frame in flight to its staging file each, never a chunk.
            rss_kib: CONNECTIONS as u64 * (READ_BUFFER_KIB + 1024) + SLACK_KIB,
            // A socket and a staging file each.
            fds: 2 * CONNECTIONS as u64 + SLACK_FDS,
            // What was sent, at most max_body_bytes a body.
            disk_bytes: CONNECTIONS as u64 * MAX_BODY_BYTES + SLACK_DISK,
            fence_rows: 0,
        },
    )
    .await;
}

/// Browser-form uploads and POSTs of operations fencegate does not serve, from a stranger:
/// 501 on their head alone, their bodies (declared at 64 MiB, never sent) unread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_and_unserved_posts_get_501_unread() {
    const BOUND: &str = "forms and unserved POSTs";
    const EACH: usize = 8;
    let h = Hostile::start().await;
    let addr = h.s.addr;
    let heads = [
        "POST /default HTTP/1.1\r\nContent-Type: multipart/form-data; boundary=x",
        "POST /default/k?restore HTTP/1.1\r\nContent-Type: application/xml",
    ];
    let mut held = Vec::new();
    for (i, head) in heads.iter().cycle().take(2 * EACH).enumerate() {
        let mut conn = TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "{head}\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n",
            64 << 20
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        let (status, text) = answer(&mut conn, Duration::from_secs(5))
            .await
            .expect("an answer before the body");
        if i < heads.len() {
            let what = if i == 0 { "a browser form" } else { "?restore" };
            refused(BOUND, what, status, &text, 501, "NotImplemented");
        }
        assert_eq!(status, 501, "{text}");
        held.push(conn);
    }
    let figures = h.held();
    drop(held);
    h.check(
        BOUND,
        figures,
        Budget {
            rss_kib: 2 * EACH as u64 * READ_BUFFER_KIB + SLACK_KIB,
            fds: 2 * EACH as u64 + SLACK_FDS,
            disk_bytes: SLACK_DISK,
            fence_rows: 0,
        },
    )
    .await;
}

/// Bodies past `max_body_bytes` from the narrow key: 413 on their declared length, before a
/// byte is staged, and the connection closed after the answer rather than the body drained
/// (an early refusal reads at most 64 KiB of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_past_max_body_bytes_get_413() {
    const BOUND: &str = "disk: bodies past max_body_bytes";
    const EACH: usize = 8;
    let h = Hostile::start().await;
    let addr = h.s.addr;
    let len = MAX_BODY_BYTES as usize + 1;
    let tasks: Vec<_> = (0..EACH)
        .map(|i| {
            tokio::spawn(async move {
                let mut conn = TcpStream::connect(addr).await.unwrap();
                let path = format!("/v1/objects/default/big-{i}");
                let head = sign::unsigned_payload_head(addr, &path, NARROW, len);
                conn.write_all(head.as_bytes()).await.unwrap();
                // A MiB of the body follows, as a client that does not wait for 100-continue
                // sends it: no more, so that the connection's lingering close (which reads up
                // to 4 MiB) takes it all and the client reads the answer, not a reset.
                conn.write_all(&vec![b'b'; 1 << 20]).await.unwrap();
                answer(&mut conn, Duration::from_secs(10)).await
            })
        })
        .collect();
    let (answers, figures) = h.during(futures::future::join_all(tasks)).await;
    for (i, a) in answers.into_iter().enumerate() {
        let (status, text) = a.unwrap().expect("an answer");
        if i == 0 {
            refused(
                BOUND,
                "max_body_bytes + 1",
                status,
                &text,
                413,
                "EntityTooLarge",
            );
        }
        assert_eq!(status, 413, "{text}");
        assert!(
            text.to_ascii_lowercase().contains("connection: close"),
            "{text}"
        );
    }
    h.check(
        BOUND,
        figures,
        Budget {
            rss_kib: EACH as u64 * READ_BUFFER_KIB + SLACK_KIB,
            fds: 2 * EACH as u64 + SLACK_FDS,
            disk_bytes: SLACK_DISK,
            fence_rows: 0,
        },
    )
    .await;
}

/// A POST's XML body from the narrow key: a CompleteMultipartUpload of 5 MiB, past the 4 MiB
/// fencegate reads of one, is refused 400 MaxMessageLengthExceeded once 4 MiB are read (s3s
/// alone answered it 500); sent chunked, without a length, 411 before a byte is read (the
/// client may see only the connection close under it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn xml_bodies_past_4_mib_are_refused() {
    const BOUND: &str = "a POST's XML body";
    const EACH: usize = 4;
    let h = Hostile::start().await;
    let s3 = common::moto::client_with(&h.s.url(""), NARROW.key, NARROW.secret);
    let upload = s3
        .create_multipart_upload()
        .bucket("default")
        .key("xml")
        .send()
        .await
        .unwrap()
        .upload_id()
        .unwrap()
        .to_string();
    let part = "<Part><PartNumber>1</PartNumber><ETag>\"0\"</ETag></Part>";
    let xml = format!(
        "<CompleteMultipartUpload>{}</CompleteMultipartUpload>",
        part.repeat((5 << 20) / part.len())
    );
    let url = h.s.url(&format!("/default/xml?uploadId={upload}"));
    let tasks: Vec<_> = (0..EACH)
        .map(|i| {
            let (url, xml) = (url.clone(), xml.clone());
            tokio::spawn(async move {
                let c = common::client();
                // Half with a Content-Length, half chunked (a stream of unknown length).
                let body = if i % 2 == 0 {
                    reqwest::Body::from(xml)
                } else {
                    let piece = bytes::Bytes::from(xml);
                    reqwest::Body::wrap_stream(futures::stream::once(async move {
                        Ok::<_, std::io::Error>(piece)
                    }))
                };
                let mut req = c
                    .post(url)
                    .header("x-amz-content-sha256", "UNSIGNED-PAYLOAD")
                    .body(body)
                    .build()
                    .unwrap();
                sign::sign_payload(&mut req, NARROW, "UNSIGNED-PAYLOAD");
                match c.execute(req).await {
                    Ok(resp) => (
                        resp.status().as_u16(),
                        resp.text().await.unwrap_or_default(),
                    ),
                    Err(e) => (0, e.to_string()),
                }
            })
        })
        .collect();
    let (answers, figures) = h.during(futures::future::join_all(tasks)).await;
    let mut chunked = [0; 2];
    for (i, a) in answers.into_iter().enumerate() {
        let (status, text) = a.unwrap();
        if i % 2 == 0 {
            refused(
                BOUND,
                "5 MiB CompleteMultipartUpload",
                status,
                &text,
                400,
                "MaxMessageLengthExceeded",
            );
        } else if status == 0 {
            // Refused unread, the connection closed while the client still sent (lingering
            // drains at most 4 MiB of the 5): it may never read the answer.
            chunked[1] += 1;
        } else {
            assert_eq!(status, 411, "the same, chunked: {text}");
            assert!(text.contains("MissingContentLength"), "{text}");
            chunked[0] += 1;
        }
    }
    println!(
        "hostile | {BOUND} | the same, chunked: {} × 411 MissingContentLength, {} × closed while the client sent",
        chunked[0], chunked[1]
    );
    h.check(
        BOUND,
        figures,
        Budget {
            // What s3s reads of each, at most.
            rss_kib: EACH as u64 * 4 * 1024 + SLACK_KIB,
            fds: EACH as u64 + SLACK_FDS,
            disk_bytes: SLACK_DISK,
            fence_rows: 0,
        },
    )
    .await;
}

/// A body that sends nothing: the narrow key's upload, read by a handler, is cut off with 408
/// after `body_idle_timeout_secs`; a stranger's body read before its signature, at the listener
/// 5 s later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_sends_nothing_is_cut_off() {
    const BOUND: &str = "a body that sends nothing";
    const EACH: usize = 8;
    let h = Hostile::start().await;
    let addr = h.s.addr;
    let mut tasks = Vec::new();
    for i in 0..2 * EACH {
        let stranger = i % 2 == 1;
        let path = format!("/v1/objects/default/idle-{i}");
        let head = if stranger {
            sign::body_hash_signed_head(addr, &path, FORGER, 1024)
        } else {
            sign::unsigned_payload_head(addr, &path, NARROW, 1024)
        };
        let mut conn = TcpStream::connect(addr).await.unwrap();
        conn.write_all(head.as_bytes()).await.unwrap();
        tasks.push(tokio::spawn(async move {
            let started = Instant::now();
            let answer = answer(&mut conn, Duration::from_secs(30)).await;
            (stranger, answer, started.elapsed())
        }));
    }
    let (ends, figures) = h.during(futures::future::join_all(tasks)).await;
    let mut slowest = [Duration::ZERO; 2];
    let mut cut = 0;
    for end in ends {
        let (stranger, answer, took) = end.unwrap();
        match answer {
            Some((status, text)) => {
                assert_eq!(status, 408, "{text}");
                assert!(text.contains("RequestTimeout"), "{text}");
            }
            // The listener may cut a body off without an answer ("408, or the connection cut
            // off"); a handler always answers.
            None => {
                assert!(stranger, "the narrow key's upload was cut off unanswered");
                cut += 1;
            }
        }
        let slot = &mut slowest[usize::from(stranger)];
        *slot = (*slot).max(took);
    }
    println!("hostile | {BOUND} | {EACH} uploads of the narrow key: 408 RequestTimeout; {EACH} bodies of a stranger: {} 408 RequestTimeout, {cut} cut off", EACH - cut);
    // The answer leaves up to 1 s after the cut, while the unread rest of the body is awaited
    // (`http::unread`); and other tests of this binary run at the same time on two cores.
    let slack = Duration::from_secs(3);
    within_time(
        BOUND,
        "narrow key's upload cut off after",
        slowest[0],
        Duration::from_secs(BODY_IDLE_SECS) + slack,
    );
    within_time(
        BOUND,
        "stranger's body cut off after",
        slowest[1],
        Duration::from_secs(BODY_IDLE_SECS + BACKSTOP_MARGIN_SECS) + slack,
    );
    h.check(
        BOUND,
        figures,
        Budget {
            rss_kib: 2 * EACH as u64 * READ_BUFFER_KIB + SLACK_KIB,
            // A socket each, and a staging file for each upload past its checks.
            fds: 3 * EACH as u64 + SLACK_FDS,
            disk_bytes: SLACK_DISK,
            fence_rows: 0,
        },
    )
    .await;
}

/// Connections: past `max_connections` a stranger's connections wait in the accept backlog,
/// holding no descriptor of fencegate's, and are served once others close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_max_connections_wait_in_the_backlog() {
    const BOUND: &str = "connections";
    let h = Hostile::start().await;
    let mut held = Vec::new();
    // Three times the limit, each stalled mid-headers (a slowloris).
    for _ in 0..3 * MAX_CONNECTIONS {
        let mut conn = TcpStream::connect(h.s.addr).await.unwrap();
        conn.write_all(b"GET /healthz HTTP/1.1\r\nX-Slow: ")
            .await
            .unwrap();
        held.push(conn);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let figures = h.held();
    let waiting = reqwest::Client::builder()
        .timeout(Duration::from_millis(800))
        .build()
        .unwrap();
    assert!(
        waiting.get(h.s.url("/healthz")).send().await.is_err(),
        "a client past max_connections waits"
    );
    println!(
        "hostile | {BOUND} | {} connections, limit {MAX_CONNECTIONS}: a new client waits",
        3 * MAX_CONNECTIONS
    );
    assert!(!h
        .s
        .awaited_log_lines(&["connection limit is reached"], 1)
        .is_empty());
    drop(held);
    // Closed connections linger up to 2 s inside the budget; then a client is served.
    let started = Instant::now();
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let status = c.get(h.s.url("/healthz")).send().await.unwrap().status();
    assert_eq!(status.as_u16(), 200);
    within_time(
        BOUND,
        "served again after they close",
        started.elapsed(),
        Duration::from_secs(5),
    );
    h.check(
        BOUND,
        figures,
        Budget {
            rss_kib: MAX_CONNECTIONS as u64 * READ_BUFFER_KIB + SLACK_KIB,
            fds: MAX_CONNECTIONS as u64 + SLACK_FDS,
            disk_bytes: SLACK_DISK,
            fence_rows: 0,
        },
    )
    .await;
}

/// The status and S3 error code of a failed SDK call.
fn s3_failure<T, E>(
    r: Result<T, aws_sdk_s3::error::SdkError<E, aws_sdk_s3::config::http::HttpResponse>>,
) -> (u16, String)
where
    T: std::fmt::Debug,
    E: aws_sdk_s3::error::ProvideErrorMetadata + std::fmt::Debug,
{
    use aws_sdk_s3::error::ProvideErrorMetadata;
    let e = r.expect_err("the call should have been refused");
    let status = e.raw_response().map_or(0, |r| r.status().as_u16());
    (status, e.code().unwrap_or_default().to_string())
}

/// Multipart uploads the narrow key starts and never completes: at most
/// `max_uploads_per_key` open (400 TooManyUploads past it), at most `max_parts` parts each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multipart_uploads_and_parts_stop_at_their_bounds() {
    const BOUND: &str = "multipart uploads";
    const PART: usize = 1024;
    let h = Hostile::start().await;
    let c = common::moto::client_with(&h.s.url(""), NARROW.key, NARROW.secret);
    let mut uploads = Vec::new();
    for i in 0..MAX_UPLOADS_PER_KEY + 5 {
        let r = c
            .create_multipart_upload()
            .bucket("default")
            .key(format!("up-{i}"))
            .send()
            .await;
        if i < MAX_UPLOADS_PER_KEY {
            uploads.push(r.unwrap().upload_id().unwrap().to_string());
        } else {
            let (status, code) = s3_failure(r);
            if i == MAX_UPLOADS_PER_KEY {
                refused(
                    BOUND,
                    "one upload past max_uploads_per_key",
                    status,
                    &code,
                    400,
                    "TooManyUploads",
                );
            }
            assert_eq!((status, code.as_str()), (400, "TooManyUploads"));
        }
    }
    for n in 1..=MAX_PARTS + 1 {
        let r = c
            .upload_part()
            .bucket("default")
            .key("up-0")
            .upload_id(&uploads[0])
            .part_number(n)
            .body(vec![b'p'; PART].into())
            .send()
            .await;
        if n <= MAX_PARTS {
            r.unwrap();
        } else {
            let (status, code) = s3_failure(r);
            refused(
                BOUND,
                "a part past max_parts",
                status,
                &code,
                400,
                "InvalidArgument",
            );
        }
    }
    let open = h.metric("fencegate_multipart_uploads_open").await.unwrap() as u64;
    println!(
        "hostile | {BOUND} | fencegate_multipart_uploads_open: {open} (budget {MAX_UPLOADS_PER_KEY})"
    );
    assert!(open <= MAX_UPLOADS_PER_KEY as u64);
    let figures = h.held();
    h.check(
        BOUND,
        figures,
        Budget {
            rss_kib: SLACK_KIB,
            fds: SLACK_FDS,
            // The parts' bytes; a record and a parts-log line (about 110 bytes) each, well
            // within 4 KiB apiece.
            disk_bytes: MAX_PARTS as u64 * PART as u64
                + (MAX_UPLOADS_PER_KEY as u64 + MAX_PARTS as u64) * 4096
                + SLACK_DISK,
            // At most a scope per upload the key may hold.
            fence_rows: MAX_UPLOADS_PER_KEY as u64,
        },
    )
    .await;
}

/// Leases of the narrow key: at most `max_live_per_key` live (429 TooManyLeases past it); an
/// expired lease is dropped from memory, and its name keeps one fence-table row for good (which
/// is why application keys should name their leases: this key's `job-*` lets it add names).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_stop_at_max_live_per_key() {
    const BOUND: &str = "leases";
    const EXPIRED: usize = 200;
    let h = Hostile::start().await;
    let c = common::client();
    let acquire = |name: String, ttl_ms: u64| {
        let c = c.clone();
        let url = h.s.url(&format!("/v1/leases/{name}"));
        async move {
            let req = c
                .post(url)
                .json(&serde_json::json!({"holder": "h", "ttl_ms": ttl_ms}));
            sign::send_json(&c, req, Some(NARROW)).await
        }
    };
    // Leases of a millisecond, each expired by the time the next is asked for: they never
    // count against the bound, and cost no memory once gone.
    for i in 0..EXPIRED {
        let (status, body) = acquire(format!("job-brief-{i}"), 1).await;
        assert_eq!(status, 200, "{body}");
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    for i in 0..MAX_LIVE_LEASES + 5 {
        let (status, body) = acquire(format!("job-{i}"), 60_000).await;
        if i < MAX_LIVE_LEASES {
            assert_eq!(status, 200, "{body}");
        } else {
            if i == MAX_LIVE_LEASES {
                refused(
                    BOUND,
                    "a lease past max_live_per_key",
                    status,
                    &body.to_string(),
                    429,
                    "TooManyLeases",
                );
            }
            assert_eq!(
                (status, body["error"].as_str()),
                (429, Some("TooManyLeases"))
            );
        }
    }
    let live = h.metric("fencegate_leases_held").await.unwrap() as u64;
    println!("hostile | {BOUND} | fencegate_leases_held: {live} (budget {MAX_LIVE_LEASES})");
    assert!(live <= MAX_LIVE_LEASES as u64);
    let figures = h.held();
    let granted = (EXPIRED + MAX_LIVE_LEASES) as u64;
    h.check(
        BOUND,
        figures,
        Budget {
            rss_kib: SLACK_KIB,
            fds: SLACK_FDS,
            // The write-ahead log's record of each name's row.
            disk_bytes: granted * 512 + SLACK_DISK,
            // A row for each name granted; the refused add none.
            fence_rows: granted,
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tombstones_past_the_bound_are_folded_and_their_tokens_hold() {
    const BOUND: &str = "tombstones";
    const DELETES: u64 = 400;
    let h = Hostile::start().await;
    let c = common::client();
    // A key that may only delete names keys that never existed, each with its own token: each
    // delete leaves a tombstone keeping the token.
    let (_, held) = h
        .during(async {
            for i in 0..DELETES {
                let req = c
                    .delete(h.s.object_url("default", &format!("absent/{i}")))
                    .header("Fencing-Token", (1000 + i).to_string());
                let status = sign::send(&c, req, Some(DELETER)).await.status().as_u16();
                assert_eq!(status, 200, "delete {i}");
            }
        })
        .await;
    // Folded in the background, each time the bound is reached.
    let folded_metric = "fencegate_tombstones_folded_total{bucket=\"default\"}";
    let deadline = Instant::now() + Duration::from_secs(20);
    let folded = loop {
        let folded = h.metric(folded_metric).await.unwrap_or(0.0) as u64;
        if folded + MAX_TOMBSTONES >= DELETES {
            break folded;
        }
        assert!(
            Instant::now() < deadline,
            "only {folded} of {DELETES} folded"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    println!("hostile | {BOUND} | folded: {folded} of {DELETES} deletes (bound {MAX_TOMBSTONES})");
    // Every token the deletes recorded still refuses what is below it, on a folded key and on
    // a key never named; the refusal says the bucket's floor judged it.
    let top = 1000 + DELETES - 1;
    for key in ["absent/0", "absent/200", "never-named"] {
        let (status, body) = common::put_as(
            &c,
            &h.s.object_url("default", key),
            Some(&(top - 1).to_string()),
            b"zombie",
            Some(NARROW),
        )
        .await;
        refused(
            BOUND,
            &format!("a write below the floor ({key})"),
            status,
            &body.to_string(),
            409,
            "StaleFencingToken",
        );
        let message = body["message"].as_str().unwrap();
        assert!(message.contains("max_tombstones_per_bucket"), "{message}");
    }
    let (status, body) = common::put_as(
        &c,
        &h.s.object_url("default", "absent/0"),
        Some(&top.to_string()),
        b"the holder",
        Some(NARROW),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    h.check(
        BOUND,
        held,
        Budget {
            rss_kib: SLACK_KIB,
            fds: SLACK_FDS,
            // The write-ahead log's records of every tombstone written and folded.
            disk_bytes: DELETES * 1024 + SLACK_DISK,
            // The tombstones not yet folded, the floor row and the object written at the end.
            fence_rows: MAX_TOMBSTONES + 2,
        },
    )
    .await;
}
