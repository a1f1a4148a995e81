//! What an attacker would try on etcd for two holders that both believe: a reply lost after
//! the step ran, a request held up and delivered after its client gave up, a change of the
//! lock's keys that is no release (a set-once step sent again is a shared server case). Each is played on a real
//! member through the tests' fault proxy (or another writer), as a user of the API meets it.

use std::thread;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use dlock_test_support::conformance::unique;
use dlock_test_support::etcd_server::EtcdCluster;
use dlock_test_support::tcp_proxy::TcpProxy;
use dlocks::etcd::EtcdBackend;
use dlocks::LockClient;

const LEASE: Duration = Duration::from_secs(3);

/// A client on `proxy` with a short watchdog lease and request timeout.
fn client_through(proxy: &TcpProxy) -> LockClient {
    let backend = EtcdBackend::builder(&format!("http://127.0.0.1:{}", proxy.port()))
        .connect_timeout(Duration::from_secs(1))
        .request_timeout(Duration::from_millis(500))
        .build()
        .expect("connect through the proxy");
    LockClient::builder(backend)
        .watchdog_lease(LEASE)
        .build()
        .expect("client")
}

/// A client straight on the cluster (another process).
fn client(cluster: &EtcdCluster) -> LockClient {
    LockClient::builder(cluster.backend())
        .watchdog_lease(LEASE)
        .build()
        .expect("client")
}

/// What only the transaction that writes a step's keys of `name` contains (a read compares
/// nothing): the fault proxy's needles for it.
fn write_of(cluster: &EtcdCluster, name: &str) -> [String; 2] {
    [
        STANDARD.encode(cluster.backend().key_prefix(name)),
        r#""compare":[{"#.to_owned(),
    ]
}

fn needles(found: &[String; 2]) -> [&str; 2] {
    [found[0].as_str(), found[1].as_str()]
}

/// The acquire's transaction ran on etcd (the key is there, on the client's session, which
/// its other hold keeps alive, so etcd alone would keep it), and its reply was lost. Whatever `lock()` then says, there is
/// never a second holder: if it failed, the hold it may have made is nobody's and ends by its
/// lease (another client gets the lock), and the first client, asking again, does not get it
/// while the other holds it.
#[test]
fn an_acquire_whose_reply_was_lost_makes_no_second_holder() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let (mine, theirs) = (client_through(&proxy), client(&cluster));
    // A client that has held another lock for a while: its watchdog renewed it, so its holds
    // share one etcd lease that the watchdog keeps alive.
    let _keeps_the_session = mine.lock(unique("other")).lock().expect("lock");
    thread::sleep(LEASE / 2);
    let name = crate::aligned_name("lost-acquire");
    let write = write_of(&cluster, &name);
    proxy.cut_reply_to_all(&needles(&write));
    let first = mine.lock(name.clone()).lock();
    assert_eq!(proxy.cuts(), 1, "the acquire's reply was really cut");
    match first {
        Ok(guard) => {
            assert!(
                theirs.lock(name.clone()).try_lock().expect("try").is_none(),
                "held by the first client"
            );
            guard.unlock().expect("unlock");
        }
        Err(error) => {
            assert!(error.is_unavailable(), "{error}");
            let taken = theirs
                .lock(name.clone())
                .try_lock_for(LEASE * 3)
                .expect("wait")
                .expect("the lost reply's hold ends with its lease");
            assert!(
                mine.lock(name.clone()).try_lock().expect("try").is_none(),
                "the first client does not hold it beside the other"
            );
            assert!(!taken.is_lost());
            taken.unlock().expect("unlock");
        }
    }
}

/// An acquire held up in the network until its client gave up (an error), delivered once
/// another client has taken and released the lock: whether it lands or not, the two clients
/// never both hold the lock, and a hold it made is not the first client's unless the store
/// says so when asked.
#[test]
fn an_acquire_delivered_after_its_client_gave_up_makes_no_second_holder() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let (mine, theirs) = (client_through(&proxy), client(&cluster));
    let name = crate::aligned_name("late-acquire");
    let write = write_of(&cluster, &name);
    proxy.hold_back_next_all(&needles(&write));
    let error = mine
        .lock(name.clone())
        .try_lock()
        .expect_err("the acquire's request was held up");
    assert!(error.is_unavailable(), "{error}");
    assert_eq!(proxy.held_back(), 1, "the acquire was really held up");
    let between = theirs
        .lock(name.clone())
        .try_lock()
        .expect("try")
        .expect("free while the acquire is held up");
    between.unlock().expect("unlock");
    proxy.deliver_held();
    let first = mine.lock(name.clone()).try_lock().expect("try");
    let second = theirs.lock(name.clone()).try_lock().expect("try");
    assert!(
        first.is_none() || second.is_none(),
        "two holders after a late acquire"
    );
    for guard in [first, second].into_iter().flatten() {
        guard.unlock().expect("unlock");
    }
}

