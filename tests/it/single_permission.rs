//! Single-permission keys tried at every surface they could overreach through (S3 object and bucket operations, copies whose source is elsewhere, multipart,
//! tagging, attributes, native objects/fences/leases, admin). A key holds exactly one of
//! `read`, `write`, `delete`, `lease`, `fence` on bucket `vault`, nothing on `other`.

use crate::common;
use common::sign::{send, Creds};
use common::Server;
use serde_json::json;

const OWNER: Creds = Creds {
    key: "owner-key",
    secret: "owner-secret-0123456",
};

const PERMS: [&str; 5] = ["read", "write", "delete", "lease", "fence"];

fn creds_of(name: &str) -> Creds {
    let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
    Creds {
        key: leak(format!("{name}-key")),
        secret: leak(format!("{name}-secret-0123456")),
    }
}

fn config() -> String {
    let mut config = "[keys.owner]\naccess_key_id = \"owner-key\"\nsecret_access_key = \"owner-secret-0123456\"\nadmin = true\n\n[buckets.vault]\n\n[buckets.other]\n\n".to_string();
    for p in PERMS {
        config.push_str(&format!(
            "[keys.{p}]\naccess_key_id = \"{p}-key\"\nsecret_access_key = \"{p}-secret-0123456\"\nbuckets = {{ \"vault\" = [\"{p}\"] }}\nlease_names = [\"*\"]\n\n"
        ));
    }
    config
}

