//! The gcs backend on the scripted GCS double (tests/common/gcs_fake; no installable emulator
//! honours generation preconditions, docs/notes/gcs-groundwork.md): a commit held in flight past
//! its deadline never lands, a store that ignores any condition fencegate relies on (or whose
//! clock runs behind) is refused at start-up by name, large bodies and multipart uploads
//! composed from staging pieces read back whole, what a crash leaves is swept, and a token that
//! expires is fetched again.

use crate::common;
use common::gcs_fake::{GcsFake, Op};
use common::relay::Relay;
use common::{client, get_bytes, put, Server};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A `gcs` backend named `g` on `endpoint` for the fencegate bucket `default`, in the GCS
/// bucket `bucket`, with the fake's service account written into `dir`.
fn config(fake: &GcsFake, dir: &Path, endpoint: &str, bucket: &str, extra: &str) -> String {
    fake.create_bucket(bucket);
    let key = fake.write_service_account(dir);
    format!(
        "[backends.g]\nkind = \"gcs\"\ncredentials_file = \"{}\"\nendpoint = \"{endpoint}\"\n{extra}\n\n[buckets.default]\nbackend = \"g\"\nbackend_bucket = \"{bucket}\"\nfencing = \"optional\"\n",
        key.display()
    )
}

/// A PUT held in flight past its commit deadline reaches the service whole after token 6
/// wrote the key and token 7 deleted it (so its `x-goog-if-generation-match: 0` holds again):
/// its signed URL has expired by then, and the service refuses it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_held_past_its_deadline_never_lands() {
    let fake = GcsFake::start().await;
    let relay = Relay::start(fake.addr).await;
    let dir = tempfile::tempdir().unwrap();
    let endpoint = format!("http://127.0.0.1:{}", relay.port);
    let config = config(
        &fake,
        dir.path(),
        &endpoint,
        "held",
        "read_timeout_secs = 2\ncall_timeout_secs = 2\ncommit_deadline_secs = 3",
    );
    let server = Server::start(&dir.path().join("data"), Some(&config));
    let c = client();
    let url = server.object_url("default", "doc");
    relay.hold.store(true, Ordering::SeqCst);
    let (status, body) = put(&c, &url, Some("5"), b"five").await;
    assert!(
        status >= 500,
        "the held commit has no answer: {status} {body}"
    );
    relay.hold.store(false, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, body) = put(&c, &url, Some("6"), b"six").await;
        if status == 200 {
            break;
        }
        assert_eq!(body["error"], "CommitUnresolved", "{status} {body}");
        assert!(
            Instant::now() < deadline,
            "the key stayed unresolved: {body}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let deleted = c
        .delete(&url)
        .header("Fencing-Token", "7")
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    assert_eq!(deleted, 200, "token 7 deletes the key");
    relay.release.send(true).unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        fake.get_direct("held", "doc").is_none(),
        "the held token-5 commit landed after token 7's delete"
    );
    assert_eq!(get_bytes(&c, &url).await.0, 404);
}

/// Each condition a weak emulator ignores makes the start-up probe refuse the store, naming
/// it; so does a service that takes a signed URL after its expiry (here: a clock running two
/// minutes behind), and a service clock behind this one's by more than the 2 s margin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_probe_refuses_a_store_that_ignores_what_commits_rely_on() {
    type Weaken = fn(&GcsFake);
    let cases: [(&str, Weaken, &str); 6] = [
        (
            "put",
            |f| f.ignore_conditions(Op::Put),
            "x-goog-if-generation-match: 0 on PUT",
        ),
        (
            "compose",
            |f| f.ignore_conditions(Op::Compose),
            "on Compose",
        ),
        (
            "delete",
            |f| f.ignore_conditions(Op::Delete),
            "x-goog-if-generation-match on DELETE",
        ),
        ("md5", |f| f.ignore_md5(), "Content-MD5 on PUT"),
        (
            "late",
            |f| f.set_clock_offset(-120),
            "the expiry of a V4 signed URL",
        ),
        ("skew", |f| f.set_clock_offset(-5), "ahead of the store's"),
    ];
    for (name, weaken, named) in cases {
        let fake = GcsFake::start().await;
        weaken(&fake);
        let dir = tempfile::tempdir().unwrap();
        let config = config(&fake, dir.path(), &fake.url(), "weak", "");
        let (up, log) = common::try_start(&dir.path().join("data"), &config, &[]);
        assert!(
            !up,
            "{name}: fencegate served a store that ignores it:\n{log}"
        );
        assert!(
            log.contains(named),
            "{name}: the refusal does not name {named:?}:\n{log}"
        );
    }
    // The same double, honouring everything, is served.
    let fake = GcsFake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(&fake, dir.path(), &fake.url(), "strong", "");
    let (up, log) = common::try_start(&dir.path().join("data"), &config, &[]);
    assert!(up, "{log}");
}

