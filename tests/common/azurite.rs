//! Azurite (npm `azurite`, pinned in tests/e2e/azurite, which `scripts/test` installs with
//! `npm ci`) as the store behind the azure backend: its blob service alone (`azurite-blob`), in
//! memory, on a free loopback port, strict (no `--loose`: headers and parameters it does not
//! support are refused, not ignored). docs/notes/azurite-behaviour.md says what it answers
//! and where that differs from Azure. Containers are made, and blobs read and written "around"
//! fencegate, with the real Azure SDK for Python (tests/e2e/azure_behind.py), so no test
//! depends on fencegate's own request signer to set up or check the store.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Azurite's well-known development account: the only account it has by default.
pub const ACCOUNT: &str = "devstoreaccount1";
/// The development account's key (public, the same in every Azurite).
pub const KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Azurite's blob service, stopped (SIGKILL) on drop; its contents are in memory only.
pub struct Azurite {
    child: Option<Child>,
    pub port: u16,
    // Its working directory (nothing is written there in memory mode, but a crash report
    // would be) and its output, shown if it exits before it listens.
    dir: tempfile::TempDir,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The azurite-blob script `npm ci` put in tests/e2e/azurite (`FENCEGATE_AZURITE` names
/// another). It starts with `#!/usr/bin/env node`, so the process spawned is node itself:
/// [`Azurite::pid`] is the server's, fit for SIGSTOP.
fn azurite_blob() -> Command {
    super::store::program(
        "FENCEGATE_AZURITE",
        "tests/e2e/azurite/node_modules/.bin/azurite-blob",
        "azurite-blob",
        "cd tests/e2e/azurite && npm ci --no-audit --no-fund",
    )
}

/// The Python of .venv, where `scripts/test` installs azure-storage-blob.
fn python() -> Command {
    super::store::program(
        "FENCEGATE_AZURE_PYTHON",
        ".venv/bin/python3",
        "the .venv Python (with azure-storage-blob)",
        "python3 -m venv .venv && .venv/bin/pip install 'azure-storage-blob>=12.19'",
    )
}

/// tests/e2e/azure_behind.py, the SDK client the tests write around fencegate with.
pub fn behind_script() -> PathBuf {
    root().join("tests/e2e/azure_behind.py")
}

impl Azurite {
    pub fn start() -> Azurite {
        Self::start_on(super::moto::free_port())
    }

    /// Starts Azurite on `port` (a restart comes back empty) and waits until it listens.
    pub fn start_on(port: u16) -> Azurite {
        Self::start_with(port, &[])
    }

    /// As [`Azurite::start_on`], with more azurite-blob arguments (`--loose`, say).
    pub fn start_with(port: u16, extra: &[&str]) -> Azurite {
        let dir = tempfile::tempdir().unwrap();
        let log = std::fs::File::create(dir.path().join("azurite.log")).unwrap();
        let mut cmd = azurite_blob();
        cmd.args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
            // Nothing on disk: a restart (or a new test) starts empty, as moto does.
            .arg("--inMemoryPersistence")
            // The Python SDK sends its newest x-ms-version (2026-10-06 for azure-storage-blob
            // 12.31), which Azurite 3.37 (2026-06-06 at most) refuses otherwise.
            .arg("--skipApiVersionCheck")
            // The account is the URL's first path segment, whatever the host is called.
            .arg("--disableProductStyleUrl")
            // No network here, and nothing to report to.
            .arg("--disableTelemetry")
            // Its default keep-alive is 5 s: a pooled connection idle that long may be closed
            // just as a client reuses it, a failure Azure's front ends (minutes) do not cause.
            .args(["--blobKeepAliveTimeout", "120"])
            // The access log (a line per request) is not kept.
            .arg("--silent")
            .args(extra)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log));
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("azurite-blob starts: {e}"));
        let mut azurite = Azurite {
            child: Some(child),
            port,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = azurite
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!(
                    "Azurite exited before listening on {port}: {status}; its output:\n{}",
                    azurite.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "Azurite did not listen on {port} within 60 s; its output:\n{}",
                azurite.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        azurite
    }

    /// What Azurite printed so far (its start-up lines and errors; the access log is off).
    pub fn output(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("azurite.log")).unwrap_or_default()
    }

