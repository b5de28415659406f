//! The deployment files (docker/, docs/fencegate.service), checked the way this machine can: no
//! Docker engine or systemd runs here, so the compose files are parsed with a real YAML parser
//! (PyYAML, from the test venv), every path and port they name is checked against the config
//! they run, and their command lines are run outside Docker: the same arguments, the same
//! config file, with only what differs outside a container (addresses, the data directory)
//! set from the environment, as an operator would.

mod common;

use common::ministack::Ministack;
use common::Server;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn read(path: &str) -> String {
    std::fs::read_to_string(Path::new(ROOT).join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// A compose file as JSON, parsed by PyYAML (anchors and `<<` merge keys resolved).
fn compose(path: &str) -> serde_json::Value {
    let python = Path::new(ROOT).join(".venv/bin/python3");
    assert!(
        python.exists(),
        "no {}: run scripts/test once (it installs the test venv, PyYAML included)",
        python.display()
    );
    let out = Command::new(python)
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
        ])
        .arg(Path::new(ROOT).join(path))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{path} is not valid YAML: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("a list: {v}"))
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

/// A fencegate started with a deployment file's command line (its data directory is the one
/// the arguments or the environment name).
fn serve(args: &[String], env: &[(&str, String)]) -> Server {
    let mut cmd = Command::new(common::binary());
    cmd.args(args).env("RUST_LOG", "info").stdout(Stdio::null());
    for (k, v) in env {
        cmd.env(k, v);
    }
    Server::spawn(cmd, Path::new("."))
}

/// SIGTERM, as `docker stop` and systemd send; a clean exit must come within `limit`.
fn stop_within(mut server: Server, limit: Duration) {
    unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) };
    let status = server
        .wait_exit(limit)
        .unwrap_or_else(|| panic!("fencegate did not exit within {limit:?} of SIGTERM"));
    assert!(
        status.success(),
        "fencegate exited with {status} on SIGTERM"
    );
}

/// A compose healthcheck's `test` (`["CMD", program, args...]`), run here with its address
/// pointed at `addr`.
fn healthcheck(test: &serde_json::Value, addr: &str) -> bool {
    let test = strings(test);
    assert_eq!(test[0], "CMD");
    let args: Vec<String> = test[2..]
        .iter()
        .map(|a| a.replace("127.0.0.1:8080", addr))
        .collect();
    Command::new(&test[1])
        .args(&args)
        .status()
        .unwrap()
        .success()
}

fn secrets() -> Vec<(&'static str, String)> {
    vec![
        ("FENCEGATE_APP_SECRET", "a-secret-for-the-app-key".into()),
        (
            "FENCEGATE_ADMIN_TOKEN",
            "an-admin-token-of-enough-length-0123".into(),
        ),
    ]
}

#[test]
fn dockerfile_builds_from_paths_the_context_sends() {
    let dockerfile = read("docker/Dockerfile");
    let ignore = read(".dockerignore");
    // .dockerignore sends nothing but what it re-includes; every COPY must be among them.
    assert!(ignore.lines().any(|l| l.trim() == "*"));
    let sent: Vec<&str> = ignore
        .lines()
        .filter_map(|l| l.trim().strip_prefix('!'))
        .map(|p| p.trim_end_matches('/'))
        .collect();
    let mut copies = 0;
    for line in dockerfile
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from"))
    {
        let parts: Vec<&str> = line.split_whitespace().collect();
        for src in &parts[1..parts.len() - 1] {
            let src = src.trim_end_matches('/');
            assert!(Path::new(ROOT).join(src).exists(), "COPY of missing {src}");
            assert!(sent.contains(&src), ".dockerignore does not send {src}");
            copies += 1;
        }
    }
    assert!(copies >= 4);
    // Dependencies are cached across source edits (BuildKit cache mounts).
    assert!(dockerfile.starts_with("# syntax=docker/dockerfile:1"));
    assert!(dockerfile.contains("--mount=type=cache,target=/usr/local/cargo/registry"));
    assert!(dockerfile.contains("--mount=type=cache,target=/src/target"));
    assert!(dockerfile.contains("--bin fencegate"));
    assert!(dockerfile.contains("EXPOSE 8080 9091"));
    assert!(dockerfile.contains("http://127.0.0.1:8080/readyz"));
}

