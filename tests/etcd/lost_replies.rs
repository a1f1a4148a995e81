//! Replies the network loses between etcd and the backend: a write whose reply never came is
//! never sent again blind (its outcome is unknown, and a second run could act twice).

use std::time::Duration;

use dlock_test_support::conformance::unique;
use dlock_test_support::etcd_server::EtcdCluster;
use dlock_test_support::tcp_proxy::TcpProxy;
use dlocks::etcd::EtcdBackend;
use dlocks::LockClient;

/// A client on `cluster`'s first member through `proxy`.
fn client_through(proxy: &TcpProxy) -> LockClient {
    LockClient::new(
        EtcdBackend::builder(&format!("http://127.0.0.1:{}", proxy.port()))
            .request_timeout(Duration::from_secs(2))
            .build()
            .expect("connect through the proxy"),
    )
}

/// The connection of a count-down's write is cut once etcd has run it: the kept-alive
/// connection failing after the request was written is no sign that etcd never read it, so
/// the count-down is not run a second time; the caller is told its outcome is unknown.
#[test]
fn a_count_down_whose_reply_was_lost_is_not_run_twice() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let client = client_through(&proxy);
    let latch = client.count_down_latch(unique("lost-count-down"));
    assert!(latch.try_set_count(3).expect("set"));
    assert_eq!(latch.count().expect("count"), 3);
    // The count-down's write is the only request that puts a key from here on.
    proxy.cut_reply_to("request_put");
    let error = latch
        .count_down()
        .expect_err("the count-down's reply was lost");
    assert!(error.is_unavailable(), "{error}");
    assert_eq!(proxy.cuts(), 1, "the reply was really cut");
    assert_eq!(latch.count().expect("count"), 2, "counted down once");
}
