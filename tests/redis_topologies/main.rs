//! dlock on Redis topologies of several servers: Cluster, Sentinel, RedLock and replica
//! acknowledgement, each with the conformance suite where it applies, and the lease rule where
//! it depends on them.

mod cluster;
mod cluster_conformance;
mod cluster_harness;
mod differential;
mod lease_rule;
mod redlock;
mod redlock_conformance;
mod replicas;
mod sentinel;
mod sentinel_conformance;
