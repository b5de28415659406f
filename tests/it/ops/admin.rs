//! The admin surface (docs/security.md and docs/operations.md, "The admin surface"): its own
//! listener with a bearer token or admin keys, `/metrics` moved there, live leases listed and
//! revoked, a scope fenced at the top by mistake reset, each change an audit line naming who
//! did it.

use crate::common;
use common::sign::{send_json as call, Creds};
use common::Server;
use serde_json::json;

pub(crate) const TOKEN: &str = "admin-bearer-token-for-the-tests-0001";
const ADMIN: Creds = Creds {
    key: "ops-key",
    secret: "ops-secret-0123456",
};
pub(crate) const WRITER: Creds = Creds {
    key: "app-key",
    secret: "app-secret-0123456",
};

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn config(token_file: &std::path::Path, admin_port: u16) -> String {
    format!(
        r#"
[admin]
listen = "127.0.0.1:{admin_port}"
bearer_token_file = "{}"

[keys.ops]
access_key_id = "ops-key"
secret_access_key = "ops-secret-0123456"
admin = true

[keys.app]
access_key_id = "app-key"
secret_access_key = "app-secret-0123456"
buckets = {{ "default" = ["read", "write", "delete", "fence", "lease"], "lenient" = ["read", "write"], "made-*" = ["read", "write", "delete"] }}
lease_names = ["*"]

[buckets.default]
[buckets.lenient]
on_bypass = "adopt"

[bucket_defaults]
"#,
        token_file.display()
    )
}

/// An instance with keys and an admin listener behind the bearer token [`TOKEN`].
pub(crate) struct Fixture {
    pub s: Server,
    pub c: reqwest::Client,
    /// The admin listener's base URL.
    pub admin: String,
    _dir: tempfile::TempDir,
}

