//! The command line: --help teaches, check-config validates and names the line of a mistake.

use std::process::Command;

fn fencegate(args: &[&str]) -> (bool, String, String) {
    fencegate_env(args, &[])
}

fn fencegate_env(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let out = Command::new(crate::common::binary())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn help_explains_the_tool() {
    let (ok, out, _) = fencegate(&["--help"]);
    assert!(ok);
    for needle in [
        "fencing token",
        "check-config",
        "--data-dir",
        "--listen",
        "RUST_LOG",
        "Fencing-Token",
    ] {
        assert!(out.contains(needle), "--help lacks {needle}:\n{out}");
    }
}

#[test]
fn check_config_prints_the_effective_policies() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/config/prefix-scoped.toml");
    let (ok, out, err) = fencegate(&["check-config", file]);
    assert!(ok, "{err}");
    assert!(
        out.contains(
            "bucket tenants: backend=local fencing=required scope=prefix (first 1 segments) tokens=non-decreasing"
        ),
        "{out}"
    );
    assert!(out.contains("bucket jobs:"), "{out}");
    // Every bucket names its token-jump bound, "any" where none is set.
    assert!(out.contains("max_token_jump=any"), "{out}");
    let dir = tempfile::tempdir().unwrap();
    let bounded = dir.path().join("jump.toml");
    std::fs::write(&bounded, "[buckets.bounded]\nmax_token_jump = 1000\n").unwrap();
    let (ok, out, err) = fencegate(&["check-config", bounded.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(out.contains("max_token_jump=1000"), "{out}");
    // Settings as the file spells them, not as Rust names them.
    assert!(
        !out.contains("Required") && !out.contains("Refuse"),
        "{out}"
    );
}

#[test]
fn a_bad_file_names_the_file_the_line_and_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(
        &file,
        "[buckets.logs]\nfencing = \"required\"\nbackend = \"nas\"\n",
    )
    .unwrap();
    let (ok, _, err) = fencegate(&["check-config", file.to_str().unwrap()]);
    assert!(!ok);
    // The line and column of the value that names it.
    assert!(err.contains("bad.toml:3:11:"), "{err}");
    assert!(err.contains("fix:"), "{err}");
    // serve refuses to start on it too.
    let (ok, _, err) = fencegate(&[
        "serve",
        "--config",
        file.to_str().unwrap(),
        "--data-dir",
        dir.path().join("d").to_str().unwrap(),
    ]);
    assert!(!ok);
    assert!(err.contains("nas"), "{err}");
    assert!(
        !dir.path().join("d").exists(),
        "nothing was created by a refused start"
    );
}
/// check-config makes serve's checks, with the same words: a file it passes, serve takes.
#[test]
fn check_config_refuses_what_serve_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_string()
    };
    // Development mode on a public address.
    let public = write("public.toml", "[server]\nlisten = \"0.0.0.0:8080\"\n");
    let (ok, _, checked) = fencegate(&["check-config", &public]);
    assert!(!ok, "check-config passed what serve refuses");
    assert!(checked.contains("development mode"), "{checked}");
    // The file may be named as serve names it, too.
    let (ok, _, named) = fencegate(&["check-config", "--config", &public]);
    assert!(!ok);
    assert_eq!(named, checked);
    let data = dir.path().join("d");
    let (ok, _, served) = fencegate(&[
        "serve",
        "--config",
        &public,
        "--data-dir",
        data.to_str().unwrap(),
    ]);
    assert!(!ok);
    let first = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("error:"))
            .map(str::to_string)
    };
    assert_eq!(first(&checked), first(&served));
    // Certificates that do not load.
    let tls = write(
        "tls.toml",
        "[server.tls]\ncert_file = \"/nonexistent/cert.pem\"\nkey_file = \"/nonexistent/key.pem\"\n",
    );
    let (ok, _, err) = fencegate(&["check-config", &tls]);
    assert!(!ok);
    assert!(err.contains("/nonexistent/cert.pem"), "{err}");
    // Two listeners on one address: serve would fail to bind its own second port.
    let twice = write(
        "twice.toml",
        "[server]\nlisten = \"127.0.0.1:18099\"\n[admin]\nlisten = \"127.0.0.1:18099\"\n",
    );
    let (ok, _, err) = fencegate(&["check-config", &twice]);
    assert!(!ok);
    assert!(
        err.contains("[server] listen and [admin] listen are both"),
        "{err}"
    );
}

