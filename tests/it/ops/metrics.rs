//! `/metrics` (docs/operations.md, "Metrics"): after a write, a stale write, reads, leases (one left to
//! expire), S3 requests, a readiness probe and a backend failure, every family that
//! `fencegate::metrics::FAMILIES` lists is exposed with its HELP and TYPE, histograms as real
//! Prometheus histograms, with the values those requests must have left. And every metric
//! name that docs/alerts.yaml, docs/grafana-dashboard.json, the README and docs/*.md use is
//! one that fencegate exports, so the docs cannot drift from the code.

use crate::common;
use common::Server;
use fencegate::metrics::{Kind, Seen, FAMILIES};
use std::collections::BTreeMap;
use std::time::Duration;

/// One sample of the exposition: its family name, labels and value.
struct Sample {
    name: String,
    labels: BTreeMap<String, String>,
    value: f64,
}

fn samples(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|line| {
            let (series, value) = line.rsplit_once(' ').expect("a sample has a value");
            let (name, labels) = match series.split_once('{') {
                Some((name, rest)) => {
                    let rest = rest.strip_suffix('}').expect("labels end with }");
                    let labels = rest
                        .split("\",")
                        .filter(|p| !p.is_empty())
                        .map(|p| {
                            let (k, v) = p.split_once("=\"").expect("label=\"value\"");
                            (k.to_string(), v.trim_end_matches('"').to_string())
                        })
                        .collect();
                    (name.to_string(), labels)
                }
                None => (series.to_string(), BTreeMap::new()),
            };
            let value = match value {
                "+Inf" => f64::INFINITY,
                v => v.parse().unwrap_or_else(|_| panic!("a number: {line}")),
            };
            Sample {
                name,
                labels,
                value,
            }
        })
        .collect()
}

/// The sum over the series of `name` that carry every label of `with`.
fn sum(all: &[Sample], name: &str, with: &[(&str, &str)]) -> f64 {
    let matching: Vec<&Sample> = all
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            with.iter()
                .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
        })
        .collect();
    assert!(
        !matching.is_empty(),
        "no series {name} with {with:?}; the exposition has: {:?}",
        all.iter()
            .filter(|s| s.name == name)
            .map(|s| &s.labels)
            .collect::<Vec<_>>()
    );
    matching.iter().map(|s| s.value).sum()
}