    /// The server's process id (node's), to pause it with SIGSTOP, say.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// The account's blob endpoint, `http://127.0.0.1:PORT/devstoreaccount1` (path style: the
    /// container is the next path segment).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}/{ACCOUNT}", self.port)
    }

    pub fn account(&self) -> &'static str {
        ACCOUNT
    }

    /// The account key, base64 as Azure gives it.
    pub fn key(&self) -> &'static str {
        KEY
    }

    /// A `[backends.NAME]` table for this server (the development account, Shared Key), for
    /// a test to add its own options and buckets to.
    pub fn backend_table(&self, name: &str) -> String {
        format!(
            "[backends.{name}]\nkind = \"azure\"\naccount = \"{ACCOUNT}\"\naccess_key = \"{KEY}\"\nendpoint = \"{}\"\n",
            self.endpoint()
        )
    }

    /// An Azure Storage connection string for this server (for SDKs and tools).
    pub fn connection_string(&self) -> String {
        format!(
            "DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={KEY};BlobEndpoint={};",
            self.endpoint()
        )
    }

    /// Kills the server (its in-memory contents are gone with it).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Runs tests/e2e/azure_behind.py against this server with `args` (a subcommand and its
    /// arguments) and `stdin`; its output, whatever its exit status.
    pub fn behind(&self, args: &[&str], stdin: Option<&[u8]>) -> Output {
        use std::io::Write;
        let mut cmd = python();
        cmd.arg(behind_script())
            .args(["--endpoint", &self.endpoint()])
            .args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("azure_behind.py starts");
        if let Some(bytes) = stdin {
            // Written from a thread, so a large body never deadlocks against a full stdout.
            let mut pipe = child.stdin.take().unwrap();
            let bytes = bytes.to_vec();
            std::thread::spawn(move || {
                let _ = pipe.write_all(&bytes);
            });
        }
        child.wait_with_output().unwrap()
    }

    /// As [`Azurite::behind`], panicking with its stderr unless it succeeded; its stdout.
    pub fn behind_ok(&self, args: &[&str], stdin: Option<&[u8]>) -> Vec<u8> {
        let out = self.behind(args, stdin);
        assert!(
            out.status.success(),
            "azure_behind.py {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out.stdout
    }

    /// Creates container `name` with the Azure SDK (an existing one is left as it is).
    /// Container names are 3 to 63 characters of lower-case letters, digits and dashes.
    pub fn create_container(&self, name: &str) {
        self.behind_ok(&["create-container", name], None);
    }

    /// Writes `blob` (Put Blob, overwriting) with the Azure SDK, around fencegate.
    pub fn put_behind(&self, container: &str, blob: &str, bytes: &[u8]) {
        self.behind_ok(&["put", container, blob, "-"], Some(bytes));
    }

    /// [`Self::put_behind`], with metadata `(name, value)`.
    pub fn put_behind_with(
        &self,
        container: &str,
        blob: &str,
        bytes: &[u8],
        meta: &[(&str, &str)],
    ) {
        let mut args = vec!["put".to_string(), container.into(), blob.into(), "-".into()];
        for (name, value) in meta {
            args.push(format!("--meta={name}={value}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.behind_ok(&args, Some(bytes));
    }

    /// The bytes of `blob` read with the Azure SDK, or None if the store has no such blob.
    pub fn get_behind(&self, container: &str, blob: &str) -> Option<Vec<u8>> {
        let out = self.behind(&["get", container, blob], None);
        if out.status.success() {
            return Some(out.stdout);
        }
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("BlobNotFound"),
            "azure_behind.py get failed: {err}"
        );
        None
    }

    /// Set Blob Metadata on `blob` with the Azure SDK, around fencegate: its metadata becomes
    /// `meta`, its bytes stay (its ETag changes).
    pub fn set_meta_behind(&self, container: &str, blob: &str, meta: &[(&str, &str)]) {
        let mut args = vec!["set-meta".to_string(), container.into(), blob.into()];
        for (name, value) in meta {
            args.push(format!("--meta={name}={value}"));
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        self.behind_ok(&args, None);
    }

    /// Deletes `blob` with the Azure SDK.
    pub fn delete_behind(&self, container: &str, blob: &str) {
        self.behind_ok(&["delete", container, blob], None);
    }

    /// The blob names under `prefix`, listed with the Azure SDK.
    pub fn list_behind(&self, container: &str, prefix: &str) -> Vec<String> {
        self.list_with(&["list", container, prefix])
    }

    /// [`Self::list_behind`], blobs that have only uncommitted blocks included.
    pub fn list_staged_behind(&self, container: &str, prefix: &str) -> Vec<String> {
        self.list_with(&["list", "--uncommitted", container, prefix])
    }

    fn list_with(&self, args: &[&str]) -> Vec<String> {
        let out = self.behind_ok(args, None);
        String::from_utf8(out)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Get Blob Properties with the Azure SDK: `{"etag", "size", "content_md5", "metadata"}`.
    pub fn props_behind(&self, container: &str, blob: &str) -> serde_json::Value {
        let out = self.behind_ok(&["props", container, blob], None);
        serde_json::from_slice(&out).unwrap()
    }
}

impl Drop for Azurite {
    fn drop(&mut self) {
        self.stop();
    }
}
