//! Which servers the command line trusts over https, and the hint when it trusts none: the
//! system's roots and the PEM
//! certificates of `--ca-file` / `FENCEGATE_CA_FILE`, checked by rustls' WebPKI verifier, and
//! one exception it owns: a server certificate byte for byte identical to one in the CA file
//! is accepted even though it is marked as a CA.
//!
//! OpenSSL 3's `openssl req -x509` one-liner writes `basicConstraints = CA:TRUE` into the
//! self-signed certificate it makes. WebPKI refuses a CA certificate presented as the server's
//! own (`CaUsedAsEndEntity`), while curl's `--cacert` and the server itself take it. The
//! operator who names that very file as the CA has pinned that exact certificate: nothing else
//! is trusted by the exception. Its validity dates have passed WebPKI's check by then (they
//! are checked before the CA flag), the name is checked here against the URL's host, and the
//! handshake's signature is still verified with the certificate's key.

use super::connection::AdminError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, SignatureScheme};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// WebPKI, and the pinned self-signed certificates it would refuse as CAs.
#[derive(Debug)]
struct PinnedOrWebPki {
    webpki: Arc<WebPkiServerVerifier>,
    /// The CA file's certificates, whole (DER).
    pinned: Vec<CertificateDer<'static>>,
}

/// Whether rustls refused the certificate only as a CA used as the server's own.
fn ca_used_as_end_entity(e: &rustls::Error) -> bool {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::Other(other)) => matches!(
            other.0.downcast_ref::<webpki::Error>(),
            Some(webpki::Error::CaUsedAsEndEntity)
        ),
        _ => false,
    }
}

impl ServerCertVerifier for PinnedOrWebPki {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(e)
                if ca_used_as_end_entity(&e)
                    && self
                        .pinned
                        .iter()
                        .any(|p| p.as_ref() == end_entity.as_ref()) =>
            {
                let parsed = rustls::server::ParsedCertificate::try_from(end_entity)?;
                rustls::client::verify_server_name(&parsed, server_name)?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

fn unusable(path: &Path, e: &dyn std::fmt::Display) -> AdminError {
    AdminError::Usage(format!(
        "--ca-file {}: {e}; it must hold PEM certificates",
        path.display()
    ))
}

/// The PEM certificates of `path`, one at least.
fn ca_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, AdminError> {
    let unusable = |e: &dyn std::fmt::Display| unusable(path, e);
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| unusable(&e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| unusable(&e))?;
    if certs.is_empty() {
        return Err(unusable(&"no certificate found"));
    }
    Ok(certs)
}

/// An HTTP client trusting the system's roots and the PEM certificates of `ca_file`, that
/// never follows a redirect.
pub(super) fn http_client(
    ca_file: Option<&Path>,
    agent: &str,
    timeout: Duration,
) -> Result<reqwest::Client, AdminError> {
    let setup = |e: &dyn std::fmt::Display| AdminError::Usage(format!("TLS set-up: {e}"));
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    let mut pinned = Vec::new();
    if let Some(path) = ca_file {
        pinned = ca_certificates(path)?;
        for cert in &pinned {
            roots.add(cert.clone()).map_err(|e| unusable(path, &e))?;
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| setup(&e))?;
    // Without a CA file there is nothing to pin, and roots may be empty (a container without
    // system certificates, talking plain http), which the WebPKI verifier's builder refuses.
    let tls = if pinned.is_empty() {
        config.with_root_certificates(roots)
    } else {
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| setup(&e))?;
        config
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(PinnedOrWebPki { webpki, pinned }))
    }
    .with_no_client_auth();
    reqwest::Client::builder()
        .user_agent(agent)
        .use_preconfigured_tls(tls)
        .connect_timeout(timeout.min(Duration::from_secs(10)))
        .timeout(timeout)
        // fencegate never redirects: a redirect is something else answering (a login page),
        // and following it would carry the admin's credentials there.
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| AdminError::Usage(format!("the HTTP client: {e}")))
}

/// What to do about a certificate the TLS check refused: name a CA file when none was given,
/// else say why the one given did not vouch for this server.
pub(super) fn untrusted_hint(ca_file: Option<&Path>, detail: &str) -> String {
    let Some(path) = ca_file else {
        return "the server's certificate is not trusted: pass --ca-file with the PEM of its CA (or set FENCEGATE_CA_FILE)".into();
    };
    let path = path.display();
    let why = if detail.contains("not valid for name") {
        "the certificate does not name the host of --url (its subjectAltName must list that DNS name or IP address)"
    } else if detail.contains("expired") || detail.contains("not valid yet") {
        "the certificate is outside its validity dates (or this machine's clock is off)"
    } else if detail.contains("UnknownIssuer") {
        "the server's certificate is neither in that file nor signed by a certificate in it"
    } else if detail.contains("CaUsedAsEndEntity") {
        "the server presents a certificate marked as a CA (CA:TRUE) that is not itself in that file; put that very certificate in the file, or give the server one without CA:TRUE signed by the CA in it"
    } else {
        "the TLS check failed as the detail says"
    };
    format!("{path} was trusted, and still: {why}. docs/security.md, \"A test certificate\", shows how to make one the command line, curl and the server all accept")
}
