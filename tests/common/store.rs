//! The S3-compatible store behind fencegate's s3 backend in tests, of either kind the suite
//! runs against: moto ([`super::moto`]), which ignores If-Match on CompleteMultipartUpload so
//! fencegate only starts on it with `conditional_writes = "fencegate"`, and ministack
//! ([`super::ministack`]), which honours every condition, so fencegate runs on it in its safe
//! mode (conditional commits). Owns the store's process: a free loopback port, waiting until it
//! listens, a scratch directory while it runs, and stopping it on drop.

use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum StoreKind {
    Moto,
    Ministack,
}

impl StoreKind {
    /// The backend lines fencegate needs to start on this store: the opt-in on moto (its
    /// start-up probe refuses moto otherwise), nothing on ministack (the safe mode).
    pub fn opt_in(self) -> &'static str {
        match self {
            StoreKind::Moto => "conditional_writes = \"fencegate\"",
            StoreKind::Ministack => "",
        }
    }
}

pub struct Store {
    pub kind: StoreKind,
    child: Option<Child>,
    pub port: u16,
    // ministack writes its pid file (and spills) under TMPDIR: one directory per run, so
    // parallel tests and restarts on the same port never meet.
    _tmp: Option<tempfile::TempDir>,
}

impl Store {
    pub fn start(kind: StoreKind) -> Store {
        Self::start_on(kind, super::moto::free_port())
    }

    /// Starts the store on `port` and waits until it accepts connections.
    pub fn start_on(kind: StoreKind, port: u16) -> Store {
        let (mut cmd, tmp) = match kind {
            StoreKind::Moto => (super::moto::command(port), None),
            StoreKind::Ministack => {
                let tmp = tempfile::tempdir().unwrap();
                (super::ministack::command(port, tmp.path()), Some(tmp))
            }
        };
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{kind:?} starts: {e}"));
        let mut store = Store {
            kind,
            child: Some(child),
            port,
            _tmp: tmp,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(status) = store
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                panic!("{kind:?} exited before listening on {port}: {status}");
            }
            assert!(
                Instant::now() < deadline,
                "{kind:?} did not listen on {port} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        store
    }

    /// The server's process id (to pause it with SIGSTOP, say).
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Kills the server (its in-memory contents are gone with it).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// A real aws-sdk-s3 client for this server.
    pub fn client(&self) -> aws_sdk_s3::Client {
        super::moto::client_for(&self.endpoint())
    }

    pub async fn create_bucket(&self, name: &str) {
        self.client()
            .create_bucket()
            .bucket(name)
            .send()
            .await
            .unwrap();
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A store program that `scripts/test` installs into a venv of the checkout; `env` overrides it.
pub(super) fn program(env: &str, venv_path: &str, what: &str, install: &str) -> Command {
    let path = std::env::var_os(env)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(venv_path));
    assert!(
        path.exists(),
        "{what} not found at {}: run scripts/test, which installs it (or `{install}`; \
         {env} names another one)",
        path.display()
    );
    Command::new(path)
}

/// Asserts that `server` passed its start-up probe with no opt-in on every s3 backend: its
/// commits and deletes are conditional (the safe mode), so a test on it proves that mode.
pub fn assert_safe_mode(server: &super::Server) {
    let honoured = server.log_lines(&["s3 store honours conditional writes and deletes"]);
    assert!(!honoured.is_empty(), "no probe passed in safe mode");
    let unsafe_lines = server.log_lines(&["UNSAFE"]);
    assert!(unsafe_lines.is_empty(), "{unsafe_lines:?}");
    let not_md5 = server.log_lines(&["ETags are not MD5s"]);
    assert!(not_md5.is_empty(), "{not_md5:?}");
}
