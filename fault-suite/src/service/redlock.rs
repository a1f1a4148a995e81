//! RedLock (`--backend redlock`, `--topology redlock`): three independent Redis servers, a lock
//! held where a majority of them granted it. A fault on one server is what RedLock is built to
//! ride out, so the server faults go to a majority (two of the three): both restarted empty,
//! both paused, both clocks stepped. With `--topology redlock` (or for the partitions) each
//! server is in a network namespace of its own, and a partition cuts that majority off from
//! the workers. RedLock keeps the reentrant lock only: the plain and checked modes.

use std::sync::Arc;
use std::time::Duration;

use dlocks::backend::DistributedLock;
use dlocks::redis::{RedLockBackend, RedisBackend};
use dlocks::LockError;

use super::{Backend, Store};
use crate::options::{FaultKind, Mode};
use crate::support::network::Network;
use crate::support::redis_server::RedisServer;
use crate::support::tcp_proxy::TcpProxy;
use crate::worker::WorkerSpec;

/// How a worker's lock URL names the servers: `redlock:redis://a,redis://b,redis://c` (the
/// suite's own form: the library builds a RedLock from backends, not from one URL).
const SCHEME: &str = "redlock:";

/// The servers.
const SERVERS: usize = 3;

/// The servers a server fault goes to: a majority.
const MAJORITY: [usize; 2] = [0, 1];

pub static BACKEND: Backend = Backend {
    name: "redlock",
    start: |_| start(None),
    claims: |url| url.starts_with(SCHEME),
    connect,
    start_partitionable: Some(start_partitionable),
    takes,
    runs: |mode| matches!(mode, Mode::Plain | Mode::Checked),
};

/// Whether the servers take `fault`: no replicas to fail over to, and no single server for the
/// suite's proxy to stand for.
pub(super) fn takes(fault: FaultKind) -> bool {
    !fault.needs_replica() && !fault.needs_network()
}

/// The three servers, each in a network namespace of its own.
pub(super) fn start_partitionable() -> Box<dyn Store> {
    match Network::create(SERVERS) {
        Ok(network) => start(Some(network)),
        Err(error) => panic!("the redlock topology needs its network: {error}"),
    }
}

fn start(network: Option<Network>) -> Box<dyn Store> {
    let servers = (0..SERVERS)
        .map(|at| match &network {
            Some(network) => RedisServer::start_on_node(network.node(at), Default::default()),
            None => RedisServer::start(),
        })
        .collect();
    Box::new(RedLockService { servers, network })
}

/// A worker's RedLock over the servers its URL names, with the spec's timeouts.
fn connect(spec: &WorkerSpec) -> Result<Arc<dyn DistributedLock>, LockError> {
    let urls = spec.lock_url.strip_prefix(SCHEME).unwrap_or(&spec.lock_url);
    let nodes = urls
        .split(',')
        .map(|url| {
            RedisBackend::builder(url)
                .connect_timeout(spec.response_timeout)
                .response_timeout(spec.response_timeout)
                .checkout_timeout(spec.response_timeout * 2)
                .build()
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Arc::new(RedLockBackend::builder(nodes).build()?))
}

struct RedLockService {
    servers: Vec<RedisServer>,
    /// Dropped after the servers: the processes go before their namespaces.
    network: Option<Network>,
}

impl RedLockService {
    fn network(&self) -> Result<&Network, String> {
        self.network
            .as_ref()
            .ok_or_else(|| "these servers are not in network namespaces of their own".to_owned())
    }
}

impl Drop for RedLockService {
    fn drop(&mut self) {
        self.servers.clear();
    }
}

impl Store for RedLockService {
    fn port(&self) -> u16 {
        self.servers[0].port()
    }

    fn url(&self, _network: Option<&TcpProxy>) -> String {
        let urls: Vec<String> = self.servers.iter().map(RedisServer::url).collect();
        format!("{SCHEME}{}", urls.join(","))
    }

    /// Kills two of the three servers and starts them again at once, empty (no persistence):
    /// every hold loses its majority.
    fn restart(&mut self) {
        for at in MAJORITY {
            self.servers[at].restart();
        }
    }

    fn pause(&self) {
        for at in MAJORITY {
            self.servers[at].pause();
        }
    }

    fn resume(&self) {
        for at in MAJORITY {
            self.servers[at].resume();
        }
    }

    fn kill_wakeup_connections(&self) -> Result<(), String> {
        for server in &self.servers {
            server.kill_pubsub_clients()?;
        }
        Ok(())
    }

    fn failover(&mut self, _lag: Duration) -> Result<(), String> {
        Err("RedLock's servers have no replicas to fail over to".to_owned())
    }

    fn ensure_replica(&mut self) {}

    /// Two of the three servers cut off from the workers, both ways, for `length`: no step
    /// reaches a majority.
    fn partition(&mut self, length: Duration) -> Result<(), String> {
        let network = self.network()?;
        network.cut_from_clients(&MAJORITY)?;
        std::thread::sleep(length);
        network.heal()
    }

    /// What two of the three servers send the workers dropped for `length`: their steps take
    /// effect, their answers never arrive.
    fn partition_one_way(&mut self, length: Duration) -> Result<(), String> {
        let network = self.network()?;
        network.cut_to_clients(&MAJORITY)?;
        std::thread::sleep(length);
        network.heal()
    }

    /// What stepping the clocks of two of the three servers does to their keys: every hold
    /// loses its majority at once (the weakness of RedLock that Martin Kleppmann pointed out).
    fn jump_clock(&mut self, by: Duration) -> Result<(), String> {
        for at in MAJORITY {
            self.servers[at].jump_expiry(by)?;
        }
        Ok(())
    }
}
