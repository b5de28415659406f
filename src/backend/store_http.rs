//! The pooled HTTP client the store backends (s3, azure) send their own requests on: their
//! timeouts, the system roots plus an optional CA file for https, and redirects never followed.

use std::path::Path;
use std::time::Duration;

pub struct Settings<'a> {
    pub connect_timeout: Duration,
    /// Longest wait for the next bytes of a response.
    pub read_timeout: Duration,
    /// The most one request may take in all.
    pub call_timeout: Duration,
    /// A PEM file of CA certificates trusted besides the system roots.
    pub ca_file: Option<&'a Path>,
}

/// A redirect is the store's answer, never followed: a write re-sent elsewhere (without its
/// signature) could land where nothing reads it, and a HEAD answered by another URL's 404 would
/// take an object for absent. The client never retries by itself.
pub fn client(settings: &Settings) -> Result<reqwest::Client, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(cert);
    }
    if let Some(path) = settings.ca_file {
        use rustls::pki_types::{pem::PemObject, CertificateDer};
        let certs = CertificateDer::pem_file_iter(path)
            .map_err(|e| format!("cannot read ca_file {}: {e}", path.display()))?;
        for cert in certs {
            let cert = cert.map_err(|e| format!("ca_file {}: {e}", path.display()))?;
            roots
                .add(cert)
                .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
        }
    }
    let tls = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| e.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    reqwest::Client::builder()
        .use_preconfigured_tls(tls)
        .redirect(reqwest::redirect::Policy::none())
        .connect_timeout(settings.connect_timeout)
        .read_timeout(settings.read_timeout)
        .timeout(settings.call_timeout)
        .build()
        .map_err(|e| format!("the store's HTTP client: {e}"))
}
