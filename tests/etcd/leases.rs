//! etcd's leases under dlock's holds: whole seconds rounded up, one session per client whose
//! loss ends every hold on it, and one watch per name however many wait.

use std::thread;
use std::time::Duration;

use dlock_test_support::conformance::unique;
use dlock_test_support::etcd_server::EtcdCluster;
use dlocks::backend::Inspection;
use dlocks::testing::{FaultyBackend, Op};
use dlocks::{LeaseChange, LockClient, LossReason};

const WATCHDOG: Duration = Duration::from_secs(6);

/// The lease id (decimal) of the first key under `prefix`, as etcdctl reads it.
pub(crate) fn lease_of(cluster: &EtcdCluster, prefix: &str) -> i64 {
    let output = cluster
        .etcdctl()
        .args(["get", prefix, "--prefix", "--write-out=fields"])
        .output()
        .expect("etcdctl get");
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find_map(|line| line.strip_prefix("\"Lease\" : "))
        .and_then(|id| id.trim().parse().ok())
        .unwrap_or_else(|| panic!("no lease under {prefix}: {text}"))
}

fn etcdctl(cluster: &EtcdCluster, args: &[&str]) -> String {
    let output: std::process::Output = cluster.etcdctl().args(args).output().expect("etcdctl");
    assert!(output.status.success(), "etcdctl {args:?}");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

#[test]
fn a_fixed_lease_is_rounded_up_to_whole_seconds() {
    let cluster = EtcdCluster::single();
    let client = LockClient::new(cluster.backend());
    let name = unique("rounded");
    let guard = client
        .lock(name.clone())
        .lock_with_lease(Duration::from_millis(1500))
        .expect("lock");
    let lease = lease_of(&cluster, &cluster.backend().key_prefix(&name));
    let told = etcdctl(&cluster, &["lease", "timetolive", &format!("{lease:x}")]);
    assert!(told.contains("granted with TTL(2s)"), "{told}");
    guard.unlock().expect("unlock");
}

#[test]
fn a_session_etcd_no_longer_has_loses_every_hold_on_it_at_the_next_renewal() {
    let cluster = EtcdCluster::single();
    let backend = cluster
        .backend_builder()
        .watchdog_lease(WATCHDOG)
        .build()
        .expect("backend");
    let client = LockClient::builder(backend.clone())
        .watchdog_lease(WATCHDOG)
        .build()
        .expect("client");
    let events = client.lease_events();
    let names: Vec<String> = (0..3).map(|i| unique(&format!("session-{i}"))).collect();
    let guards: Vec<_> = names
        .iter()
        .map(|name| client.lock(name.clone()).lock().expect("lock"))
        .collect();
    // The three holds share the client's session: one lease.
    let leases: Vec<i64> = names
        .iter()
        .map(|name| lease_of(&cluster, &backend.key_prefix(name)))
        .collect();
    assert!(leases.iter().all(|lease| *lease == leases[0]), "{leases:?}");
    // An operator revokes it: etcd deletes its keys; the next keep-alive finds no lease.
    etcdctl(&cluster, &["lease", "revoke", &format!("{:x}", leases[0])]);
    let mut lost = Vec::new();
    while lost.len() < names.len() {
        let event = events
            .recv_timeout(WATCHDOG)
            .expect("every hold reported lost before its deadline");
        if let LeaseChange::Lost { reason } = event.change {
            assert_ne!(
                reason,
                LossReason::Unreachable,
                "told by the store, not by time"
            );
            lost.push(event.name.to_string());
        }
    }
    lost.sort();
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(lost, expected);
    assert!(guards.iter().all(|guard| guard.is_lost()));
    // New holds get a new session.
    client
        .lock(names[0].clone())
        .lock()
        .expect("lock again")
        .unlock()
        .expect("unlock");
}

#[test]
fn waiters_on_two_names_share_each_names_watches() {
    let cluster = EtcdCluster::single();
    let backend = cluster.backend();
    let names = [unique("watched-a"), unique("watched-b")];
    let holder = LockClient::new(backend.clone());
    let held: Vec<_> = names
        .iter()
        .map(|name| holder.lock(name.clone()).lock().expect("lock"))
        .collect();
    // Four clients (as four services of one process), each with two threads per name. A plain
    // lock's waiters watch the name's keys and its waiters' marks: two watches per name,
    // whoever waits.
    let per_name = 2;
    let clients: Vec<LockClient> = (0..4).map(|_| LockClient::new(backend.clone())).collect();
    thread::scope(|s| {
        let waiters: Vec<_> = clients
            .iter()
            .flat_map(|client| {
                names
                    .iter()
                    .flat_map(move |name| [(client, name), (client, name)])
            })
            .map(|(client, name)| {
                s.spawn(move || {
                    client
                        .lock(name.clone())
                        .try_lock_for(Duration::from_secs(30))
                        .expect("wait")
                        .map(|guard| guard.unlock().is_ok())
                })
            })
            .collect();
        for _ in 0..10 {
            assert!(
                backend.watch_streams() <= per_name * names.len(),
                "two watches per name, not per waiter"
            );
            thread::sleep(Duration::from_millis(50));
        }
        drop(held);
        for waiter in waiters {
            assert_eq!(waiter.join().expect("waiter"), Some(true));
        }
    });
    // A watch stays a second for the next waiter, and no longer.
    assert!(backend.watch_streams() <= per_name * names.len());
    thread::sleep(Duration::from_secs(1));
    assert_eq!(
        backend.watch_streams(),
        0,
        "no watch is left a second after nobody waits"
    );
}

/// A reader that waits behind a waiting writer is let in by the writer's hold going, never
/// by another reader's: the readers that leave one by one while the writer waits do not wake
/// it to be refused again (each would cost the store a refused try).
#[test]
fn a_waiting_reader_is_not_woken_by_other_readers_leaving() {
    const READERS: usize = 6;
    let cluster = EtcdCluster::single();
    let name = unique("readers-leave");
    let read_holders: Vec<LockClient> = (0..READERS)
        .map(|_| LockClient::new(cluster.backend()))
        .collect();
    let mut reads: Vec<_> = read_holders
        .iter()
        .map(|client| {
            client
                .read_write_lock(name.clone())
                .read_lock()
                .lock()
                .expect("read")
        })
        .collect();
    let writer = LockClient::new(cluster.backend());
    let store = FaultyBackend::new(cluster.backend());
    let reader = LockClient::new(store.clone());
    let probe = LockClient::new(cluster.backend());
    // Waits up to 30 s to read (or write) with `client`, and leaves: whether it got in.
    let wait = |client: &LockClient, write: bool| {
        let lock = client.read_write_lock(name.clone());
        let wait = Duration::from_secs(30);
        match write {
            true => lock
                .write_lock()
                .try_lock_for(wait)
                .map(|g| g.map(|g| g.unlock())),
            false => lock
                .read_lock()
                .try_lock_for(wait)
                .map(|g| g.map(|g| g.unlock())),
        }
        .expect("wait")
        .map(|unlocked| unlocked.is_ok())
    };
    thread::scope(|s| {
        let writing = s.spawn(|| wait(&writer, true));
        // The writer waits once a new reader is turned away (writer preference).
        let turned_away = (0..200).any(|_| {
            thread::sleep(Duration::from_millis(25));
            probe
                .read_write_lock(name.clone())
                .read_lock()
                .try_lock()
                .expect("try to read")
                .map(|guard| guard.unlock().expect("unlock"))
                .is_none()
        });
        assert!(turned_away, "the writer never started waiting");
        let reading = s.spawn(|| wait(&reader, false));
        let refused = (0..200).any(|_| {
            thread::sleep(Duration::from_millis(25));
            store.answered(Op::TryAcquire) >= 1
        });
        assert!(refused, "the reader's first try was never answered");
        let before = store.calls(Op::TryAcquire);
        // All but one of the readers inside leave, one at a time.
        for read in reads.drain(1..) {
            read.unlock().expect("unlock");
            thread::sleep(Duration::from_millis(100));
        }
        let tries = store.calls(Op::TryAcquire) - before;
        reads
            .pop()
            .expect("the last reader")
            .unlock()
            .expect("unlock");
        assert_eq!(writing.join().expect("writer"), Some(true));
        assert_eq!(reading.join().expect("reader"), Some(true));
        // At most its try again once it listens, and one more as it looks again within its
        // slot anyway: not one per reader that left.
        assert!(
            tries <= 2,
            "the waiting reader tried {tries} times as {} readers left",
            READERS - 1
        );
    });
}

/// The watch a waiter needs is slow to start (its request held up in the network past the
/// backend's timeouts): the waiter does not give up its wait for it, and once the watch is in
/// place it looks at the store again and takes the lock released meanwhile, long before the
/// holder's lease would have ended.
#[test]
fn a_waiter_whose_watch_is_slow_to_start_still_gets_the_lock() {
    let cluster = EtcdCluster::single();
    let proxy = dlock_test_support::tcp_proxy::TcpProxy::start(cluster.members()[0].client_port);
    let waiter = LockClient::new(
        dlocks::etcd::EtcdBackend::builder(&format!("http://127.0.0.1:{}", proxy.port()))
            .request_timeout(Duration::from_millis(500))
            .build()
            .expect("connect through the proxy"),
    );
    let holder = LockClient::new(cluster.backend());
    let name = unique("slow-watch");
    let held = holder
        .lock(name.clone())
        .lock_with_lease(Duration::from_secs(120))
        .expect("lock");
    proxy.hold_back_next("create_request");
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            waiter
                .lock(name.clone())
                .try_lock_for(Duration::from_secs(60))
                .map(|guard| guard.map(|guard| guard.unlock().is_ok()))
        });
        // Past the two request timeouts the subscription waits for its watch.
        thread::sleep(Duration::from_millis(1500));
        assert_eq!(proxy.held_back(), 1, "the watch's start was held up");
        assert!(!waiting.is_finished(), "still waiting, not failed");
        held.unlock().expect("unlock");
        proxy.deliver_held();
        // Its wait (a minute) ends long before the holder's lease would have (two): only
        // the watch can have woken it in time.
        assert_eq!(waiting.join().expect("waiter").expect("wait"), Some(true));
    });
}

