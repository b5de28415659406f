//! The S3 tests' fixture: fencegate on the fs backend or on an s3 store (ministack in the safe
//! mode, or moto), with buckets that take writes without tokens, and the refusal of a call
//! taken apart as a client sees it.

use crate::common;
use aws_sdk_s3::error::ProvideErrorMetadata;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::Client;
use common::store::{Store, StoreKind};
use common::Server;

pub const STORE_BUCKET: &str = "fencegate-parity";
pub const PART: usize = 5 * 1024 * 1024;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    Fs,
    S3Safe,
    /// moto, in the unsafe mode: only for what moto itself does differently.
    S3Moto,
    /// The azure backend on Azurite.
    Azure,
    /// The gcs backend on the scripted GCS double.
    Gcs,
}

pub struct Fx {
    _store: Option<Store>,
    _azurite: Option<common::azurite::Azurite>,
    _gcs: Option<common::gcs_fake::GcsFake>,
    _dir: tempfile::TempDir,
    pub server: Server,
}

impl Fx {
    /// Development mode (no keys): the development key signs. Bucket `bkt` takes writes without
    /// tokens, so each behaviour is S3's alone.
    pub async fn start(kind: Kind) -> Fx {
        Fx::start_with(kind, &[]).await
    }

    /// As [`Fx::start`], with more buckets: (name, policy lines), on the store under
    /// `name/` for the s3 kinds.
    pub async fn start_with(kind: Kind, more: &[(&str, &str)]) -> Fx {
        Fx::start_configured(kind, more, false).await
    }

    /// As [`Fx::start_with`], served over https when `tls` (a certificate for localhost made
    /// here: [`Fx::ca_file`]).
    pub async fn start_configured(kind: Kind, more: &[(&str, &str)], tls: bool) -> Fx {
        let dir = tempfile::tempdir().unwrap();
        let mut azurite = None;
        let mut gcs = None;
        let (store, config) = match kind {
            Kind::Gcs => {
                let fake = common::gcs_fake::GcsFake::start().await;
                fake.create_bucket(STORE_BUCKET);
                let key = fake.write_service_account(dir.path());
                let config = format!(
                    "[backends.store]\nkind = \"gcs\"\ncredentials_file = \"{}\"\nendpoint = \"{}\"\nblock_size_bytes = {PART}\n\n[buckets.bkt]\nfencing = \"optional\"\nbackend = \"store\"\nbackend_bucket = \"{STORE_BUCKET}\"\nbackend_prefix = \"b/\"\n\n[buckets.cat]\nfencing = \"optional\"\nbackend = \"store\"\nbackend_bucket = \"{STORE_BUCKET}\"\nbackend_prefix = \"c/\"\n",
                    key.display(),
                    fake.url()
                );
                gcs = Some(fake);
                (None, config)
            }
            Kind::Azure => {
                let az = common::azurite::Azurite::start();
                az.create_container(STORE_BUCKET);
                let config = format!(
                    "[backends.store]\nkind = \"azure\"\naccount = \"{}\"\naccess_key = \"{}\"\nendpoint = \"{}\"\nblock_size_bytes = {PART}\n\n[buckets.bkt]\nfencing = \"optional\"\nbackend = \"store\"\nbackend_bucket = \"{STORE_BUCKET}\"\nbackend_prefix = \"b/\"\n\n[buckets.cat]\nfencing = \"optional\"\nbackend = \"store\"\nbackend_bucket = \"{STORE_BUCKET}\"\nbackend_prefix = \"c/\"\n",
                    az.account(),
                    az.key(),
                    az.endpoint()
                );
                azurite = Some(az);
                (None, config)
            }
            Kind::Fs => (
                None,
                "[buckets.bkt]\nfencing = \"optional\"\n\n[buckets.cat]\nfencing = \"optional\"\n"
                    .to_string(),
            ),
            Kind::S3Safe | Kind::S3Moto => {
                let store_kind = match kind {
                    Kind::S3Moto => StoreKind::Moto,
                    _ => StoreKind::Ministack,
                };
                let store = Store::start(store_kind);
                store.create_bucket(STORE_BUCKET).await;
                let config = format!(
                    "[backends.store]\nkind = \"s3\"\nendpoint = \"{}\"\naccess_key_id = \"test\"\nsecret_access_key = \"test\"\nmultipart_threshold_bytes = {PART}\n{}\n\n[buckets.bkt]\nfencing = \"optional\"\nbackend = \"store\"\nbackend_bucket = \"{STORE_BUCKET}\"\nbackend_prefix = \"b/\"\n\n[buckets.cat]\nfencing = \"optional\"\nbackend = \"store\"\nbackend_bucket = \"{STORE_BUCKET}\"\nbackend_prefix = \"c/\"\n",
                    store.endpoint(),
                    store_kind.opt_in()
                );
                (Some(store), config)
            }
        };
        let mut config = config;
        if tls {
            let ck =
                rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()])
                    .unwrap();
            std::fs::write(dir.path().join("ca.pem"), ck.cert.pem()).unwrap();
            std::fs::write(dir.path().join("tls.key"), ck.key_pair.serialize_pem()).unwrap();
            config = format!(
                "[server.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n\n{config}",
                dir.path().join("ca.pem").display(),
                dir.path().join("tls.key").display()
            );
        }
        for (name, policy) in more {
            config.push_str(&format!("\n[buckets.{name}]\n{policy}\n"));
            if kind != Kind::Fs {
                config.push_str(&format!("backend = \"store\"\nbackend_bucket = \"{STORE_BUCKET}\"\nbackend_prefix = \"{name}/\"\n"));
            }
        }
        let server = Server::start(&dir.path().join("data"), Some(&config));
        if kind == Kind::S3Safe {
            common::store::assert_safe_mode(&server);
        }
        Fx {
            _store: store,
            _azurite: azurite,
            _gcs: gcs,
            _dir: dir,
            server,
        }
    }

    /// The Azurite of a [`Kind::Azure`] fixture, to read and write around fencegate.
    pub fn azurite(&self) -> &common::azurite::Azurite {
        self._azurite.as_ref().expect("an azure fixture")
    }

    /// The certificate an https fixture serves (and the CA to trust for it).
    pub fn ca_file(&self) -> std::path::PathBuf {
        self._dir.path().join("ca.pem")
    }

    pub fn client(&self) -> Client {
        common::moto::client_with(&self.server.url(""), "fencegate", "fencegate-dev-secret")
    }
}

