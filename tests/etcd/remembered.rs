//! What the backend remembers runs out safely: a release sent again answers from what the
//! store has, never from an inference; an acquire that lands after the backend gave up on it
//! takes nothing; and the holds it remembers as over never make a step too big for etcd.

use std::process::Stdio;
use std::thread;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use dlock_test_support::conformance::unique;
use dlock_test_support::etcd_server::EtcdCluster;
use dlock_test_support::tcp_proxy::TcpProxy;
use dlocks::etcd::EtcdBackend;
use dlocks::{LeaseChange, LockClient, LockError};

const LEASE: Duration = Duration::from_secs(3);

/// A client on `proxy` with a short watchdog lease (its backend told, so its watchdog holds go
/// on its session at once) and request timeout.
fn client_through(proxy: &TcpProxy) -> LockClient {
    let backend = EtcdBackend::builder(&format!("http://127.0.0.1:{}", proxy.port()))
        .connect_timeout(Duration::from_secs(1))
        .request_timeout(Duration::from_millis(500))
        .watchdog_lease(LEASE)
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

/// Runs `etcdctl` with `args` on `cluster`; its standard output.
fn etcdctl(cluster: &EtcdCluster, args: &[&str]) -> String {
    let output = cluster
        .etcdctl()
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .expect("etcdctl runs");
    assert!(output.status.success(), "etcdctl {args:?} failed");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Another client takes `name` and lets it go: someone held the lock in between.
fn taken_in_between(cluster: &EtcdCluster, name: &str) {
    let other = client(cluster);
    let between = other
        .lock(name)
        .try_lock()
        .expect("try")
        .expect("free: the first hold was ended");
    between.unlock().expect("unlock");
}

/// The holder's unlock, whose reply the network loses (the backend sends the release
/// again), after its hold was ended on the store by someone else and another client held the
/// lock: the holder is told its lease was lost, with a lease event, as it would have been
/// without the lost reply; never that it released.
fn assert_unlock_reports_the_loss(proxy: &TcpProxy, holder: &LockClient, guard: dlocks::LockGuard) {
    let events = holder.lease_events();
    proxy.cut_reply_to("request_delete_range");
    let error = guard
        .unlock()
        .expect_err("the hold had ended before the release");
    assert!(matches!(error, LockError::LeaseLost { .. }), "{error:?}");
    assert_eq!(proxy.cuts(), 1, "the release's reply was really cut");
    let event = events
        .recv_timeout(Duration::from_secs(5))
        .expect("a lease event");
    assert!(
        matches!(event.change, LeaseChange::Lost { .. }),
        "{:?}",
        event.change
    );
}

/// An operator clears the lock with etcd's own tool (`etcdctl del --prefix N/`).
#[test]
fn a_release_sent_again_after_an_operator_deleted_the_hold_reports_it_lost() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let holder = client_through(&proxy);
    let name = unique("deleted-by-etcdctl");
    let guard = holder
        .lock(name.clone())
        .lock_with_lease(Duration::from_secs(30))
        .expect("lock");
    let prefix = cluster.backend().key_prefix(&name);
    etcdctl(&cluster, &["del", "--prefix", &prefix]);
    taken_in_between(&cluster, &name);
    assert_unlock_reports_the_loss(&proxy, &holder, guard);
}

/// An operator force-unlocks the hold, and its tombstone runs out (its lease revoked here, as
/// ten minutes would end it) while the holder's longer fixed lease still runs.
#[test]
fn a_release_sent_again_after_the_holds_tombstone_ran_out_reports_it_lost() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let holder = client_through(&proxy);
    let name = unique("tombstone-ran-out");
    let guard = holder
        .lock(name.clone())
        .lock_with_lease(Duration::from_secs(60))
        .expect("lock");
    assert!(client(&cluster)
        .lock(name.clone())
        .force_unlock()
        .expect("force"));
    let tombstones = etcdctl(&cluster, &["get", "--prefix", "dlock-ended:", "-w", "json"]);
    let tombstones: serde_json::Value = serde_json::from_str(&tombstones).expect("JSON");
    let mut revoked = 0;
    for kv in tombstones["kvs"].as_array().into_iter().flatten() {
        let key = STANDARD
            .decode(kv["key"].as_str().unwrap_or_default())
            .unwrap_or_default();
        // In the tombstone's key, `:` in the name is written `%3A`.
        if String::from_utf8_lossy(&key).contains(&name.replace(':', "%3A")) {
            let lease = kv["lease"].as_i64().expect("a tombstone has a lease");
            etcdctl(&cluster, &["lease", "revoke", &format!("{lease:x}")]);
            revoked += 1;
        }
    }
    assert_eq!(revoked, 1, "the hold's tombstone");
    taken_in_between(&cluster, &name);
    assert_unlock_reports_the_loss(&proxy, &holder, guard);
}

