//! Lease credentials do no more than the key that acquired the lease (docs/security.md,
//! "What `lease` allows"): minted by keys holding `lease` with every combination of `read`,
//! `write`, `delete` and `fence` on a bucket, each credential is tried at everything the S3
//! surface offers and must be refused whatever its key may not do; a reload that narrows or
//! removes the key narrows or ends its live credentials; and through a second instance of a
//! cluster the same holds.

use crate::common;
use common::sign::{send, send_json, Creds};
use common::Server;
use serde_json::json;

const OWNER: Creds = Creds {
    key: "owner-key",
    secret: "owner-secret-0123456",
};

/// The permissions a key may hold beside `lease`, each in or out of a combination.
const OTHERS: [&str; 4] = ["read", "write", "delete", "fence"];

fn combination(i: usize) -> Vec<&'static str> {
    let mut perms = vec!["lease"];
    perms.extend((0..4).filter(|b| i & (1 << b) != 0).map(|b| OTHERS[b]));
    perms
}

fn key_section(name: &str, perms: &[&str]) -> String {
    let perms: Vec<String> = perms.iter().map(|p| format!("{p:?}")).collect();
    format!(
        "[keys.{name}]\naccess_key_id = \"{name}-key\"\nsecret_access_key = \"{name}-secret-0123456\"\nbuckets = {{ \"vault\" = [{}] }}\nlease_names = [\"*\"]\n\n",
        perms.join(", ")
    )
}

fn creds_of(name: &str) -> Creds {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    Creds {
        key: leak(format!("{name}-key")),
        secret: leak(format!("{name}-secret-0123456")),
    }
}

const OWNER_KEY: &str = "[keys.owner]\naccess_key_id = \"owner-key\"\nsecret_access_key = \"owner-secret-0123456\"\nadmin = true\n\n[buckets.vault]\n\n";

/// Acquires lease `name` bound to `vault/key` as `who`; the status and the answer.
async fn acquire(
    c: &reqwest::Client,
    url: &str,
    who: Creds,
    key: &str,
    credentials: bool,
) -> (u16, serde_json::Value) {
    let req = c.post(url).json(&json!({
        "holder": "h", "ttl_ms": 60000, "bucket": "vault", "key": key,
        "s3_credentials": credentials
    }));
    send_json(c, req, Some(who)).await
}