async fn scrape(c: &reqwest::Client, s: &Server) -> String {
    let resp = c.get(s.url("/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap()
}

/// Drives one of everything through a fresh fencegate and returns its exposition.
async fn exercised() -> (String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let s = Server::start(&data, None);
    let c = common::client();
    let url = s.object_url("default", "report.csv");
    assert_eq!(
        common::put(&c, &url, Some("5"), b"written by B").await.0,
        200
    );
    assert_eq!(common::put(&c, &url, Some("4"), b"zombie").await.0, 409);
    let (status, body) = common::get_bytes(&c, &url).await;
    assert_eq!((status, body.as_slice()), (200, &b"written by B"[..]));
    assert_eq!(c.head(&url).send().await.unwrap().status(), 200);
    // S3: a PutObject and a GetObject, anonymous (development mode).
    let s3 = s.url("/default/s3.csv");
    let put = c
        .put(&s3)
        .header("Fencing-Token", "1")
        .body("via s3")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    let got = c.get(&s3).send().await.unwrap();
    assert_eq!(got.status(), 200);
    assert_eq!(got.text().await.unwrap(), "via s3");
    // Two leases: one left to expire, one held.
    for (name, ttl) in [("brief", 200), ("long", 60_000)] {
        let resp = c
            .post(s.url(&format!("/v1/leases/{name}")))
            .body(format!(r#"{{"holder": "w", "ttl_ms": {ttl}}}"#))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{name}");
    }
    assert_eq!(c.get(s.url("/readyz")).send().await.unwrap().status(), 200);
    // The lease census runs every second.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // A backend failure: the bucket's directory replaced by a file.
    let bucket_dir = data.join("objects").join("default");
    std::fs::rename(&bucket_dir, data.join("objects").join("moved-away")).unwrap();
    std::fs::write(&bucket_dir, b"not a directory").unwrap();
    let (status, _) = common::put(&c, &s.object_url("default", "new.csv"), Some("6"), b"x").await;
    assert!(status >= 500, "{status}");
    (scrape(&c, &s).await, dir)
}

#[tokio::test]
async fn every_family_is_exposed_with_help_type_and_its_values() {
    let (text, _dir) = exercised().await;
    let all = samples(&text);
    for f in FAMILIES
        .iter()
        .filter(|f| matches!(f.seen, Seen::Always | Seen::Local))
    {
        let help = format!("# HELP {} ", f.name);
        assert!(text.contains(&help), "no HELP for {}:\n{text}", f.name);
        let kind = match f.kind {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
        };
        let type_line = format!("# TYPE {} {kind}\n", f.name);
        assert!(
            text.contains(&type_line),
            "no `{}`:\n{text}",
            type_line.trim()
        );
        if f.kind == Kind::Histogram {
            // A real histogram: cumulative buckets up to +Inf, a count and a sum.
            let inf = sum(&all, &format!("{}_bucket", f.name), &[("le", "+Inf")]);
            let count = sum(&all, &format!("{}_count", f.name), &[]);
            assert!(count >= 1.0, "{}", f.name);
            assert_eq!(inf, count, "{}", f.name);
            sum(&all, &format!("{}_sum", f.name), &[]);
        }
    }

    // The stale write, counted for its bucket, and the gate's decisions.
    assert_eq!(
        sum(
            &all,
            "fencegate_stale_rejections_total",
            &[("bucket", "default")]
        ),
        1.0
    );
    let decided = |outcome| {
        sum(
            &all,
            "fencegate_gate_decisions_total",
            &[("operation", "put"), ("outcome", outcome)],
        )
    };
    assert_eq!(decided("stale"), 1.0);
    assert_eq!(decided("accepted"), 2.0);
    assert_eq!(
        sum(
            &all,
            "fencegate_bypass_detected_total",
            &[("bucket", "default")]
        ),
        0.0
    );
    // Requests by surface, operation and outcome.
    let requests =
        |labels: &[(&str, &str)]| sum(&all, "fencegate_request_duration_seconds_count", labels);
    let put = [("surface", "native"), ("operation", "put_object")];
    assert_eq!(requests(&[put[0], put[1], ("outcome", "2xx")]), 1.0);
    assert_eq!(requests(&[put[0], put[1], ("outcome", "4xx")]), 1.0);
    assert_eq!(requests(&[put[0], put[1], ("outcome", "5xx")]), 1.0);
    assert_eq!(
        requests(&[("surface", "native"), ("operation", "get_object")]),
        1.0
    );
    assert_eq!(
        requests(&[
            ("surface", "s3"),
            ("operation", "PutObject"),
            ("outcome", "2xx")
        ]),
        1.0
    );
    assert_eq!(
        requests(&[("surface", "s3"), ("operation", "GetObject")]),
        1.0
    );
    assert_eq!(
        requests(&[("surface", "leases"), ("operation", "acquire")]),
        2.0
    );
    assert_eq!(
        requests(&[("surface", "health"), ("operation", "readyz")]),
        1.0
    );
    // The scrape itself is the one request in flight.
    assert_eq!(sum(&all, "fencegate_requests_in_flight", &[]), 1.0);
    // Bytes: the bodies read (12 + 1 native bytes; the stale write's 6 are refused before
    // its body is read, if they are read at all) and 6 through S3, and those sent back.
    let native_in = sum(
        &all,
        "fencegate_request_body_bytes_total",
        &[("surface", "native")],
    );
    assert!((13.0..=19.0).contains(&native_in), "{native_in}");
    assert_eq!(
        sum(
            &all,
            "fencegate_request_body_bytes_total",
            &[("surface", "s3")]
        ),
        6.0
    );
    assert!(
        sum(
            &all,
            "fencegate_response_body_bytes_total",
            &[("surface", "native")]
        ) >= 12.0
    );
    assert!(
        sum(
            &all,
            "fencegate_response_body_bytes_total",
            &[("surface", "s3")]
        ) >= 6.0
    );
    // Leases: two granted, the brief one expired, the long one held.
    assert_eq!(sum(&all, "fencegate_leases_granted_total", &[]), 2.0);
    assert_eq!(sum(&all, "fencegate_lease_expiries_total", &[]), 1.0);
    assert_eq!(sum(&all, "fencegate_leases_held", &[]), 1.0);
    // The backend: commits timed, the failed one counted by kind.
    assert!(
        sum(
            &all,
            "fencegate_backend_request_duration_seconds_count",
            &[("operation", "commit"), ("outcome", "ok")]
        ) >= 2.0
    );
    assert_eq!(
        sum(
            &all,
            "fencegate_backend_errors_total",
            &[("operation", "commit"), ("kind", "failing")]
        ),
        1.0
    );
    // The fence table synced (and never failed); it was ready when probed.
    assert!(sum(&all, "fencegate_fence_sync_duration_seconds_count", &[]) >= 2.0);
    assert_eq!(sum(&all, "fencegate_fence_store_errors_total", &[]), 0.0);
    assert_eq!(
        sum(&all, "fencegate_ready", &[("check", "fence_table")]),
        1.0
    );
    assert_eq!(
        sum(
            &all,
            "fencegate_build_info",
            &[("version", env!("CARGO_PKG_VERSION"))]
        ),
        1.0
    );
    // No request data in any label.
    assert!(
        !text.contains("report.csv") && !text.contains("s3.csv"),
        "{text}"
    );
}

/// Every `fencegate_...` name in `text`, histogram series reduced to their family.
fn names_in(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for prefix in ["fencegate_", "process_"] {
        let mut rest = text;
        while let Some(at) = rest.find(prefix) {
            let before = text.len() - rest.len() + at;
            let tail = &rest[at..];
            let end = tail
                .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
                .unwrap_or(tail.len());
            // A family's name, not a word that ends in the prefix nor the prefix alone
            // (`process_*`).
            let word_start = before == 0
                || !text.as_bytes()[before - 1].is_ascii_alphanumeric()
                    && text.as_bytes()[before - 1] != b'_';
            if word_start && end > prefix.len() {
                names.push(tail[..end].to_string());
            }
            rest = &tail[end..];
        }
    }
    names
}

fn family_of(name: &str) -> Option<&'static fencegate::metrics::Family> {
    FAMILIES.iter().find(|f| {
        f.name == name
            || (f.kind == Kind::Histogram
                && ["_bucket", "_count", "_sum"]
                    .iter()
                    .any(|s| name.strip_suffix(s) == Some(f.name)))
    })
}

#[tokio::test]
async fn the_docs_name_only_exported_metrics() {
    let (text, _dir) = exercised().await;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let alerts = std::fs::read_to_string(root.join("docs/alerts.yaml")).unwrap();
    let dashboard = std::fs::read_to_string(root.join("docs/grafana-dashboard.json")).unwrap();
    let dashboard_json: serde_json::Value =
        serde_json::from_str(&dashboard).expect("the dashboard is JSON");
    assert!(dashboard_json["panels"]
        .as_array()
        .is_some_and(|p| p.len() >= 8));
    assert!(alerts.contains("groups:") && alerts.contains("alert:"));
    // Every user doc: the README and docs/*.md, but the history, which names families as
    // they were called once.
    let mut docs = vec![
        ("docs/alerts.yaml".to_string(), alerts),
        ("docs/grafana-dashboard.json".to_string(), dashboard),
        (
            "README.md".to_string(),
            std::fs::read_to_string(root.join("README.md")).unwrap(),
        ),
    ];
    let mut md: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md") && n != "history.md")
        .collect();
    md.sort();
    for name in md {
        let doc = format!("docs/{name}");
        let body = std::fs::read_to_string(root.join(&doc)).unwrap();
        docs.push((doc, body));
    }
    for (doc, body) in &docs {
        let names = names_in(body);
        // The dashboard, the alerts and the metrics' own doc must name some; others may.
        if [
            "docs/alerts.yaml",
            "docs/grafana-dashboard.json",
            "docs/operations.md",
        ]
        .contains(&doc.as_str())
        {
            assert!(!names.is_empty(), "{doc} names no metric");
        }
        if doc == "docs/operations.md" {
            // The metrics' own doc has a row for every family the binary exports, and each
            // row's labels are its families' labels.
            for f in FAMILIES {
                assert!(
                    body.contains(&format!("`{}`", f.name)),
                    "docs/operations.md has no row for {}",
                    f.name
                );
            }
            for row in body.lines().filter(|l| l.starts_with("| `")) {
                let cells: Vec<&str> = row
                    .trim()
                    .trim_matches('|')
                    .split('|')
                    .map(str::trim)
                    .collect();
                let ticked = |cell: &str| -> std::collections::BTreeSet<String> {
                    cell.split('`')
                        .skip(1)
                        .step_by(2)
                        .map(str::to_string)
                        .collect()
                };
                let families: Vec<_> = FAMILIES
                    .iter()
                    .filter(|f| ticked(cells[0]).contains(f.name))
                    .collect();
                if families.is_empty() || cells.len() < 4 {
                    continue;
                }
                let want: std::collections::BTreeSet<String> = families
                    .iter()
                    .flat_map(|f| f.labels.iter().map(|l| l.to_string()))
                    .collect();
                assert_eq!(
                    ticked(cells[2]),
                    want,
                    "docs/operations.md: the labels of {row}"
                );
            }
        }
        for name in names {
            let family = family_of(&name)
                .unwrap_or_else(|| panic!("{doc} uses {name}, which fencegate does not export"));
            // What every deployment exports must be in this one's exposition too.
            if matches!(family.seen, Seen::Always | Seen::Local) {
                assert!(
                    text.contains(&format!("# TYPE {} ", family.name)),
                    "{doc} uses {name}, missing from /metrics:\n{text}"
                );
            }
        }
    }
}

/// A read whose body the client took to its end is `2xx`, a HEAD 404 `4xx`; only a client
/// that hangs up mid-body is `aborted`.
#[tokio::test]
async fn whole_reads_are_not_aborted() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = common::client();
    let big = vec![7u8; 4 << 20];
    let put = c
        .put(s.url("/default/big"))
        .header("Fencing-Token", "1")
        .body(big.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200);
    let got = c.get(s.url("/default/big")).send().await.unwrap();
    assert_eq!(got.bytes().await.unwrap().len(), big.len());
    assert_eq!(
        c.head(s.url("/default/absent"))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        c.head(s.url("/default/big")).send().await.unwrap().status(),
        200
    );
    // A client that leaves after the first bytes of the answer.
    let (status, _) = {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut conn = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        conn.write_all(b"GET /default/big HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut first = vec![0u8; 1024];
        let n = conn.read(&mut first).await.unwrap();
        (String::from_utf8_lossy(&first[..n]).into_owned(), ())
    };
    assert!(status.starts_with("HTTP/1.1 200"), "{status}");
    let all = {
        // The dropped connection's request records once the server notices.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let all = samples(&scrape(&c, &s).await);
            let aborted = all
                .iter()
                .filter(|x| x.name == "fencegate_request_duration_seconds_count")
                .filter(|x| x.labels.get("outcome").map(String::as_str) == Some("aborted"))
                .map(|x| x.value)
                .sum::<f64>();
            if aborted >= 1.0 || std::time::Instant::now() > deadline {
                break all;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let count = |op: &str, outcome: &str| {
        all.iter()
            .filter(|x| x.name == "fencegate_request_duration_seconds_count")
            .filter(|x| x.labels.get("operation").map(String::as_str) == Some(op))
            .filter(|x| x.labels.get("outcome").map(String::as_str) == Some(outcome))
            .map(|x| x.value)
            .sum::<f64>()
    };
    assert_eq!(count("GetObject", "2xx"), 1.0);
    assert_eq!(count("GetObject", "aborted"), 1.0, "the hang-up mid-body");
    assert_eq!(count("HeadObject", "4xx"), 1.0);
    assert_eq!(count("HeadObject", "2xx"), 1.0);
    assert_eq!(count("HeadObject", "aborted"), 0.0);
}

/// Counters with a fixed list of label values exist at zero from the start, so that
/// `increase()` sees their first, possibly only, event.
#[tokio::test]
async fn fixed_label_counters_start_at_zero() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = common::client();
    let all = samples(&scrape(&c, &s).await);
    for kind in ["timeout", "unreachable", "corrupt", "kept_different_bytes"] {
        assert_eq!(
            sum(
                &all,
                "fencegate_backend_errors_total",
                &[("operation", "commit"), ("kind", kind)]
            ),
            0.0
        );
    }
}

/// A scripted mix, each request counted by surface, operation, status and error code: a stale
/// write, a 428, a bad signature, an admin advance, a whole GET and a HEAD 404. The code label
/// tells apart refusals that share a status class.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mix_is_counted_by_status_and_code() {
    use common::sign::{send, Creds};
    const APP: Creds = Creds {
        key: "app-key",
        secret: "app-secret-0123456789",
    };
    const OPS: Creds = Creds {
        key: "ops-key",
        secret: "ops-secret-0123456789",
    };
    const FORGED: Creds = Creds {
        key: "app-key",
        secret: "not-the-secret-0123",
    };
    let dir = tempfile::tempdir().unwrap();
    let config = r#"
[keys.ops]
access_key_id = "ops-key"
secret_access_key = "ops-secret-0123456789"
admin = true

[keys.app]
access_key_id = "app-key"
secret_access_key = "app-secret-0123456789"
buckets = { "default" = ["read", "write"], "strict" = ["read", "write"] }

[buckets.default]
[buckets.strict]
fencing = "required"
"#;
    let s = Server::start(&dir.path().join("data"), Some(config));
    let c = common::client();
    let put = |bucket: &str, token: Option<&str>| {
        let mut r = c
            .put(s.object_url(bucket, "k"))
            .body("bytes")
            .header("content-type", "text/plain");
        if let Some(t) = token {
            r = r.header("Fencing-Token", t);
        }
        r
    };
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(
        status(send(&c, put("default", Some("5")), Some(APP)).await),
        200
    );
    assert_eq!(
        status(send(&c, put("default", Some("4")), Some(APP)).await),
        409
    );
    assert_eq!(status(send(&c, put("strict", None), Some(APP)).await), 428);
    assert_eq!(
        status(send(&c, put("default", Some("6")), Some(FORGED)).await),
        403
    );
    // Its access line names the key the bad signature claims, and the code.
    let forged = s.awaited_log_lines(&["served", "status=403"], 1);
    assert!(
        forged[0].contains("access_key=\"app-key\""),
        "{}",
        forged[0]
    );
    assert!(!forged[0].contains("principal="), "{}", forged[0]);
    assert!(
        forged[0].contains("code=\"SignatureDoesNotMatch\""),
        "{}",
        forged[0]
    );
    let advance = c.post(s.url("/admin/fences/default/k?advance_to=9"));
    assert_eq!(status(send(&c, advance, Some(OPS)).await), 200);
    let got = send(&c, c.get(s.object_url("default", "k")), Some(APP)).await;
    assert_eq!(got.status(), 200);
    assert_eq!(got.bytes().await.unwrap().as_ref(), b"bytes");
    let head = send(&c, c.head(s.url("/default/absent")), Some(APP)).await;
    assert_eq!(head.status(), 404);
    let scrape = send(&c, c.get(s.url("/metrics")), Some(OPS)).await;
    assert_eq!(scrape.status(), 200);
    let all = samples(&scrape.text().await.unwrap());
    let counted = |surface: &str, operation: &str, status: &str, code: &str| {
        sum(
            &all,
            "fencegate_http_requests_total",
            &[
                ("surface", surface),
                ("operation", operation),
                ("status", status),
                ("code", code),
            ],
        )
    };
    assert_eq!(counted("native", "put_object", "200", "none"), 1.0);
    assert_eq!(
        counted("native", "put_object", "409", "StaleFencingToken"),
        1.0
    );
    assert_eq!(
        counted("native", "put_object", "428", "FencingTokenRequired"),
        1.0
    );
    assert_eq!(
        counted("native", "put_object", "403", "SignatureDoesNotMatch"),
        1.0
    );
    assert_eq!(counted("admin", "advance_fence", "200", "none"), 1.0);
    assert_eq!(counted("native", "get_object", "200", "none"), 1.0);
    assert_eq!(counted("s3", "HeadObject", "404", "NoSuchKey"), 1.0);
    // The same requests in the duration histogram, by outcome; the whole GET is no abort.
    let timed = |operation: &str, outcome: &str| {
        sum(
            &all,
            "fencegate_request_duration_seconds_count",
            &[("operation", operation), ("outcome", outcome)],
        )
    };
    assert_eq!(timed("put_object", "4xx"), 3.0);
    assert_eq!(timed("get_object", "2xx"), 1.0);
    assert_eq!(timed("HeadObject", "4xx"), 1.0);
    assert_eq!(
        sum(
            &all,
            "fencegate_stale_rejections_total",
            &[("bucket", "default")]
        ),
        1.0
    );
    // The connection gauge sees the scrape's own connection, within the budget.
    let open = sum(&all, "fencegate_connections_open", &[]);
    let limit = sum(&all, "fencegate_connections_limit", &[]);
    assert!(open >= 1.0 && open <= limit, "{open} of {limit}");
    // The process and the disk, from the first scrape on.
    assert!(sum(&all, "process_resident_memory_bytes", &[]) > 1e6);
    assert!(sum(&all, "process_open_fds", &[]) >= 3.0);
    assert!(sum(&all, "process_start_time_seconds", &[]) > 1.7e9);
    assert!(sum(&all, "fencegate_data_dir_free_bytes", &[]) > 0.0);
    assert!(sum(&all, "fencegate_fence_table_disk_bytes", &[]) > 0.0);
    assert_eq!(sum(&all, "fencegate_fence_table_tombstones", &[]), 0.0);
}

/// Refusals made before a handler runs are counted and logged like any other: requests hyper
/// cannot parse (it answers them itself), a wrong method on an admin route of the shared
/// listener, and a lease body past its limit, each with the JSON and code the others have.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_before_any_handler_are_counted_with_their_codes() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = common::client();
    let (status, _) =
        common::raw_request(s.addr, "GET /healthz HTTP/1.1\r\nUser-Agent: a\x0bb", b"");
    assert_eq!(status, 400);
    let many: String = (0..120).map(|i| format!("\r\nX-H{i}: v")).collect();
    let (status, _) = common::raw_request(s.addr, &format!("GET /healthz HTTP/1.1{many}"), b"");
    assert_eq!(status, 431);
    let lines = s.awaited_log_lines(&["served", "operation=\"unparsed\""], 2);
    assert!(lines.iter().any(|l| l.contains("status=400")), "{lines:?}");
    assert!(lines.iter().any(|l| l.contains("status=431")), "{lines:?}");
    assert!(
        lines.iter().all(|l| l.contains("client=127.0.0.1:")),
        "{lines:?}"
    );

    let wrong = c.put(s.url("/admin/leases")).send().await.unwrap();
    assert_eq!(wrong.status(), 405);
    let body: serde_json::Value = wrong.json().await.unwrap();
    assert_eq!(body["error"], "MethodNotAllowed", "{body}");
    let wrong = c.put(s.url("/metrics")).send().await.unwrap();
    assert_eq!(wrong.status(), 405);

    let big = format!(
        "{{\"holder\": \"w\", \"ttl_ms\": 1000, \"pad\": \"{}\"}}",
        "x".repeat(100_000)
    );
    let refused = c
        .post(s.url("/v1/leases/big"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 413);
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"], "EntityTooLarge", "{body}");
    // Just under the limit is read, and refused for what it says.
    let padded = format!(
        "{{\"holder\": \"w\", \"ttl_ms\": 1000, \"pad\": \"{}\"}}",
        "x".repeat(60_000)
    );
    let read = c
        .post(s.url("/v1/leases/big"))
        .body(padded)
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 400);

    let all = samples(&scrape(&c, &s).await);
    let counted = |surface: &str, operation: &str, status: &str, code: &str| {
        sum(
            &all,
            "fencegate_http_requests_total",
            &[
                ("surface", surface),
                ("operation", operation),
                ("status", status),
                ("code", code),
            ],
        )
    };
    assert_eq!(counted("other", "unparsed", "400", "none"), 1.0);
    assert_eq!(counted("other", "unparsed", "431", "none"), 1.0);
    assert_eq!(counted("admin", "other", "405", "MethodNotAllowed"), 1.0);
    assert_eq!(counted("admin", "metrics", "405", "MethodNotAllowed"), 1.0);
    assert_eq!(counted("leases", "acquire", "413", "EntityTooLarge"), 1.0);
}

/// Prometheus's own checker accepts the exposition (names, types, HELP) and the alerting
/// rules (`promtool`, from Debian's prometheus, which scripts/test installs).
#[tokio::test]
async fn promtool_accepts_the_exposition_and_the_alerts() {
    let (text, _dir) = exercised().await;
    let run = |args: &[&str], input: Option<&str>| {
        use std::io::Write;
        let mut child = std::process::Command::new("promtool")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("promtool is not installed: run scripts/test, which installs it (apt-get install prometheus)");
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.unwrap_or("").as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), said)
    };
    let (ok, said) = run(&["check", "metrics"], Some(&text));
    // Lint findings are printed, and fail the check, as problems with the exposition.
    assert!(ok && said.trim().is_empty(), "{said}");
    let (ok, said) = run(&["check", "rules", "docs/alerts.yaml"], None);
    assert!(ok, "{said}");
    // The alerts' own unit tests: each fires on the pattern it is named for.
    let (ok, said) = run(&["test", "rules", "docs/alerts.test.yaml"], None);
    assert!(ok, "{said}");
}