/// Each single-permission key at every operation: refused (403, or 401 on the native API)
/// unless its one permission is what the operation needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_permission_keys_do_nothing_beyond_their_permission() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(&dir.path().join("data"), Some(&config()));
    let c = common::client();
    for (bucket, key) in [("vault", "secret.txt"), ("other", "src.txt")] {
        let put = c
            .put(s.url(&format!("/{bucket}/{key}")))
            .header("Fencing-Token", "1")
            .body("classified");
        assert_eq!(send(&c, put, Some(OWNER)).await.status(), 200);
    }
    let mut wrong = Vec::new();
    let mut table = String::new();
    for (n, perm) in PERMS.iter().enumerate() {
        let who = creds_of(perm);
        let t = (10 + n * 10).to_string();
        let mp = format!("/vault/mp-{perm}");
        // (what, request, the permission it needs)
        let cells: Vec<(&str, reqwest::RequestBuilder, &str)> = vec![
            ("S3 GetObject", c.get(s.url("/vault/secret.txt")), "read"),
            ("S3 HeadObject", c.head(s.url("/vault/secret.txt")), "read"),
            (
                "S3 GetObjectAttributes",
                c.get(s.url("/vault/secret.txt?attributes"))
                    .header("x-amz-object-attributes", "ETag,ObjectSize"),
                "read",
            ),
            ("S3 GetObjectTagging", c.get(s.url("/vault/secret.txt?tagging")), "read"),
            ("S3 ListObjectsV2", c.get(s.url("/vault?list-type=2")), "read"),
            ("S3 ListObjects", c.get(s.url("/vault")), "read"),
            ("S3 ListMultipartUploads", c.get(s.url("/vault?uploads")), "read"),
            ("S3 GetBucketLocation", c.get(s.url("/vault?location")), "read"),
            ("S3 GetObjectAcl", c.get(s.url("/vault/secret.txt?acl")), "read"),
            (
                "S3 PutObject",
                c.put(s.url(&format!("/vault/new-{perm}"))).header("Fencing-Token", &t).body("x"),
                "write",
            ),
            (
                "S3 PutObjectTagging",
                c.put(s.url("/vault/secret.txt?tagging"))
                    .header("Fencing-Token", &t)
                    .body("<Tagging><TagSet><Tag><Key>a</Key><Value>b</Value></Tag></TagSet></Tagging>"),
                "write",
            ),
            (
                "S3 DeleteObjectTagging",
                c.delete(s.url("/vault/secret.txt?tagging")).header("Fencing-Token", &t),
                "write",
            ),
            (
                "S3 CopyObject from another bucket",
                c.put(s.url(&format!("/vault/copy-{perm}")))
                    .header("x-amz-copy-source", "/other/src.txt")
                    .header("Fencing-Token", &t),
                "none",
            ),
            (
                "S3 CopyObject within the bucket",
                c.put(s.url(&format!("/vault/copy2-{perm}")))
                    .header("x-amz-copy-source", "/vault/secret.txt")
                    .header("Fencing-Token", &t),
                "read+write",
            ),
            (
                "S3 CreateMultipartUpload",
                c.post(s.url(&format!("{mp}?uploads"))).header("Fencing-Token", &t),
                "write",
            ),
            (
                "S3 DeleteObject",
                c.delete(s.url(&format!("/vault/gone-{perm}"))).header("Fencing-Token", &t),
                "delete",
            ),
            (
                "S3 PutBucketVersioning",
                c.put(s.url("/vault?versioning")).body(
                    "<VersioningConfiguration><Status>Suspended</Status></VersioningConfiguration>",
                ),
                "write",
            ),
            ("S3 CreateBucket elsewhere", c.put(s.url(&format!("/made-by-{perm}"))), "none"),
            ("S3 GetObject in other", c.get(s.url("/other/src.txt")), "none"),
            (
                "S3 PutObject in other",
                c.put(s.url("/other/src.txt")).header("Fencing-Token", &t).body("x"),
                "none",
            ),
            ("native GET object", c.get(s.object_url("vault", "secret.txt")), "read"),
            ("native list", c.get(s.url("/v1/objects/vault")), "read"),
            (
                "native PUT object",
                c.put(s.object_url("vault", &format!("nat-{perm}"))).header("Fencing-Token", &t).body("x"),
                "write",
            ),
            (
                "native DELETE object",
                c.delete(s.object_url("vault", &format!("natgone-{perm}"))).header("Fencing-Token", &t),
                "delete",
            ),
            ("native fence show", c.get(s.url("/v1/fences/vault/secret.txt")), "read"),
            (
                "native fence advance",
                c.post(s.url(&format!("/v1/fences/vault/adv-{perm}"))).header("Fencing-Token", &t),
                "fence",
            ),
            (
                "native fence advance in other",
                c.post(s.url("/v1/fences/other/src.txt")).header("Fencing-Token", "1000"),
                "none",
            ),
            (
                "lease bound to vault",
                c.post(s.url(&format!("/v1/leases/bound-{perm}")))
                    .json(&json!({"holder": "h", "ttl_ms": 60000, "bucket": "vault", "key": format!("l-{perm}")})),
                "lease",
            ),
            (
                "lease bound to other",
                c.post(s.url(&format!("/v1/leases/other-{perm}")))
                    .json(&json!({"holder": "h", "ttl_ms": 60000, "bucket": "other", "key": "src.txt"})),
                "none",
            ),
            (
                "lease with S3 credentials",
                c.post(s.url(&format!("/v1/leases/creds-{perm}")))
                    .json(&json!({"holder": "h", "ttl_ms": 60000, "bucket": "vault", "key": format!("c-{perm}"), "s3_credentials": true})),
                "lease+write",
            ),
            ("admin status", c.get(s.url("/admin/status")), "none"),
            ("admin fences", c.get(s.url("/admin/fences/vault")), "none"),
            ("admin leases", c.get(s.url("/admin/leases")), "none"),
        ];
        for (what, req, needs) in cells {
            let resp = send(&c, req, Some(who)).await;
            let status = resp.status().as_u16();
            let body = resp.text().await.unwrap_or_default();
            let allowed = needs == *perm;
            let refused = status == 403 || status == 401;
            table.push_str(&format!("{perm}: {what}: {status}\n"));
            if allowed == refused {
                wrong.push(format!(
                    "{perm}: {what} (needs {needs}) answered {status}: {}",
                    body.chars().take(300).collect::<String>()
                ));
            }
        }
    }
    eprintln!("{table}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // What the owner wrote is as it was.
    let resp = send(&c, c.get(s.url("/vault/secret.txt")), Some(OWNER)).await;
    assert_eq!(resp.text().await.unwrap(), "classified");
}
