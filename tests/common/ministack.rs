//! ministack (PyPI `ministack`, which `scripts/test` installs into `.venv-ministack`) as the
//! store behind the s3 backend. It honours If-Match / If-None-Match on PutObject and
//! CompleteMultipartUpload and If-Match on DeleteObject, so fencegate passes its start-up probe
//! on it without any `unsafe_*` opt-in: the tests of the safe mode run here. The process itself
//! is a [`Store`], started as `scripts/cluster` starts it.

use super::store::{Store, StoreKind};
use std::path::Path;
use std::process::Command;

/// ministack, started and stopped as any [`Store`] (which it dereferences to).
pub struct Ministack(Store);

/// The command that runs ministack on `port`, with `tmp` as its TMPDIR (for [`Store::start`]).
pub(super) fn command(port: u16, tmp: &Path) -> Command {
    let mut cmd = super::store::program(
        "FENCEGATE_MINISTACK",
        ".venv-ministack/bin/ministack",
        "ministack",
        "python3 -m venv .venv-ministack && .venv-ministack/bin/pip install 'ministack>=1.5,<2'",
    );
    // In memory (S3_PERSIST=0): a restart comes back empty, as moto does.
    cmd.env("GATEWAY_PORT", port.to_string())
        .env("BIND_HOST", "127.0.0.1")
        .env("S3_PERSIST", "0")
        .env("TMPDIR", tmp);
    cmd
}

impl Ministack {
    pub fn start() -> Ministack {
        Ministack(Store::start(StoreKind::Ministack))
    }

    /// Starts ministack on `port` (a restart: it comes back empty) and waits until it listens.
    pub fn start_on(port: u16) -> Ministack {
        Ministack(Store::start_on(StoreKind::Ministack, port))
    }
}

impl std::ops::Deref for Ministack {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.0
    }
}

impl std::ops::DerefMut for Ministack {
    fn deref_mut(&mut self) -> &mut Store {
        &mut self.0
    }
}