/// The image's own command line (`CMD`, with docker/fencegate.toml) outside Docker: it starts,
/// its HEALTHCHECK passes, and SIGTERM stops it.
#[test]
fn the_image_command_runs() {
    let dockerfile = read("docker/Dockerfile");
    let cmd_line = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("CMD "))
        .expect("a CMD");
    let args: Vec<String> = serde_json::from_str::<Vec<String>>(cmd_line)
        .unwrap()
        .into_iter()
        .map(|a| {
            a.replace(
                "/etc/fencegate/fencegate.toml",
                &format!("{ROOT}/docker/fencegate.toml"),
            )
        })
        .collect();
    let data = tempfile::tempdir().unwrap();
    let mut env = secrets();
    env.push(("FENCEGATE_SERVER__LISTEN", "127.0.0.1:0".into()));
    env.push(("FENCEGATE_ADMIN__LISTEN", "127.0.0.1:0".into()));
    env.push((
        "FENCEGATE_SERVER__DATA_DIR",
        data.path().display().to_string(),
    ));
    let running = serve(&args, &env);
    let health = dockerfile
        .lines()
        .find_map(|l| {
            l.split(" CMD ")
                .nth(1)
                .filter(|_| l.starts_with("HEALTHCHECK"))
        })
        .expect("a HEALTHCHECK");
    let health = health.replace("127.0.0.1:8080", &running.addr.to_string());
    let ok = Command::new("sh").arg("-c").arg(&health).status().unwrap();
    assert!(ok.success(), "the HEALTHCHECK failed: {health}");
    stop_within(running, Duration::from_secs(30));
}

