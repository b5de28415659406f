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
    run_exec_form(&test[1..], "127.0.0.1:8080", addr)
}

/// A command in exec form (a program and its arguments), run here with `from` pointed at `to`;
/// the image's fencegate is the binary under test.
fn run_exec_form(command: &[String], from: &str, to: &str) -> bool {
    let program = match command[0].as_str() {
        IMAGE_BINARY => common::binary(),
        other => PathBuf::from(other),
    };
    let args: Vec<String> = command[1..].iter().map(|a| a.replace(from, to)).collect();
    Command::new(program)
        .args(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// Where the image keeps fencegate.
const IMAGE_BINARY: &str = "/usr/local/bin/fencegate";

/// The Dockerfile's runtime stage: the lines after its last FROM.
fn runtime_stage(dockerfile: &str) -> Vec<&str> {
    let lines: Vec<&str> = dockerfile.lines().collect();
    let last = lines
        .iter()
        .rposition(|l| l.starts_with("FROM "))
        .expect("a FROM");
    lines[last..].to_vec()
}

/// The HEALTHCHECK's command, in exec form.
fn image_healthcheck(dockerfile: &str) -> Vec<String> {
    let line = dockerfile
        .lines()
        .find(|l| l.starts_with("HEALTHCHECK"))
        .expect("a HEALTHCHECK");
    let json = line
        .split(" CMD ")
        .nth(1)
        .expect("HEALTHCHECK ... CMD [...]");
    serde_json::from_str(json)
        .unwrap_or_else(|e| panic!("the HEALTHCHECK is not in exec form: {e}"))
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
    // The runtime image: a current Debian, a numeric user (Kubernetes' runAsNonRoot checks the
    // number), and no curl: the healthcheck is fencegate's own subcommand.
    let runtime = runtime_stage(&dockerfile);
    let from = runtime[0];
    assert!(
        ["trixie", "forky"].iter().any(|r| from.contains(r)),
        "{from}: not a current Debian"
    );
    assert!(dockerfile
        .lines()
        .any(|l| l.starts_with("FROM ") && l.contains("trixie") && l.contains("AS build")));
    assert!(runtime.contains(&"USER 10001:10001"), "{runtime:?}");
    assert!(!runtime.iter().any(|l| l.contains("curl")), "{runtime:?}");
    let health = image_healthcheck(&dockerfile);
    assert_eq!(health[..2], [IMAGE_BINARY, "healthcheck"]);
    assert!(health.contains(&"http://127.0.0.1:8080/readyz".to_string()));
}

/// The build stage's files are enough for cargo: its COPY sources, copied into an empty
/// directory, make a manifest whose every target is there (cargo refuses a manifest that names
/// a missing test or example, even to build the binary alone). Nothing is compiled: cargo is
/// asked for a binary that does not exist, which it answers after reading the manifest.
#[test]
fn the_build_stage_has_every_file_cargo_needs() {
    let dockerfile = read("docker/Dockerfile");
    let build_stage = &dockerfile[..dockerfile.rfind("\nFROM ").unwrap()];
    let ctx = tempfile::tempdir().unwrap();
    for line in build_stage.lines().filter(|l| l.starts_with("COPY ")) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        for src in &parts[1..parts.len() - 1] {
            let src = src.trim_end_matches('/');
            // A nested source (clients/rust) lands under its own parent, as COPY makes it.
            std::fs::create_dir_all(ctx.path().join(src).parent().unwrap()).unwrap();
            let status = Command::new("cp")
                .args(["-r", &format!("{ROOT}/{src}")])
                .arg(ctx.path().join(src))
                .status()
                .unwrap();
            assert!(status.success(), "cp {src}");
        }
    }
    let out = Command::new("cargo")
        .args(["build", "--offline", "--locked", "--bin", "no-such-binary"])
        .current_dir(ctx.path())
        .env("CARGO_TARGET_DIR", ctx.path().join("target"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("no bin target named `no-such-binary`"),
        "cargo cannot read the manifest from the build stage's files alone:\n{err}"
    );
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
    let health = image_healthcheck(&dockerfile);
    let addr = running.addr.to_string();
    assert!(
        run_exec_form(&health, "127.0.0.1:8080", &addr),
        "the HEALTHCHECK failed: {health:?}"
    );
    stop_within(running, Duration::from_secs(30));
    // Once the instance is gone, the healthcheck says so.
    assert!(!run_exec_form(&health, "127.0.0.1:8080", &addr));
}

/// `bwrap` (bubblewrap), which scripts/test installs.
fn bwrap() -> PathBuf {
    ["/usr/bin/bwrap", "/bin/bwrap"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .expect("no bwrap: run scripts/test once (it installs bubblewrap)")
}

/// The runtime image as Kubernetes' restricted defaults run it (runAsNonRoot,
/// readOnlyRootFilesystem): its file set (each COPY of the runtime stage at its destination,
/// over the base image's libraries and certificates) as a read-only root, the USER's numeric
/// ids, and only the data volume writable. Started with the image's CMD, it serves a signed
/// write into the volume, and its HEALTHCHECK, run inside the same root, answers.
#[tokio::test(flavor = "multi_thread")]
async fn the_image_runs_as_its_numeric_user_on_a_read_only_root() {
    let dockerfile = read("docker/Dockerfile");
    let runtime = runtime_stage(&dockerfile);
    let (uid, gid) = runtime
        .iter()
        .find_map(|l| l.strip_prefix("USER "))
        .and_then(|u| u.split_once(':'))
        .expect("USER uid:gid");
    assert!(uid.parse::<u32>().unwrap() > 0 && gid.parse::<u32>().is_ok());
    let volume = runtime
        .iter()
        .find_map(|l| l.strip_prefix("VOLUME "))
        .expect("a VOLUME");
    use std::os::unix::fs::PermissionsExt;
    let root = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    // The sandbox runs as the image's user on the host too (setpriv, below), so what it reads
    // must be readable by that user: the binary is copied out of the build cache's directory.
    let files = tempfile::tempdir().unwrap();
    for dir in [root.path(), files.path()] {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let mut binds: Vec<(PathBuf, String)> = Vec::new();
    for line in runtime.iter().filter(|l| l.starts_with("COPY ")) {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let dest = parts[parts.len() - 1].to_string();
        let src = if line.contains("--from=build") {
            let copy = files.path().join("fencegate");
            std::fs::copy(common::binary(), &copy).unwrap();
            copy
        } else {
            Path::new(ROOT).join(parts[1])
        };
        binds.push((src, dest));
    }
    // The volume belongs to the image's user only if the runtime stage gives it to that user,
    // as Docker copies the image's directory's owner into a new volume; otherwise root's.
    let chowned = runtime
        .iter()
        .any(|l| l.contains(&format!("chown {uid}:{gid} {volume}")));
    if chowned {
        std::os::unix::fs::chown(
            data.path(),
            Some(uid.parse().unwrap()),
            Some(gid.parse().unwrap()),
        )
        .unwrap();
    }
    // The base image's certificates exist only if the runtime stage installs them.
    let certificates = runtime.iter().any(|l| l.contains("ca-certificates"));
    assert_eq!(binds.len(), 2, "{binds:?}");
    // Mount points in the read-only root: the base image's libraries and certificates, the
    // copied files, the volume, /dev and /proc. Nothing else exists there, /tmp included.
    let mut args: Vec<String> = vec![
        "--ro-bind".into(),
        root.path().display().to_string(),
        "/".into(),
    ];
    for dir in [
        "usr/lib",
        "usr/lib64",
        "etc/ssl",
        "proc",
        "dev",
        volume.trim_start_matches('/'),
    ] {
        std::fs::create_dir_all(root.path().join(dir)).unwrap();
    }
    std::os::unix::fs::symlink("usr/lib", root.path().join("lib")).unwrap();
    std::os::unix::fs::symlink("usr/lib64", root.path().join("lib64")).unwrap();
    let mut bases = vec!["/usr/lib", "/usr/lib64"];
    if certificates {
        bases.push("/etc/ssl");
    }
    for base in bases {
        args.extend(["--ro-bind".into(), base.into(), base.into()]);
    }
    for (src, dest) in &binds {
        let at = root.path().join(dest.trim_start_matches('/'));
        std::fs::create_dir_all(at.parent().unwrap()).unwrap();
        std::fs::write(&at, b"").unwrap();
        args.extend(["--ro-bind".into(), src.display().to_string(), dest.clone()]);
    }
    args.extend([
        "--bind".into(),
        data.path().display().to_string(),
        volume.to_string(),
    ]);
    args.extend(
        [
            "--dev",
            "/dev",
            "--proc",
            "/proc",
            "--unshare-user",
            "--die-with-parent",
        ]
        .map(String::from),
    );
    args.extend(["--uid".into(), uid.into(), "--gid".into(), gid.into()]);
    // bwrap started by root would map the image's uid to root, which may write anywhere:
    // it is started as that uid instead, so file ownership is tested as Docker applies it.
    let sandboxed = |command: &[String]| {
        let mut cmd = Command::new("setpriv");
        cmd.args(["--reuid", uid, "--regid", gid, "--clear-groups"])
            .arg(bwrap())
            .args(&args)
            .args(command);
        cmd
    };
    let entry: Vec<String> = runtime
        .iter()
        .find_map(|l| l.strip_prefix("ENTRYPOINT "))
        .map(|e| serde_json::from_str(e).unwrap())
        .expect("an ENTRYPOINT");
    let cmd_args: Vec<String> = runtime
        .iter()
        .find_map(|l| l.strip_prefix("CMD "))
        .map(|e| serde_json::from_str(e).unwrap())
        .expect("a CMD");
    let mut cmd = sandboxed(&[entry, cmd_args].concat());
    cmd.env("RUST_LOG", "info").stdout(Stdio::null());
    for (k, v) in secrets() {
        cmd.env(k, v);
    }
    cmd.env("FENCEGATE_SERVER__LISTEN", "127.0.0.1:0")
        .env("FENCEGATE_ADMIN__LISTEN", "127.0.0.1:0");
    let running = Server::spawn(cmd, data.path());
    let c = common::moto::client_with(
        &format!("http://{}", running.addr),
        "app",
        "a-secret-for-the-app-key",
    );
    c.put_object()
        .bucket("default")
        .key("k")
        .metadata("fencing-token", "1")
        .body(b"from a read-only root".to_vec().into())
        .send()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "a signed write: {e:?}\n{}",
                running.log_lines(&[""]).join("\n")
            )
        });
    let got = c
        .get_object()
        .bucket("default")
        .key("k")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        b"from a read-only root"
    );
    assert!(
        std::fs::read_dir(data.path()).unwrap().count() > 0,
        "nothing in the volume"
    );
    let health = image_healthcheck(&dockerfile);
    let health: Vec<String> = health
        .iter()
        .map(|a| a.replace("127.0.0.1:8080", &running.addr.to_string()))
        .collect();
    let out = sandboxed(&health).output().unwrap();
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "ready",
        "the HEALTHCHECK inside the image's root: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    running.kill9();
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
    assert_eq!(services["store"]["build"]["dockerfile"], "store.Dockerfile");
    assert!(read("docker/store.Dockerfile").contains("GATEWAY_PORT=4566"));
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

/// docker/store.Dockerfile, the demo store of both compose files: a pinned ministack, installed
/// when the image is built, keeping its objects on a volume. Its command runs here with the
/// image's environment (only the port and the data directory moved): each compose file's
/// store healthcheck passes, and an object written before a restart is there after it.
#[tokio::test(flavor = "multi_thread")]
async fn the_demo_store_keeps_its_objects_across_a_restart() {
    let dockerfile = read("docker/store.Dockerfile");
    assert!(
        dockerfile
            .lines()
            .any(|l| l.starts_with("RUN pip install") && l.contains("ministack==")),
        "ministack is installed at build time, at a pinned version"
    );
    let env: Vec<(String, String)> = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("ENV "))
        .expect("an ENV")
        .split_whitespace()
        .map(|kv| {
            let (k, v) = kv.split_once('=').unwrap();
            (k.to_string(), v.to_string())
        })
        .collect();
    let value = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    let volume = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("VOLUME "))
        .expect("a VOLUME");
    assert_eq!(value("S3_PERSIST").as_deref(), Some("1"));
    assert_eq!(value("S3_DATA_DIR").as_deref(), Some(volume));
    let mut checks = Vec::new();
    for path in ["docker/compose.yaml", "docker/cluster.compose.yaml"] {
        let services = compose(path)["services"].clone();
        let store = &services["store"];
        assert_eq!(store["build"]["dockerfile"], "store.Dockerfile", "{path}");
        assert!(
            strings(&store["volumes"])
                .iter()
                .any(|v| v.ends_with(&format!(":{volume}"))),
            "{path}: the store's data is on a volume"
        );
        for (name, svc) in services.as_object().unwrap() {
            if name.starts_with("fencegate") || name == "store-bucket" {
                assert_eq!(
                    svc["depends_on"]["store"]["condition"], "service_healthy",
                    "{path}: {name}"
                );
            }
        }
        checks.push(strings(&store["healthcheck"]["test"]));
    }
    let data = tempfile::tempdir().unwrap();
    // A fresh port for each start: a port given back at the stop may be taken by a parallel
    // test's store before the restart binds it.
    let start = |port: &str| {
        let mut cmd = Command::new(Path::new(ROOT).join(".venv-ministack/bin/ministack"));
        for (k, v) in &env {
            cmd.env(k, v);
        }
        cmd.env("GATEWAY_PORT", port)
            .env("BIND_HOST", "127.0.0.1")
            .env("S3_DATA_DIR", data.path())
            .env("TMPDIR", data.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .expect("ministack (scripts/test installs it in .venv-ministack)");
        // Every compose file's healthcheck, with the port moved, passes once it serves.
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        for check in &checks {
            let mut check = check[1..].to_vec();
            check[0] = Path::new(ROOT)
                .join(".venv-ministack/bin/python3")
                .display()
                .to_string();
            while !run_exec_form(&check, "127.0.0.1:4566", &format!("127.0.0.1:{port}")) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the store's healthcheck never passed"
                );
                std::thread::sleep(Duration::from_millis(250));
            }
        }
        child
    };
    let port = common::moto::free_port().to_string();
    let mut store = start(&port);
    let c = common::moto::client_with(&format!("http://127.0.0.1:{port}"), "test", "test");
    c.create_bucket().bucket("fencegate").send().await.unwrap();
    c.put_object()
        .bucket("fencegate")
        .key("kept")
        .body(b"outlives the container".to_vec().into())
        .send()
        .await
        .unwrap();
    unsafe { libc::kill(store.id() as i32, libc::SIGTERM) };
    store.wait().unwrap();
    let port = common::moto::free_port().to_string();
    let mut store = start(&port);
    let c = common::moto::client_with(&format!("http://127.0.0.1:{port}"), "test", "test");
    // The body is read before the store is stopped: it streams from the live store.
    let body = match c.get_object().bucket("fencegate").key("kept").send().await {
        Ok(got) => got
            .body
            .collect()
            .await
            .map(|b| b.into_bytes())
            .map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    };
    store.kill().unwrap();
    store.wait().unwrap();
    let body = body.expect("the object is still there after a restart");
    assert_eq!(body.as_ref(), b"outlives the container");
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
        let image = svc["image"].as_str().unwrap();
        let version: Vec<u32> = image
            .rsplit(":v")
            .next()
            .unwrap()
            .split('.')
            .map(|p| p.parse().unwrap())
            .collect();
        assert!(version[..2] >= [3, 5][..], "{image}: etcd 3.5 or newer");
        let health = strings(&svc["healthcheck"]["test"]);
        assert!(
            health.contains(&"endpoint".to_string()) && health.contains(&"health".to_string()),
            "{health:?}"
        );
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
        for member in ["etcd1", "etcd2", "etcd3"] {
            assert_eq!(
                fg["depends_on"][member]["condition"], "service_healthy",
                "fencegate{n} waits for a quorum"
            );
        }
        assert_eq!(
            strings(&fg["healthcheck"]["test"])[1..3],
            [IMAGE_BINARY, "healthcheck"]
        );
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
