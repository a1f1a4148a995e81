//! dlock on real etcd members, one (or three) per test: the suites every backend runs through
//! its harness (`EtcdCluster`, one member), the conformance suite again on three members, and
//! what is etcd's own: locks and elections shared with etcd's (`etcdctl lock`, `etcdctl
//! elect`), etcd's leases and watches under dlock's holds and waiters, a cluster losing
//! members, and replies lost on the way back.

mod cluster;
mod credentials;
mod etcdctl;
mod fenced_writes;
mod leases;
mod lost_replies;
mod partitions;
mod remembered;
mod silent;
mod three_members;
mod two_holders;

use dlock_test_support::etcd_server::EtcdCluster;

/// The conformance suite: every lock kind and every synchronizer.
mod conformance {
    dlock_test_support::conformance_suite!(server super::EtcdCluster);
}

/// The async surface.
#[cfg(feature = "async")]
mod async_surface {
    dlock_test_support::async_suite!(server super::EtcdCluster);
}

/// The lease model and the differential test.
mod lease_model {
    dlock_test_support::lease_model_suite!(super::EtcdCluster);
}

dlock_test_support::server_suite!(EtcdCluster);