/// How many store steps `wait` made on the calling thread, and what it returned.
fn acquire_steps_of<T>(wait: impl FnOnce() -> T) -> (usize, T) {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let answer = metrics::with_local_recorder(&recorder, wait);
    let steps = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, _, _, _)| {
            let key = key.key();
            key.name() == "dlock_backend_call_seconds"
                && key
                    .labels()
                    .any(|label| label.key() == "step" && label.value() == "acquire")
        })
        .map(|(_, _, _, value)| match value {
            DebugValue::Histogram(samples) => samples.len(),
            _ => 0,
        })
        .sum();
    (steps, answer)
}

/// A hold another client stopped renewing (its process died, say) ends with its lease. etcd
/// tells the time a lease has left in whole seconds, cut down, and removes a lease that ran out
/// within half a second: its waiter looks again a few times a second meanwhile, not a round
/// trip after another.
#[test]
fn a_waiter_for_a_leases_last_second_does_not_ask_again_and_again() {
    let cluster = EtcdCluster::single();
    let name = unique("last-second");
    let holder = LockClient::new(cluster.backend());
    let _abandoned = holder
        .lock(name.clone())
        .lock_with_lease(Duration::from_secs(2))
        .expect("lock");
    let waiter = LockClient::new(cluster.backend());
    let (steps, taken) = acquire_steps_of(|| waiter.lock(name.clone()).try_lock_for(WATCHDOG));
    let taken = taken
        .expect("wait")
        .expect("taken once the abandoned hold's lease ran out");
    assert!(
        steps <= 30,
        "{steps} acquire steps while waiting for a lease of two seconds to end"
    );
    taken.unlock().expect("unlock");
}

