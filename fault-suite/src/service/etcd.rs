//! The etcd lock service: one member, or three when a fault needs a member to fail over to.
//! Workers reach the members through one proxy each (the service's addresses, every member
//! named in their URL as etcdctl's `--endpoints`), so the service can drop the connections
//! waiters are woken through. A failover kills the leading member; the others elect a new
//! leader and the workers' backends reach it at its own address. For a partition, three
//! members each in a network namespace of their own, reached at their own addresses.

use std::sync::Arc;
use std::time::Duration;

use dlocks::backend::DistributedLock;
use dlocks::etcd::EtcdBackend;
use dlocks::LockError;

use super::{Backend, Store};
use crate::support::etcd_server::EtcdCluster;
use crate::support::tcp_proxy::TcpProxy;
use crate::worker::WorkerSpec;

pub static BACKEND: Backend = Backend {
    name: "etcd",
    start: |fault| start(if fault.needs_replica() { 3 } else { 1 }),
    claims: |url| url.starts_with("http://") || url.starts_with("https://"),
    connect,
    start_partitionable: Some(start_partitionable),
    // The leader counts leases on its monotonic clock (and Go reads time without the C
    // library, so `libfaketime` cannot reach it).
    takes: |fault| !fault.needs_fake_clock(),
    runs: |_| true,
};

/// How long a failover waits for the remaining members to elect a leader.
const ELECTION_LIMIT: Duration = Duration::from_secs(10);

/// `members` members, each behind a proxy (three give a member to fail over to); etcd
/// commits every write on a quorum, so a synchronous standby is what it always has.
pub(super) fn start(members: usize) -> Box<dyn Store> {
    let cluster = EtcdCluster::start(members);
    let proxies = cluster
        .members()
        .iter()
        .map(|member| TcpProxy::start(member.client_port))
        .collect();
    Box::new(EtcdService {
        cluster,
        proxies,
        killed: None,
    })
}

/// Three members, each in a network namespace of its own: the workers reach them at their own
/// addresses (no proxy), and a partition cuts links between members.
pub(super) fn start_partitionable() -> Box<dyn Store> {
    Box::new(EtcdService {
        cluster: EtcdCluster::start_partitionable(3),
        proxies: Vec::new(),
        killed: None,
    })
}

/// A worker's backend, on every member the URL names (a write is acknowledged once a quorum
/// has it, so the spec's replica acknowledgement is always there).
fn connect(spec: &WorkerSpec) -> Result<Arc<dyn DistributedLock>, LockError> {
    let backend = EtcdBackend::builder(&spec.lock_url)
        .connect_timeout(spec.response_timeout)
        .request_timeout(spec.response_timeout)
        .build()?;
    Ok(Arc::new(backend))
}

struct EtcdService {
    cluster: EtcdCluster,
    /// One proxy per member, in the members' order: the addresses workers use.
    proxies: Vec<TcpProxy>,
    /// The member a failover killed, until it is started again.
    killed: Option<usize>,
}

impl EtcdService {
    /// Drops what the leader sends the other members (and, `both_ways`, what they send it)
    /// for `length`, then heals and waits for a leader.
    fn cut_leader_off(&mut self, length: Duration, both_ways: bool) -> Result<(), String> {
        let network = self
            .cluster
            .network()
            .ok_or("this lock service's members are not in network namespaces of their own")?;
        let leader = self
            .cluster
            .await_leader(ELECTION_LIMIT)
            .ok_or("the cluster has no leader")?;
        let others: Vec<usize> = (0..self.cluster.members().len())
            .filter(|at| *at != leader)
            .collect();
        network.cut(&[leader], &others, both_ways)?;
        std::thread::sleep(length);
        network.heal()?;
        self.cluster
            .await_leader(ELECTION_LIMIT)
            .map(drop)
            .ok_or_else(|| "no leader once the partition healed".to_owned())
    }
}

impl Store for EtcdService {
    fn port(&self) -> u16 {
        self.cluster.members()[0].client_port
    }

    fn url(&self, network: Option<&TcpProxy>) -> String {
        if let Some(network) = network {
            return format!("http://127.0.0.1:{}", network.port());
        }
        let endpoints: Vec<String> = if self.proxies.is_empty() {
            // Members in namespaces of their own: reached at their own addresses.
            self.cluster
                .members()
                .iter()
                .map(|member| member.url())
                .collect()
        } else {
            self.proxies
                .iter()
                .map(|proxy| format!("http://127.0.0.1:{}", proxy.port()))
                .collect()
        };
        endpoints.join(",")
    }

    /// Kills the first member and starts it again on its data and ports: what it committed
    /// is still there.
    fn restart(&mut self) {
        self.cluster.restart(0);
    }

    fn pause(&self) {
        for at in 0..self.cluster.members().len() {
            self.cluster.pause(at);
        }
    }

    fn resume(&self) {
        for at in 0..self.cluster.members().len() {
            self.cluster.resume(at);
        }
    }

    /// Closes every connection through the service's addresses: etcd's watch streams (what
    /// wakes waiters) share the gateway with the steps, so the steps' kept-alive connections
    /// go too, and the backends open new ones.
    fn kill_wakeup_connections(&self) -> Result<(), String> {
        if self.proxies.is_empty() {
            return Err("the workers reach these members without a proxy to cut".to_owned());
        }
        for (proxy, member) in self.proxies.iter().zip(self.cluster.members()) {
            proxy.redirect(member.client_port);
        }
        Ok(())
    }

    /// The leading member goes on for `lag`, then is killed; the others elect a leader among
    /// themselves. Raft commits a write on a quorum before it is answered, so no answered
    /// write is lost with the leader (unlike a lagging standby's primary).
    fn failover(&mut self, lag: Duration) -> Result<(), String> {
        if self.cluster.members().len() < 3 {
            return Err("this lock service has no member to fail over to".to_owned());
        }
        let leader = self
            .cluster
            .await_leader(ELECTION_LIMIT)
            .ok_or("the cluster has no leader")?;
        std::thread::sleep(lag);
        self.cluster.kill(leader);
        self.killed = Some(leader);
        Ok(())
    }

    /// The leader cut off from the other two members for `length`, its workers still
    /// reaching it: its holds cannot be renewed, the others elect a leader of their own and
    /// take the locks once those holds' leases are over; then the partition heals and the
    /// cut member rejoins as a follower.
    fn partition(&mut self, length: Duration) -> Result<(), String> {
        self.cut_leader_off(length, true)
    }

    /// What the leader sends the other two members dropped for `length`, what they send it
    /// still arriving: they hear no heartbeat and elect a leader of their own, whose messages
    /// tell the old one it was replaced; then the link heals.
    fn partition_one_way(&mut self, length: Duration) -> Result<(), String> {
        self.cut_leader_off(length, false)
    }

    /// Starts the member a failover killed again, so the next round has one to fail over to.
    fn ensure_replica(&mut self) {
        if let Some(at) = self.killed.take() {
            self.cluster.restart(at);
        }
    }
}
