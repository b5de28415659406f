//! `fencegate status` and `fencegate leases get` (docs/operations.md, "The command line"), run
//! as the real binary: the instance at a glance with every readiness check's error, exit 1
//! while it is not ready; one lease with the credentials of its earlier grants still in their
//! grace.

use super::admin::{base, cli};
use crate::common;
use crate::ops::admin::{Fixture, TOKEN, WRITER};
use common::sign::send_json as call;
use common::Server;
use serde_json::json;

/// The `FIELD VALUE` table's value for `field`.
fn field(out: &str, field: &str) -> String {
    out.lines()
        .find_map(|l| l.strip_prefix(field).filter(|rest| rest.starts_with("  ")))
        .unwrap_or_else(|| panic!("no {field:?} line in:\n{out}"))
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_instance_and_exits_1_while_it_is_not_ready() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let config = "[buckets.default]\n[buckets.spare]\nfencing = \"optional\"\n";
    let s = Server::start(&data, Some(config));
    let c = common::client();
    let url = base(&s);
    let (status, grant) = call(
        &c,
        c.post(s.url("/v1/leases/nightly"))
            .json(&json!({"holder": "w", "ttl_ms": 600000})),
        None,
    )
    .await;
    assert_eq!(status, 200, "{grant}");

    // The rows are counted by a scan at start, which may finish just after the first request.
    let mut run = cli(&url, &["status"], &[]);
    for _ in 0..50 {
        if field(&run.out, "fence table").contains("rows") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        run = cli(&url, &["status"], &[]);
    }
    assert!(run.ok, "{}\n{}", run.out, run.err);
    assert_eq!(field(&run.out, "version"), env!("CARGO_PKG_VERSION"));
    assert_eq!(field(&run.out, "mode"), "development");
    assert_eq!(field(&run.out, "ready"), "yes");
    let table = data.canonicalize().unwrap().join("fences");
    let shown = field(&run.out, "fence table");
    assert!(
        shown.starts_with(&format!("rocksdb {}", table.display())),
        "{}",
        run.out
    );
    assert!(
        shown.contains("rows") && shown.contains("on disk"),
        "{shown}"
    );
    assert_eq!(
        field(&run.out, "leases held"),
        "1 (0 S3 credentials in their grace)"
    );
    for bucket in ["default", "spare"] {
        assert!(
            run.out
                .lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>() == [bucket, "local", "fs"]),
            "{}",
            run.out
        );
    }
    let served: serde_json::Value = c
        .get(s.url("/admin/status"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let json = cli(&url, &["status", "--json"], &[]).json();
    for key in [
        "version",
        "mode",
        "ready",
        "buckets",
        "checks",
        "leases_held",
    ] {
        assert_eq!(json[key], served[key], "{key}: {json} against {served}");
    }
    assert_eq!(json["fence_store"]["kind"], "rocksdb");
    assert!(json["fence_store"].get("members").is_none(), "{json}");

    // An unusable bucket: the check's error is shown to the operator (the admin surface is
    // authenticated), and the command exits 1 naming it.
    let bucket_dir = data.join("objects").join("default");
    let away = data.join("objects").join("moved-away");
    std::fs::rename(&bucket_dir, &away).unwrap();
    std::fs::write(&bucket_dir, b"not a directory").unwrap();
    let run = cli(&url, &["status"], &[]);
    assert!(!run.ok, "{}", run.out);
    assert_eq!(field(&run.out, "ready"), "no");
    let row = run
        .out
        .lines()
        .find(|l| l.starts_with("bucket:default "))
        .unwrap_or_else(|| panic!("{}", run.out));
    assert!(
        row.contains(" no ") && row.contains("is not a directory"),
        "{row}"
    );
    assert!(
        run.err.contains("not ready: bucket:default failed"),
        "{}",
        run.err
    );
    let json = cli(&url, &["status", "--json"], &[]);
    assert!(!json.ok);
    let v: serde_json::Value = serde_json::from_str(&json.out).unwrap();
    assert_eq!(v["ready"], false, "{v}");
    std::fs::remove_file(&bucket_dir).unwrap();
    std::fs::rename(&away, &bucket_dir).unwrap();
    let run = cli(&url, &["status"], &[]);
    assert!(run.ok, "{}\n{}", run.out, run.err);
}

/// a lets its lease with S3 credentials expire and b takes it: `leases get` shows b's lease
/// and a's credential still in its grace; a name with neither is an operator's 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_get_shows_the_lease_and_its_credentials_in_their_grace() {
    let fx = Fixture::start();
    let (c, s) = (&fx.c, &fx.s);
    let env = [("FENCEGATE_ADMIN_TOKEN", TOKEN)];
    let acquire = |holder: &str, credentials: bool, ttl_ms: u64| {
        c.post(s.url("/v1/leases/report")).json(&json!({
            "holder": holder, "ttl_ms": ttl_ms, "bucket": "default", "key": "r.bin",
            "s3_credentials": credentials
        }))
    };
    let (status, grant_a) = call(c, acquire("a", true, 300), Some(WRITER)).await;
    assert_eq!(status, 200, "{grant_a}");
    let creds = common::sign::lease_creds(&grant_a);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    // Expired, nobody holds it: the credential alone is shown.
    let run = cli(&fx.admin, &["leases", "get", "report"], &env);
    assert!(run.ok, "{}", run.err);
    assert!(
        run.out.contains("no live lease is named \"report\""),
        "{}",
        run.out
    );
    assert!(run.out.contains(creds.key), "{}", run.out);
    let (status, grant_b) = call(c, acquire("b", false, 600_000), Some(WRITER)).await;
    assert_eq!(status, 200, "{grant_b}");

    let run = cli(&fx.admin, &["leases", "get", "report"], &env);
    let rows = run.rows();
    let token_b = grant_b["token"].to_string();
    assert_eq!(
        rows[0][..3],
        ["report", "b", token_b.as_str()],
        "{}",
        run.out
    );
    assert_eq!(
        rows[0][4..],
        ["default/r.bin", "-", "key:app"],
        "{}",
        run.out
    );
    let grace = run
        .out
        .lines()
        .find(|l| l.starts_with(creds.key))
        .unwrap_or_else(|| panic!("{}", run.out));
    let token_a = grant_a["token"].to_string();
    assert_eq!(
        grace.split_whitespace().collect::<Vec<_>>()[1..4],
        ["report", token_a.as_str(), "a"],
        "{grace}"
    );
    assert!(!run.out.contains(creds.secret), "{}", run.out);
    let shown = cli(&fx.admin, &["leases", "get", "report", "--json"], &env).json();
    assert_eq!(shown["lease"]["holder"], "b", "{shown}");
    assert_eq!(shown["lease"]["principal"], "key:app", "{shown}");
    assert!(shown["lease"].get("lease_secret").is_none(), "{shown}");
    assert_eq!(shown["credentials_in_grace"][0]["holder"], "a", "{shown}");
    assert!(!shown.to_string().contains(creds.secret), "{shown}");

    let run = cli(&fx.admin, &["leases", "get", "nobody-took-this"], &env);
    assert!(!run.ok);
    assert!(run.err.contains("404 NoSuchLease"), "{}", run.err);
    assert!(run.err.contains("leases list"), "{}", run.err);
    assert!(!run.err.contains("acquire it again"), "{}", run.err);
    // A name the lease grammar refuses is the client's mistake, with its code.
    let (status, body) = call(
        c,
        c.get(format!("{}/admin/leases/bad%20name", fx.admin))
            .bearer_auth(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 400, "{body}");

    // Protected mode says so.
    let status = cli(&fx.admin, &["status", "--json"], &env).json();
    assert_eq!(status["mode"], "protected", "{status}");
    assert_eq!(status["leases_held"], 1, "{status}");
    assert_eq!(status["credentials_in_grace"], 1, "{status}");
}
