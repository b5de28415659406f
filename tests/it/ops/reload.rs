//! Reloading the configuration while serving (docs/configuration.md, "Reloading"): SIGHUP and
//! `POST /admin/reload` read the file again and swap keys, bucket policies and the TLS
//! certificate, all or nothing. A key added works, a key removed is refused on every surface
//! as soon as the reload has answered, a policy change applies; a scope change, a broken file
//! or a setting that needs a restart changes nothing. Every reload is an audit line naming who
//! asked.

use crate::common;
use common::sign::{send_json as call, Creds};
use common::Server;
use std::path::{Path, PathBuf};
use std::time::Duration;

const OPS: Creds = Creds {
    key: "ops-key",
    secret: "ops-secret-0123456",
};
const OPS2: Creds = Creds {
    key: "ops2-key",
    secret: "ops2-secret-0123456",
};
const APP: Creds = Creds {
    key: "app-key",
    secret: "app-secret-0123456",
};
const NEW: Creds = Creds {
    key: "new-key",
    secret: "new-secret-0123456",
};
const NEWER: Creds = Creds {
    key: "newer-key",
    secret: "newer-secret-0123456",
};

const OPS_KEY: &str =
    "[keys.ops]\naccess_key_id = \"ops-key\"\nsecret_access_key = \"ops-secret-0123456\"\nadmin = true\n";
const OPS2_ADMIN: &str = "[keys.ops2]\naccess_key_id = \"ops2-key\"\nsecret_access_key = \"ops2-secret-0123456\"\nadmin = true\n";
const OPS2_PLAIN: &str = "[keys.ops2]\naccess_key_id = \"ops2-key\"\nsecret_access_key = \"ops2-secret-0123456\"\nbuckets = { \"*\" = [\"read\", \"write\"] }\n";
const APP_KEY: &str = "[keys.app]\naccess_key_id = \"app-key\"\nsecret_access_key = \"app-secret-0123456\"\nbuckets = { \"*\" = [\"read\", \"write\", \"delete\", \"fence\"] }\n";
const NEW_KEY: &str = "[keys.new]\naccess_key_id = \"new-key\"\nsecret_access_key = \"new-secret-0123456\"\nbuckets = { \"*\" = [\"read\", \"write\"] }\n";
const NEWER_KEY: &str = "[keys.newer]\naccess_key_id = \"newer-key\"\nsecret_access_key = \"newer-secret-0123456\"\nbuckets = { \"*\" = [\"read\", \"write\"] }\n";
const BUCKETS: &str = "[buckets.default]\n[buckets.lenient]\nfencing = \"optional\"\n";

struct Fixture {
    s: Server,
    c: reqwest::Client,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

impl Fixture {
    fn start(text: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let s = Server::start(&data, Some(text));
        Fixture {
            s,
            c: common::client(),
            // Where the harness wrote the file `--config` names.
            file: data.with_extension("toml"),
            _dir: dir,
        }
    }

    fn rewrite(&self, text: &str) {
        write_atomically(&self.file, text);
    }

    async fn admin_reload(&self, creds: Creds) -> (u16, serde_json::Value) {
        call(
            &self.c,
            self.c.post(self.s.url("/admin/reload")),
            Some(creds),
        )
        .await
    }

    /// `/metrics`, read with the admin key.
    async fn metrics(&self) -> (u16, String) {
        let resp = common::sign::send(&self.c, self.c.get(self.s.url("/metrics")), Some(OPS)).await;
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap())
    }

    fn sighup(&self) {
        unsafe { libc::kill(self.s.pid() as i32, libc::SIGHUP) };
    }

    async fn put(&self, key: &str, token: Option<&str>, creds: Creds) -> u16 {
        self.put_in("default", key, token, creds).await
    }

    async fn put_in(&self, bucket: &str, key: &str, token: Option<&str>, creds: Creds) -> u16 {
        common::put_as(
            &self.c,
            &self.s.object_url(bucket, key),
            token,
            b"x",
            Some(creds),
        )
        .await
        .0
    }

    /// A path-style S3 GetObject, signed with SigV4.
    async fn s3_get(&self, key: &str, creds: Creds) -> (u16, String) {
        let resp = common::sign::send(
            &self.c,
            self.c.get(self.s.url(&format!("/default/{key}"))),
            Some(creds),
        )
        .await;
        (resp.status().as_u16(), resp.text().await.unwrap())
    }

    async fn admin_leases(&self, creds: Creds) -> u16 {
        call(
            &self.c,
            self.c.get(self.s.url("/admin/leases")),
            Some(creds),
        )
        .await
        .0
    }