/// The status of one S3 request signed with `creds`.
async fn s3(c: &reqwest::Client, req: reqwest::RequestBuilder, creds: Creds) -> u16 {
    send(c, req, Some(creds)).await.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_credentials_never_exceed_the_minting_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = OWNER_KEY.to_string();
    for i in 0..16 {
        config.push_str(&key_section(&format!("k{i}"), &combination(i)));
    }
    let s = Server::start(&dir.path().join("data"), Some(&config));
    let c = common::client();
    // Another writer's object in the same bucket.
    let put = c
        .put(s.url("/vault/payroll.csv"))
        .header("Fencing-Token", "1")
        .body("salaries");
    assert_eq!(s3(&c, put, OWNER).await, 200);

    let mut table = String::new();
    let mut wrong = Vec::new();
    for i in 0..16 {
        let perms = combination(i);
        let has = |p: &str| perms.contains(&p);
        let notes = format!("notes-{i}.txt");
        let url = s.url(&format!("/v1/leases/l{i}"));
        let (status, grant) = acquire(&c, &url, creds_of(&format!("k{i}")), &notes, true).await;
        if !has("write") {
            // Credentials that could write nothing are not minted; the lease itself is
            // `lease`'s to take, bound or not.
            let refused = status == 403 && grant["error"] == "AccessDenied";
            let told = grant["message"]
                .as_str()
                .is_some_and(|m| m.contains("s3_credentials"));
            if !refused || !told {
                wrong.push(format!("{perms:?}: minting answered {status} {grant}"));
            }
            let (bound, body) = acquire(&c, &url, creds_of(&format!("k{i}")), &notes, false).await;
            if bound != 200 {
                wrong.push(format!(
                    "{perms:?}: a bound lease without credentials: {bound} {body}"
                ));
            }
            table.push_str(&format!("{perms:?}: credentials refused at the acquire\n"));
            continue;
        }
        assert_eq!(status, 200, "{perms:?}: {grant}");
        let lease = common::sign::lease_creds(&grant);
        let cells = [
            (
                "GET another's object",
                c.get(s.url("/vault/payroll.csv")),
                has("read"),
            ),
            (
                "HEAD another's object",
                c.head(s.url("/vault/payroll.csv")),
                has("read"),
            ),
            (
                "list the bucket",
                c.get(s.url("/vault?list-type=2")),
                has("read"),
            ),
            (
                "GET its tags",
                c.get(s.url("/vault/payroll.csv?tagging")),
                has("read"),
            ),
            (
                "PUT the leased key",
                c.put(s.url(&format!("/vault/{notes}"))).body("n"),
                true,
            ),
            (
                "PUT another's object",
                c.put(s.url("/vault/payroll.csv")).body("x"),
                false,
            ),
            (
                "DELETE the leased key",
                c.delete(s.url(&format!("/vault/{notes}"))),
                has("delete"),
            ),
            (
                "DELETE another's object",
                c.delete(s.url("/vault/payroll.csv")),
                false,
            ),
            ("create a bucket", c.put(s.url("/elsewhere")), false),
        ];
        for (what, req, allowed) in cells {
            let status = s3(&c, req, lease).await;
            let ok = if allowed { status < 300 } else { status == 403 };
            table.push_str(&format!("{perms:?}: {what}: {status}\n"));
            if !ok {
                wrong.push(format!(
                    "{perms:?}: {what} answered {status}, allowed = {allowed}"
                ));
            }
        }
    }
    eprintln!("{table}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // The object another writer owns is as it was.
    let resp = send(&c, c.get(s.url("/vault/payroll.csv")), Some(OWNER)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "salaries");
}

/// The key's rights are read at each request: a reload that takes `read` from the key takes it
/// from its live credentials; one that removes the key ends them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_narrows_live_lease_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let broad = key_section("k", &["lease", "read", "write"]);
    let s = Server::start(&data, Some(&format!("{OWNER_KEY}{broad}")));
    let file = data.with_extension("toml");
    let c = common::client();
    let put = c
        .put(s.url("/vault/payroll.csv"))
        .header("Fencing-Token", "1")
        .body("salaries");
    assert_eq!(s3(&c, put, OWNER).await, 200);
    let url = s.url("/v1/leases/narrowed");
    let (status, grant) = acquire(&c, &url, creds_of("k"), "notes.txt", true).await;
    assert_eq!(status, 200, "{grant}");
    let lease = common::sign::lease_creds(&grant);
    let read = || c.get(s.url("/vault/payroll.csv"));
    let write = || c.put(s.url("/vault/notes.txt")).body("n");
    assert_eq!(s3(&c, read(), lease).await, 200);

    let reload = |text: String| {
        let (c, file, url) = (c.clone(), file.clone(), s.url("/admin/reload"));
        async move {
            std::fs::write(&file, text).unwrap();
            let (status, body) = send_json(&c, c.post(url), Some(OWNER)).await;
            assert_eq!(status, 200, "{body}");
        }
    };
    reload(format!(
        "{OWNER_KEY}{}",
        key_section("k", &["lease", "write"])
    ))
    .await;
    assert_eq!(s3(&c, read(), lease).await, 403, "read taken by the reload");
    assert_eq!(s3(&c, write(), lease).await, 200, "write kept");
    reload(OWNER_KEY.to_string()).await;
    assert_eq!(s3(&c, write(), lease).await, 403, "the key is gone");
}