/// Without a file, check-config checks the embedded default with the FENCEGATE_* variables,
/// as a container configured by its environment runs.
#[test]
fn check_config_without_a_file_checks_the_default_and_the_environment() {
    let (ok, out, err) = fencegate(&["check-config"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("ok: the embedded default configuration is valid"),
        "{out}"
    );
    let (ok, _, err) = fencegate_env(
        &["check-config"],
        &[("FENCEGATE_BUCKETS__DEFAULT__FENCING", "sometimes")],
    );
    assert!(!ok);
    assert!(err.contains("FENCEGATE_BUCKETS__DEFAULT__FENCING"), "{err}");
}

/// Mistakes an operator makes, each explained: a misspelt field, a bad number shown as
/// written (it is no secret), a secret short enough to guess, and an environment variable a
/// reload cannot see.
#[test]
fn check_config_explains_common_mistakes() {
    let dir = tempfile::tempdir().unwrap();
    let check = |text: &str| {
        let path = dir.path().join("c.toml");
        std::fs::write(&path, text).unwrap();
        let (ok, _, err) = fencegate(&["check-config", path.to_str().unwrap()]);
        assert!(!ok, "{text} passed");
        err
    };
    let err = check("[server]\nlisten = \"127.0.0.1:1\"\nmax_conections = 5\n");
    assert!(err.contains("did you mean `max_connections`?"), "{err}");
    let err = check("[server]\nlistne = \"127.0.0.1:1\"\n");
    assert!(err.contains("did you mean `listen`?"), "{err}");
    let err = check("[buckets.default]\nmax_token_jump = -1\n");
    assert!(!err.contains("not shown"), "{err}");
    assert!(err.contains("-1"), "{err}");
    // In a backend's table (read whole, by its `kind`), a misspelt field is named and a bad
    // value that is no secret is shown; a secret's bad value is not.
    let err = check("[backends.store]\nkind = \"s3\"\nendpont = \"http://127.0.0.1:9\"\n");
    assert!(err.contains("did you mean `endpoint`?"), "{err}");
    assert!(!err.contains("not shown"), "{err}");
    let err = check("[backends.disk]\nkind = \"fs\"\nrot = \"/srv\"\n");
    assert!(err.contains("did you mean `root`?"), "{err}");
    let err = check("[backends.store]\nkind = \"s3\"\nregion = 5\n");
    assert!(err.contains("`5`") && !err.contains("not shown"), "{err}");
    let err = check("[backends.store]\nkind = \"s3\"\nsecret_access_key = 51966\n");
    assert!(err.contains("not shown") && !err.contains("51966"), "{err}");
    let key = |secret: &str| {
        format!(
            "[keys.app]\naccess_key_id = \"app\"\n{secret}\nbuckets = {{ \"*\" = [\"read\"] }}\n"
        )
    };
    let err = check(&key("secret_access_key = \"guessable\""));
    assert!(err.contains("shorter than 16 characters"), "{err}");
    assert!(!err.contains("guessable"), "{err}");
    // A secret's misspelt field is pointed at a file or a variable's name, and a secret
    // written where a variable's name belongs is not repeated.
    let err = check("[admin]\nbearer_tokn = \"x\"\n");
    assert!(
        err.contains("`bearer_token_file` (a file holding the secret)"),
        "{err}"
    );
    let err = check(&key("secret_access_key_env = \"Zr8+k/2v9QmLwP0sT4xY\""));
    assert!(!err.contains("Zr8+k/2v9QmLwP0sT4xY"), "{err}");
    assert!(err.contains("not a variable name"), "{err}");
    let err = check(&key("secret_access_key_env = \"FENCEGATE_TEST_NEVER_SET\""));
    assert!(
        err.contains("the environment fencegate was started with")
            && err.contains("secret_access_key_file"),
        "{err}"
    );
}