impl Fixture {
    pub fn start() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let token_file = dir.path().join("token");
        std::fs::write(&token_file, TOKEN).unwrap();
        let port = free_port();
        let s = Server::start(&dir.path().join("data"), Some(&config(&token_file, port)));
        Fixture {
            s,
            c: common::client(),
            admin: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_live_on_the_admin_listener_behind_its_credentials() {
    let fx = Fixture::start();
    let (c, s) = (&fx.c, &fx.s);
    // The native listener points to the admin one, whoever asks.
    let (status, body) = call(c, c.get(s.url("/metrics")), Some(ADMIN)).await;
    assert_eq!(status, 404);
    assert!(body.to_string().contains("admin listener"), "{body}");
    let (status, _) = call(c, c.get(s.url("/admin/leases")), Some(ADMIN)).await;
    assert_eq!(status, 404);

    let metrics = format!("{}/metrics", fx.admin);
    assert_eq!(call(c, c.get(&metrics), None).await.0, 401);
    assert_eq!(
        call(c, c.get(&metrics).bearer_auth("wrong-token"), None)
            .await
            .0,
        403
    );
    assert_eq!(call(c, c.get(&metrics), Some(WRITER)).await.0, 403);
    let (status, body) = call(c, c.get(&metrics).bearer_auth(TOKEN), None).await;
    assert_eq!(status, 200);
    assert!(body.as_str().unwrap().contains("fencegate_"), "{body}");
    assert_eq!(call(c, c.get(&metrics), Some(ADMIN)).await.0, 200);
    // The admin listener serves administration only.
    let (status, _) = call(
        c,
        c.get(format!("{}/v1/objects/default/k", fx.admin)),
        Some(ADMIN),
    )
    .await;
    assert_eq!(status, 404);
    assert_eq!(
        call(c, c.get(format!("{}/healthz", fx.admin)), None)
            .await
            .0,
        200
    );
    let (status, body) = call(
        c,
        c.post(format!("{}/admin/reload", fx.admin))
            .bearer_auth(TOKEN),
        None,
    )
    .await;
    assert_eq!((status, body["tls"].as_str()), (200, Some("off")));
    assert!(!fx
        .s
        .awaited_log_lines(&["admin authentication failed"], 1)
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_fenced_at_the_top_by_mistake_is_reset_and_audited() {
    let fx = Fixture::start();
    let (c, s) = (&fx.c, &fx.s);
    let put = |token: u64| {
        c.put(s.object_url("default", "report.csv"))
            .header("Fencing-Token", token.to_string())
            .body(format!("v{token}"))
    };
    assert_eq!(call(c, put(5), Some(WRITER)).await.0, 200);
    // A bad client writes with u64::MAX: the scope is dead for every real holder.
    assert_eq!(call(c, put(u64::MAX), Some(WRITER)).await.0, 200);
    assert_eq!(call(c, put(6), Some(WRITER)).await.0, 409);

    let reset = |to: &str| format!("{}/admin/fences/default/report.csv?reset_to={to}", fx.admin);
    // Counted on a series of its own, there at zero before the first reset after the start.
    let resets = || async {
        let text = c
            .get(format!("{}/metrics", fx.admin))
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.lines()
            .find_map(|l| l.strip_prefix("fencegate_fence_resets_total "))
            .unwrap_or_else(|| panic!("no fencegate_fence_resets_total in\n{text}"))
            .parse::<f64>()
            .unwrap()
    };
    assert_eq!(resets().await, 0.0);
    // Only an admin may, and only downwards.
    assert_eq!(call(c, c.post(reset("5")), Some(WRITER)).await.0, 403);
    let (status, body) = call(c, c.post(reset("not-a-number")), Some(ADMIN)).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = call(c, c.post(reset("")), Some(ADMIN)).await;
    assert_eq!(status, 400, "{body}");
    let (status, body) = call(c, c.post(reset("5")), Some(ADMIN)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["was"], json!(u64::MAX));
    assert_eq!(body["fence"]["highest"], 5);
    let (status, body) = call(c, c.post(reset("5")), Some(ADMIN)).await;
    assert_eq!(status, 400, "a reset that does not lower: {body}");
    assert_eq!(
        resets().await,
        1.0,
        "one reset lowered the fence; the refusals did not count"
    );
    assert_eq!(
        fx.s.awaited_log_lines(
            &["fence reset by an admin", "key:ops", "18446744073709551615"],
            1
        )
        .len(),
        1,
        "one audit line names the admin and the value it replaced"
    );
    // The real holders go on, and the fence still fences.
    assert_eq!(call(c, put(6), Some(WRITER)).await.0, 200);
    assert_eq!(call(c, put(5), Some(WRITER)).await.0, 409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_lists_and_revokes_leases() {
    let fx = Fixture::start();
    let (c, s) = (&fx.c, &fx.s);
    let acquire = |holder: &str| {
        c.post(s.url("/v1/leases/nightly")).json(&json!({
            "holder": holder, "ttl_ms": 600000, "bucket": "default", "key": "out.bin",
            "s3_credentials": true
        }))
    };
    let (status, grant) = call(c, acquire("stuck-worker"), Some(WRITER)).await;
    assert_eq!(status, 200, "{grant}");
    let lease_creds = common::sign::lease_creds(&grant);
    let s3_put = || c.put(s.url("/default/out.bin")).body("x");
    assert_eq!(call(c, s3_put(), Some(lease_creds)).await.0, 200);

    let (status, list) = call(
        c,
        c.get(format!("{}/admin/leases", fx.admin))
            .bearer_auth(TOKEN),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let leases = list["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 1, "{list}");
    assert_eq!(leases[0]["holder"], "stuck-worker");
    assert_eq!(leases[0]["principal"], "key:app");
    assert!(leases[0].get("lease_secret").is_none(), "{list}");
    assert_eq!(leases[0]["s3_credentials"]["secret_access_key"], "<hidden>");

    // Another holder waits; the admin revokes; it gets the lease at once, and the revoked
    // credentials stop working at once (no grace after a revoke).
    let (status, _) = call(c, acquire("next-worker"), Some(WRITER)).await;
    assert_eq!(status, 409);
    let revoke = format!("{}/admin/leases/nightly", fx.admin);
    assert_eq!(call(c, c.delete(&revoke), Some(WRITER)).await.0, 403);
    let (status, body) = call(c, c.delete(&revoke), Some(ADMIN)).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["lease"]["holder"], "stuck-worker");
    assert_eq!(body["credentials"], 1);
    assert_eq!(call(c, c.delete(&revoke), Some(ADMIN)).await.0, 404);
    let (status, _) = call(c, s3_put(), Some(lease_creds)).await;
    assert_eq!(status, 403);
    let (status, next) = call(c, acquire("next-worker"), Some(WRITER)).await;
    assert_eq!(status, 200, "{next}");
    assert!(next["token"].as_u64() > grant["token"].as_u64());
    assert_eq!(
        fx.s.awaited_log_lines(&["lease revoked", "stuck-worker", "key:ops"], 1)
            .len(),
        1
    );
}

#[test]
fn an_exposed_admin_listener_needs_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(&config, "[admin]\nlisten = \"0.0.0.0:0\"\n").unwrap();
    let out = std::process::Command::new(common::binary())
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("0.0.0.0") && err.contains("[keys"), "{err}");
    // A short bearer token is refused at load, saying how to make one.
    std::fs::write(dir.path().join("t"), "short").unwrap();
    std::fs::write(
        &config,
        format!(
            "[admin]\nbearer_token_file = \"{}\"\n",
            dir.path().join("t").display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(common::binary())
        .arg("check-config")
        .arg(&config)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("openssl rand"), "{err}");
}

/// Every change an operator may have to account for is an audit line (tracing target
/// `fencegate::audit`) naming the key that made it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_lines_name_the_key() {
    let fx = Fixture::start();
    let (c, s) = (&fx.c, &fx.s);
    let audit = |what: &str| {
        s.awaited_log_lines(&["fencegate::audit", what, "key:app"], 1)
            .len()
    };
    // S3: a bucket created and deleted.
    assert_eq!(
        call(c, c.put(s.url("/made-here")), Some(WRITER)).await.0,
        200
    );
    assert_eq!(
        call(c, c.delete(s.url("/made-here")), Some(WRITER)).await.0,
        204
    );
    // Native: a fence advance and a lease grant.
    let advance = c
        .post(s.url("/v1/fences/default/a"))
        .header("Fencing-Token", "4");
    assert_eq!(call(c, advance, Some(WRITER)).await.0, 200);
    let lease = c
        .post(s.url("/v1/leases/audited"))
        .json(&json!({"holder": "h", "ttl_ms": 1000}));
    assert_eq!(call(c, lease, Some(WRITER)).await.0, 200);
    // A file changed behind fencegate's back, adopted by the next write.
    let put = |token: &str| {
        c.put(s.object_url("lenient", "doc"))
            .header("Fencing-Token", token)
            .body("through fencegate")
    };
    assert_eq!(call(c, put("1"), Some(WRITER)).await.0, 200);
    std::fs::write(s.data_dir.join("objects/lenient/doc.o"), "edited by hand").unwrap();
    assert_eq!(call(c, put("2"), Some(WRITER)).await.0, 200);
    for what in [
        "bucket created",
        "bucket deleted",
        "fence advanced",
        "lease granted",
        "adopting the backend's version",
    ] {
        assert_eq!(audit(what), 1, "{what}: {:?}", s.log_lines(&[what]));
    }
    // A failed authentication names the key it claimed, and no principal: nobody was
    // authenticated.
    let bad = Creds {
        key: "app-key",
        secret: "wrong",
    };
    assert_eq!(
        call(c, c.get(s.url("/v1/objects/default")), Some(bad))
            .await
            .0,
        403
    );
    let failed = s.awaited_log_lines(&["fencegate::audit", "authentication failed"], 1);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].contains("access_key=\"app-key\""),
        "{}",
        failed[0]
    );
    assert!(!failed[0].contains("principal="), "{}", failed[0]);
    // An S3 request with no signature: AccessDenied as on AWS, audited as what it is.
    let anonymous = c.get(s.url("/default/a")).send().await.unwrap();
    assert_eq!(anonymous.status(), 403);
    assert!(anonymous.text().await.unwrap().contains("AccessDenied"));
    assert_eq!(
        s.awaited_log_lines(&["fencegate::audit", "S3 request without credentials"], 1)
            .len(),
        1
    );
    // A denial says what was asked as the configuration spells it, not in Rust's words.
    let delete = c.delete(s.object_url("lenient", "doc"));
    assert_eq!(call(c, delete, Some(WRITER)).await.0, 403);
    let denied = s.awaited_log_lines(&["fencegate::audit", "access denied", "key:app"], 1);
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert!(
        denied[0].contains("action=\"delete lenient/doc\""),
        "{}",
        denied[0]
    );
}

/// Review round 7: credentials outlive their lease by the grace period, and a revoke ends them
/// too, after an expiry or a release; the admin's list shows the lease names they belong to.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoke_ends_credentials_still_in_their_grace() {
    let fx = Fixture::start();
    let (c, s) = (&fx.c, &fx.s);
    let (status, grant) = call(
        c,
        c.post(s.url("/v1/leases/short")).json(&json!({
            "holder": "w", "ttl_ms": 300, "bucket": "default", "key": "grace.bin",
            "s3_credentials": true
        })),
        Some(WRITER),
    )
    .await;
    assert_eq!(status, 200, "{grant}");
    let creds = common::sign::lease_creds(&grant);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let s3_put = || c.put(s.url("/default/grace.bin")).body("x");
    // Expired, but within the 30 s grace: still writing.
    assert_eq!(call(c, s3_put(), Some(creds)).await.0, 200);
    let (_, list) = call(
        c,
        c.get(format!("{}/admin/leases", fx.admin))
            .bearer_auth(TOKEN),
        None,
    )
    .await;
    assert_eq!(list["leases"].as_array().unwrap().len(), 0, "{list}");
    let in_grace = list["credentials_in_grace"].as_array().unwrap();
    assert_eq!(in_grace.len(), 1, "{list}");
    assert_eq!(in_grace[0]["lease"], "short", "{list}");
    assert_eq!(in_grace[0]["access_key_id"], creds.key, "{list}");
    assert_eq!(in_grace[0]["holder"], "w", "{list}");
    assert_eq!(in_grace[0]["token"], grant["token"], "{list}");
    assert!(!list.to_string().contains(creds.secret), "{list}");
    let revoke = format!("{}/admin/leases/short", fx.admin);
    let (status, body) = call(c, c.delete(&revoke).bearer_auth(TOKEN), None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!((body.get("lease"), &body["credentials"]), (None, &json!(1)));
    assert_eq!(call(c, s3_put(), Some(creds)).await.0, 403);
    assert_eq!(
        call(c, c.delete(&revoke).bearer_auth(TOKEN), None).await.0,
        404
    );
}

/// Review round 7: SIGHUP without TLS is a no-op, not the signal's default (the end of the
/// process): `systemctl reload` and logrotate hooks send it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_without_tls_leaves_the_server_running() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), None);
    unsafe { libc::kill(s.pid() as i32, libc::SIGHUP) };
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let c = common::client();
    assert_eq!(call(&c, c.get(s.url("/healthz")), None).await.0, 200);
    assert_eq!(
        s.awaited_log_lines(&["SIGHUP", "nothing to reload"], 1)
            .len(),
        1
    );
}

/// Holder a lets its lease with S3 credentials expire and b takes the lease without any: a's
/// credentials still work in their grace, and the admin's list shows them, with their lease,
/// token, holder and the end of their grace, although the lease's name is held again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_in_grace_are_listed_while_another_holder_has_the_lease() {
    let fx = Fixture::start();
    let (c, s) = (&fx.c, &fx.s);
    let acquire = |holder: &str, credentials: bool| {
        c.post(s.url("/v1/leases/report")).json(&json!({
            "holder": holder, "ttl_ms": 300, "bucket": "default", "key": "r.bin",
            "s3_credentials": credentials
        }))
    };
    let (status, grant_a) = call(c, acquire("a", true), Some(WRITER)).await;
    assert_eq!(status, 200, "{grant_a}");
    let creds = common::sign::lease_creds(&grant_a);
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let (status, grant_b) = call(c, acquire("b", false), Some(WRITER)).await;
    assert_eq!(status, 200, "{grant_b}");
    let (_, list) = call(
        c,
        c.get(format!("{}/admin/leases", fx.admin))
            .bearer_auth(TOKEN),
        None,
    )
    .await;
    assert_eq!(list["leases"][0]["holder"], "b", "{list}");
    let in_grace = list["credentials_in_grace"].as_array().unwrap();
    assert_eq!(in_grace.len(), 1, "{list}");
    assert_eq!(in_grace[0]["holder"], "a", "{list}");
    assert_eq!(in_grace[0]["token"], grant_a["token"], "{list}");
    assert_eq!(in_grace[0]["access_key_id"], creds.key, "{list}");
    // They do still authenticate, as the list says; b's grant raised the scope's token, so
    // the fence refuses a's late write: 403 StaleFencingToken, as every stale write signed with
    // lease credentials (not InvalidAccessKeyId: the key still works).
    let put = c.put(s.url("/default/r.bin")).body("late write by a");
    let (status, body) = call(c, put, Some(creds)).await;
    assert_eq!(status, 403, "{body}");
    assert!(body.to_string().contains("StaleFencingToken"), "{body}");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let until = in_grace[0]["works_until_ms"].as_u64().unwrap();
    assert!(until > now_ms && until <= now_ms + 31_000, "{list}");
    // The audit log ties the key id to its lease: at the grant, and when the lease ran out,
    // so a 403 for that key long after is traced without the key ever having been used.
    let key_id = format!(
        "s3_access_key_id={}",
        in_grace[0]["access_key_id"].as_str().unwrap()
    );
    let granted = s.awaited_log_lines(&["lease granted", "holder=\"a\"", &key_id], 1);
    assert_eq!(granted.len(), 1, "{granted:?}");
    let expired = s.awaited_log_lines(
        &["lease expired", "lease=report", "holder=\"a\"", &key_id],
        1,
    );
    assert_eq!(expired.len(), 1, "{expired:?}");
    // A holder is the client's to choose: quoted, it cannot pose as the line's other fields.
    let forged = c.post(s.url("/v1/leases/forged")).json(&json!({
        "holder": "w principal=admin token=999 s3_access_key_id=AKADMIN", "ttl_ms": 1000
    }));
    assert_eq!(call(c, forged, Some(WRITER)).await.0, 200);
    let line = s.awaited_log_lines(&["lease granted", "lease=forged"], 1);
    assert_eq!(line.len(), 1, "{line:?}");
    assert!(
        line[0].contains("holder=\"w principal=admin token=999 s3_access_key_id=AKADMIN\"")
            && line[0].contains("principal=key:app"),
        "{}",
        line[0]
    );
    assert_eq!(
        s.log_lines(&["lease granted", "holder=\"b\"", "s3_access_key_id=-"])
            .len(),
        1
    );
}