/// An acquire held up in the network past its request timeout (its outcome unknown), while
/// the client keeps its session alive for another hold; the backend asks the store about the
/// attempt (nothing there) and forgets it; then the request lands. It takes nothing: another
/// client gets the lock within a lease, and the first client does not hold it.
#[test]
fn an_acquire_landing_after_the_backend_forgot_it_takes_nothing() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let (mine, theirs) = (client_through(&proxy), client(&cluster));
    // Renewed by the watchdog: the client's holds share one etcd lease it keeps alive.
    let _keeps_the_session = mine.lock(unique("other")).lock().expect("lock");
    thread::sleep(LEASE / 2);
    let name = crate::aligned_name("late-on-session");
    proxy.hold_back_next_all(&[
        &STANDARD.encode(cluster.backend().key_prefix(&name)),
        r#""compare":[{"#,
    ]);
    let lock = mine.lock(name.clone());
    let error = lock
        .try_lock()
        .expect_err("the acquire's request was held up");
    assert!(error.is_unavailable(), "{error}");
    assert_eq!(proxy.held_back(), 1, "the acquire was really held up");
    // Past the request's lease, the backend asks the store about the attempt (its status
    // step meets the name) and, finding nothing, forgets it.
    thread::sleep(LEASE + Duration::from_millis(500));
    assert!(!lock.is_locked().expect("status"), "nothing there yet");
    proxy.deliver_held();
    let taken = theirs
        .lock(name.clone())
        .try_lock_for(LEASE * 2)
        .expect("wait")
        .expect("the late acquire blocks the name no longer than a lease");
    assert!(
        !lock.is_held_by_current_thread().expect("status"),
        "the forgotten attempt is nobody's hold"
    );
    taken.unlock().expect("unlock");
}

/// An acquire held up in the network (its outcome unknown); the thread asks again, as the same
/// hold, takes the lock and releases it; then the first request lands. It takes nothing.
#[test]
fn an_acquire_landing_after_its_hold_was_taken_again_and_released_takes_nothing() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let (mine, theirs) = (client_through(&proxy), client(&cluster));
    let _keeps_the_session = mine.lock(unique("other")).lock().expect("lock");
    thread::sleep(LEASE / 2);
    let name = crate::aligned_name("late-after-retry");
    proxy.hold_back_next_all(&[
        &STANDARD.encode(cluster.backend().key_prefix(&name)),
        r#""compare":[{"#,
    ]);
    let lock = mine.lock(name.clone());
    let error = lock
        .try_lock()
        .expect_err("the acquire's request was held up");
    assert!(error.is_unavailable(), "{error}");
    assert_eq!(proxy.held_back(), 1, "the acquire was really held up");
    let again = lock
        .try_lock()
        .expect("try")
        .expect("free: the first is held up");
    again.unlock().expect("unlock");
    proxy.deliver_held();
    let taken = theirs
        .lock(name.clone())
        .try_lock_for(LEASE * 2)
        .expect("wait")
        .expect("the late acquire blocks the name no longer than a lease");
    assert!(!lock.is_held_by_current_thread().expect("status"));
    taken.unlock().expect("unlock");
}

