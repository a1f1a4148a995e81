//! What waiters in turn (the plain lock's, a read-write lock's writers) cost etcd: a release
//! wakes every waiting client, and only the waiter marked first may take the lock. The others
//! see from the name's watches that the turn is not theirs and make no transaction for it.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use dlock_test_support::etcd_server::EtcdCluster;
use dlock_test_support::tcp_proxy::TcpProxy;
use dlocks::{LockClient, LockError, LockGuard};

/// Processes contending for the name: each a client on a backend of its own.
const CLIENTS: usize = 6;
/// Acquisitions each makes.
const ROUNDS: usize = 30;

/// How long a test waits for what must come.
const PATIENCE: Duration = Duration::from_secs(10);

/// Six clients, each on its own backend (as six processes), take one plain lock in turn, 30
/// times each, with 2 ms holds. An acquisition costs the taking try and the refused first try
/// of a client that asks again at once (behind the others' marks): 2.1-2.3 tries here. With
/// every waiting client trying at each release, it cost about ten (2026-12-02).
#[test]
fn a_release_is_tried_by_the_first_marked_waiter_alone() {
    let (tries, acquisitions) = tries_taking_in_turn("plain-waiters", false, &|client, name| {
        client.lock(name).lock()
    });
    assert!(
        tries <= acquisitions * 3,
        "{tries} tries sent to etcd for {acquisitions} acquisitions"
    );
}

/// The same with six writers of a read-write lock, and a reader coming and going among them
/// (200 µs holds): it goes in after each writer it waited behind, and the writers wait for it.
/// An acquisition (a read or a write) cost 2.4-2.5 tries here (2026-12-02).
#[test]
fn a_write_release_is_tried_by_the_first_marked_writer_alone() {
    let (tries, acquisitions) = tries_taking_in_turn("writers-in-turn", true, &|client, name| {
        client.read_write_lock(name).write_lock().lock()
    });
    assert!(
        tries <= acquisitions * 3,
        "{tries} tries sent to etcd for {acquisitions} acquisitions"
    );
}

