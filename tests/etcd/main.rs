//! dlock on real etcd members: the conformance suite on one member and on a cluster of three,
//! locks and elections shared with etcd's own (`etcdctl lock`, `etcdctl elect`), etcd's leases
//! and watches under dlock's holds and waiters, and a cluster losing members.

mod cluster;
mod conformance;
mod etcdctl;
mod leases;
