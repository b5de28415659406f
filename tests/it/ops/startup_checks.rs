//! Start-up refuses configurations that would quietly void a fence: two buckets on the same
//! store keys, or an fs root over fencegate's own files (check-config too), and a bucket whose
//! scope changed since its tokens were recorded. CreateBucket refuses a name whose store keys another bucket already uses.

use crate::common;
use common::moto::Moto;
use common::{client, put, try_start, Server};
use std::path::Path;
use std::process::Command;

fn fencegate(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(common::binary()).args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn check_config(dir: &Path, text: &str) -> (bool, String) {
    let file = dir.join("check.toml");
    std::fs::write(&file, text).unwrap();
    let (ok, out, err) = fencegate(&["check-config", file.to_str().unwrap()]);
    (ok, out + &err)
}

const S3_BACKEND: &str = "[backends.store]\nkind = \"s3\"\nendpoint = \"http://127.0.0.1:9\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n";

#[test]
fn check_config_refuses_overlapping_store_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    // One prefix inside the other, in the same store bucket.
    let (ok, out) = check_config(
        dir.path(),
        &format!("{S3_BACKEND}\n[buckets.reports]\nbackend = \"store\"\nbackend_bucket = \"shared\"\nbackend_prefix = \"team/\"\n\n[buckets.archive]\nbackend = \"store\"\nbackend_bucket = \"shared\"\nbackend_prefix = \"team/archive/\"\n"),
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("bucket archive and bucket reports overlap"),
        "{out}"
    );
    assert!(out.contains("backend_prefix"), "says what to change: {out}");

    // An empty prefix takes the whole store bucket, where [bucket_defaults] creates buckets.
    let (ok, out) = check_config(
        dir.path(),
        &format!("{S3_BACKEND}\n[buckets.everything]\nbackend = \"store\"\nbackend_bucket = \"shared\"\n\n[bucket_defaults]\nbackend = \"store\"\nbackend_bucket = \"shared\"\nbackend_prefix = \"created/\"\n"),
    );
    assert!(!ok, "{out}");
    assert!(out.contains("bucket everything"), "{out}");
    assert!(out.contains("[bucket_defaults]"), "{out}");

    // fs: a backend whose root is inside another bucket's directory.
    let objects = dir.path().join("objects");
    let (ok, out) = check_config(
        dir.path(),
        &format!(
            "[backends.local]\nkind = \"fs\"\nroot = \"{0}\"\n\n[backends.inner]\nkind = \"fs\"\nroot = \"{0}/outer\"\n\n[buckets.outer]\nbackend = \"local\"\n\n[buckets.nested]\nbackend = \"inner\"\n",
            objects.display()
        ),
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("bucket nested and bucket outer overlap"),
        "{out}"
    );

    // Review round 3: two spellings of one store, or of one directory, are one place.
    let (ok, out) = check_config(
        dir.path(),
        &format!("{S3_BACKEND}\n[backends.alias]\nkind = \"s3\"\nendpoint = \"http://localhost:9/\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\n\n[buckets.one]\nbackend = \"store\"\nbackend_bucket = \"shared\"\n\n[buckets.two]\nbackend = \"alias\"\nbackend_bucket = \"shared\"\n"),
    );
    assert!(!ok, "{out}");
    assert!(out.contains("bucket one and bucket two overlap"), "{out}");
    let real = dir.path().join("real");
    std::fs::create_dir_all(real.join("bbb")).unwrap();
    std::os::unix::fs::symlink(&real, dir.path().join("link")).unwrap();
    let (ok, out) = check_config(
        dir.path(),
        &format!(
            "[backends.local]\nkind = \"fs\"\nroot = \"{}\"\n\n[backends.via_link]\nkind = \"fs\"\nroot = \"{}\"\n\n[buckets.bbb]\nbackend = \"local\"\n\n[buckets.ccc]\nbackend = \"via_link\"\n",
            real.display(),
            dir.path().join("link/bbb").display()
        ),
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("bucket ccc and bucket bbb overlap")
            || out.contains("bucket bbb and bucket ccc overlap"),
        "{out}"
    );

    // Disjoint prefixes, and a different store bucket, are fine.
    let (ok, out) = check_config(
        dir.path(),
        &format!("{S3_BACKEND}\n[buckets.reports]\nbackend = \"store\"\nbackend_bucket = \"shared\"\nbackend_prefix = \"team/\"\n\n[buckets.archive]\nbackend = \"store\"\nbackend_bucket = \"shared\"\nbackend_prefix = \"team-archive/\"\n\n[buckets.other]\nbackend = \"store\"\nbackend_bucket = \"elsewhere\"\n\n[bucket_defaults]\nbackend = \"store\"\nbackend_bucket = \"shared\"\nbackend_prefix = \"created/\"\n"),
    );
    assert!(ok, "{out}");
}

