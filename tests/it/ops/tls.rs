//! TLS on every listener (docs/security.md, "TLS"), with certificates generated here (rcgen):
//! aws-sdk-s3 and curl connect over https, a plain-HTTP client is refused with an answer that
//! says so, SIGHUP swaps the certificate without dropping a connection that is open, and an s3
//! backend reaches an https store through `ca_file`.

use crate::common;
use common::Server;
use rustls::pki_types::CertificateDer;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const KEYS: &str = r#"
[keys.app]
access_key_id = "app-key"
secret_access_key = "app-secret-0123456"
buckets = { "*" = ["read", "write", "delete", "fence"] }
"#;

/// A self-signed certificate for localhost and 127.0.0.1, written as `name`.pem and
/// `name`.key; returns its DER.
fn certificate(dir: &Path, name: &str) -> CertificateDer<'static> {
    let ck =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    std::fs::write(dir.join(format!("{name}.pem")), ck.cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), ck.key_pair.serialize_pem()).unwrap();
    ck.cert.der().clone()
}

fn tls_config(dir: &Path, extra: &str) -> String {
    format!(
        "[server.tls]\ncert_file = \"{}\"\nkey_file = \"{}\"\n{extra}",
        dir.join("live.pem").display(),
        dir.join("live.key").display()
    )
}