/// docker/compose.yaml: one fencegate in front of a store service, with its config file, the
/// secrets from the environment, a /readyz healthcheck, a restart policy and a stop grace
/// period longer than the drain. Its command runs here against a real ministack.
#[tokio::test(flavor = "multi_thread")]
async fn the_single_instance_compose_file_runs() {
    let file = compose("docker/compose.yaml");
    let services = &file["services"];
    let fg = &services["fencegate"];
    assert_eq!(fg["build"]["dockerfile"], "docker/Dockerfile");
    assert_eq!(fg["restart"], "unless-stopped");
    let grace: u64 = fg["stop_grace_period"]
        .as_str()
        .unwrap()
        .trim_end_matches('s')
        .parse()
        .unwrap();
    // The config the service mounts, and the command that names it.
    let volumes = strings(&fg["volumes"]);
    let mount = volumes
        .iter()
        .find(|v| v.starts_with("./"))
        .expect("the config is mounted");
    let (host, container) = mount.trim_end_matches(":ro").split_once(':').unwrap();
    let config_path = Path::new(ROOT)
        .join("docker")
        .join(host.trim_start_matches("./"));
    assert!(config_path.exists(), "{mount}");
    let args: Vec<String> = strings(&fg["command"])
        .into_iter()
        .map(|a| a.replace(container, &config_path.display().to_string()))
        .collect();
    assert!(
        args.contains(&config_path.display().to_string()),
        "{args:?}"
    );
    std::env::set_var("FENCEGATE_APP_SECRET", "a-secret-for-the-app-key");
    std::env::set_var(
        "FENCEGATE_ADMIN_TOKEN",
        "an-admin-token-of-enough-length-0123",
    );
    let config = fencegate::config::Config::load(&config_path).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        grace > config.server.shutdown_grace_secs,
        "stop_grace_period {grace}s"
    );
    // Ports: the published container ports are the config's, the admin one on loopback only.
    let ports = strings(&fg["ports"]);
    assert!(ports.contains(&format!("{0}:{0}", config.listen.port())));
    let admin = config.admin_listen.expect("an admin listener");
    assert!(ports.contains(&format!("127.0.0.1:{0}:{0}", admin.port())));
    assert!(volumes.contains(&format!(
        "fencegate-data:{}",
        config.server.data_dir.display()
    )));
    // Secrets come from the environment, and compose refuses to start without them.
    for var in ["FENCEGATE_APP_SECRET", "FENCEGATE_ADMIN_TOKEN"] {
        assert!(fg["environment"][var]
            .as_str()
            .unwrap()
            .starts_with(&format!("${{{var}:?")));
    }
    // The store the config writes to is the compose file's, with the bucket it creates.
    let backend = serde_json::to_string(&config.backends["store"]).unwrap();
    assert!(backend.contains("http://store:4566"), "{backend}");
    assert!(services["store"]["command"]
        .to_string()
        .contains("GATEWAY_PORT=4566"));
    let bucket = config.buckets["default"].backend_bucket.clone().unwrap();
    assert!(services["store-bucket"]["command"]
        .to_string()
        .contains(&format!("http://store:4566/{bucket}")));

    // The same command line outside Docker, against a real ministack.
    let store = Ministack::start();
    store.create_bucket(&bucket).await;
    let data = tempfile::tempdir().unwrap();
    let mut env = secrets();
    env.push(("FENCEGATE_SERVER__LISTEN", "127.0.0.1:0".into()));
    env.push(("FENCEGATE_ADMIN__LISTEN", "127.0.0.1:0".into()));
    env.push((
        "FENCEGATE_SERVER__DATA_DIR",
        data.path().display().to_string(),
    ));
    env.push(("FENCEGATE_BACKENDS__STORE__ENDPOINT", store.endpoint()));
    let running = serve(&args, &env);
    assert!(
        healthcheck(&fg["healthcheck"]["test"], &running.addr.to_string()),
        "the compose healthcheck failed"
    );
    // Keys are on: an unsigned write is refused, a signed one lands in the store.
    let (status, _) = common::raw_request(
        running.addr,
        "PUT /v1/objects/default/k HTTP/1.1\r\nHost: x\r\nFencing-Token: 1\r\nContent-Length: 1\r\n\r\n",
        b"x",
    );
    assert_eq!(status, 401);
    let c = common::moto::client_with(
        &format!("http://{}", running.addr),
        "app",
        "a-secret-for-the-app-key",
    );
    c.put_object()
        .bucket("default")
        .key("k")
        .metadata("fencing-token", "1")
        .body(b"through compose's command line".to_vec().into())
        .send()
        .await
        .expect("a signed write lands");
    let kept = store
        .client()
        .get_object()
        .bucket(&bucket)
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(
        kept.body.collect().await.unwrap().into_bytes().as_ref(),
        b"through compose's command line"
    );
    stop_within(running, Duration::from_secs(grace));
}

