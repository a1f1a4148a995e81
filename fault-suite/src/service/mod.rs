//! The lock service the workers use: one server, or a primary with a standby to fail over to,
//! of the backend `--backend` names, or a deployment of several servers `--topology` names.
//! Each backend is one entry of [`BACKENDS`], each topology one of `TOPOLOGIES`; their
//! [`Store`] starts the servers and does the faults to them; the rest of the suite holds the
//! service through that trait alone.

mod etcd;
mod postgres;
mod postgres_standby;
mod promoting;
mod redis;
mod redis_cluster;
mod redis_sentinel;
mod redlock;
mod topology;

pub use topology::Topology;

use std::sync::Arc;
use std::time::Duration;

use dlocks::backend::DistributedLock;
use dlocks::LockError;

use crate::options::{FaultKind, Mode};
use crate::support::tcp_proxy::TcpProxy;
use crate::worker::WorkerSpec;

/// A backend the suite runs on.
pub struct Backend {
    /// Its name on the command line and in the report.
    pub name: &'static str,
    /// Starts its lock service for a run of `fault`: one server, or a primary (master) with
    /// one standby (replica) when the fault needs one (a synchronous one unless the fault is
    /// the unsynced failover, where the backend has both), on clocks the suite can step when
    /// the fault needs them.
    pub start: fn(fault: FaultKind) -> Box<dyn Store>,
    /// Whether a worker's lock URL is this backend's.
    pub claims: fn(url: &str) -> bool,
    /// Opens the backend a worker uses, with the timeouts and the replica acknowledgement of
    /// its spec.
    pub connect: fn(spec: &WorkerSpec) -> Result<Arc<dyn DistributedLock>, LockError>,
    /// Starts its lock service with several members, each in a network namespace of its own,
    /// for the partition faults; `None` where it has no such service.
    pub start_partitionable: Option<fn() -> Box<dyn Store>>,
    /// Whether its lock service takes `fault` (the partitions also need
    /// `start_partitionable`).
    pub takes: fn(fault: FaultKind) -> bool,
    /// Whether its workers can run in `mode` (the backend keeps that kind of lock).
    pub runs: fn(mode: Mode) -> bool,
}

impl Backend {
    /// The name on the command line and in the report.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Whether its lock service can take `fault`.
    pub fn takes(&self, fault: FaultKind) -> bool {
        (!fault.needs_partitions() || self.start_partitionable.is_some()) && (self.takes)(fault)
    }

    /// The backend called `name`.
    pub fn named(name: &str) -> Option<&'static Backend> {
        BACKENDS
            .iter()
            .copied()
            .find(|backend| backend.name == name)
    }

    /// The backend a worker's lock URL is for (the first one claims it; else the default).
    pub fn of_url(url: &str) -> &'static Backend {
        BACKENDS
            .iter()
            .copied()
            .find(|backend| (backend.claims)(url))
            .unwrap_or(BACKENDS[0])
    }

    /// Every backend's name, for messages: "redis or postgres or etcd or redlock".
    pub fn names() -> String {
        let names: Vec<&str> = BACKENDS.iter().map(|backend| backend.name).collect();
        names.join(" or ")
    }
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// The backends, the default first.
pub static BACKENDS: [&Backend; 4] = [
    &redis::BACKEND,
    &postgres::BACKEND,
    &etcd::BACKEND,
    &redlock::BACKEND,
];

/// A backend's servers, and the faults done to them.
pub trait Store {
    /// The port of the server that takes the locks now.
    fn port(&self) -> u16;

    /// The URL workers connect to: through `network` (a proxy in front of [`Store::port`]) when
    /// given.
    fn url(&self, network: Option<&TcpProxy>) -> String;

    /// Kills the lock server and starts it again on the same port.
    fn restart(&mut self);

    /// Stops (`SIGSTOP`) every process of the lock server.
    fn pause(&self);

    /// Lets a paused lock server go on.
    fn resume(&self);

    /// Drops every connection waiters are woken through.
    fn kill_wakeup_connections(&self) -> Result<(), String>;

