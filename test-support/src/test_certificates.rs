//! A private certificate authority and a server certificate it signed, for `localhost` and
//! `127.0.0.1`: what the TLS tests' servers present.

/// PEM texts of a test CA and of a server certificate and key it signed.
pub struct TestCertificates {
    pub ca_pem: String,
    pub server_cert_pem: String,
    pub server_key_pem: String,
}

impl TestCertificates {
    /// A new CA and a server certificate for `localhost` and `127.0.0.1`.
    pub fn generate() -> Self {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair, SanType};
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "dlock test CA");
        let ca = ca_params.self_signed(&ca_key).expect("CA certificate");
        let server_key = KeyPair::generate().expect("server key");
        let mut params =
            CertificateParams::new(vec!["localhost".to_string()]).expect("server params");
        params
            .subject_alt_names
            .push(SanType::IpAddress(std::net::IpAddr::from([127, 0, 0, 1])));
        let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
        let server_cert = params
            .signed_by(&server_key, &issuer)
            .expect("server certificate");
        TestCertificates {
            ca_pem: ca.pem(),
            server_cert_pem: server_cert.pem(),
            server_key_pem: server_key.serialize_pem(),
        }
    }
}