#[test]
fn check_config_refuses_fs_roots_over_fencegates_own_files() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let server = format!("[server]\ndata_dir = \"{}\"\n", data.display());
    // The root is data_dir, where buckets fences, uploads and spool would be fencegate's own.
    let (ok, out) = check_config(
        dir.path(),
        &format!(
            "{server}\n[backends.local]\nkind = \"fs\"\nroot = \"{}\"\n",
            data.display()
        ),
    );
    assert!(!ok, "{out}");
    assert!(out.contains("holds [server] data_dir"), "{out}");
    assert!(out.contains("fix: give backend local a root"), "{out}");
    // The fence table inside a bucket's directory.
    let objects = dir.path().join("objects");
    let (ok, out) = check_config(
        dir.path(),
        &format!(
            "{server}\n[fence_store]\npath = \"{}\"\n\n[backends.local]\nkind = \"fs\"\nroot = \"{}\"\n",
            objects.join("default/fences").display(),
            objects.display()
        ),
    );
    assert!(!ok, "{out}");
    assert!(out.contains("the fence table"), "{out}");
    assert!(
        out.contains("check.toml:5:"),
        "names the path's line: {out}"
    );
    // `serve --data-dir` over a root is refused the same.
    let (up, log) = try_start(
        &objects,
        &format!(
            "[backends.local]\nkind = \"fs\"\nroot = \"{}\"\n",
            objects.display()
        ),
        &[],
    );
    assert!(!up, "{log}");
    assert!(log.contains("holds [server] data_dir"), "{log}");
}

#[test]
fn start_up_refuses_a_created_bucket_that_overlaps_a_configured_one() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    // Created through the S3 API earlier, at "created/beta/"; since then a configured bucket
    // took all of "created/".
    std::fs::write(
        data.join("buckets.json"),
        r#"{"beta": {"backend": "store", "backend_bucket": "shared", "backend_prefix": "created/beta/"}}"#,
    )
    .unwrap();
    let config = format!("{S3_BACKEND}\n[buckets.alpha]\nbackend = \"store\"\nbackend_bucket = \"shared\"\nbackend_prefix = \"created/\"\n");
    let (up, log) = try_start(&data, &config, &[]);
    assert!(!up, "{log}");
    assert!(
        log.contains("bucket alpha and bucket beta (created through the S3 API) overlap"),
        "{log}"
    );
}

/// A bucket created through S3 on a backend the configuration has since lost: start-up names
/// the bucket, the backend and the fix, instead of panicking.
#[test]
fn start_up_names_a_created_bucket_whose_backend_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(
        data.join("buckets.json"),
        r#"{"made": {"backend": "gone", "backend_bucket": "shared", "backend_prefix": "made/"}}"#,
    )
    .unwrap();
    let (up, log) = try_start(&data, "[buckets.kept]\n", &[]);
    assert!(!up, "{log}");
    assert!(!log.contains("panicked"), "{log}");
    assert!(
        log.contains("bucket made was created through S3 on backend \"gone\"")
            && log.contains("add [backends.gone] back"),
        "{log}"
    );
    // A configured bucket of that name overrides the record: its backend is not needed.
    let (up, log) = try_start(&data, "[buckets.kept]\n[buckets.made]\n", &[]);
    assert!(up, "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_bucket_refuses_a_name_inside_another_buckets_keys() {
    let moto = Moto::start();
    moto.create_bucket("shared").await;
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "[backends.local]\nkind = \"s3\"\nendpoint = \"{}\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\nunsafe_no_conditional_writes = true\n\n[buckets.alpha]\nbackend_bucket = \"shared\"\nbackend_prefix = \"beta/\"\n\n[bucket_defaults]\nbackend_bucket = \"shared\"\n",
        moto.endpoint()
    );
    let s = Server::start(&dir.path().join("data"), Some(&config));
    let s3 = common::moto::client_with(&s.url(""), "fencegate", "fencegate-dev-secret");
    // "beta" would live at "beta/", which is bucket alpha's.
    let err = s3.create_bucket().bucket("beta").send().await.unwrap_err();
    let err = err.into_service_error();
    assert_eq!(err.meta().code(), Some("InvalidBucketName"), "{err:?}");
    let message = err.meta().message().unwrap_or_default();
    assert!(message.contains("bucket alpha"), "{message}");
    // Any other name is fine.
    s3.create_bucket().bucket("gamma").send().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_scope_kind_is_refused_until_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let object_scope = "[buckets.logs]\nscope = \"object\"\n";
    let prefix_scope = "[buckets.logs]\nscope = \"prefix\"\nprefix_segments = 1\n";
    let s = Server::start(&data, Some(object_scope));
    let c = client();
    let url = s.object_url("logs", "tenant/a");
    assert_eq!(put(&c, &url, Some("5"), b"v").await.0, 200);
    s.kill9();

    let (up, log) = try_start(&data, prefix_scope, &[]);
    assert!(!up, "started with a different scope: {log}");
    for needle in [
        "bucket logs",
        "its scope is prefix/1",
        "under scope object",
        "--accept-scope-change logs",
        "Set scope (and prefix_segments) back to object",
    ] {
        assert!(log.contains(needle), "{needle:?} missing: {log}");
    }
    // The same scope again starts.
    let s = Server::start(&data, Some(object_scope));
    assert_eq!(
        put(&c, &s.object_url("logs", "tenant/a"), Some("4"), b"old")
            .await
            .0,
        409
    );
    s.kill9();

    // After draining writers, the operator accepts the change once; it is recorded.
    let (up, log) = try_start(&data, prefix_scope, &["--accept-scope-change", "logs"]);
    assert!(up, "{log}");
    let s = Server::start(&data, Some(prefix_scope));
    assert_eq!(
        put(&c, &s.object_url("logs", "tenant/b"), Some("6"), b"new")
            .await
            .0,
        200
    );
}

