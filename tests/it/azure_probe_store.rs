//! `fencegate probe-store BACKEND` on an azure backend: the start-up probe (each condition
//! alone, a race of writers creating one blob, the clock) printed before any data goes through
//! the service. Azurite is safe; a proxy in front of it that strips the conditional headers is
//! not, and the verdict names every condition it lost. Either way no scratch blob stays.

use crate::common;
use common::azurite::Azurite;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};

const CONTAINER: &str = "probe-me";

fn config(dir: &Path, endpoint: &str) -> PathBuf {
    let file = dir.join("probe.toml");
    std::fs::write(
        &file,
        format!(
            "[backends.az]\nkind = \"azure\"\naccount = \"{}\"\naccess_key = \"{}\"\nendpoint = \"{endpoint}\"\n\n[buckets.reports]\nbackend = \"az\"\nbackend_bucket = \"{CONTAINER}\"\nbackend_prefix = \"reports/\"\n",
            common::azurite::ACCOUNT,
            common::azurite::KEY,
        ),
    )
    .unwrap();
    file
}

/// tests/e2e/drop_conditions_proxy.py in front of Azurite, removing If-Match, If-None-Match
/// and x-ms-source-if-match from every request; killed on drop.
struct DropConditions(Child, u16);

impl DropConditions {
    fn start(upstream: u16) -> DropConditions {
        let port = common::moto::free_port();
        let child = Command::new("python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/drop_conditions_proxy.py"))
            .args([
                &port.to_string(),
                &upstream.to_string(),
                "x-ms-source-if-match",
            ])
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "the proxy did not listen"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        DropConditions(child, port)
    }
}

impl Drop for DropConditions {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `fencegate probe-store ARGS` off the runtime: its exit code, stdout and stderr.
async fn probe(args: Vec<String>) -> (i32, String, String) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_fencegate"))
            .arg("probe-store")
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

fn args(file: &Path, extra: &[&str]) -> Vec<String> {
    let mut a = vec![
        "az".to_string(),
        "--config".into(),
        file.display().to_string(),
    ];
    a.extend(extra.iter().map(|s| s.to_string()));
    a
}

fn row<'a>(verdict: &'a Value, capability: &str) -> &'a Value {
    verdict["capabilities"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["capability"].as_str().unwrap().starts_with(capability))
        .unwrap_or_else(|| panic!("no row {capability}: {verdict}"))
}

const CONDITIONS: [&str; 6] = [
    "If-None-Match: * on Put Blob",
    "If-Match on Put Blob",
    "If-None-Match: * on Copy Blob",
    "If-Match on Copy Blob",
    "x-ms-source-if-match on Copy Blob",
    "If-Match on Delete Blob",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azurite_is_safe() {
    let az = Azurite::start();
    az.create_container(CONTAINER);
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), &az.endpoint());

    let (code, table, err) = probe(args(&file, &[])).await;
    assert_eq!(code, 0, "{table}{err}");
    assert!(
        table.contains("backend az, store bucket probe-me, prefix reports/"),
        "{table}"
    );
    assert!(
        table.contains("8 writers race with If-None-Match: * on Put Blob  1 of 8 won"),
        "the start-up probe's race of 8: {table}"
    );
    assert!(
        table.contains("SAFE: fencegate serves this store in safe mode"),
        "{table}"
    );
    assert!(!table.contains(" !"), "nothing marked as lost: {table}");

    let (code, json, err) = probe(args(&file, &["--json", "--writers", "5"])).await;
    assert_eq!(code, 0, "{err}");
    let v = &serde_json::from_str::<Value>(&json).unwrap()[0];
    assert_eq!(
        (v["safe"].as_bool(), v["starts"].as_bool()),
        (Some(true), Some(true)),
        "{v}"
    );
    for capability in CONDITIONS.iter().chain(&["Content-MD5 on Put Blob"]) {
        assert_eq!(row(v, capability)["result"], "honoured", "{v}");
    }
    assert_eq!(row(v, "clock against the service's")["ok"], true, "{v}");
    let race = &v["races"][0];
    assert_eq!(
        (
            race["writers"].as_u64(),
            race["won"].as_u64(),
            race["refused"].as_u64(),
            race["kept_winner"].as_bool()
        ),
        (Some(5), Some(1), Some(4), Some(true)),
        "{race}"
    );
    assert_eq!(
        az.list_behind(CONTAINER, ""),
        Vec::<String>::new(),
        "the probe removed its scratch blobs"
    );
}

/// A blob service that accepts If-Match, If-None-Match and x-ms-source-if-match and ignores
/// them (a proxy strips them on their way to Azurite): probe-store says it is not safe (exit
/// 1), names each condition lost and the race every writer won, and `serve` refuses it by
/// the same probe.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_ignores_conditions_is_refused_and_named() {
    let az = Azurite::start();
    az.create_container(CONTAINER);
    let proxy = DropConditions::start(az.port);
    let dir = tempfile::tempdir().unwrap();
    let file = config(
        dir.path(),
        &format!("http://127.0.0.1:{}/{}", proxy.1, common::azurite::ACCOUNT),
    );

    let (code, table, err) = probe(args(&file, &[])).await;
    assert_eq!(code, 1, "{table}{err}");
    assert!(
        table.contains("NOT SAFE: serve refuses to start on it"),
        "{table}"
    );
    for condition in CONDITIONS {
        assert!(
            table.contains(&format!("{condition} ")) && table.contains("ignored !"),
            "{condition} named as ignored: {table}"
        );
    }
    assert!(
        table.contains("WHAT CLIENTS OF FENCEGATE GET:\n    - none"),
        "{table}"
    );

    let (code, json, err) = probe(args(&file, &["--json"])).await;
    assert_eq!(code, 1, "{err}");
    let v = &serde_json::from_str::<Value>(&json).unwrap()[0];
    assert_eq!(
        (v["safe"].as_bool(), v["starts"].as_bool()),
        (Some(false), Some(false)),
        "{v}"
    );
    for condition in CONDITIONS {
        let r = row(v, condition);
        assert_eq!(
            (r["result"].as_str(), r["ok"].as_bool()),
            (Some("ignored"), Some(false)),
            "{v}"
        );
    }
    // The proxy leaves Content-MD5 alone, and the service still checks it.
    assert_eq!(row(v, "Content-MD5 on Put Blob")["result"], "honoured");
    assert_eq!(v["races"][0]["won"].as_u64(), Some(8), "{v}");
    let refusal = v["refusals"][0].as_str().unwrap();
    assert!(
        refusal.contains("If-Match on Delete Blob")
            && refusal.contains("x-ms-source-if-match on Copy Blob")
            && refusal.contains("8 of 8 won"),
        "{refusal}"
    );

    let data = dir.path().join("data");
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_fencegate"))
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&file)
            .arg("--data-dir")
            .arg(data)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "serve started: {err}");
    assert!(
        err.contains("does not honour what fencegate's commits rely on")
            && err.contains("If-Match on Put Blob"),
        "{err}"
    );
    assert_eq!(az.list_behind(CONTAINER, ""), Vec::<String>::new());
}

/// What cannot be probed on azure is said, with exit 2: a container that does not exist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_container_is_no_verdict() {
    let az = Azurite::start();
    let dir = tempfile::tempdir().unwrap();
    let file = config(dir.path(), &az.endpoint());
    let (code, out, err) = probe(args(&file, &[])).await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("container probe-me") && err.contains("has no container"),
        "{err}"
    );
}
