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

/// A writer's try that finds its own hold is an extend, not a wait: it marks no waiting
/// writer, also when its reply is lost before the backend could act on what it read. A mark
/// left so would refuse every reader until the marks' lease ran out (up to three seconds),
/// with no writer waiting.
#[test]
fn a_writers_try_that_finds_its_own_hold_leaves_no_mark_when_its_reply_is_lost() {
    use dlocks::backend::{AcquireRequest, DistributedLock, LockRef};
    use dlocks::LockKind;

    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let backend = crate::backend_through(&proxy, Duration::from_secs(2));
    let other = cluster.backend();
    let id = crate::owner;
    let lease = Duration::from_secs(60);
    let slot = Duration::from_secs(2);
    let name = unique("rw-own-hold-mark");
    let (write, read) = (
        LockRef::new(&name, LockKind::Write),
        LockRef::new(&name, LockKind::Read),
    );
    // A writer of this backend waits once, behind another backend's reader: the backend
    // then keeps a lease for waiters' marks, and marks a refused writer in its try's own
    // transaction.
    let (reader, first_waiter) = (id("reader"), id("first-waiter"));
    let taken = other
        .try_acquire(&AcquireRequest::new(read, &reader, lease))
        .expect("read");
    assert!(taken.is_acquired());
    let refused = backend
        .try_acquire(&AcquireRequest::new(write, &first_waiter, lease).waiting(true, slot))
        .expect("try");
    assert!(!refused.is_acquired(), "the reader holds: {refused:?}");
    backend
        .cancel_wait(write, &first_waiter, slot)
        .expect("leave");
    other.release(read, &reader).expect("release");

    let (writer, waiter) = (id("writer"), id("waiter"));
    let asked = AcquireRequest::new(write, &writer, lease)
        .queued_as(&waiter)
        .waiting(true, slot);
    // Asks, the reply to its transaction lost (the `cuts`-th reply cut).
    let ask_losing_the_reply = |cuts: usize| {
        proxy.cut_reply_to("request_txn");
        let error = backend.try_acquire(&asked).expect_err("the reply was lost");
        assert!(error.is_unavailable(), "{error}");
        assert_eq!(proxy.cuts(), cuts, "the reply was really cut");
    };
    // The take lands, its answer lost.
    ask_losing_the_reply(1);
    // Asked again: the try is refused by the writer's own key, and its reply is lost too,
    // before the backend reads why.
    ask_losing_the_reply(2);
    let released = backend.release(write, &writer).expect("release");
    assert!(
        !matches!(released, dlocks::backend::Release::NotHeld),
        "the first take made the hold"
    );
    // No time passes: a waiting writer's mark would refuse the reader.
    let reader = id("second-reader");
    let read_now = other
        .try_acquire(&AcquireRequest::new(read, &reader, lease))
        .expect("read");
    assert!(read_now.is_acquired(), "a reader was refused: {read_now:?}");
    other.release(read, &reader).expect("release");
}