/// Every PromQL expression of docs/alerts.yaml (each `expr:`, block scalars included).
fn alert_expressions(yaml: &str) -> Vec<String> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut exprs = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(rest) = line.trim_start().strip_prefix("expr:") else {
            continue;
        };
        let indent = line.len() - line.trim_start().len();
        let rest = rest.trim();
        if rest != "|" && rest != ">-" {
            exprs.push(rest.to_string());
            continue;
        }
        let body: Vec<&str> = lines[i + 1..]
            .iter()
            .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent)
            .copied()
            .collect();
        exprs.push(body.join("\n"));
    }
    exprs
}

/// The labels `expr` names on each series (`name{label=...}`) and in its `by (...)` and
/// `without (...)` clauses, checked against the families it uses: a panel or an alert that
/// groups by a label its family lacks shows nothing, silently.
fn check_labels(doc: &str, expr: &str) {
    let families: Vec<&fencegate::metrics::Family> = names_in(expr)
        .iter()
        .map(|n| family_of(n).unwrap_or_else(|| panic!("{doc}: {n} is not exported: {expr}")))
        .collect();
    // Prometheus's own `up` is the only series not fencegate's.
    assert!(
        !families.is_empty() || expr.starts_with("up{"),
        "{doc}: no family in {expr}"
    );
    // Prometheus adds these to every series it scrapes; `le` is a histogram bucket's.
    let scraped = ["instance", "job", "le"];
    let allowed = |label: &str| {
        scraped.contains(&label) || families.iter().any(|f| f.labels.contains(&label))
    };
    for name in names_in(expr) {
        let family = family_of(&name).unwrap();
        let mut rest = expr;
        while let Some(at) = rest.find(&name) {
            let tail = &rest[at + name.len()..];
            rest = tail;
            let Some(matchers) = tail.strip_prefix('{') else {
                continue;
            };
            let matchers = &matchers[..matchers.find('}').expect("matchers end with }")];
            for m in matchers.split(',').filter(|m| !m.trim().is_empty()) {
                let label = m.split(['=', '!', '~']).next().unwrap().trim().to_string();
                assert!(
                    scraped.contains(&label.as_str()) || family.labels.contains(&label.as_str()),
                    "{doc}: {name} has no label {label}: {expr}"
                );
            }
        }
    }
    for clause in ["by (", "without ("] {
        for part in expr.split(clause).skip(1) {
            let labels = &part[..part.find(')').expect("a clause ends with )")];
            for label in labels.split(',').map(str::trim).filter(|l| !l.is_empty()) {
                assert!(allowed(label), "{doc}: no family has {label}: {expr}");
            }
        }
    }
    // On a shared fence table every instance counts every lease and every expiry: summing
    // over instances multiplies them.
    for name in ["fencegate_leases_held", "fencegate_lease_expiries_total"] {
        if expr.contains(name) {
            assert!(
                !expr.trim_start().starts_with("sum"),
                "{doc}: take the max of {name} over instances, not the sum: {expr}"
            );
        }
    }
}

