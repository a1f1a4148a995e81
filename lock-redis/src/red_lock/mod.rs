//! [`RedLockBackend`]: one lock held on a majority of independent Redis masters (the Redlock
//! algorithm), as a backend the client's reentrancy, waiting and watchdog run on unchanged.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use dlock_core::LockError;

use crate::backend::RedisBackend;

mod fan_out;
mod steps;

/// Default bound on one step's wait for the nodes' replies.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(100);
/// Default clock drift allowance, as a fraction of the lease (the Redlock description's 1 %).
pub const DEFAULT_CLOCK_DRIFT_FACTOR: f64 = 0.01;
/// The fixed part of the drift allowance (the Redlock description's 2 ms).
const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// A lock held on a majority of N independent Redis masters (Redlock), as a backend.
///
/// Hand it to [`LockClient::new`](dlock_core::LockClient::new) like any backend: reentrancy,
/// waiting, the watchdog and lease events work on it unchanged. Each step goes to every node
/// at once (written to every node, then every reply read, each node's within the node timeout
/// from when its step was written, so a step costs about one round trip, not N):
///
/// - **acquire** succeeds when at least `N/2 + 1` nodes granted it and the lease, counted from
///   when the step started, less the drift margin (`lease × drift factor + 2 ms`), has not run
///   out by the time the last reply is in. The client's hold is valid until that instant, and
///   every renewal moves it to the renewal's start + lease − the same margin. Otherwise what was
///   taken is given back on every node (but a re-entry's is not: the owner still relies on the
///   hold it had). A node that did not answer within the node timeout gets the give-back
///   written on the same connection, so if it was only stalled it runs the give-back right
///   after the acquire.
/// - **release, renew and force unlock** go to every node; they count as done on a majority.
/// - **status and the remaining lease** are what a majority says.
/// - **waiters** are woken by a release seen on any node.
///
/// Only the reentrant lock ([`LockKind::Reentrant`](dlock_core::LockKind::Reentrant)) is kept:
/// a fair queue or a read-write lock split over independent servers has no majority meaning.
///
/// # Examples
///
/// ```no_run
/// use dlocks::LockClient;
/// use dlocks::redis::{RedLockBackend, RedisBackend};
///
/// let nodes = ["redis://10.0.0.1:6379", "redis://10.0.0.2:6379", "redis://10.0.0.3:6379"]
///     .iter()
///     .map(|url| RedisBackend::connect(url))
///     .collect::<Result<Vec<_>, _>>()?;
/// let client = LockClient::new(RedLockBackend::new(nodes)?);
/// let guard = client.lock("orders").lock()?;      // held on at least 2 of the 3
/// guard.unlock()?;
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Clone)]
pub struct RedLockBackend {
    inner: Arc<Inner>,
}

struct Inner {
    nodes: Vec<RedisBackend>,
    quorum: usize,
    node_timeout: Duration,
    drift_factor: f64,
}

/// Settings for a [`RedLockBackend`], from [`RedLockBackend::builder`].
#[must_use = "a builder does nothing until `build` is called"]
pub struct RedLockBuilder {
    nodes: Vec<RedisBackend>,
    node_timeout: Duration,
    drift_factor: f64,
}

impl RedLockBackend {
    /// A quorum backend over `nodes` with the default settings.
    ///
    /// # Errors
    ///
    /// As [`RedLockBuilder::build`].
    pub fn new(nodes: Vec<RedisBackend>) -> Result<Self, LockError> {
        Self::builder(nodes).build()
    }

    /// A builder, to set the node timeout and the clock drift allowance.
    pub fn builder(nodes: Vec<RedisBackend>) -> RedLockBuilder {
        RedLockBuilder {
            nodes,
            node_timeout: DEFAULT_NODE_TIMEOUT,
            drift_factor: DEFAULT_CLOCK_DRIFT_FACTOR,
        }
    }

    /// The nodes' `host:port`.
    pub fn servers(&self) -> Vec<&str> {
        self.inner.nodes.iter().map(RedisBackend::server).collect()
    }

    /// How many nodes a step needs: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.quorum
    }
}