/// docker/cluster.compose.yaml and docker/cluster.toml: the config loads (with the same
/// environment), shares the fence table on the compose file's three etcd services and writes
/// to its store service, and both instances run it with the healthcheck, restart policy and
/// grace of the single instance.
#[test]
fn the_cluster_compose_file_agrees_with_its_config() {
    let file = compose("docker/cluster.compose.yaml");
    let services = &file["services"];
    std::env::set_var("FENCEGATE_APP_SECRET", "a-secret-for-the-app-key");
    std::env::set_var(
        "FENCEGATE_ADMIN_TOKEN",
        "an-admin-token-of-enough-length-0123",
    );
    let path = Path::new(ROOT).join("docker/cluster.toml");
    let config = fencegate::config::Config::load(&path).unwrap_or_else(|e| panic!("{e}"));
    let etcd = config
        .etcd
        .as_ref()
        .expect("cluster.toml shares the fence table on etcd");
    assert_eq!(etcd.endpoints.len(), 3);
    for (n, endpoint) in etcd.endpoints.iter().enumerate() {
        let name = format!("etcd{}", n + 1);
        let svc = &services[&name];
        assert_eq!(
            svc["environment"]["ETCD_ADVERTISE_CLIENT_URLS"],
            endpoint.as_str()
        );
        assert_eq!(svc["environment"]["ETCD_AUTO_COMPACTION_MODE"], "revision");
        assert_eq!(svc["restart"], "unless-stopped");
    }
    let backend = serde_json::to_string(&config.backends["store"]).unwrap();
    assert!(backend.contains("http://store:4566"), "{backend}");
    let bucket = config.buckets["default"].backend_bucket.clone().unwrap();
    assert!(services["store-bucket"]["command"]
        .to_string()
        .contains(&format!("http://store:4566/{bucket}")));
    for n in [1, 2] {
        let fg = &services[&format!("fencegate{n}")];
        assert_eq!(fg["build"]["dockerfile"], "docker/Dockerfile");
        let args = strings(&fg["command"]);
        assert_eq!(args, ["serve", "--config", "/etc/fencegate/cluster.toml"]);
        let volumes = strings(&fg["volumes"]);
        assert!(volumes.contains(&"./cluster.toml:/etc/fencegate/cluster.toml:ro".to_string()));
        assert!(volumes.contains(&format!(
            "fencegate{n}:{}",
            config.server.data_dir.display()
        )));
        assert_eq!(fg["restart"], "unless-stopped");
        assert!(strings(&fg["healthcheck"]["test"])
            .contains(&"http://127.0.0.1:8080/readyz".to_string()));
        let grace: u64 = fg["stop_grace_period"]
            .as_str()
            .unwrap()
            .trim_end_matches('s')
            .parse()
            .unwrap();
        assert!(grace > config.server.shutdown_grace_secs);
        assert!(fg["depends_on"]["store-bucket"]["condition"] == "service_completed_successfully");
    }
    assert!(!config.keys.is_empty());
    fencegate::server::check_protected(&config).unwrap();
}

/// docs/fencegate.service: its ExecStart and ExecReload run here as written (paths moved to a
/// temporary directory), SIGHUP reloads rather than ends the process, and systemd waits longer
/// than the drain before it kills.
#[test]
fn the_systemd_unit_runs_its_command_lines() {
    let unit = read("docs/fencegate.service");
    let value = |key: &str| -> Vec<String> {
        unit.lines()
            .filter_map(|l| l.strip_prefix(&format!("{key}=")))
            .map(String::from)
            .collect()
    };
    let tmp = tempfile::tempdir().unwrap();
    let conf: PathBuf = tmp.path().join("fencegate.toml");
    std::fs::copy(Path::new(ROOT).join("config/fencegate.toml"), &conf).unwrap();
    let local = |line: &str| -> Vec<String> {
        line.replace("/etc/fencegate/fencegate.toml", &conf.display().to_string())
            .replace(
                "/var/lib/fencegate",
                &tmp.path().join("data").display().to_string(),
            )
            .split_whitespace()
            .skip(1) // the binary: the one under test
            .map(String::from)
            .collect()
    };
    let start = value("ExecStart");
    assert_eq!(start.len(), 1);
    assert!(start[0].starts_with("/usr/local/bin/fencegate serve"));
    let running = serve(
        &local(&start[0]),
        &[("FENCEGATE_SERVER__LISTEN", "127.0.0.1:0".into())],
    );
    let reloads = value("ExecReload");
    assert!(reloads[0].starts_with("/usr/local/bin/fencegate check-config"));
    let check = Command::new(common::binary())
        .args(local(&reloads[0]))
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stderr)
    );
    assert_eq!(reloads[1], "/bin/kill -HUP $MAINPID");
    unsafe { libc::kill(running.pid() as i32, libc::SIGHUP) };
    std::thread::sleep(Duration::from_millis(500));
    let (status, _) = common::raw_request(
        running.addr,
        "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
        b"",
    );
    assert_eq!(status, 200, "SIGHUP ended the process");
    let stop: u64 = value("TimeoutStopSec")[0].parse().unwrap();
    let config = fencegate::config::Config::load(&conf).unwrap();
    assert!(stop > config.server.shutdown_grace_secs);
    assert_eq!(value("KillSignal"), ["SIGTERM"]);
    assert_eq!(value("StateDirectory"), ["fencegate"]);
    stop_within(running, Duration::from_secs(stop));
}
