//! The scripts a newcomer runs first: `scripts/run` says so when it waits for another build on
//! the shared build cache, rather than waiting silently.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// A build cache whose lock another "build" (a `flock` holding it, as cargo does) holds:
/// scripts/run prints that it waits, before cargo blocks on it.
#[test]
fn scripts_run_says_when_it_waits_for_another_build() {
    let cache = tempfile::tempdir().unwrap();
    let lock = cache.path().join("release/.cargo-lock");
    std::fs::create_dir_all(lock.parent().unwrap()).unwrap();
    std::fs::write(&lock, b"").unwrap();
    let mut holder = Command::new("flock")
        .arg(&lock)
        .args(["sleep", "120"])
        .spawn()
        .expect("flock runs (util-linux)");
    let held = Instant::now();
    while Command::new("flock")
        .args(["-n", "-s"])
        .arg(&lock)
        .arg("true")
        .status()
        .unwrap()
        .success()
    {
        assert!(
            held.elapsed() < Duration::from_secs(10),
            "flock never took the lock"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    let mut run = Command::new(Path::new(ROOT).join("scripts/run"))
        .arg("--version")
        .env("CARGO_TARGET_DIR", cache.path())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, got) = std::sync::mpsc::channel();
    let stderr = run.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let said = loop {
        match got.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) if line.contains("waiting for another build") => break Some(line),
            Ok(line) => seen.push(line),
            Err(_) => break None,
        }
    };
    // scripts/run execs cargo, which waits on the lock: stop it, then the holder.
    let _ = run.kill();
    let _ = run.wait();
    let _ = holder.kill();
    let _ = holder.wait();
    let said = said.unwrap_or_else(|| panic!("scripts/run waited silently:\n{}", seen.join("\n")));
    assert!(
        said.contains(&cache.path().display().to_string()),
        "it names the cache: {said}"
    );
}