impl RedLockBuilder {
    /// How long one step waits for a node's replies, from when the step was written to it
    /// (default 100 ms). A node that has not answered by then counts as failed for that step.
    /// Waiting for one of this process's pooled connections is not counted (that is bounded by
    /// the nodes' checkout timeout), except while a node has no connection open at all. Keep it
    /// small against the lease: the time a step takes is subtracted from the grant's validity.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The clock drift allowance as a fraction of the lease (default 0.01, also the least
    /// used): how much faster one node's clock may run than the client's during a lease. Every
    /// deadline of the client's holds keeps `lease × factor + 2 ms` from the lease's end
    /// ([`DistributedLock::clock_drift`](dlock_core::backend::DistributedLock::clock_drift)).
    pub fn clock_drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// Checks the nodes and settings.
    ///
    /// # Errors
    ///
    /// - [`LockError::Config`]: fewer than 3 nodes (a majority of 1 or 2 servers survives no
    ///   failure a single server would not); the same server twice (by address, or the same
    ///   `run_id` behind two addresses); a node timeout of zero or a drift factor outside
    ///   `0..0.5`.
    /// - [`LockError::Unavailable`]: a node did not answer `INFO` within its timeouts.
    ///
    /// An even number of nodes is accepted with a warning: 4 nodes need 3, and tolerate one
    /// failure, as 3 do.
    pub fn build(self) -> Result<RedLockBackend, LockError> {
        let n = self.nodes.len();
        if n < 3 {
            return Err(LockError::config(format!(
                "a RedLock needs at least 3 independent Redis masters, got {n}"
            )));
        }
        if let Some(node) = self.nodes.iter().find(|node| node.is_cluster()) {
            return Err(LockError::config(format!(
                "a RedLock's nodes must be independent masters; {} is a Redis Cluster (which \
                 already keeps each lock on one master)",
                node.endpoint().describe()
            )));
        }
        if n % 2 == 0 {
            tracing::warn!(
                nodes = n,
                "dlock: a RedLock on an even number of nodes tolerates no more failures than one node fewer"
            );
        }
        if self.node_timeout.is_zero() || self.node_timeout > dlock_core::MAX_DURATION {
            return Err(LockError::config(format!(
                "node_timeout must be between zero and a year, got {:?}",
                self.node_timeout
            )));
        }
        if !(0.0..0.5).contains(&self.drift_factor) {
            return Err(LockError::config(format!(
                "clock_drift_factor must be at least 0 and below 0.5, got {}",
                self.drift_factor
            )));
        }
        let mut seen: Vec<(String, String)> = Vec::with_capacity(n);
        for node in &self.nodes {
            let run_id = run_id(node)?;
            if let Some((other, _)) = seen
                .iter()
                .find(|(addr, id)| addr == node.server() || *id == run_id)
            {
                return Err(LockError::config(format!(
                    "a RedLock's nodes must be independent servers: {} and {} are the same \
                     server (run_id {run_id})",
                    other,
                    node.server()
                )));
            }
            seen.push((node.server().to_owned(), run_id));
        }
        Ok(RedLockBackend {
            inner: Arc::new(Inner {
                quorum: n / 2 + 1,
                nodes: self.nodes,
                node_timeout: self.node_timeout,
                drift_factor: self.drift_factor,
            }),
        })
    }
}

/// The server's `run_id`: the same server behind two addresses has one.
fn run_id(node: &RedisBackend) -> Result<String, LockError> {
    let info: String = node
        .server_parts()?
        .0
        .run("reading the server's run_id", |con| {
            redis::cmd("INFO").arg("server").query(con)
        })?;
    Ok(info
        .lines()
        .find_map(|line| line.strip_prefix("run_id:"))
        .map(|id| id.trim().to_owned())
        .unwrap_or_else(|| node.server().to_owned()))
}

impl fmt::Debug for RedLockBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedLockBackend")
            .field("servers", &self.servers())
            .field("quorum", &self.inner.quorum)
            .field("node_timeout", &self.inner.node_timeout)
            .finish_non_exhaustive()
    }
}

impl fmt::Debug for RedLockBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let servers: Vec<&str> = self.nodes.iter().map(RedisBackend::server).collect();
        f.debug_struct("RedLockBuilder")
            .field("servers", &servers)
            .field("node_timeout", &self.node_timeout)
            .field("clock_drift_factor", &self.drift_factor)
            .finish()
    }
}