/// One thread holds the lock; another thread of the same client tries it, and its request is
/// held up in the network (its outcome unknown: both threads' holds would be the client's one
/// key). Then the holder's release is lost too (both sends), while the client keeps its
/// session alive for another hold. The backend still knows the key as the first hold's, and
/// deletes it once the hold is over: another client takes the lock within a lease or two, not
/// at the end of the client's life.
#[test]
fn a_lost_release_after_another_threads_unanswered_try_ends_by_the_holds_deadline() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let (mine, theirs) = (client_through(&proxy), client(&cluster));
    let _keeps_the_session = mine.lock(unique("other")).lock().expect("lock");
    let name = crate::aligned_name("lost-release-sibling");
    let prefix = STANDARD.encode(cluster.backend().key_prefix(&name));
    let guard = mine.lock(name.clone()).lock().expect("lock");
    proxy.hold_back_next_all(&[&prefix, r#""compare":[{"#]);
    thread::scope(|scope| {
        scope
            .spawn(|| {
                let error = mine
                    .lock(name.clone())
                    .try_lock()
                    .expect_err("the try's request was held up");
                assert!(error.is_unavailable(), "{error}");
            })
            .join()
            .expect("the trying thread");
    });
    assert_eq!(proxy.held_back(), 1, "the try was really held up");
    // Delivered now, it finds the name held and takes nothing.
    proxy.deliver_held();
    proxy.hold_back_every(&[&prefix, "request_delete_range"]);
    let error = guard
        .unlock()
        .expect_err("the release's requests were held up");
    assert!(error.is_unavailable(), "{error}");
    assert_eq!(
        proxy.held_back(),
        2,
        "the release was sent twice, and held up twice"
    );
    proxy.stop_holding_back();
    let taken = theirs
        .lock(name.clone())
        .try_lock_for(LEASE * 3)
        .expect("wait")
        .expect("the hold whose release was lost ends by its deadline");
    taken.unlock().expect("unlock");
}

/// 140 read holds on fixed leases left to run out in one process (their guards kept): every
/// later step of that process on the name deletes the holds it knows to be over, which
/// would be more operations than etcd takes in one transaction (128). The name still works
/// in that process.
#[test]
fn a_hundred_and_forty_expired_read_holds_leave_the_name_usable() {
    let cluster = EtcdCluster::single();
    let reader = client(&cluster);
    let name = unique("many-over");
    let rw = reader.read_write_lock(name.clone());
    let held: Vec<_> = (0..140)
        .map(|_| {
            rw.read_lock()
                .lock_owned_with_lease(Duration::from_secs(1))
                .expect("read")
        })
        .collect();
    thread::sleep(Duration::from_millis(1200));
    let write = rw
        .write_lock()
        .try_lock_for(Duration::from_secs(5))
        .expect("the name works in this process")
        .expect("free once the read leases ran out");
    assert!(!write.is_lost());
    write.unlock().expect("unlock");
    let read = rw.read_lock().try_lock().expect("read").expect("free");
    read.unlock().expect("unlock");
    drop(held);
}

/// A hold over for its holder (its 1.05 s lease ran out) while etcd keeps its key (on a lease
/// etcd grants for longer: whole seconds, and here at least 6); its holder asks for it again and that request is held up in the
/// network (its outcome unknown). The backend's next step asks the store about it and finds the
/// key as the ended hold left it: the request has not landed, and the key is an over hold's,
/// which another hold of the same backend takes over at once (where it was counted as the new
/// request's hold, for the request's whole lease). Delivered then, the request takes nothing.
#[test]
fn a_take_held_up_over_its_own_ended_hold_leaves_that_hold_over() {
    use dlocks::backend::{AcquireRequest, DistributedLock, LockRef, Release};
    use dlocks::LockKind;

    // The ended hold's key must still be there when the next step meets it: etcd keeps it as
    // long as its lease, which this member grants for at least 6 s.
    let kept = Duration::from_secs(6);
    let cluster = EtcdCluster::single_with_shortest_lease(kept);
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let backend = crate::backend_through(&proxy, Duration::from_millis(200));
    let name = crate::aligned_name("take-over-own-ended");
    let lock = LockRef::new(&name, LockKind::Reentrant);
    let (first, second) = (crate::owner("first"), crate::owner("second"));
    let short = Duration::from_millis(1050);
    let started = std::time::Instant::now();
    let taken = backend
        .try_acquire(&AcquireRequest::new(lock, &first, short))
        .expect("take");
    assert!(taken.is_acquired(), "{taken:?}");
    // Its holder's lease runs out; etcd keeps the key until its own lease ends.
    thread::sleep(short + Duration::from_millis(20));
    proxy.hold_back_next_all(&[
        &STANDARD.encode(cluster.backend().key_prefix(&name)),
        r#""compare":[{"#,
    ]);
    let error = backend
        .try_acquire(&AcquireRequest::new(lock, &first, LEASE * 20))
        .expect_err("the request was held up");
    assert!(error.is_unavailable(), "{error}");
    assert_eq!(proxy.held_back(), 1, "the request was really held up");
    let next = backend
        .try_acquire(&AcquireRequest::new(lock, &second, LEASE * 20))
        .expect("take");
    // The ended hold's key had to be there for this step to meet it.
    assert!(
        started.elapsed() < kept,
        "the machine stalled past the ended hold's etcd lease ({:?}): nothing was tried",
        started.elapsed()
    );
    assert!(
        next.is_acquired(),
        "the ended hold's key was counted as the held-up request's hold: {next:?}"
    );
    proxy.deliver_held();
    // Written since, the key fails the late request's comparison: the second hold stays.
    let released = backend.release(lock, &second).expect("release");
    assert!(
        matches!(released, Release::Released | Release::ReleasedToOthers),
        "the second hold was there to release: {released:?}"
    );
}