/// `fencegate serve --config FILE` from `cwd`, with FILE's own data_dir (no --data-dir).
fn serve_from(cwd: &std::path::Path, file: &std::path::Path, extra: &[&str]) -> common::Server {
    let mut cmd = std::process::Command::new(common::binary());
    cmd.current_dir(cwd)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(file)
        .args(extra)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null());
    common::Server::spawn(cmd, &file.parent().unwrap().join("data"))
}

/// A file's relative data_dir is the file's: started from another directory, fencegate opens
/// the same fence table, and a zombie's stale token is still refused. Start-up names the
/// table's absolute path.
#[tokio::test]
async fn a_relative_data_dir_is_the_files_not_the_working_directorys() {
    let dir = tempfile::tempdir().unwrap();
    let etc = dir.path().join("etc");
    std::fs::create_dir_all(&etc).unwrap();
    let file = etc.join("fencegate.toml");
    std::fs::write(&file, "[server]\ndata_dir = \"./data\"\n").unwrap();
    let c = common::client();
    let (first, second) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir_all(&first).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    let s = serve_from(&first, &file, &[]);
    let url = s.object_url("default", "report.csv");
    assert_eq!(common::put(&c, &url, Some("5"), b"new").await.0, 200);
    let table = etc.join("data").join("fences");
    let named = s.awaited_log_lines(&["fence table on rocksdb"], 1);
    assert!(
        named[0].contains(&table.display().to_string()),
        "{}",
        named[0]
    );
    drop(s);
    let s = serve_from(&second, &file, &[]);
    let url = s.object_url("default", "report.csv");
    assert_eq!(common::put(&c, &url, Some("4"), b"zombie").await.0, 409);
    assert!(!first.join("data").exists() && !second.join("data").exists());
}

/// Outside development mode a new, empty table is a WARN naming its path; with
/// --require-existing-table it is refused, and an existing one starts.
#[tokio::test]
async fn a_new_fence_table_is_announced_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("keys.toml");
    std::fs::write(
        &file,
        "[server]\nlisten = \"127.0.0.1:0\"\ndata_dir = \"./data\"\n\n[keys.app]\naccess_key_id = \"app\"\nsecret_access_key = \"app-secret-0123456\"\nbuckets = { \"*\" = [\"read\", \"write\"] }\n",
    )
    .unwrap();
    let out = std::process::Command::new(common::binary())
        .current_dir(dir.path())
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--require-existing-table",
            "--config",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no fence table at") && err.contains("--require-existing-table"),
        "{err}"
    );
    assert!(!dir.path().join("data").join("fences").exists(), "{err}");
    let s = serve_from(dir.path(), &file, &[]);
    let warned = s.awaited_log_lines(&["WARN", "created a new, empty fence table"], 1);
    assert!(
        warned[0].contains(&dir.path().join("data").join("fences").display().to_string()),
        "{}",
        warned[0]
    );
    drop(s);
    let s = serve_from(dir.path(), &file, &["--require-existing-table"]);
    let lines = s.awaited_log_lines(&["fence table on rocksdb"], 1);
    assert!(lines[0].contains("new=false"), "{}", lines[0]);
    assert!(s
        .log_lines(&["created a new, empty fence table"])
        .is_empty());
}
