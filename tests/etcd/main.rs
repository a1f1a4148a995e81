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
mod multi;
mod partitions;
mod queue;
mod readers;
mod remembered;
mod silent;
mod three_members;
mod turns;
mod two_holders;
mod waiters_in_turn;

use std::time::Duration;

use dlock_test_support::etcd_server::EtcdCluster;
use dlock_test_support::tcp_proxy::TcpProxy;
use dlocks::backend::OwnerId;
use dlocks::etcd::EtcdBackend;

/// A backend on the member behind `proxy`, its requests given up after `request_timeout`: for
/// the steps a test drives one by one, through the backend's own API.
fn backend_through(proxy: &TcpProxy, request_timeout: Duration) -> EtcdBackend {
    EtcdBackend::builder(&format!("http://127.0.0.1:{}", proxy.port()))
        .connect_timeout(Duration::from_secs(1))
        .request_timeout(request_timeout)
        .build()
        .expect("connect through the proxy")
}

/// A fresh name whose key prefix (`<name>/`) is a whole number of base64 groups, so the
/// prefix's base64 starts the base64 of every key under it (a needle for the fault proxy).
fn aligned_name(what: &str) -> String {
    let mut name = dlock_test_support::conformance::unique(what);
    while (name.len() + 1) % 3 != 0 {
        name.push('x');
    }
    name
}

/// Waits until `count` waiters are queued behind the holder of `name` (what `dlock status`
/// shows).
fn await_queued(cluster: &EtcdCluster, name: &str, count: u64) {
    let backend = cluster.backend();
    assert!(
        dlock_test_support::store_queue::await_queued(&backend, name, count),
        "the etcd backend inspects its locks"
    );
}

/// A hold (or waiter) id of its own, `what` to tell it in a failure.
fn owner(what: &str) -> OwnerId {
    OwnerId::from_raw(format!("{}:{what}", uuid::Uuid::new_v4()))
}

/// How many calls of the gRPC `method` (`Txn`, `LeaseTimeToLive`) the first member has
/// answered, from etcd's own metrics.
fn calls_answered(cluster: &EtcdCluster, method: &str) -> u64 {
    use std::io::{Read, Write};
    let url = cluster.members()[0].url();
    let address = url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).expect("connect to etcd");
    write!(stream, "GET /metrics HTTP/1.0\r\nHost: {address}\r\n\r\n").expect("ask metrics");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read metrics");
    let method = format!("grpc_method=\"{method}\"");
    text.lines()
        .filter(|line| line.starts_with("grpc_server_handled_total") && line.contains(&method))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum::<f64>() as u64
}

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