/// A TLS client trusting exactly `roots`.
fn connector(roots: &[CertificateDer<'static>]) -> tokio_rustls::TlsConnector {
    let mut store = rustls::RootCertStore::empty();
    for r in roots {
        store.add(r.clone()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(store)
    .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

type TlsStream = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

async fn open(s: &Server, roots: &[CertificateDer<'static>]) -> TlsStream {
    let tcp = tokio::net::TcpStream::connect(s.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    connector(roots).connect(name, tcp).await.unwrap()
}

/// One keep-alive `GET /healthz` on an open connection.
async fn healthz(conn: &mut TlsStream) -> String {
    conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !got.ends_with(b"ok\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
            .await
            .expect("an answer within 10 s")
            .unwrap();
        assert!(
            n > 0,
            "the connection closed: {}",
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(got).unwrap()
}

fn https_client(endpoint: &str, ca_pem: &[u8]) -> aws_sdk_s3::Client {
    use aws_smithy_http_client::tls;
    let context = tls::TlsContext::builder()
        .with_trust_store(tls::TrustStore::empty().with_pem_certificate(ca_pem.to_vec()))
        .build()
        .unwrap();
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::AwsLc,
        ))
        .tls_context(context)
        .build_https();
    let conf = aws_sdk_s3::config::Builder::new()
        .behavior_version(aws_sdk_s3::config::BehaviorVersion::latest())
        .region(aws_sdk_s3::config::Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .force_path_style(true)
        .http_client(http)
        .credentials_provider(aws_sdk_s3::config::Credentials::new(
            "app-key",
            "app-secret-0123456",
            None,
            None,
            "tests",
        ))
        .build();
    aws_sdk_s3::Client::from_conf(conf)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_connect_over_tls_and_plain_http_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let der = certificate(dir.path(), "live");
    let s = Server::start(
        &dir.path().join("data"),
        Some(&tls_config(dir.path(), KEYS)),
    );
    let endpoint = format!("https://localhost:{}", s.addr.port());
    let mut conn = open(&s, std::slice::from_ref(&der)).await;
    assert!(healthz(&mut conn).await.starts_with("HTTP/1.1 200"));

    // aws-sdk-s3 over https: a fenced write and its read.
    let pem = std::fs::read(dir.path().join("live.pem")).unwrap();
    let s3 = https_client(&endpoint, &pem);
    s3.put_object()
        .bucket("default")
        .key("tls.txt")
        .metadata("fencing-token", "7")
        .body(b"over tls".to_vec().into())
        .send()
        .await
        .unwrap();
    let got = s3
        .get_object()
        .bucket("default")
        .key("tls.txt")
        .send()
        .await
        .unwrap();
    let body = got.body.collect().await.unwrap().into_bytes();
    assert_eq!(&body[..], b"over tls");

    // curl, signing with SigV4 on the native API and trusting the certificate.
    let cacert = dir.path().join("live.pem");
    let out = std::process::Command::new("curl")
        .args(["-sS", "--cacert"])
        .arg(&cacert)
        .args([
            "--aws-sigv4",
            "aws:amz:us-east-1:s3",
            "--user",
            "app-key:app-secret-0123456",
            "-H",
            "x-amz-content-sha256: UNSIGNED-PAYLOAD",
        ])
        .arg(format!("{endpoint}/v1/objects/default/tls.txt"))
        .output()
        .expect("curl runs");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "over tls",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // curl without the certificate is refused by curl itself: the server is not trusted.
    let untrusted = std::process::Command::new("curl")
        .args(["-sS", "-o", "/dev/null", "-w", "%{http_code}"])
        .arg(format!("{endpoint}/healthz"))
        .output()
        .unwrap();
    assert!(!untrusted.status.success());

    // Plain HTTP on the TLS port: an answer that says what to do, and nothing else.
    let (status, body) = common::raw_request(
        s.addr,
        "PUT /v1/objects/default/plain.txt HTTP/1.1\r\nFencing-Token: 9",
        b"plain",
    );
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("TlsRequired") && body.contains("https://"),
        "{body}"
    );
    // The shape of every native refusal (docs/reference.md): {"error": CODE, "message": ...}.
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["error"], "TlsRequired", "{body}");
    let plain = common::client()
        .get(format!("http://{}/healthz", s.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 400);
    let fence: serde_json::Value = {
        let out = std::process::Command::new("curl")
            .args(["-sS", "--cacert"])
            .arg(&cacert)
            .args([
                "--aws-sigv4",
                "aws:amz:us-east-1:s3",
                "--user",
                "app-key:app-secret-0123456",
            ])
            .arg(format!("{endpoint}/v1/fences/default/plain.txt"))
            .output()
            .unwrap();
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(fence["highest"], serde_json::Value::Null, "{fence}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_swaps_the_certificate_and_keeps_open_connections() {
    let dir = tempfile::tempdir().unwrap();
    let first = certificate(dir.path(), "live");
    let second = certificate(dir.path(), "next");
    let s = Server::start(
        &dir.path().join("data"),
        Some(&tls_config(dir.path(), KEYS)),
    );
    let both = [first.clone(), second.clone()];

    let mut open_before = open(&s, &both).await;
    assert!(healthz(&mut open_before).await.starts_with("HTTP/1.1 200"));
    let seen = |c: &TlsStream| c.get_ref().1.peer_certificates().unwrap()[0].clone();
    assert_eq!(seen(&open_before), first);

    // A broken file first: the reload fails and the certificate in use stays.
    std::fs::write(dir.path().join("live.pem"), "not a certificate").unwrap();
    unsafe { libc::kill(s.pid() as i32, libc::SIGHUP) };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(seen(&open(&s, &both).await), first);

    // The renewal copied into place, then SIGHUP: new connections get it.
    std::fs::copy(dir.path().join("next.pem"), dir.path().join("live.pem")).unwrap();
    std::fs::copy(dir.path().join("next.key"), dir.path().join("live.key")).unwrap();
    unsafe { libc::kill(s.pid() as i32, libc::SIGHUP) };
    let mut swapped = false;
    for _ in 0..50 {
        if seen(&open(&s, &both).await) == second {
            swapped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(swapped, "a new connection was offered the new certificate");
    // The connection opened before the reload still works.
    assert!(healthz(&mut open_before).await.starts_with("HTTP/1.1 200"));
    assert_eq!(seen(&open_before), first);
}

/// An s3 backend in front of an https store it trusts through `ca_file`: the store here is a
/// second fencegate serving its S3 gateway over TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_backend_reaches_an_https_store_with_a_ca_file() {
    let dir = tempfile::tempdir().unwrap();
    certificate(dir.path(), "live");
    let store_config = tls_config(
        dir.path(),
        &format!("{KEYS}\n[buckets.store]\nfencing = \"off\"\n"),
    );
    let store = Server::start(&dir.path().join("store"), Some(&store_config));
    let endpoint = format!("https://localhost:{}", store.addr.port());
    let front = |ca: Option<&Path>| {
        format!(
            r#"
[backends.remote]
kind = "s3"
endpoint = "{endpoint}"
access_key_id = "app-key"
secret_access_key = "app-secret-0123456"
{}

[buckets.front]
backend = "remote"
backend_bucket = "store"
# The store is a fencegate, which refuses keys under .fencegate-probe/ at the top of a bucket:
# the front's probes and claim go under a prefix.
backend_prefix = "front/"
"#,
            ca.map(|p| format!("ca_file = \"{}\"", p.display()))
                .unwrap_or_default()
        )
    };
    // Without the CA the store is not trusted, and the start fails saying why.
    let untrusted = dir.path().join("untrusted.toml");
    std::fs::write(&untrusted, front(None)).unwrap();
    let refused = std::process::Command::new(common::binary())
        .arg("serve")
        .arg("--listen")
        .arg("127.0.0.1:0")
        .arg("--data-dir")
        .arg(dir.path().join("untrusted"))
        .arg("--config")
        .arg(&untrusted)
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let text = String::from_utf8_lossy(&refused.stderr);
    assert!(text.contains("front"), "{text}");

    let s = Server::start(
        &dir.path().join("front"),
        Some(&front(Some(&dir.path().join("live.pem")))),
    );
    let c = common::client();
    let put = c
        .put(s.object_url("front", "through.txt"))
        .header("Fencing-Token", "3")
        .body("via https")
        .send()
        .await
        .unwrap();
    assert_eq!(put.status(), 200, "{}", put.text().await.unwrap());
    // The bytes are in the https store.
    let pem = std::fs::read(dir.path().join("live.pem")).unwrap();
    let got = https_client(&endpoint, &pem)
        .get_object()
        .bucket("store")
        .key("front/through.txt")
        .send()
        .await
        .unwrap();
    let body = got.body.collect().await.unwrap().into_bytes();
    assert_eq!(&body[..], b"via https");
}