/// (status, code, raw header x-amz-request-id, raw body) of a failed call.
pub fn refused<T: std::fmt::Debug, E: ProvideErrorMetadata + std::fmt::Debug>(
    r: Result<
        T,
        aws_sdk_s3::error::SdkError<E, aws_smithy_runtime_api::client::orchestrator::HttpResponse>,
    >,
) -> (u16, String, String, String) {
    let e = r.expect_err("the call should have been refused");
    let raw = e.raw_response().expect("an HTTP answer");
    let id = raw
        .headers()
        .get("x-amz-request-id")
        .unwrap_or_default()
        .to_string();
    let body = String::from_utf8_lossy(raw.body().bytes().unwrap_or_default()).into_owned();
    (
        raw.status().as_u16(),
        e.code().unwrap_or_default().to_string(),
        id,
        body,
    )
}

pub async fn put(c: &Client, bucket: &str, key: &str, body: &[u8]) -> String {
    c.put_object()
        .bucket(bucket)
        .key(key)
        .body(ByteStream::from(body.to_vec()))
        .send()
        .await
        .unwrap()
        .e_tag()
        .unwrap()
        .to_string()
}

/// One test per behaviour and backend: `mod fs` and `mod s3_safe`, each calling
/// `super::NAME(Kind)` of the module that invokes it.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod fs {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Fs).await })*
        }
        mod s3_safe {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::S3Safe).await })*
        }
    };
}
pub(crate) use on_both_backends;

/// As [`on_both_backends`], and on the azure (Azurite) and gcs (the GCS double) backends too: the
/// S3 conformance tests,
/// which every backend must pass, or refuse as documented.
macro_rules! on_every_backend {
    ($($name:ident),* $(,)?) => {
        mod fs {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Fs).await })*
        }
        mod s3_safe {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::S3Safe).await })*
        }
        mod azure {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Azure).await })*
        }
        mod gcs {
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() { super::$name(super::Kind::Gcs).await })*
        }
    };
}
pub(crate) use on_every_backend;

/// The `<Code>` of an S3 error document (empty when there is none).
pub fn error_code(xml: &str) -> String {
    xml.split_once("<Code>")
        .and_then(|(_, r)| r.split_once("</Code>"))
        .map_or(String::new(), |(c, _)| c.to_string())
}

/// Runs an end-to-end script (tests/e2e/*.py), prints what it said, and asserts that it
/// succeeded and printed `done`.
pub async fn run_script(cmd: &mut tokio::process::Command, done: &str) {
    let out = cmd.output().await.expect("the script runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}{stderr}");
    assert!(out.status.success(), "a client failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains(done), "{stdout}");
}
