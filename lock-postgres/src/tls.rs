//! How connections are opened: plain TCP (or a Unix socket), or TLS through rustls when the
//! URL asks for it (`sslmode=require`).

use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, NoTls};

use dlock_core::LockError;

use crate::connection::Drive;

/// The transport security of the backend's connections.
#[derive(Clone, Default)]
pub(crate) enum Tls {
    /// No TLS: the URL's `sslmode` is `disable` or `prefer` (libpq's default).
    #[default]
    Plain,
    /// TLS with the server's certificate checked against the system's roots and the
    /// configured ones, for URLs with `sslmode=require`.
    #[cfg(feature = "tls")]
    Rustls(tokio_postgres_rustls::MakeRustlsConnect),
}

/// The certificates of a TLS configuration, as PEM.
#[derive(Clone, Default)]
pub(crate) struct TlsSettings {
    /// Certificates of the authorities to trust besides the system's (a private CA).
    pub(crate) root_certificate: Option<Vec<u8>>,
    /// The client's certificate chain and key, for servers that ask for one.
    pub(crate) client_certificate: Option<(Vec<u8>, Vec<u8>)>,
}

impl Tls {
    /// The transport `config` asks for: TLS when its `sslmode` is `require`.
    ///
    /// # Errors
    ///
    /// [`LockError::Config`] when certificates are given but the URL does not ask for TLS (they
    /// would be ignored without a word), when they cannot be read, or when the URL asks for TLS
    /// and this build has none.
    pub(crate) fn for_config(
        config: &tokio_postgres::Config,
        settings: &TlsSettings,
    ) -> Result<Tls, LockError> {
        let wanted = config.get_ssl_mode() == SslMode::Require;
        let certificates =
            settings.root_certificate.is_some() || settings.client_certificate.is_some();
        if !wanted {
            if certificates {
                return Err(LockError::config(
                    "TLS certificates are set but the URL does not ask for TLS: add \
                     sslmode=require to it",
                ));
            }
            return Ok(Tls::Plain);
        }
        Self::rustls(settings)
    }

    #[cfg(feature = "tls")]
    fn rustls(settings: &TlsSettings) -> Result<Tls, LockError> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};

        let unusable = |what: &str, error: &dyn std::fmt::Display| {
            LockError::config(format!("the {what} cannot be used for TLS: {error}"))
        };
        let mut roots = rustls::RootCertStore::empty();
        // The system's roots, as far as they can be read; a private CA is added below.
        for cert in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(cert);
        }
        if let Some(pem) = &settings.root_certificate {
            let mut added = 0;
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|error| unusable("root certificate", &error))?;
                roots
                    .add(cert)
                    .map_err(|error| unusable("root certificate", &error))?;
                added += 1;
            }
            if added == 0 {
                return Err(LockError::config(
                    "the root certificate holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
                ));
            }
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|error| unusable("TLS configuration", &error))?
            .with_root_certificates(roots);
        let config = match &settings.client_certificate {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|error| unusable("client certificate", &error))?;
                let key = PrivateKeyDer::from_pem_slice(key)
                    .map_err(|error| unusable("client key", &error))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|error| unusable("client certificate", &error))?
            }
        };
        Ok(Tls::Rustls(tokio_postgres_rustls::MakeRustlsConnect::new(
            config,
        )))
    }

    #[cfg(not(feature = "tls"))]
    fn rustls(_: &TlsSettings) -> Result<Tls, LockError> {
        Err(LockError::config(
            "the URL asks for TLS (sslmode=require) but dlock was built without its `tls` feature",
        ))
    }

    /// Opens a connection with `config`: its client, and the connection to drive.
    pub(crate) async fn connect(
        &self,
        config: &tokio_postgres::Config,
    ) -> Result<(Client, Box<dyn Drive>), tokio_postgres::Error> {
        match self {
            Tls::Plain => {
                let (client, connection) = config.connect(NoTls).await?;
                Ok((client, Box::new(connection)))
            }
            #[cfg(feature = "tls")]
            Tls::Rustls(make) => {
                let (client, connection) = config.connect(make.clone()).await?;
                Ok((client, Box::new(connection)))
            }
        }
    }
}