    /// Waits (bounded) for the log line a SIGHUP reload leaves.
    async fn after_sighup(&self, n: usize) {
        for _ in 0..100 {
            let done = self.s.log_lines(&["principal=SIGHUP"]).len();
            if done >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no audit line for SIGHUP reload {n}");
    }
}

/// A rename, so that a reload never reads half a file.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_added_key_works_after_sighup_and_after_the_admin_reload() {
    let fx = Fixture::start(&format!("{OPS_KEY}{APP_KEY}{BUCKETS}"));
    assert_eq!(fx.put("k", Some("1"), NEW).await, 403);

    fx.rewrite(&format!("{OPS_KEY}{APP_KEY}{NEW_KEY}{BUCKETS}"));
    fx.sighup();
    fx.after_sighup(1).await;
    assert_eq!(fx.put("k", Some("1"), NEW).await, 200);
    assert_eq!(
        fx.s.log_lines(&["configuration reloaded", "principal=SIGHUP", "new"])
            .len(),
        1
    );

    fx.rewrite(&format!("{OPS_KEY}{APP_KEY}{NEW_KEY}{NEWER_KEY}{BUCKETS}"));
    let (status, body) = fx.admin_reload(OPS).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["keys"]["added"], serde_json::json!(["newer"]));
    assert_eq!(body["keys"]["removed"], serde_json::json!([]));
    assert_eq!(body["tls"], "off");
    // Works as soon as the reload has answered, on the native API and through S3.
    assert_eq!(fx.put("k", Some("2"), NEWER).await, 200);
    assert_eq!(fx.s3_get("k", NEWER).await.0, 200);
    assert_eq!(
        fx.s.log_lines(&["configuration reloaded", "principal=key:ops", "newer"])
            .len(),
        1
    );
    // No secret in the answer or the log.
    assert!(!body.to_string().contains("newer-secret-0123456"));
    assert!(fx.s.log_lines(&["newer-secret-0123456"]).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_key_is_refused_on_every_surface_once_the_reload_answers() {
    let fx = Fixture::start(&format!("{OPS_KEY}{OPS2_ADMIN}{APP_KEY}{BUCKETS}"));
    assert_eq!(fx.put("k", Some("1"), APP).await, 200);
    assert_eq!(fx.s3_get("k", APP).await.0, 200);
    assert_eq!(fx.admin_leases(OPS2).await, 200);

    fx.rewrite(&format!("{OPS_KEY}{BUCKETS}"));
    let (status, body) = fx.admin_reload(OPS).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["keys"]["removed"], serde_json::json!(["app", "ops2"]));
    // No window: the very next requests are refused.
    let (status, body) = common::put_as(
        &fx.c,
        &fx.s.object_url("default", "k"),
        Some("2"),
        b"x",
        Some(APP),
    )
    .await;
    assert_eq!(
        (status, body["error"].as_str()),
        (403, Some("InvalidAccessKeyId"))
    );
    let (status, body) = fx.s3_get("k", APP).await;
    assert_eq!(status, 403);
    assert!(body.contains("InvalidAccessKeyId"), "{body}");
    assert_eq!(fx.admin_leases(OPS2).await, 403);
    // Removed by SIGHUP too: the other admin key goes the same way.
    fx.rewrite(&format!("{OPS2_ADMIN}{BUCKETS}"));
    fx.sighup();
    fx.after_sighup(1).await;
    assert_eq!(fx.admin_leases(OPS).await, 403);
    assert_eq!(fx.admin_leases(OPS2).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_change_takes_effect_and_is_reported() {
    let fx = Fixture::start(&format!("{OPS_KEY}{APP_KEY}{BUCKETS}"));
    assert_eq!(fx.put_in("lenient", "k", None, APP).await, 200);
    assert_eq!(fx.put("k", Some("5"), APP).await, 200);
    assert_eq!(fx.put("k", Some("5"), APP).await, 200);

    fx.rewrite(&format!(
        "{OPS_KEY}{APP_KEY}[buckets.default]\ntokens = \"strictly-increasing\"\n[buckets.lenient]\nfencing = \"required\"\n"
    ));
    let (status, body) = fx.admin_reload(OPS).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["buckets"]["lenient"], serde_json::json!(["fencing"]));
    assert_eq!(body["buckets"]["default"], serde_json::json!(["tokens"]));
    assert_eq!(fx.put_in("lenient", "k", None, APP).await, 428);
    assert_eq!(fx.put("k", Some("5"), APP).await, 409);
    assert_eq!(fx.put("k", Some("6"), APP).await, 200);
    assert_eq!(
        fx.s.log_lines(&["configuration reloaded", "principal=key:ops", "lenient"])
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_change_is_refused_and_nothing_of_the_file_applies() {
    let fx = Fixture::start(&format!("{OPS_KEY}{APP_KEY}{BUCKETS}"));
    assert_eq!(fx.put("a/k", Some("7"), APP).await, 200);
    // The scope change comes with a key removal and a policy change: neither may apply.
    fx.rewrite(&format!(
        "{OPS_KEY}[buckets.default]\nscope = \"prefix\"\n[buckets.lenient]\nfencing = \"required\"\n"
    ));
    let (status, body) = fx.admin_reload(OPS).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("ScopeChangeRefused"))
    );
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains("--accept-scope-change default"),
        "{message}"
    );
    // The old policy is still in force: the object scope, and the token recorded under it.
    let fence = common::fence_as(&fx.c, &fx.s, "default", "a/k", Some(APP)).await;
    assert_eq!(fence["scope"], "object:default/a/k");
    assert_eq!(fence["highest"], 7);
    assert_eq!(fx.put("a/k", Some("6"), APP).await, 409);
    assert_eq!(fx.put_in("lenient", "k", None, APP).await, 200);
    assert!(!fx
        .s
        .log_lines(&[
            "configuration reload refused",
            "principal=key:ops",
            "ScopeChangeRefused"
        ])
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_or_a_restart_setting_changes_nothing() {
    let fx = Fixture::start(&format!("{OPS_KEY}{APP_KEY}{BUCKETS}"));
    // A syntax error, with its line.
    fx.rewrite(&format!("{OPS_KEY}[keys.app\n{BUCKETS}"));
    let (status, body) = fx.admin_reload(OPS).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (422, Some("InvalidConfiguration"))
    );
    assert!(
        body["message"].as_str().unwrap().contains(".toml:5:"),
        "{body}"
    );
    // A value that does not validate, by SIGHUP: refused and logged, the server keeps going.
    fx.rewrite(&format!("{OPS_KEY}{APP_KEY}{BUCKETS}[s3]\nmax_parts = 0\n"));
    fx.sighup();
    fx.after_sighup(1).await;
    // Once: the audit line names the signal and the cause; no second line repeats it.
    assert_eq!(
        fx.s.awaited_log_lines(&["configuration reload refused", "SIGHUP", "max_parts"], 1)
            .len(),
        1
    );
    assert_eq!(fx.s.log_lines(&["max_parts"]).len(), 1, "logged twice");
    assert_eq!(fx.put("k", Some("1"), APP).await, 200);
    // A setting taken at start-up, beside a key removal: refused whole, named, nothing applied.
    fx.rewrite(&format!(
        "{OPS_KEY}{BUCKETS}[server]\nmax_body_bytes = \"1MiB\"\n[buckets.more]\n"
    ));
    let (status, body) = fx.admin_reload(OPS).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("RestartRequired"))
    );
    let message = body["message"].as_str().unwrap();
    assert!(message.contains("server.max_body_bytes"), "{message}");
    assert!(message.contains("buckets.more (added)"), "{message}");
    assert_eq!(fx.put("k", Some("2"), APP).await, 200);
    // Each refusal's line, read from the log as it comes.
    assert_eq!(
        fx.s.awaited_log_lines(&["configuration reload refused"], 3)
            .len(),
        3
    );
    // Counted, and the last one's outcome kept until a reload applies.
    let metric = |text: &str, name: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
            .parse()
            .unwrap()
    };
    let (status, text) = fx.metrics().await;
    assert_eq!(status, 200);
    assert_eq!(
        metric(&text, "fencegate_config_reloads_total{outcome=\"refused\"}"),
        3.0
    );
    assert_eq!(
        metric(&text, "fencegate_config_reloads_total{outcome=\"applied\"}"),
        0.0
    );
    assert_eq!(
        metric(&text, "fencegate_config_last_reload_successful"),
        0.0
    );
    let loaded = metric(
        &text,
        "fencegate_config_last_reload_success_timestamp_seconds",
    );
    fx.rewrite(&format!("{OPS_KEY}{APP_KEY}{BUCKETS}"));
    assert_eq!(fx.admin_reload(OPS).await.0, 200);
    let (_, text) = fx.metrics().await;
    assert_eq!(
        metric(&text, "fencegate_config_reloads_total{outcome=\"applied\"}"),
        1.0
    );
    assert_eq!(
        metric(&text, "fencegate_config_last_reload_successful"),
        1.0
    );
    assert!(
        metric(
            &text,
            "fencegate_config_last_reload_success_timestamp_seconds"
        ) >= loaded
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_flag_removed_closes_the_admin_surface_to_that_key() {
    let fx = Fixture::start(&format!("{OPS_KEY}{OPS2_ADMIN}{BUCKETS}"));
    assert_eq!(fx.admin_leases(OPS2).await, 200);
    fx.rewrite(&format!("{OPS_KEY}{OPS2_PLAIN}{BUCKETS}"));
    let (status, body) = fx.admin_reload(OPS2).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["keys"]["changed"], serde_json::json!(["ops2"]));
    assert_eq!(fx.admin_leases(OPS2).await, 403);
    let (status, _) = fx.admin_reload(OPS2).await;
    assert_eq!(status, 403);
    // Still a key: what it keeps works.
    assert_eq!(fx.put("k", Some("1"), OPS2).await, 200);
    assert_eq!(fx.admin_leases(OPS).await, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_bearer_token_file_is_taken_and_the_old_token_refused() {
    const OLD: &str = "old-admin-bearer-token-0123456789";
    const NEW_TOKEN: &str = "new-admin-bearer-token-9876543210";
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, OLD).unwrap();
    let text = format!(
        "[admin]\nbearer_token_file = \"{}\"\n{OPS_KEY}{BUCKETS}",
        token_file.display()
    );
    let fx = Fixture::start(&text);
    let leases = fx.s.url("/admin/leases");
    let with = |token: &str| fx.c.get(&leases).bearer_auth(token);
    assert_eq!(call(&fx.c, with(OLD), None).await.0, 200);
    write_atomically(&token_file, NEW_TOKEN);
    let (status, body) = call(
        &fx.c,
        fx.c.post(fx.s.url("/admin/reload")).bearer_auth(OLD),
        None,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["admin_token"], true);
    assert_eq!(call(&fx.c, with(OLD), None).await.0, 403);
    assert_eq!(call(&fx.c, with(NEW_TOKEN), None).await.0, 200);
    assert!(fx.s.log_lines(&[OLD]).is_empty() && fx.s.log_lines(&[NEW_TOKEN]).is_empty());
    // Removing the token altogether needs a restart: refused, the new token still works.
    fx.rewrite(&format!("{OPS_KEY}{BUCKETS}"));
    let (status, body) = fx.admin_reload(OPS).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("RestartRequired"))
    );
    assert_eq!(call(&fx.c, with(NEW_TOKEN), None).await.0, 200);
}