/// A body of 36 pieces (more than one compose takes, so folded first) and a multipart upload
/// read back as sent, with S3's ETags, and no staging piece left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_and_multipart_uploads_are_composed_from_pieces() {
    let fake = GcsFake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        &fake,
        dir.path(),
        &fake.url(),
        "big",
        "block_size_bytes = 262144",
    );
    let server = Server::start(&dir.path().join("data"), Some(&config));
    let c = client();
    let body: Vec<u8> = (0..36 * 262_144u32).map(|i| (i % 251) as u8).collect();
    let url = server.object_url("default", "large");
    let r = c
        .put(&url)
        .header("Fencing-Token", "1")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "{}", r.text().await.unwrap());
    let stored = fake.stat_direct("big", "large").unwrap();
    assert_eq!(
        stored.data.as_ref(),
        &body[..],
        "the composed object is the body"
    );
    assert!(stored.component_count.unwrap_or(1) >= 36);
    assert_eq!(get_bytes(&c, &url).await.1, body);
    let s3 = common::moto::client_with(&server.url(""), "fencegate", "fencegate-dev-secret");
    let head = s3
        .head_object()
        .bucket("default")
        .key("large")
        .send()
        .await
        .unwrap();
    use md5::Digest;
    assert_eq!(
        head.e_tag().unwrap(),
        format!("\"{}\"", hex::encode(md5::Md5::digest(&body)))
    );
    let up = s3
        .create_multipart_upload()
        .bucket("default")
        .key("mp")
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap().to_string();
    let parts = [
        vec![1u8; 5 * 1024 * 1024 + 7],
        vec![2u8; 5 * 1024 * 1024],
        vec![3u8; 10],
    ];
    let mut done = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let n = i as i32 + 1;
        let r = s3
            .upload_part()
            .bucket("default")
            .key("mp")
            .upload_id(&id)
            .part_number(n)
            .body(aws_sdk_s3::primitives::ByteStream::from(part.clone()))
            .send()
            .await
            .unwrap();
        done.push(
            aws_sdk_s3::types::CompletedPart::builder()
                .part_number(n)
                .e_tag(r.e_tag().unwrap())
                .build(),
        );
    }
    let out = s3
        .complete_multipart_upload()
        .bucket("default")
        .key("mp")
        .upload_id(&id)
        .multipart_upload(
            aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .set_parts(Some(done))
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert!(out.e_tag().unwrap().ends_with("-3\""), "{:?}", out.e_tag());
    let whole: Vec<u8> = parts.concat();
    assert_eq!(fake.get_direct("big", "mp").unwrap().0.as_ref(), &whole[..]);
    assert_eq!(
        fake.list_direct("big", ".fencegate-probe/staging/"),
        Vec::<(String, i64)>::new(),
        "a large body's pieces are deleted once composed"
    );
    assert_eq!(
        fake.list_direct("big", ".fencegate-probe/uploads/"),
        Vec::<(String, i64)>::new(),
        "a completed upload's pieces are deleted"
    );
}

/// What a crash leaves under `.fencegate-probe/` is swept at start-up: a staging piece goes,
/// the pieces of a client's multipart upload that the registry still holds stay, and that
/// upload completes after a kill -9 and restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_staging_pieces_are_swept_and_live_uploads_kept() {
    let fake = GcsFake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = config(
        &fake,
        dir.path(),
        &fake.url(),
        "sweep",
        "abandoned_upload_secs = 0",
    );
    fake.put_direct(
        "sweep",
        ".fencegate-probe/staging/crash/00000",
        &b"x"[..],
        &[],
    );
    let data = dir.path().join("data");
    let server = Server::start(&data, Some(&config));
    assert_eq!(
        fake.list_direct("sweep", ".fencegate-probe/staging/"),
        Vec::<(String, i64)>::new(),
        "the abandoned staging piece was swept"
    );
    let s3 = common::moto::client_with(&server.url(""), "fencegate", "fencegate-dev-secret");
    let id = s3
        .create_multipart_upload()
        .bucket("default")
        .key("m")
        .send()
        .await
        .unwrap()
        .upload_id()
        .unwrap()
        .to_string();
    let part = s3
        .upload_part()
        .bucket("default")
        .key("m")
        .upload_id(&id)
        .part_number(1)
        .body(aws_sdk_s3::primitives::ByteStream::from_static(
            b"kept part",
        ))
        .send()
        .await
        .unwrap();
    let uploads = || fake.list_direct("sweep", ".fencegate-probe/uploads/");
    assert_eq!(uploads().len(), 1, "the upload's piece is stored");
    server.kill9();
    let server = Server::start(&data, Some(&config));
    assert_eq!(uploads().len(), 1, "a registered upload's pieces are kept");
    let s3 = common::moto::client_with(&server.url(""), "fencegate", "fencegate-dev-secret");
    s3.complete_multipart_upload()
        .bucket("default")
        .key("m")
        .upload_id(&id)
        .multipart_upload(
            aws_sdk_s3::types::CompletedMultipartUpload::builder()
                .parts(
                    aws_sdk_s3::types::CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag().unwrap())
                        .build(),
                )
                .build(),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(
        fake.get_direct("sweep", "m").unwrap().0.as_ref(),
        b"kept part"
    );
    assert!(
        uploads().is_empty(),
        "the completed upload's pieces are gone"
    );
}

