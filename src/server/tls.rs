//! TLS for every listener (`[server.tls]`): the certificate chain and key files, loaded with
//! rustls, and reloaded on SIGHUP or `POST /admin/reload`. A reload changes what new
//! connections are offered; connections already open keep their session, so none is dropped.

use parking_lot::RwLock;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::ServerConfig;
use std::path::{Path, PathBuf};
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read the TLS {what} {path}: {error}; [server.tls] {what}_file must name a PEM file fencegate can read")]
    Read {
        what: &'static str,
        path: PathBuf,
        error: rustls::pki_types::pem::Error,
    },
    #[error("the TLS cert_file {0} holds no certificate; it must hold the PEM chain, leaf first")]
    NoCertificate(PathBuf),
    #[error("the TLS certificate or key is unusable: {0}; check that key_file is the private key of cert_file's first certificate")]
    Rustls(#[from] rustls::Error),
}

/// A certificate read and checked, not yet offered ([`Tls::prepare`]).
pub struct Prepared(Arc<ServerConfig>);

/// The live server configuration of the TLS listeners, swapped whole on reload.
#[derive(Clone)]
pub struct Tls {
    cert_file: PathBuf,
    key_file: PathBuf,
    current: Arc<RwLock<Arc<ServerConfig>>>,
}

impl Tls {
    /// Loads the files once; start-up fails on an error, so a bad file is never served.
    pub fn load(cert_file: &Path, key_file: &Path) -> Result<Tls, TlsError> {
        let config = server_config(cert_file, key_file)?;
        Ok(Tls {
            cert_file: cert_file.to_path_buf(),
            key_file: key_file.to_path_buf(),
            current: Arc::new(RwLock::new(config)),
        })
    }

    /// Reads the files again. On an error the certificate in use stays, so a half-copied
    /// renewal never takes a listener down.
    pub fn reload(&self) -> Result<(), TlsError> {
        let config = self.prepare()?;
        self.install(config);
        Ok(())
    }

    /// Reads and checks the files without serving them yet: a configuration reload installs
    /// them only once everything else it changes has been checked too.
    pub fn prepare(&self) -> Result<Prepared, TlsError> {
        server_config(&self.cert_file, &self.key_file).map(Prepared)
    }

    /// Offers a prepared certificate to every new connection.
    pub fn install(&self, prepared: Prepared) {
        *self.current.write() = prepared.0;
    }

    /// The acceptor for the next connection.
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.current.read().clone())
    }

    pub fn cert_file(&self) -> &Path {
        &self.cert_file
    }
}

fn server_config(cert_file: &Path, key_file: &Path) -> Result<Arc<ServerConfig>, TlsError> {
    let read = |what, error| TlsError::Read {
        what,
        path: if what == "cert" { cert_file } else { key_file }.to_path_buf(),
        error,
    };
    let certs = CertificateDer::pem_file_iter(cert_file)
        .map_err(|e| read("cert", e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| read("cert", e))?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(cert_file.to_path_buf()));
    }
    let key = PrivateKeyDer::from_pem_file(key_file).map_err(|e| read("key", e))?;
    // An explicit provider: the AWS SDK brings rustls in with aws-lc-rs, and a process-wide
    // default would depend on which crates happen to be linked.
    let mut config = ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::aws_lc_rs::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}
