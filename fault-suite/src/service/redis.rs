//! The Redis lock service: one `redis-server`, or a master with a replica behind a proxy that
//! stands for the service's address (moved to the replica on failover); the replica reaches its
//! master through a proxy of its own, so the replication link can be partitioned: what the
//! master writes meanwhile never reaches the replica.

use std::sync::Arc;
use std::time::Duration;

use dlocks::backend::DistributedLock;
use dlocks::redis::RedisBackend;
use dlocks::LockError;

use super::{Backend, Store};
use crate::options::FaultKind;
use crate::support::redis_server::RedisServer;
use crate::support::tcp_proxy::TcpProxy;
use crate::worker::WorkerSpec;

pub static BACKEND: Backend = Backend {
    name: "redis",
    start,
    claims: |url| {
        [
            "redis://",
            "rediss://",
            "redis-sentinel://",
            "redis-cluster://",
        ]
        .iter()
        .any(|scheme| url.starts_with(scheme))
    },
    connect,
    start_partitionable: None,
    takes: |_| true,
    runs: |_| true,
};

fn start(fault: FaultKind) -> Box<dyn Store> {
    let master = RedisServer::start();
    let proxy = fault
        .needs_replica()
        .then(|| TcpProxy::start(master.port()));
    Box::new(RedisService {
        master,
        replica: None,
        replication_link: None,
        proxy,
        retired: Vec::new(),
    })
}

/// A worker's backend: waiting for the replica when the spec asks for it.
fn connect(spec: &WorkerSpec) -> Result<Arc<dyn DistributedLock>, LockError> {
    let backend = RedisBackend::builder(&spec.lock_url)
        .connect_timeout(spec.response_timeout)
        .response_timeout(spec.response_timeout)
        .checkout_timeout(spec.response_timeout * 2)
        .replica_sync(spec.replica_sync)
        .replica_sync_timeout(spec.replica_sync_timeout)
        .build()?;
    Ok(Arc::new(backend))
}

struct RedisService {
    /// The server lock steps go to (after a failover, the promoted replica).
    master: RedisServer,
    /// The master's replica, until a failover promotes it.
    replica: Option<RedisServer>,
    /// The replica's link to the master.
    replication_link: Option<TcpProxy>,
    proxy: Option<TcpProxy>,
    /// The old master, killed by a failover, kept so its process is reaped with the run.
    retired: Vec<RedisServer>,
}

impl Store for RedisService {
    fn port(&self) -> u16 {
        self.master.port()
    }

    fn url(&self, network: Option<&TcpProxy>) -> String {
        match (network, &self.proxy) {
            (Some(network), _) => network.url(),
            (None, Some(proxy)) => proxy.url(),
            (None, None) => self.master.url(),
        }
    }

    fn restart(&mut self) {
        self.master.restart();
    }

    fn pause(&self) {
        self.master.pause();
    }

    fn resume(&self) {
        self.master.resume();
    }

    fn kill_wakeup_connections(&self) -> Result<(), String> {
        self.master.kill_pubsub_clients().map(drop)
    }

    fn failover(&mut self, lag: Duration) -> Result<(), String> {
        let replica = self
            .replica
            .take()
            .ok_or("this lock service has no replica")?;
        let link = self
            .replication_link
            .take()
            .ok_or("this lock service has no replication link")?;
        link.hold_traffic(true);
        std::thread::sleep(lag);
        self.master.kill();
        drop(link);
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut replica.admin())
            .map_err(|error| format!("promoting the replica: {error}"))?;
        if let Some(proxy) = &self.proxy {
            proxy.redirect(replica.port());
        }
        let old = std::mem::replace(&mut self.master, replica);
        self.retired.push(old);
        Ok(())
    }

    /// What the master's clock stepping forward does to its keys.
    fn jump_clock(&mut self, by: Duration) -> Result<(), String> {
        self.master.jump_expiry(by).map(drop)
    }

    fn ensure_replica(&mut self) {
        if self.proxy.is_some() && self.replica.is_none() {
            let link = TcpProxy::start(self.master.port());
            self.replica = Some(RedisServer::start_replica_via(&self.master, link.port()));
            self.replication_link = Some(link);
        }
    }
}