/// A waiter refused by another client's hold is told the time its lease has left, for when to
/// look again if no release wakes it first. etcd is asked once while its answer holds, not at
/// every refusal: a waiter refused again and again by one holder (a contended lock, a
/// multi-lock trying its set) would otherwise pay a round trip more on each.
#[test]
fn refusals_by_one_holder_ask_etcd_its_leases_time_left_once() {
    let cluster = EtcdCluster::single();
    let name = unique("time-left");
    let holder = LockClient::new(cluster.backend());
    let held = holder
        .lock(name.clone())
        .lock_with_lease(Duration::from_secs(60))
        .expect("lock");
    let waiter = LockClient::new(cluster.backend());
    let lock = waiter.lock(name.clone());
    let before = crate::calls_answered(&cluster, "LeaseTimeToLive");
    for _ in 0..20 {
        assert!(lock.try_lock().expect("try").is_none(), "held by the other");
    }
    let asked = crate::calls_answered(&cluster, "LeaseTimeToLive") - before;
    assert!(
        asked <= 1,
        "etcd asked the holder's lease time {asked} times for 20 refusals"
    );
    held.unlock().expect("unlock");
    let taken = lock.try_lock().expect("try").expect("free once released");
    taken.unlock().expect("unlock");
}

/// Fair waiters' places share a short lease that their process keeps alive (a dead waiter's
/// place goes within seconds): live waiters keep their turns however long they wait, also
/// when a waiter of the same process on another name stopped coming back.
#[test]
fn fair_waiters_keep_their_turns_past_their_places_lease() {
    let cluster = EtcdCluster::single();
    let name = unique("fair-long-wait");
    let backend = cluster.backend();
    // A waiter of this process on another name that never comes back: its place is dropped
    // one slot (1 s) after its attempt, and that alone.
    let other = unique("fair-gone-quiet");
    let _held_other = LockClient::new(backend.clone())
        .fair_lock(other.clone())
        .lock()
        .expect("lock");
    let quiet = dlocks::backend::OwnerId::from_raw(format!("{}:1", uuid::Uuid::new_v4()));
    let request = dlocks::backend::AcquireRequest::new(
        dlocks::backend::LockRef::new(&other, dlocks::LockKind::Fair),
        &quiet,
        Duration::from_secs(6),
    )
    .waiting(true, Duration::from_secs(1));
    use dlocks::backend::DistributedLock;
    backend.try_acquire(&request).expect("queued");
    let await_queued = |count: u64| crate::await_queued(&cluster, &name, count);
    let client = || LockClient::new(backend.clone());
    let held = client().fair_lock(name.clone()).lock().expect("lock");
    let (served_tx, served) = std::sync::mpsc::channel();
    thread::scope(|s| {
        for who in ["first", "second"] {
            let (client, name, served_tx) = (client(), name.clone(), served_tx.clone());
            s.spawn(move || {
                let guard = client.fair_lock(name).lock().expect("wait");
                served_tx.send(who).expect("send");
                guard.unlock().expect("unlock");
            });
            await_queued(if who == "first" { 1 } else { 2 });
        }
        // The keys under the name, as etcd has them: the holder's and the two places, each
        // with its create revision (its turn).
        let prefix = backend.key_prefix(&name);
        let turns = || {
            let listed = etcdctl(&cluster, &["get", &prefix, "--prefix", "--write-out=json"]);
            let listed: serde_json::Value = serde_json::from_str(&listed).expect("JSON");
            let mut turns: Vec<i64> = listed["kvs"]
                .as_array()
                .map(|kvs| {
                    kvs.iter()
                        .filter_map(|kv| kv["create_revision"].as_i64())
                        .collect()
                })
                .unwrap_or_default();
            turns.sort_unstable();
            turns
        };
        let before = turns();
        assert_eq!(before.len(), 3, "a holder and two places: {before:?}");
        // Well past the places' lease (3 s), which only keep-alives made last.
        thread::sleep(Duration::from_secs(7));
        assert_eq!(turns(), before, "both places kept, never made again");
        assert_eq!(
            backend.inspect(&other).expect("inspect").queued_waiters,
            0,
            "the quiet waiter's place was dropped"
        );
        held.unlock().expect("unlock");
        let order: Vec<&str> = served.iter().take(2).collect();
        assert_eq!(order, ["first", "second"], "served in their turns");
    });
}
