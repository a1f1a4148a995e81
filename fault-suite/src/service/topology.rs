//! Deployments of several servers the suite can run on (`--topology`): which backend, how its
//! service starts for a run, and which faults it takes. Without one, a backend runs on its
//! single server (a replica or members added where a fault needs them).

use super::{
    etcd, postgres, postgres_standby, redis, redis_cluster, redis_sentinel, redlock, Backend, Store,
};
use crate::options::FaultKind;

/// A deployment the suite can start.
pub struct Topology {
    /// Its name on the command line and in the report.
    pub name: &'static str,
    /// The backend its servers run.
    pub backend: &'static Backend,
    /// Starts its service for a run of `fault`.
    pub start: fn(fault: FaultKind) -> Box<dyn Store>,
    /// Whether it takes `fault`.
    pub takes: fn(fault: FaultKind) -> bool,
}

impl Topology {
    /// The topology called `name`.
    pub fn named(name: &str) -> Option<&'static Topology> {
        TOPOLOGIES
            .iter()
            .copied()
            .find(|topology| topology.name == name)
    }

    /// Every topology's name, for messages: "single, sentinel, cluster, redlock, postgres-standby or etcd".
    pub fn names() -> String {
        let names: Vec<&str> = TOPOLOGIES.iter().map(|topology| topology.name).collect();
        let (last, rest) = names.split_last().expect("topologies");
        format!("single, {} or {last}", rest.join(", "))
    }
}

impl std::fmt::Debug for Topology {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// The topologies beyond a single server.
static TOPOLOGIES: [&Topology; 5] = [&SENTINEL, &CLUSTER, &REDLOCK, &POSTGRES_STANDBY, &ETCD];

/// Redis Sentinel: a master, two replicas and three sentinels, a server and a sentinel on each
/// of three nodes in network namespaces of their own.
static SENTINEL: Topology = Topology {
    name: "sentinel",
    backend: &redis::BACKEND,
    start: |_| redis_sentinel::start(),
    takes: |fault| !fault.needs_network(),
};

/// Redis Cluster: three masters with a replica each, every node in a network namespace of its
/// own.
static CLUSTER: Topology = Topology {
    name: "cluster",
    backend: &redis::BACKEND,
    start: |_| redis_cluster::start(),
    takes: |fault| !fault.needs_network(),
};

/// RedLock over three Redis servers, each in a network namespace of its own.
static REDLOCK: Topology = Topology {
    name: "redlock",
    backend: &redlock::BACKEND,
    start: |_| redlock::start_partitionable(),
    takes: redlock::takes,
};

/// Three etcd members: each in a network namespace of its own for the partitions, else reached
/// through a proxy each.
static ETCD: Topology = Topology {
    name: "etcd",
    backend: &etcd::BACKEND,
    start: |fault| {
        if fault.needs_partitions() {
            etcd::start_partitionable()
        } else {
            etcd::start(3)
        }
    },
    takes: |fault| !fault.needs_network() && !fault.needs_fake_clock(),
};

/// A PostgreSQL primary and a streaming standby (synchronous unless the fault is the unsynced
/// failover), each in a network namespace of its own; the workers' URL names both.
static POSTGRES_STANDBY: Topology = Topology {
    name: "postgres-standby",
    backend: &postgres::BACKEND,
    start: |fault| postgres_standby::start(fault != FaultKind::FailoverUnsynced),
    // A promoted standby would run on the real clock: the clock jump is on one server.
    takes: |fault| !fault.needs_network() && !fault.needs_fake_clock(),
};
