//! `scripts/cluster up` itself: it checks every prerequisite before it starts anything, and a
//! failure after it started members stops them again.

use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A PATH of every program in /usr/bin and /bin but the `hidden` ones, with `fake` scripts
/// (name, body) in front.
fn path_without(hidden: &[&str], fake: &[(&str, &str)]) -> (tempfile::TempDir, String) {
    let bin = tempfile::tempdir().unwrap();
    for dir in ["/usr/bin", "/bin"] {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let name = entry.file_name();
            let at = bin.path().join(&name);
            if hidden.iter().any(|h| name == *h) || at.exists() {
                continue;
            }
            std::os::unix::fs::symlink(entry.path(), at).unwrap();
        }
    }
    for (name, body) in fake {
        let at = bin.path().join(name);
        let _ = std::fs::remove_file(&at);
        std::fs::write(&at, format!("#!/bin/sh\n{body}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&at, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let path = bin.path().display().to_string();
    (bin, path)
}

fn up(dir: &Path, path: &str) -> std::process::Output {
    Command::new(Path::new(ROOT).join("scripts/cluster"))
        .arg("up")
        .arg(dir)
        .args(["--bin", &crate::common::binary().display().to_string()])
        .env("PATH", path)
        .output()
        .unwrap()
}

#[test]
fn a_missing_prerequisite_starts_nothing() {
    let (_bin, path) = path_without(&["etcd", "etcdctl"], &[]);
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().join("cluster");
    let out = up(&dir, &path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("etcd (apt-get install etcd-server)"), "{err}");
    assert!(
        err.contains("etcdctl (apt-get install etcd-client)"),
        "{err}"
    );
    assert!(err.contains("scripts/test installs all of them"), "{err}");
    assert!(!dir.exists(), "it started something before the check");
}

/// A binary that cannot run a cluster instance (a build without the s3 backend and cluster
/// mode: here a stand-in that answers check-config as such a build does) starts nothing.
#[test]
fn a_binary_without_cluster_mode_starts_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let fake = tmp.path().join("fencegate-fs-only");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'error: probe.toml:6:8: backend \"store\" (kind = \"s3\") needs the `s3` feature, and this fencegate was built without it' >&2\necho '  fix: build the default features' >&2\nexit 1\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let dir: PathBuf = tmp.path().join("cluster");
    let out = Command::new(Path::new(ROOT).join("scripts/cluster"))
        .arg("up")
        .arg(&dir)
        .args(["--bin", &fake.display().to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot run a cluster instance"), "{err}");
    assert!(err.contains("needs the `s3` feature"), "{err}");
    assert!(!dir.exists(), "it started something before the check");
    // And a --bin that is not there at all.
    let out = Command::new(Path::new(ROOT).join("scripts/cluster"))
        .arg("up")
        .arg(&dir)
        .args(["--bin", "/nonexistent/fencegate"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(!dir.exists());
}

#[test]
fn a_failure_after_start_stops_what_was_started() {
    // etcdctl that never reports health: the members start, the wait for a quorum fails.
    let (_bin, path) = path_without(&["etcdctl"], &[("etcdctl", "exit 1")]);
    let tmp = tempfile::tempdir().unwrap();
    let dir: PathBuf = tmp.path().join("cluster");
    let out = up(&dir, &path);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("did not become healthy"), "{err}");
    assert!(err.contains("stopping what it started"), "{err}");
    for n in 1..=3 {
        assert!(
            dir.join(format!("etcd{n}.log")).exists(),
            "etcd{n} was never started"
        );
    }
    // No process is left with the cluster's directory on its command line.
    let needle = dir.display().to_string();
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&needle) && c.contains("etcd"))
        .collect();
    assert!(
        left.is_empty(),
        "still running after the failed up: {left:?}"
    );
}
