//! Configuration from the environment and in units (docs/configuration.md), through the
//! real binary: `FENCEGATE_SECTION__FIELD` variables over the file, `30s` and `5GiB` forms,
//! and `check-config` naming the line and column (or the variable) of every value it refuses.

use crate::common;
use common::sign::Creds;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

/// `fencegate ARGS` with `env` set and the caller's `FENCEGATE_*` variables removed, so that
/// the test sees only its own layer. Exit status, stdout, stderr.
fn fencegate(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(common::binary());
    cmd.args(args);
    for (k, _) in std::env::vars() {
        if k.starts_with("FENCEGATE_") {
            cmd.env_remove(k);
        }
    }
    let out = cmd.envs(env.iter().copied()).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn check(dir: &Path, text: &str, env: &[(&str, &str)]) -> (bool, String, String) {
    let file = dir.join("bad.toml");
    std::fs::write(&file, text).unwrap();
    fencegate(&["check-config", file.to_str().unwrap()], env)
}

/// A running `fencegate serve` with extra variables; killed on drop.
struct Served {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(args: &[&str], env: &[(&str, &str)]) -> Served {
    let mut cmd = Command::new(common::binary());
    for (k, _) in std::env::vars() {
        if k.starts_with("FENCEGATE_") {
            cmd.env_remove(k);
        }
    }
    cmd.arg("serve")
        .args(args)
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    let log = Arc::new(Mutex::new(Vec::new()));
    let kept = log.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(addr) = line
                .contains("fencegate is listening")
                .then(|| line.split("addr=").nth(1))
                .flatten()
                .and_then(|rest| rest.split_whitespace().next())
            {
                let _ = tx.send(addr.parse::<SocketAddr>().unwrap());
            }
            kept.lock().unwrap().push(line);
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("fencegate did not start: {:?}", log.lock().unwrap()));
    Served { child, addr, log }
}

#[test]
fn a_variable_overrides_a_file_field_and_units_are_accepted() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[server]\nlisten = \"127.0.0.1:1\"\nmax_body_bytes = \"5GiB\"\nbody_idle_timeout_secs = \"30s\"\n\n[buckets.logs]\nfencing = \"required\"\n";
    let (ok, out, err) = check(dir.path(), text, &[]);
    assert!(ok, "{err}");
    assert!(out.contains("listen: 127.0.0.1:1\n"), "{out}");
    assert!(out.contains("max body: 5368709120 bytes"), "{out}");
    let (ok, out, err) = check(
        dir.path(),
        text,
        &[
            ("FENCEGATE_SERVER__LISTEN", "127.0.0.1:2"),
            ("FENCEGATE_SERVER__MAX_BODY_BYTES", "64MiB"),
            ("FENCEGATE_BUCKETS__LOGS__FENCING", "off"),
            // Not fields: the --config flag's variable and a secret named by *_env settings.
            ("FENCEGATE_CONFIG", "/nonexistent.toml"),
            ("FENCEGATE_ADMIN_TOKEN", "not-a-field"),
        ],
    );
    assert!(ok, "{err}");
    assert!(out.contains("listen: 127.0.0.1:2\n"), "{out}");
    assert!(out.contains("max body: 67108864 bytes"), "{out}");
    assert!(
        out.contains("bucket logs: backend=local fencing=off"),
        "{out}"
    );
    assert!(
        out.contains("FENCEGATE_SERVER__LISTEN"),
        "the source names the variables: {out}"
    );
}

#[test]
fn each_refused_field_carries_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    for (text, place, needle) in [
        (
            "[server]\nlisten = \"localhost\"\n",
            "bad.toml:2:10:",
            "listen",
        ),
        (
            "[server]\nmax_body_bytes = 0\n",
            "bad.toml:2:18:",
            "max_body_bytes",
        ),
        (
            "[server]\nbody_idle_timeout_secs = \"0s\"\n",
            "bad.toml:2:26:",
            "body_idle_timeout_secs",
        ),
        (
            "[server]\nmax_body_bytes = \"lots\"\n",
            "bad.toml:2:18:",
            "not a size",
        ),
        ("[s3]\nlisten = \"9000\"\n", "bad.toml:2:10:", "[s3] listen"),
        ("[s3]\nmax_parts = 20000\n", "bad.toml:2:13:", "max_parts"),
        (
            "[keys.etl]\naccess_key_id = \"AK\"\n",
            "bad.toml:1:1:",
            "[keys.etl] needs exactly one of",
        ),
        (
            "[keys.etl]\naccess_key_id = \"A K\"\nsecret_access_key = \"s\"\n",
            "bad.toml:2:17:",
            "access_key_id",
        ),
        (
            "[s3]\ndomain = \"https://s3.example.com\"\n",
            "bad.toml:2:10:",
            "domain",
        ),
    ] {
        let (ok, _, err) = check(dir.path(), text, &[]);
        assert!(!ok, "{text} was accepted");
        assert!(err.contains(place), "{text}: expected {place} in {err}");
        assert!(err.contains(needle), "{text}: expected {needle} in {err}");
        assert!(err.contains("fix:"), "{err}");
    }
}

