//! etcd: `etcd://[user:password@]host:port[,host:port...]` (plain HTTP to etcd's gateway) and
//! `etcds://` (HTTPS; the CA and client certificate from etcdctl's own `ETCDCTL_CACERT`,
//! `ETCDCTL_CERT` and `ETCDCTL_KEY`, so an operator's etcdctl settings serve `dlock` too).

use std::sync::Arc;

use dlocks::backend::DistributedLock;
use dlocks::etcd::EtcdBackend;

use super::Scheme;
use crate::connect::{Access, Target, RESPONSE_TIMEOUT};
use crate::exit_code::{Failure, USAGE};

/// The etcd entry.
pub static SCHEME: Scheme = Scheme {
    store: "etcd",
    claims,
    redact,
    open,
    takes_schema: false,
};

fn claims(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    lower.starts_with("etcd://") || lower.starts_with("etcds://")
}

fn redact(url: &str) -> String {
    dlocks::backend::redact_url(url, &["password"])
}

/// Opens the cluster: every command alike, since nothing is created on etcd before a lock is
/// taken.
fn open(target: &Target, _access: Access) -> Result<Arc<dyn DistributedLock>, Failure> {
    // The library takes the URL as it is (endpoints and credentials); the CLI adds etcdctl's
    // certificates for `etcds://`.
    let url = target.url.as_str();
    let tls = url.to_ascii_lowercase().starts_with("etcds://");
    let mut builder = EtcdBackend::builder(url).request_timeout(RESPONSE_TIMEOUT);
    if tls {
        if let Some(ca) = read_pem("ETCDCTL_CACERT")? {
            builder = builder.tls_root_certificate(ca);
        }
        if let (Some(cert), Some(key)) = (read_pem("ETCDCTL_CERT")?, read_pem("ETCDCTL_KEY")?) {
            builder = builder.tls_client_certificate(cert, key);
        }
    }
    match builder.build() {
        Ok(backend) => Ok(Arc::new(backend)),
        Err(error) => {
            let failure = Failure::from(error);
            Err(Failure::new(
                failure.code,
                format!("cannot use the etcd cluster: {}", failure.message),
            ))
        }
    }
}

/// The PEM file the environment variable `name` points at, if it is set.
fn read_pem(name: &str) -> Result<Option<Vec<u8>>, Failure> {
    let Some(path) = std::env::var_os(name) else {
        return Ok(None);
    };
    std::fs::read(&path).map(Some).map_err(|error| {
        Failure::new(
            USAGE,
            format!("cannot read {name} ({}): {error}", path.to_string_lossy()),
        )
    })
}