#[test]
fn the_dashboard_and_the_alerts_use_only_labels_their_families_have() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let alerts = std::fs::read_to_string(root.join("docs/alerts.yaml")).unwrap();
    let exprs = alert_expressions(&alerts);
    assert!(exprs.len() >= 20, "{exprs:?}");
    for expr in &exprs {
        check_labels("docs/alerts.yaml", expr);
    }
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("docs/grafana-dashboard.json")).unwrap(),
    )
    .unwrap();
    let mut count = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("every target has an expr");
            check_labels(&format!("dashboard panel {}", panel["title"]), expr);
            count += 1;
        }
    }
    assert!(count >= 30, "{count}");
}

/// A client that hangs up in the middle of its upload, on the native API and on S3, is
/// `aborted`, and still counted by the status fencegate answered (400 `IncompleteBody`): a
/// client that only half-closes reads that answer, and a refusal must stay countable by its
/// status. A body that breaks while the connection stays open (a malformed chunk) is the
/// client's mistake, answered and counted as a 400, not aborted.
#[tokio::test]
async fn an_upload_the_client_abandons_is_aborted() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    let c = common::client();
    for path in ["/v1/objects/default/left", "/default/left-s3"] {
        let mut conn = tokio::net::TcpStream::connect(s.addr).await.unwrap();
        let head = format!(
            "PUT {path} HTTP/1.1\r\nhost: x\r\nfencing-token: 5\r\ncontent-length: 1048576\r\n\r\n"
        );
        conn.write_all(head.as_bytes()).await.unwrap();
        conn.write_all(&vec![1u8; 65536]).await.unwrap();
        drop(conn);
    }
    // A malformed chunk: the connection stays open and the 400 is read.
    let mut conn = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    conn.write_all(
        b"PUT /v1/objects/default/bad-chunk HTTP/1.1\r\nhost: x\r\nfencing-token: 5\r\ntransfer-encoding: chunked\r\n\r\n4\r\nabcd\r\nzz\r\n",
    )
    .await
    .unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut answer))
        .await
        .expect("an answer to a malformed chunk")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).into_owned();
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    // A half-close mid-body: the client still reads the answer.
    let mut conn = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    conn.write_all(b"PUT /v1/objects/default/half HTTP/1.1\r\nhost: x\r\nfencing-token: 5\r\ncontent-length: 100\r\n\r\n")
        .await
        .unwrap();
    conn.write_all(&[2u8; 50]).await.unwrap();
    conn.shutdown().await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), conn.read_to_end(&mut answer))
        .await
        .expect("an answer to a half-closed upload")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    assert!(
        answer.starts_with("HTTP/1.1 400") && answer.contains("IncompleteBody"),
        "{answer}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let all = loop {
        let all = samples(&scrape(&c, &s).await);
        // Every one of the four requests recorded in both families (three aborted, one
        // answered): a request's two series are updated one after the other, and a scrape
        // can fall between them.
        let aborted = all
            .iter()
            .filter(|x| x.name == "fencegate_request_duration_seconds_count")
            .filter(|x| x.labels.get("outcome").map(String::as_str) == Some("aborted"))
            .map(|x| x.value)
            .sum::<f64>();
        let recorded = all
            .iter()
            .filter(|x| x.name == "fencegate_http_requests_total")
            .filter(|x| x.labels.get("status").map(String::as_str) == Some("400"))
            .map(|x| x.value)
            .sum::<f64>();
        if (recorded >= 4.0 && aborted >= 3.0) || std::time::Instant::now() > deadline {
            break all;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let count = |name: &str, op: &str, label: &str, value: &str| {
        all.iter()
            .filter(|x| x.name == name)
            .filter(|x| x.labels.get("operation").map(String::as_str) == Some(op))
            .filter(|x| x.labels.get(label).map(String::as_str) == Some(value))
            .map(|x| x.value)
            .sum::<f64>()
    };
    let total = "fencegate_http_requests_total";
    let duration = "fencegate_request_duration_seconds_count";
    // The hang-up, the half-close and the malformed chunk: three 400 `IncompleteBody` on the
    // native API, of which the first two are aborted.
    assert_eq!(count(total, "put_object", "status", "400"), 3.0);
    assert_eq!(count(total, "put_object", "code", "IncompleteBody"), 3.0);
    assert_eq!(count(duration, "put_object", "outcome", "aborted"), 2.0);
    assert_eq!(count(duration, "put_object", "outcome", "4xx"), 1.0);
    assert_eq!(count(total, "PutObject", "status", "400"), 1.0);
    assert_eq!(count(duration, "PutObject", "outcome", "aborted"), 1.0);
    assert_eq!(count(total, "put_object", "status", "none"), 0.0);
    let lines = s.awaited_log_lines(&["served", "status=400", "aborted=true"], 3);
    assert_eq!(lines.len(), 3, "{lines:?}");
}