#[test]
fn a_refused_value_from_the_environment_names_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, err) = check(
        dir.path(),
        "[s3]\nmax_parts = 100\n",
        &[("FENCEGATE_S3__MAX_PARTS", "0")],
    );
    assert!(!ok);
    assert!(
        err.contains("bad.toml: environment variable FENCEGATE_S3__MAX_PARTS: "),
        "{err}"
    );
    let (ok, _, err) = check(
        dir.path(),
        "",
        &[("FENCEGATE_SERVER__BODY_IDLE_TIMEOUT_SECS", "a while")],
    );
    assert!(!ok);
    assert!(
        err.contains("environment variable FENCEGATE_SERVER__BODY_IDLE_TIMEOUT_SECS"),
        "{err}"
    );
    // An unknown field is named by its variable too.
    let (ok, _, err) = check(dir.path(), "", &[("FENCEGATE_SERVER__LISTN", "x")]);
    assert!(!ok);
    assert!(err.contains("FENCEGATE_SERVER__LISTN"), "{err}");
}

#[test]
fn a_bad_s3_domain_is_refused_by_check_config_as_by_serve() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[s3]\ndomain = \"s3.example.com:9000\"\n";
    let (ok, _, err) = check(dir.path(), text, &[]);
    assert!(!ok);
    assert!(err.contains("bad.toml:2:10:"), "{err}");
    let file = dir.path().join("bad.toml");
    let (ok, _, err) = fencegate(
        &[
            "serve",
            "--config",
            file.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            dir.path().join("d").to_str().unwrap(),
        ],
        &[],
    );
    assert!(!ok);
    assert!(err.contains("domain"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_secret_and_a_policy_from_the_environment_serve() {
    const ETL: Creds = Creds {
        key: "AKETL",
        secret: "0123-from-the-environment",
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fencegate.toml");
    std::fs::write(
        &file,
        "[keys.etl]\naccess_key_id = \"AKETL\"\nbuckets = { \"*\" = [\"read\", \"write\"] }\n\n[buckets.default]\nfencing = \"required\"\n",
    )
    .unwrap();
    let data = dir.path().join("data");
    let s = serve(
        &[
            "--listen",
            "127.0.0.1:0",
            "--data-dir",
            data.to_str().unwrap(),
        ],
        &[
            // --config through its own variable, beside the field variables.
            ("FENCEGATE_CONFIG", file.to_str().unwrap()),
            ("FENCEGATE_KEYS__ETL__SECRET_ACCESS_KEY", ETL.secret),
            ("FENCEGATE_BUCKETS__DEFAULT__FENCING", "off"),
            ("FENCEGATE_SERVER__MAX_BODY_BYTES", "1KiB"),
        ],
    );
    let c = common::client();
    let url = format!("http://{}/v1/objects/default/k", s.addr);
    // Fencing is off, from the environment: no token needed.
    let (status, body) = common::put_as(&c, &url, None, b"x", Some(ETL)).await;
    assert_eq!(status, 200, "{body}");
    let wrong = Creds {
        key: "AKETL",
        secret: "not-it",
    };
    assert_eq!(
        common::put_as(&c, &url, None, b"x", Some(wrong)).await.0,
        403
    );
    let big: &'static [u8] = Box::leak(vec![b'x'; 2048].into_boxed_slice());
    assert_eq!(common::put_as(&c, &url, None, big, Some(ETL)).await.0, 413);
    let log = s.log.lock().unwrap().join("\n");
    assert!(
        log.contains("FENCEGATE_KEYS__ETL__SECRET_ACCESS_KEY"),
        "{log}"
    );
    assert!(!log.contains(ETL.secret), "the secret reached the log");
}
