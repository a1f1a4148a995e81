//! Cluster connections: the `redis` crate's cluster client, opened with the backend's
//! timeouts, credentials and TLS, and pooled as single-server connections are.

use std::sync::Arc;
use std::time::Duration;

use dlock_core::LockError;
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection};
use redis::io::tcp::TcpSettings;
use redis::{IntoConnectionInfo, RedisError};

use crate::config::Settings;
use crate::connection::{Connect, Endpoint, Pooled};
use crate::redact::redact_url;

/// How many times the cluster client follows a redirect (or reconnects a node) for one
/// command before giving up; dlock itself retries `TRYAGAIN` and `CLUSTERDOWN` until the
/// response timeout, so a long slot migration costs time, not an error.
const REDIRECTS: u32 = 3;

/// Opens cluster connections: each one knows the slot map and holds a connection to every node.
#[derive(Clone)]
pub(crate) struct ClusterConnector {
    client: ClusterClient,
    pub(crate) endpoint: Endpoint,
    /// How long a `WAIT` may block (zero when replica acknowledgement is off).
    replica_wait: Duration,
}

impl ClusterConnector {
    /// A connector to the cluster that `urls` (some of its nodes) belong to.
    pub(crate) fn new(settings: &Settings, urls: &[String]) -> Result<Self, LockError> {
        let mut infos = Vec::with_capacity(urls.len());
        for url in urls {
            let scheme = url.split_once("://").map(|(scheme, _)| scheme);
            if !matches!(scheme, Some("redis" | "rediss")) {
                return Err(LockError::config(format!(
                    "unsupported Redis Cluster node URL {:?}: expected redis://[user:password@]host:port \
                     or rediss://...",
                    redact_url(url)
                )));
            }
            let info = url
                .as_str()
                .into_connection_info()
                .map_err(|error| LockError::Config {
                    message: format!(
                        "invalid Redis Cluster node URL {:?}: {error}",
                        redact_url(url)
                    ),
                    source: Some(Box::new(error)),
                })?;
            infos.push(info);
        }
        let seeds: Vec<String> = infos.iter().map(|info| info.addr().to_string()).collect();
        let user = infos
            .first()
            .and_then(|info| info.redis_settings().username().map(Arc::from));
        let server: Arc<str> = seeds.join(", ").into();
        let builder = ClusterClientBuilder::new(infos)
            .connection_timeout(settings.connect_timeout)
            .response_timeout(settings.response_timeout)
            .tcp_settings(TcpSettings::default().set_nodelay(settings.tcp_nodelay))
            .retries(REDIRECTS)
            .min_retry_wait(10)
            .max_retry_wait(100);
        let client = with_certificates(builder, settings)
            .build()
            .map_err(|error| LockError::Config {
                message: format!(
                    "invalid Redis Cluster configuration ({server}): {error} (every node URL must \
                     use the same scheme, user and password)"
                ),
                source: Some(Box::new(error)),
            })?;
        Ok(ClusterConnector {
            client,
            endpoint: Endpoint::new("redis cluster", server, user, settings),
            replica_wait: if settings.replica_sync {
                settings.replica_sync_timeout
            } else {
                Duration::ZERO
            },
        })
    }

    /// Opens a cluster connection: it reads the slot map from the first seed that answers and
    /// connects to every node, each connect, read and write bounded by the timeouts.
    pub(crate) fn open(&self) -> Result<ClusterConnection, RedisError> {
        let con = self.client.get_connection()?;
        con.set_write_timeout(Some(self.endpoint.response_timeout))?;
        // A redirected step's WAIT may block that much longer than a reply takes.
        con.set_read_timeout(Some(self.endpoint.response_timeout + self.replica_wait))?;
        Ok(con)
    }
}

#[cfg(feature = "tls")]
fn with_certificates(builder: ClusterClientBuilder, settings: &Settings) -> ClusterClientBuilder {
    if settings.tls_root_certificate.is_none() && settings.tls_client_certificate.is_none() {
        return builder;
    }
    builder.certs(redis::TlsCertificates {
        client_tls: settings.tls_client_certificate.as_ref().map(|(cert, key)| {
            redis::ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }
        }),
        root_cert: settings.tls_root_certificate.clone(),
    })
}

#[cfg(not(feature = "tls"))]
fn with_certificates(builder: ClusterClientBuilder, _settings: &Settings) -> ClusterClientBuilder {
    builder
}

impl Connect for ClusterConnector {
    fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

/// A pooled cluster connection.
pub(crate) struct PooledCluster {
    pub(crate) con: ClusterConnection,
    epoch: u64,
    broken: bool,
}

impl Pooled for PooledCluster {
    fn epoch(&self) -> u64 {
        self.epoch
    }

    fn broken(&mut self) -> &mut bool {
        &mut self.broken
    }
}

impl r2d2::ManageConnection for ClusterConnector {
    type Connection = PooledCluster;
    type Error = RedisError;

    fn connect(&self) -> Result<PooledCluster, RedisError> {
        let epoch = self.endpoint.current_epoch();
        Ok(PooledCluster {
            con: self.open()?,
            epoch,
            broken: false,
        })
    }

    fn is_valid(&self, conn: &mut PooledCluster) -> Result<(), RedisError> {
        // Only used if checkout testing is turned on (it is off: it would cost round trips).
        let result = redis::cmd("PING").query::<String>(&mut conn.con);
        conn.note(&result);
        result.map(drop)
    }

    fn has_broken(&self, conn: &mut PooledCluster) -> bool {
        conn.broken || !redis::ConnectionLike::is_open(&conn.con)
    }
}
