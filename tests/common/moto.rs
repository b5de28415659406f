//! A real S3-compatible server for tests: moto's server (PyPI `moto[server]`), which
//! `scripts/test` installs into `.venv`. Started on a free loopback port; stopped on drop.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Moto {
    child: Option<Child>,
    pub port: u16,
}

fn moto_server() -> PathBuf {
    let path = std::env::var_os("FENCEGATE_MOTO_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/.venv/bin/moto_server"
            ))
        });
    assert!(
        path.exists(),
        "moto_server not found at {}: run scripts/test, which installs moto into .venv \
         (or `python3 -m venv .venv && .venv/bin/pip install 'moto[server]'`)",
        path.display()
    );
    path
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
        Self::start_on(free_port())
    }

    /// Starts moto on `port` and waits until it accepts connections.
    pub fn start_on(port: u16) -> Moto {
        let child = Command::new(moto_server())
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("moto_server starts");
        let deadline = Instant::now() + Duration::from_secs(60);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "moto_server did not listen on {port} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Moto {
            child: Some(child),
            port,
        }
    }

    /// The server's process id (to pause it with SIGSTOP, say).
    #[allow(dead_code)]
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
        client_for(&self.endpoint())
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

impl Drop for Moto {
    fn drop(&mut self) {
        self.stop();
    }
}