    /// A lagging standby, then the primary's death: the replication link is partitioned for
    /// `lag` while the primary goes on taking locks, the primary is killed (what it wrote
    /// meanwhile is lost with the link), the standby promoted, and the workers reach it.
    fn failover(&mut self, lag: Duration) -> Result<(), String>;

    /// Gives the primary a new standby if it keeps one and has none (at the start, and after
    /// a failover for the next round).
    fn ensure_replica(&mut self);

    /// Cuts the member taking the locks off from the other members for `length` (its clients
    /// still reach it), then heals the partition. Only a service started partitionable can.
    fn partition(&mut self, _length: Duration) -> Result<(), String> {
        Err("this lock service's members are not in network namespaces of their own".to_owned())
    }

    /// Drops what the member taking the locks sends the other members for `length` (what
    /// they send it still arrives), then heals. Only a service started partitionable can.
    fn partition_one_way(&mut self, _length: Duration) -> Result<(), String> {
        Err("this lock service's members are not in network namespaces of their own".to_owned())
    }

    /// Steps the wall clock of the server taking the locks forward by `by`. Only a service
    /// started for the clock jump can.
    fn jump_clock(&mut self, _by: Duration) -> Result<(), String> {
        Err("this lock service's servers run on the real clock".to_owned())
    }
}

pub struct LockService {
    store: Box<dyn Store>,
    /// The network between the workers and the service, when a fault needs one.
    network: Option<TcpProxy>,
}

impl LockService {
    /// The service for a run of `fault`: `topology`'s, else `backend`'s (see
    /// [`Backend::start`]), reached through a network of the suite's own when the fault
    /// needs one.
    pub fn start(backend: &Backend, topology: Option<&Topology>, fault: FaultKind) -> LockService {
        let with_replica = fault.needs_replica();
        let store = match (topology, backend.start_partitionable) {
            (Some(topology), _) => (topology.start)(fault),
            (None, Some(start)) if fault.needs_partitions() => start(),
            (None, _) => (backend.start)(fault),
        };
        let with_network = fault.needs_network();
        let network = with_network.then(|| TcpProxy::start(store.port()));
        let mut service = LockService { store, network };
        if with_replica {
            service.ensure_replica();
        }
        service
    }

    /// The network between the workers and the service, if it has one.
    pub fn network(&self) -> Result<&TcpProxy, String> {
        self.network
            .as_ref()
            .ok_or_else(|| "this lock service is reached without a network to fault".to_owned())
    }

    /// The URL workers connect to.
    pub fn url(&self) -> String {
        self.store.url(self.network.as_ref())
    }

    /// Kills the lock server and starts it again on the same port: empty on Redis (no
    /// persistence), recovered from its WAL on PostgreSQL.
    pub fn restart(&mut self) {
        self.store.restart();
    }

    /// Stops (`SIGSTOP`) every process of the lock server.
    pub fn pause(&self) {
        self.store.pause();
    }

    /// Lets a paused lock server go on.
    pub fn resume(&self) {
        self.store.resume();
    }

    /// Drops every connection waiters are woken through: Redis's pub/sub connections
    /// (`CLIENT KILL TYPE pubsub`), PostgreSQL's listening sessions (`pg_terminate_backend`).
    pub fn kill_wakeup_connections(&self) -> Result<(), String> {
        self.store.kill_wakeup_connections()
    }

    /// See [`Store::failover`].
    pub fn failover(&mut self, lag: Duration) -> Result<(), String> {
        self.store.failover(lag)
    }

    /// See [`Store::partition`].
    pub fn partition(&mut self, length: Duration) -> Result<(), String> {
        self.store.partition(length)
    }

    /// See [`Store::partition_one_way`].
    pub fn partition_one_way(&mut self, length: Duration) -> Result<(), String> {
        self.store.partition_one_way(length)
    }

    /// See [`Store::jump_clock`].
    pub fn jump_clock(&mut self, by: Duration) -> Result<(), String> {
        self.store.jump_clock(by)
    }

    /// See [`Store::ensure_replica`].
    pub fn ensure_replica(&mut self) {
        self.store.ensure_replica();
    }
}
