//! Connections that go silent without a word (a paused member, a partition, a load balancer's
//! or a NAT's idle timeout): every call returns within its request timeout, a call that never
//! went out says so, and a waiter's watch is made again rather than left reading a dead
//! connection.

use std::thread;
use std::time::{Duration, Instant};

use dlock_test_support::conformance::unique;
use dlock_test_support::etcd_server::EtcdCluster;
use dlock_test_support::tcp_proxy::TcpProxy;
use dlocks::etcd::EtcdBackend;
use dlocks::LockClient;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

/// A backend on `proxies` (each an endpoint) with a 1 s request and connect timeout.
fn backend_through(proxies: &[&TcpProxy]) -> EtcdBackend {
    let endpoints: Vec<String> = proxies
        .iter()
        .map(|proxy| format!("http://127.0.0.1:{}", proxy.port()))
        .collect();
    EtcdBackend::builder(&endpoints.join(","))
        .connect_timeout(REQUEST_TIMEOUT)
        .request_timeout(REQUEST_TIMEOUT)
        .build()
        .expect("connect through the proxies")
}

/// Three endpoints, all silent (their connections open, nothing answered): a step returns
/// within its request timeout, not one request timeout per endpoint tried.
#[test]
fn a_step_with_every_endpoint_silent_returns_within_the_request_timeout() {
    let cluster = EtcdCluster::single();
    let port = cluster.members()[0].client_port;
    let proxies = [
        TcpProxy::start(port),
        TcpProxy::start(port),
        TcpProxy::start(port),
    ];
    let client = LockClient::new(backend_through(&[&proxies[0], &proxies[1], &proxies[2]]));
    let lock = client.lock(unique("silent-endpoints"));
    lock.lock().expect("lock").unlock().expect("unlock");
    for proxy in &proxies {
        proxy.hold_traffic(true);
    }
    for call in 0..3 {
        let started = Instant::now();
        let error = lock
            .try_lock_for(Duration::from_millis(500))
            .expect_err("no endpoint answers");
        let took = started.elapsed();
        assert!(error.is_unavailable(), "{error}");
        assert!(error.to_string().contains("timed out"), "says why: {error}");
        // One request timeout (1 s); the margin is for a loaded machine, well below the 4 s
        // that a second per endpoint and one more would take.
        assert!(
            took < Duration::from_millis(2500),
            "call {call}: try_lock_for(500 ms) took {took:?}: {error}"
        );
    }
    for proxy in &proxies {
        proxy.hold_traffic(false);
    }
}

/// More callers at once than a backend sends calls at once, against a silent member: a call
/// that could not start within its request timeout says it was not sent, not that its outcome
/// is unknown.
#[test]
fn a_call_that_never_started_says_it_was_not_sent() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let client = LockClient::new(backend_through(&[&proxy]));
    proxy.hold_traffic(true);
    let errors: Vec<String> = thread::scope(|s| {
        let callers: Vec<_> = (0..48)
            .map(|at| {
                let lock = client.lock(unique(&format!("crowd-{at}")));
                s.spawn(move || lock.try_lock().map(drop).expect_err("silent").to_string())
            })
            .collect();
        callers
            .into_iter()
            .map(|caller| caller.join().expect("caller"))
            .collect()
    });
    proxy.hold_traffic(false);
    let not_sent: Vec<&String> = errors.iter().filter(|e| e.contains("not sent")).collect();
    assert!(!not_sent.is_empty(), "every call started: {errors:?}");
    assert!(
        not_sent.iter().all(|e| !e.contains("unknown")),
        "a call never sent has a known outcome: {not_sent:?}"
    );
}

/// A waiter's watch whose connection is dropped on the way without a word (nothing flows
/// either way, no reset), while new connections work: the release still wakes the waiter,
/// well before the holder's 30 s lease (the cap of the waiter's own timer) would.
#[test]
fn a_waiter_whose_watch_went_silent_is_still_woken_by_the_release() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let waiter = LockClient::new(backend_through(&[&proxy]));
    let holder = LockClient::new(cluster.backend());
    let name = unique("silent-watch");
    let held = holder.lock(name.clone()).lock().expect("lock");
    let (taken, woken) = std::sync::mpsc::channel();
    thread::scope(|s| {
        s.spawn(|| {
            let guard = waiter
                .lock(name.clone())
                .try_lock_for(Duration::from_secs(60))
                .expect("wait");
            let _ = taken.send(guard.map(|guard| guard.unlock().is_ok()));
        });
        let watching_by = Instant::now() + Duration::from_secs(10);
        while proxy.subscribers() == 0 {
            assert!(Instant::now() < watching_by, "the waiter never watched");
            thread::sleep(Duration::from_millis(5));
        }
        // Its retry made (one round trip after the watch), the waiter waits.
        thread::sleep(Duration::from_millis(500));
        proxy.freeze_subscribers();
        held.unlock().expect("unlock");
        assert_eq!(
            woken.recv_timeout(Duration::from_secs(15)),
            Ok(Some(true)),
            "woken by the release, not left to its timer"
        );
    });
}
