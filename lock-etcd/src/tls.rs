//! `https://` endpoints: rustls with the `ring` provider, the server checked against the
//! configured CA certificates, and a client certificate when one is set.

use std::sync::Arc;

use dlock_core::LockError;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use crate::config::EtcdBackendBuilder;
use crate::http::Endpoint;

/// The TLS configuration for `endpoints`, if any of them is `https`.
pub(crate) fn client_config(
    builder: &EtcdBackendBuilder,
    endpoints: &[Endpoint],
) -> Result<Option<Arc<rustls::ClientConfig>>, LockError> {
    if !endpoints.iter().any(|e| e.tls) {
        return Ok(None);
    }
    let mut roots = rustls::RootCertStore::empty();
    for pem in &builder.root_certificates {
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| LockError::config(format!("a CA certificate: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| LockError::config(format!("a CA certificate: {e}")))?;
        }
    }
    if roots.is_empty() {
        return Err(LockError::config(
            "https:// etcd endpoints need a CA certificate (tls_root_certificate)",
        ));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| LockError::config(format!("TLS: {e}")))?
        .with_root_certificates(roots);
    let config = match &builder.client_certificate {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| LockError::config(format!("the client certificate: {e}")))?;
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| LockError::config(format!("the client key: {e}")))?;
            config
                .with_client_auth_cert(chain, key)
                .map_err(|e| LockError::config(format!("the client certificate: {e}")))?
        }
        None => config.with_no_client_auth(),
    };
    Ok(Some(Arc::new(config)))
}