/// In cluster mode the credentials come from the shared table; the instance that serves them
/// checks them against its own key table just the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_credentials_are_bounded_through_another_instance() {
    let _serial = crate::cluster::SERIAL.lock().await;
    let cluster = common::cluster::Cluster::up(2, "ministack");
    let keys = format!(
        "\n{}{}",
        key_section("writer", &["lease", "write"]),
        key_section("locker", &["lease"])
    )
    .replace("\"vault\"", "\"default\"");
    for n in ["fg1", "fg2"] {
        let file = cluster.dir.path().join(format!("{n}.toml"));
        let mut text = std::fs::read_to_string(&file).unwrap();
        text.push_str(&keys);
        std::fs::write(&file, text).unwrap();
        // Keys after development mode need a restart.
        cluster.signal(n, "TERM");
        cluster.start(n);
    }
    let c = common::client();
    let bound = |who: &str, credentials: bool| {
        let req = c
            .post(cluster.url(1, "/v1/leases/cluster-bound"))
            .json(&json!({
                "holder": who, "ttl_ms": 30000, "bucket": "default", "key": "leased",
                "s3_credentials": credentials
            }));
        send_json(&c, req, Some(creds_of(who)))
    };
    let (status, body) = bound("locker", true).await;
    assert_eq!(status, 403, "a lease-only key mints no credentials: {body}");
    let (status, grant) = bound("writer", true).await;
    assert_eq!(status, 200, "{grant}\n{}", cluster.logs());
    let lease = common::sign::lease_creds(&grant);
    let through_two = |req: reqwest::RequestBuilder| send(&c, req, Some(lease));
    let wrote = through_two(c.put(cluster.url(2, "/default/leased")).body("a"))
        .await
        .status();
    assert_eq!(wrote, 200, "{}", cluster.logs());
    let read = through_two(c.get(cluster.url(2, "/default/leased")))
        .await
        .status();
    assert_eq!(read, 403, "the writer key holds no read");
    let listed = through_two(c.get(cluster.url(2, "/default?list-type=2")))
        .await
        .status();
    assert_eq!(listed, 403);
}

/// DeleteObjects is `delete`'s as DeleteObject is: a key that may only delete batch-deletes; one
/// that may only read is let in and refused key by key; one that may do neither is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_objects_needs_delete_or_read_and_deletes_only_with_delete() {
    use md5::{Digest, Md5};
    let dir = tempfile::tempdir().unwrap();
    let keys: String = [
        ("deleter", vec!["delete"]),
        ("reader", vec!["read"]),
        ("writer", vec!["write"]),
    ]
    .iter()
    .map(|(name, perms)| key_section(name, perms))
    .collect();
    let config = format!("{OWNER_KEY}[buckets.loose]\nfencing = \"optional\"\n\n{keys}")
        .replace("\"vault\" = [", "\"loose\" = [");
    let s = Server::start(&dir.path().join("data"), Some(&config));
    let c = common::client();
    let batch = |key: &str| {
        let xml = format!("<Delete><Object><Key>{key}</Key></Object></Delete>");
        let md5 = base64::Engine::encode(
            &base64::engine::general_purpose::STANDARD,
            Md5::digest(xml.as_bytes()),
        );
        c.post(s.url("/loose?delete"))
            .header("content-md5", md5)
            .body(xml)
    };
    for key in ["d", "r", "w"] {
        let put = c.put(s.url(&format!("/loose/{key}"))).body("x");
        assert_eq!(s3(&c, put, OWNER).await, 200);
    }
    let resp = send(&c, batch("d"), Some(creds_of("deleter"))).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("<Deleted>"));
    let resp = send(&c, batch("r"), Some(creds_of("reader"))).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("AccessDenied"));
    assert_eq!(s3(&c, batch("w"), creds_of("writer")).await, 403);
    let head = |key: &str| c.head(s.url(&format!("/loose/{key}")));
    assert_eq!(s3(&c, head("d"), OWNER).await, 404);
    assert_eq!(s3(&c, head("r"), OWNER).await, 200);
    assert_eq!(s3(&c, head("w"), OWNER).await, 200);
}