/// A bearer token is fetched again before it expires (here it lives 62 s, so fencegate keeps
/// it 2 s): reads and writes go on without a 401 reaching a client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_that_expires_is_fetched_again() {
    let fake = GcsFake::start().await;
    fake.token_lifetime(62);
    let dir = tempfile::tempdir().unwrap();
    let config = config(&fake, dir.path(), &fake.url(), "tok", "");
    let server = Server::start(&dir.path().join("data"), Some(&config));
    let c = client();
    let before = fake.requests("POST", "token");
    for token in 1..=4u32 {
        let url = server.object_url("default", "t");
        let (status, body) = put(&c, &url, Some(&token.to_string()), b"t").await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(get_bytes(&c, &url).await.0, 200);
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    assert!(
        fake.requests("POST", "token") > before,
        "no new token was fetched"
    );
}

/// Runs `fencegate probe-store g --config FILE ARGS` off the runtime: exit code, stdout, stderr.
async fn probe_store(file: std::path::PathBuf, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "probe-store".to_string(),
        "g".into(),
        "--config".into(),
        file.display().to_string(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_fencegate"))
            .args(&args)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
    .await
    .unwrap()
}

/// `fencegate probe-store` on a gcs backend prints the start-up probe's rows: every condition
/// honoured, the race of writers with one winner whose bytes are kept, and the clock, on the
/// double as it is; on the double ignoring DELETE's and compose's conditions, those rows are
/// marked ignored and the exit code is 1. No scratch object stays either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe_store_prints_the_verdict_and_names_what_is_ignored() {
    let fake = GcsFake::start().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("probe.toml");
    std::fs::write(
        &file,
        config(&fake, dir.path(), &fake.url(), "probe-me", ""),
    )
    .unwrap();
    let (code, table, err) = probe_store(file.clone(), &[]).await;
    assert_eq!(code, 0, "{table}{err}");
    assert!(
        table.contains("8 writers race with x-goog-if-generation-match: 0 on PUT  1 of 8 won"),
        "{table}"
    );
    assert!(table.contains("the expiry of a V4 signed URL"), "{table}");
    assert!(
        table.contains("SAFE: fencegate serves this store"),
        "{table}"
    );
    assert!(!table.contains(" !"), "nothing marked as lost: {table}");
    let (code, json, err) = probe_store(file.clone(), &["--json", "--writers", "5"]).await;
    assert_eq!(code, 0, "{err}");
    let race = &serde_json::from_str::<serde_json::Value>(&json).unwrap()[0]["races"][0];
    assert_eq!(
        (
            race["won"].as_u64(),
            race["refused"].as_u64(),
            race["kept_winner"].as_bool()
        ),
        (Some(1), Some(4), Some(true)),
        "{race}"
    );
    assert_eq!(
        fake.list_direct("probe-me", ""),
        Vec::<(String, i64)>::new()
    );

    fake.ignore_conditions(Op::Delete);
    fake.ignore_conditions(Op::Compose);
    let (code, table, err) = probe_store(file, &[]).await;
    assert_eq!(code, 1, "{table}{err}");
    for lost in [
        "x-goog-if-generation-match on DELETE",
        "x-goog-if-generation-match: 0 on Compose",
        "a source's Generation on Compose",
    ] {
        assert!(
            table
                .lines()
                .any(|l| l.trim_start().starts_with(lost) && l.contains("ignored !")),
            "{lost} named as ignored: {table}"
        );
    }
    assert!(
        table.contains("NOT SAFE: serve refuses to start on it"),
        "{table}"
    );
    assert_eq!(
        fake.list_direct("probe-me", ""),
        Vec::<(String, i64)>::new()
    );
}
