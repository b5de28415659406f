//! moto's server (PyPI `moto[server]`, which `scripts/test` installs into `.venv`) as the store
//! behind the s3 backend, and the aws-sdk-s3 clients every store test uses. moto ignores
//! If-Match on CompleteMultipartUpload, so fencegate runs on it only with
//! `conditional_writes = "fencegate"`: fencegate decides conditions alone. The process itself is a [`Store`].

use super::store::{Store, StoreKind};
use std::process::Command;

/// moto, started and stopped as any [`Store`] (which it dereferences to).
pub struct Moto(Store);

/// The command that runs moto on `port` (for [`Store::start`]).
pub(super) fn command(port: u16) -> Command {
    let mut cmd = super::store::program(
        "FENCEGATE_MOTO_SERVER",
        ".venv/bin/moto_server",
        "moto_server",
        "python3 -m venv .venv && .venv/bin/pip install 'moto[server]'",
    );
    cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
    cmd
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Moto {
    pub fn start() -> Moto {
        Moto(Store::start(StoreKind::Moto))
    }

    /// Starts moto on `port` (a restart: it comes back empty) and waits until it listens.
    pub fn start_on(port: u16) -> Moto {
        Moto(Store::start_on(StoreKind::Moto, port))
    }
}

impl std::ops::Deref for Moto {
    type Target = Store;
    fn deref(&self) -> &Store {
        &self.0
    }
}

impl std::ops::DerefMut for Moto {
    fn deref_mut(&mut self) -> &mut Store {
        &mut self.0
    }
}

pub fn client_for(endpoint: &str) -> aws_sdk_s3::Client {
    client_with(endpoint, "test", "test")
}

/// A path-style client for `endpoint` signing with the given key.
#[allow(dead_code)]
pub fn client_with(endpoint: &str, id: &str, secret: &str) -> aws_sdk_s3::Client {
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            id, secret, None, None, "tests",
        ))
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}