/// The tries sent to etcd while [`CLIENTS`] clients take the lock `take` takes [`ROUNDS`]
/// times each, with 2 ms holds (and, `with_reader`, a client of its own reads the read-write
/// lock of the name over and over meanwhile, with 200 µs holds); and how many acquisitions
/// that was.
fn tries_taking_in_turn(
    name: &str,
    with_reader: bool,
    take: &(dyn Fn(&LockClient, &str) -> Result<LockGuard, LockError> + Sync),
) -> (usize, usize) {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let name = crate::aligned_name(name);
    let client = || LockClient::new(crate::backend_through(&proxy, Duration::from_secs(10)));
    let clients: Vec<LockClient> = (0..CLIENTS).map(|_| client()).collect();
    let reader = client();
    // A try compares the name's keys and puts its hold: the prefix's base64 and a put.
    let prefix = cluster.backend().key_prefix(&name);
    proxy.record_requests(&STANDARD.encode(prefix));
    let (done, reads) = (AtomicBool::new(false), AtomicUsize::new(0));
    thread::scope(|s| {
        let takers: Vec<_> = clients
            .iter()
            .map(|client| {
                let name = name.as_str();
                s.spawn(move || {
                    for _ in 0..ROUNDS {
                        let guard = take(client, name).expect("lock");
                        thread::sleep(Duration::from_millis(2));
                        guard.unlock().expect("unlock");
                    }
                })
            })
            .collect();
        if with_reader {
            let lock = reader.read_write_lock(name.as_str()).read_lock();
            let (done, reads) = (&done, &reads);
            s.spawn(move || {
                while !done.load(Ordering::Acquire) {
                    let guard = lock.lock().expect("read");
                    thread::sleep(Duration::from_micros(200));
                    guard.unlock().expect("unlock");
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        for taker in takers {
            taker.join().expect("taker");
        }
        done.store(true, Ordering::Release);
    });
    let tries = proxy
        .recorded()
        .iter()
        .filter(|request| String::from_utf8_lossy(request).contains("request_put"))
        .count();
    (tries, CLIENTS * ROUNDS + reads.load(Ordering::Relaxed))
}

/// A waiter whose watch of the name lags its watch of the marks takes its turn all the same:
/// etcd delivers a watch made while the store moved on up to 100 ms late (on its next sync
/// round). The second waiter here is told that the first waiter's mark went (it took the lock)
/// while its stream of the name still shows the holder before them: the lock may be held, or
/// free by now, and only the store can tell. It asks within moments, rather than at its
/// mark's next renewal half a waiter's slot (1 s) later.
#[test]
fn a_waiter_whose_watch_of_the_name_lags_takes_its_turn() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let name = crate::aligned_name("lagging-watch");
    let holder = LockClient::new(cluster.backend());
    let first = LockClient::new(cluster.backend());
    let second = LockClient::new(crate::backend_through(&proxy, Duration::from_secs(10)));
    let marks = || {
        let output = cluster
            .etcdctl()
            .args(["get", "", "--prefix", "--keys-only"])
            .output()
            .expect("etcdctl get");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|key| key.contains("dlock-waiting:"))
            .count()
    };
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = Instant::now() + PATIENCE;
        while !done() {
            assert!(Instant::now() < deadline, "{what} never came");
            thread::sleep(Duration::from_millis(5));
        }
    };
    let held = holder.lock(name.clone()).lock().expect("lock");
    thread::scope(|s| {
        let (first_done, first_over) = mpsc::channel();
        let first = first.lock(name.clone());
        s.spawn(move || {
            let guard = first.lock().expect("the first waiter");
            let _ = first_done.send(guard.unlock());
        });
        until("the first waiter's mark", &|| marks() == 1);
        let (second_done, second_in) = mpsc::channel();
        let second = second.lock(name.clone());
        s.spawn(move || {
            let taken = second.try_lock_for(PATIENCE);
            let _ =
                second_done.send((Instant::now(), taken.map(|guard| guard.map(|g| g.unlock()))));
        });
        until("the second waiter's mark and watches", &|| {
            marks() == 2 && proxy.subscribers() == 2
        });
        // The second waiter hears nothing more of the name, and of the marks until the first
        // waiter has taken the lock and let it go.
        let prefix = STANDARD.encode(cluster.backend().key_prefix(&name));
        proxy.hold_subscription_messages(Some(&prefix));
        proxy.hold_subscriber_messages(true);
        held.unlock().expect("unlock");
        first_over
            .recv_timeout(PATIENCE)
            .expect("the first waiter went in")
            .expect("and let go");
        let told = Instant::now();
        proxy.hold_subscriber_messages(false);
        let (taken_at, taken) = second_in
            .recv_timeout(PATIENCE)
            .expect("the second answered");
        assert!(
            matches!(taken, Ok(Some(Ok(())))),
            "the second waiter went in: {taken:?}"
        );
        let waited = taken_at.duration_since(told);
        proxy.hold_subscription_messages(None);
        assert!(
            waited < Duration::from_millis(500),
            "the second waiter took its turn {waited:?} after the first's mark went"
        );
    });
}

/// A waiter whose watch of the name starts behind the store hears the release all the same.
/// Etcd starts a watch after the revision it has when the watch is made; a write that lands
/// before the watch is in place leaves it out of step, and etcd sends such a watch nothing
/// until its next sync round, up to 100 ms later (the proxy here holds its messages for good).
/// The waiter's stream reads the name's keys once its watch is made: a read newer than the
/// watch's start tells it the watch may be behind, and until the watch speaks, or etcd's round
/// has run, its waiter looks at the store every 10 ms rather than wait for the watch (or for
/// its mark's renewal, half a waiter's slot, 1 s, later).
#[test]
fn a_waiter_whose_watch_starts_behind_the_store_takes_the_lock_released() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let name = crate::aligned_name("behind-watch");
    let holder = LockClient::new(cluster.backend());
    let writer_elsewhere = LockClient::new(cluster.backend());
    let waiter = LockClient::new(crate::backend_through(&proxy, Duration::from_secs(10)));
    let prefix = cluster.backend().key_prefix(&name).into_bytes();
    let mut end = prefix.clone();
    if let Some(last) = end.last_mut() {
        *last += 1; // the prefix ends in '/': its range ends at '0'
    }
    let (key, end) = (STANDARD.encode(&prefix), STANDARD.encode(&end));
    // The read of the name's keys that follows the waiter's watch: held, so that a write lands
    // between the watch's start and the read.
    proxy.hold_back_next(&format!(
        r#"{{"success":[{{"request_range":{{"key":"{key}","range_end":"{end}"}}}}]}}"#
    ));
    let held = holder.lock(name.clone()).lock().expect("lock");
    thread::scope(|s| {
        let (done, answer) = mpsc::channel();
        let lock = waiter.lock(name.clone());
        s.spawn(move || {
            let taken = lock.try_lock_for(PATIENCE);
            let _ = done.send(taken.map(|guard| guard.map(|g| g.unlock())));
        });
        let deadline = Instant::now() + PATIENCE;
        while proxy.held_back() == 0 {
            assert!(
                Instant::now() < deadline,
                "the waiter's watch never read the keys"
            );
            thread::sleep(Duration::from_millis(5));
        }
        // The watch is made: etcd, finding it behind, would send it nothing for a while, and
        // neither does the proxy from now on.
        proxy.hold_subscription_messages(Some(&key));
        writer_elsewhere
            .lock(crate::aligned_name("elsewhere"))
            .lock()
            .expect("lock elsewhere")
            .unlock()
            .expect("unlock elsewhere");
        assert_eq!(proxy.deliver_held(), 1, "the read went on");
        held.unlock().expect("unlock");
        let released = Instant::now();
        let taken = answer.recv_timeout(PATIENCE).expect("the waiter answered");
        let waited = released.elapsed();
        proxy.hold_subscription_messages(None);
        assert!(
            matches!(taken, Ok(Some(Ok(())))),
            "the waiter took the lock: {taken:?}"
        );
        assert!(
            waited < Duration::from_millis(500),
            "the waiter took the lock {waited:?} after its release"
        );
    });
}
