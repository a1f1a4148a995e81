//! Redis Cluster (`--topology cluster`): three masters with a replica each, every node in a
//! network namespace of its own, a node taken for failing after 1 s (`cluster-node-timeout`).
//! The workers name every node (`redis-cluster://`) and wait for a replica's acknowledgement
//! unless the fault is the unsynced failover. The faults go to the master of the suite's lock
//! name's slot; the masters promote its replica by themselves, and the suite only waits for
//! them.

use std::time::Duration;

use super::promoting::{self, Promoting};
use super::Store;
use crate::support::cluster::ClusterSetup;
use crate::support::network::Network;
use crate::support::tcp_proxy::TcpProxy;
use crate::worker::LOCK_NAME;

/// Masters, each with one replica.
const MASTERS: usize = 3;

pub fn start() -> Box<dyn Store> {
    let network = match Network::create(MASTERS * 2) {
        Ok(network) => network,
        Err(error) => panic!("the cluster topology needs its network: {error}"),
    };
    let setup = ClusterSetup::start_on_network(&network, MASTERS, 1);
    let slot = setup.slot_of(LOCK_NAME);
    let master = setup.master_of_slot(slot);
    Box::new(ClusterService {
        setup,
        network,
        slot,
        master,
        killed: None,
    })
}

struct ClusterService {
    setup: ClusterSetup,
    /// Dropped after the setup: the processes go before their namespaces.
    network: Network,
    /// The slot of the suite's lock name.
    slot: u16,
    /// The node serving `slot` when the fault began.
    master: usize,
    /// A node a fault killed, until it is started again (it rejoins as a replica).
    killed: Option<usize>,
}

impl Promoting for ClusterService {
    fn network(&self) -> &Network {
        &self.network
    }

    fn servers(&self) -> usize {
        self.setup.nodes.len()
    }

    /// The node serving the lock's slot now, by a node that answers.
    fn current_master(&mut self) -> usize {
        self.master = self.setup.master_of_slot(self.slot);
        self.master
    }

    fn kill(&mut self, at: usize) {
        self.setup.kill(at);
        self.killed = Some(at);
    }

    /// Waits until a node other than `old` serves the lock's slot, as a master the cluster
    /// takes for healthy.
    fn await_failover(&mut self, old: usize) -> Result<(), String> {
        self.master = self.setup.try_await_failover(old, self.slot)?;
        Ok(())
    }
}

impl Drop for ClusterService {
    fn drop(&mut self) {
        // Every process stopped before its namespace goes.
        self.setup.nodes.clear();
    }
}

impl Store for ClusterService {
    fn port(&self) -> u16 {
        self.setup.nodes[self.master].port()
    }

    fn url(&self, _network: Option<&TcpProxy>) -> String {
        let nodes: Vec<String> = (0..self.setup.nodes.len())
            .map(|at| self.setup.address(at))
            .collect();
        format!("redis-cluster://{}", nodes.join(","))
    }

    /// Kills the lock's master and starts it again at once, empty (no persistence; its
    /// cluster configuration kept): faster than the others take it for failing, so its
    /// replica copies its empty dataset.
    fn restart(&mut self) {
        let at = self.current_master();
        self.setup.nodes[at].restart();
    }

    fn pause(&self) {
        self.setup.nodes[self.master].pause();
    }

    fn resume(&self) {
        self.setup.nodes[self.master].resume();
    }

    fn kill_wakeup_connections(&self) -> Result<(), String> {
        self.setup.nodes[self.master]
            .kill_pubsub_clients()
            .map(drop)
    }

    /// What the lock's master sends every other node dropped (its replica gets none of what
    /// it writes meanwhile) for `lag`, then the master killed; the others promote its replica.
    fn failover(&mut self, lag: Duration) -> Result<(), String> {
        promoting::fail_over(self, lag)
    }

    /// The lock's master cut off from every other node, both ways, the clients still reaching
    /// it, for `length` and until the other masters have promoted its replica; then the
    /// partition heals, and the old master learns it is a replica now.
    fn partition(&mut self, length: Duration) -> Result<(), String> {
        promoting::partition(self, length, true)
    }

    /// What the lock's master sends the other nodes dropped, what they send it still
    /// arriving, for `length` and until its replica is promoted.
    fn partition_one_way(&mut self, length: Duration) -> Result<(), String> {
        promoting::partition(self, length, false)
    }

    /// What the lock's master's clock stepping forward does to its keys.
    fn jump_clock(&mut self, by: Duration) -> Result<(), String> {
        let at = self.current_master();
        self.setup.nodes[at].jump_expiry(by).map(drop)
    }

    /// Starts a node a fault killed again (it rejoins as a replica of the master that took
    /// its slots), and waits until every node agrees on three masters, each with its replica
    /// online.
    fn ensure_replica(&mut self) {
        if let Some(at) = self.killed.take() {
            self.setup.nodes[at].restart();
        }
        self.setup.await_settled(MASTERS);
        self.current_master();
    }
}