/// A release held up in the network until its client gave up on it and sent it again (the
/// copy released the lock), delivered once the same thread holds the lock again: a client's
/// holds of a name share one key and one hold id, so the late copy finds the key named as its
/// own. It must not end the new hold: the thread still holds it and another client cannot
/// take it.
#[test]
fn a_release_delivered_after_its_thread_took_the_lock_again_ends_nothing() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let (mine, theirs) = (client_through(&proxy), client(&cluster));
    let name = crate::aligned_name("late-release");
    let lock = mine.lock(name.clone());
    let guard = lock.lock().expect("lock");
    proxy.hold_back_next_all(&["request_delete_range"]);
    guard.unlock().expect("released by the copy sent again");
    assert_eq!(proxy.held_back(), 1, "the release was really held up");
    let again = lock.lock().expect("lock again");
    // Returns once etcd answered it (it ran, or the gateway dropped it).
    assert_eq!(proxy.deliver_held(), 1, "the late release was delivered");
    assert!(
        lock.is_held_by_current_thread().expect("status"),
        "the late release ended the new hold"
    );
    assert!(
        theirs.lock(name.clone()).try_lock().expect("try").is_none(),
        "two holders after a late release"
    );
    again.unlock().expect("unlock");
}

/// Another program writes and deletes a key under the lock's prefix while a dlock client
/// holds it: the waiter is woken (a change of the name), asks the store, and does not take
/// the lock; it gets it when the holder releases.
#[test]
fn a_change_of_the_lock_s_keys_that_is_no_release_makes_no_holder() {
    let cluster = EtcdCluster::single();
    let (holder, waiter) = (client(&cluster), client(&cluster));
    let name = unique("forged-wake-up");
    let held = holder.lock(name.clone()).lock().expect("lock");
    let prefix = cluster.backend().key_prefix(&name);
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            waiter
                .lock(name.clone())
                .try_lock_for(Duration::from_secs(20))
                .expect("wait")
                .map(|guard| guard.unlock().is_ok())
        });
        thread::sleep(Duration::from_millis(300));
        for args in [
            vec!["put", &format!("{prefix}zz-forged"), "1"],
            vec!["del", &format!("{prefix}zz-forged")],
        ] {
            let status = cluster
                .etcdctl()
                .args(&args)
                .stdout(std::process::Stdio::null())
                .status()
                .expect("run etcdctl");
            assert!(status.success(), "etcdctl {args:?}");
        }
        thread::sleep(Duration::from_millis(500));
        assert!(!waiting.is_finished(), "the waiter still waits");
        assert!(!held.is_lost(), "the holder still holds");
        held.unlock().expect("unlock");
        assert_eq!(waiting.join().expect("waiter"), Some(true));
    });
}

/// An operator's force unlock of the read side, its write held up in the network until the
/// call gave up, delivered after another reader came in: it ends every reader or none, as one
/// that reaches etcd at once does, never only the readers it had read (the one that came in
/// between would go on reading after the operator meant the side empty, or the first would be
/// ended for a force unlock its operator was told failed while the other lives).
#[test]
fn a_force_unlock_delivered_late_ends_every_reader_or_none() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let (operator, first, second) = (client_through(&proxy), client(&cluster), client(&cluster));
    let name = crate::aligned_name("late-force-unlock");
    let read = |client: &LockClient| {
        client
            .read_write_lock(name.clone())
            .read_lock()
            .lock()
            .expect("read")
    };
    let early = read(&first);
    let write = write_of(&cluster, &name);
    proxy.hold_back_next_all(&needles(&write));
    let error = operator
        .read_write_lock(name.clone())
        .read_lock()
        .force_unlock()
        .expect_err("the force unlock's write was held up");
    assert!(error.is_unavailable(), "{error}");
    assert_eq!(proxy.held_back(), 1, "the force unlock was really held up");
    let late = read(&second);
    // Answered by etcd when this returns.
    proxy.deliver_held();
    let (early, late) = (early.unlock(), late.unlock());
    assert_eq!(
        early.is_ok(),
        late.is_ok(),
        "one reader ended, the other not: {early:?}, {late:?}"
    );
}