/// Review round 23, F1: a multipart upload begun without a token while the bucket's tokens
/// were optional, completed after a reload made them required and after the holder wrote with
/// token 5 and deleted with 6, is refused (428, the upload dropped): the tombstone stays and
/// the zombie's bytes never land. A tokenless write admitted after the reload is refused too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tokenless_upload_begun_before_tokens_became_required_cannot_complete() {
    use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
    let fx = Fixture::start(&format!("{OPS_KEY}{APP_KEY}{BUCKETS}"));
    let s3 = common::moto::client_with(&fx.s.url(""), APP.key, APP.secret);
    let upload = s3
        .create_multipart_upload()
        .bucket("lenient")
        .key("report")
        .send()
        .await
        .expect("a tokenless upload in an optional bucket");
    let id = upload.upload_id().unwrap().to_string();
    let part = s3
        .upload_part()
        .bucket("lenient")
        .key("report")
        .upload_id(&id)
        .part_number(1)
        .body(b"zombie bytes".to_vec().into())
        .send()
        .await
        .unwrap();

    fx.rewrite(&format!(
        "{OPS_KEY}{APP_KEY}[buckets.default]\n[buckets.lenient]\nfencing = \"required\"\n"
    ));
    let (status, body) = fx.admin_reload(OPS).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(fx.put_in("lenient", "report", None, APP).await, 428);
    assert_eq!(fx.put_in("lenient", "report", Some("5"), APP).await, 200);
    let (status, body) = call(
        &fx.c,
        fx.c.delete(fx.s.object_url("lenient", "report"))
            .header("Fencing-Token", "6"),
        Some(APP),
    )
    .await;
    assert_eq!(status, 200, "{body}");

    let done = s3
        .complete_multipart_upload()
        .bucket("lenient")
        .key("report")
        .upload_id(&id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag().unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await;
    let err = done.expect_err("the zombie's completion is refused");
    let raw = err.raw_response().expect("an HTTP answer");
    assert_eq!(raw.status().as_u16(), 428, "{err:?}");
    // The tombstone holds: nothing to read, and the fence still at 6 with its tombstone.
    let read = common::sign::send(
        &fx.c,
        fx.c.get(fx.s.object_url("lenient", "report")),
        Some(APP),
    )
    .await;
    assert_eq!(read.status().as_u16(), 404, "the object came back");
    let (status, fence) = call(
        &fx.c,
        fx.c.get(fx.s.url("/v1/fences/lenient/report")),
        Some(APP),
    )
    .await;
    assert_eq!(status, 200, "{fence}");
    assert_eq!(fence["highest"], 6, "{fence}");
    assert_eq!(fence["tombstone"], true, "{fence}");
}
