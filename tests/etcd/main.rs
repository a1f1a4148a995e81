//! dlock on real etcd members: the conformance suite on one member and on a cluster of three,
//! locks and elections shared with etcd's own (`etcdctl lock`, `etcdctl elect`), etcd's leases
//! and watches under dlock's holds and waiters, a cluster losing members, and multi-locks with
//! members on etcd, Redis and the in-process store.

mod cluster;
mod conformance;
mod differential;
mod etcdctl;
mod lease_model;
mod leases;
mod lost_replies;
mod multi;
mod two_holders;
