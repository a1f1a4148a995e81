//! dlock on real etcd members: the conformance suite on one member and on a cluster of three,
//! and locks and elections shared with etcd's own (`etcdctl lock`, `etcdctl elect`).

mod conformance;
mod etcdctl;
