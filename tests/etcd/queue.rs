//! What a fair waiter costs etcd while it waits: nothing until its turn. Its place is put once,
//! with a read of the name's first key in the same call; its looks before its turn, which the
//! name's watch shows is not come, send nothing.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use dlock_test_support::etcd_server::EtcdCluster;
use dlock_test_support::tcp_proxy::TcpProxy;
use dlocks::backend::Inspection;
use dlocks::{LockClient, LockError};

/// How long a test waits for what must come.
const PATIENCE: Duration = Duration::from_secs(30);

/// A waiter comes back every half of its queue slot to keep its place (else the place is taken
/// for a dead waiter's and deleted once the slot ends). Queued behind a holder for twice its
/// slot, it stays queued, and its writes to the name are those of its first look: its try, its
/// place, and at most one more look while its watch of the name started. Every later look
/// finds on the watch that its turn has not come, and keeps its place where it is (it cost a
/// try and a put each before).
#[test]
fn a_waiter_queued_longer_than_its_slot_keeps_its_place_and_sends_nothing() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let slot = Duration::from_secs(2);
    let holder = LockClient::new(cluster.backend());
    let waiter = LockClient::builder(crate::backend_through(&proxy, Duration::from_secs(2)))
        .fair_wait_timeout(slot)
        .build()
        .expect("client");
    let name = crate::aligned_name("queue-quiet");
    // Transactions on the name's keys (base64 in the request), the waiter's alone.
    proxy.record_requests(&STANDARD.encode(cluster.backend().key_prefix(&name)));
    // A wait without a bound: its place is kept for the client's fair wait timeout.
    one_turn(&cluster, &holder, &waiter, &name, || {
        // Twice the slot: the place was kept all along (four looks), or it would be gone.
        thread::sleep(slot * 2);
        assert_eq!(
            cluster
                .backend()
                .inspect(&name)
                .expect("inspect")
                .queued_waiters,
            1,
            "the waiter kept its place"
        );
        let writes: Vec<String> = proxy
            .recorded()
            .iter()
            .map(|request| String::from_utf8_lossy(request).into_owned())
            .filter(|request| request.contains("request_put") || request.contains("request_delete"))
            .collect();
        assert!(
            writes.len() <= 4,
            "{} writes to the name for one wait: {writes:#?}",
            writes.len()
        );
    });
}

/// A waiter back on a name it waited on a moment ago (a process looping on a lock) finds it
/// held: its refused try puts its place in the same transaction, and its wait writes nothing
/// more until its turn (a try and then a place were two writes). Its turn comes as before.
#[test]
fn a_waiter_back_on_a_contended_name_queues_with_its_refused_try() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let holder = LockClient::new(cluster.backend());
    let waiter = LockClient::new(crate::backend_through(&proxy, Duration::from_secs(10)));
    let name = crate::aligned_name("queue-once");
    let prefix = STANDARD.encode(cluster.backend().key_prefix(&name));
    let writes = || {
        proxy
            .recorded()
            .iter()
            .filter(|request| String::from_utf8_lossy(request).contains("request_put"))
            .count()
    };
    one_turn(&cluster, &holder, &waiter, &name, || {});
    proxy.record_requests(&prefix);
    let mut queued_with = None;
    one_turn(&cluster, &holder, &waiter, &name, || {
        queued_with = Some(writes());
    });
    assert_eq!(
        queued_with,
        Some(1),
        "one transaction refused the waiter and queued it"
    );
    let info = cluster.backend().inspect(&name).expect("inspect");
    assert!(
        info.holders.is_empty() && info.queued_waiters == 0,
        "{info:?}"
    );
}

/// A waiter back on a name it waited on a moment ago puts its place with its refused try,
/// before it reads what refused it: there, a reader's hold. The place goes again, the waiter
/// is told the name is in use as another kind, and the reader reads on.
#[test]
fn a_place_put_with_a_try_refused_by_another_kind_goes_again() {
    let cluster = EtcdCluster::single();
    let holder = LockClient::new(cluster.backend());
    let waiter = LockClient::new(cluster.backend());
    let name = crate::aligned_name("queue-kind-once");
    one_turn(&cluster, &holder, &waiter, &name, || {});

    let read = holder
        .read_write_lock(name.clone())
        .read_lock()
        .lock()
        .expect("read");
    let told = waiter.fair_lock(name.clone()).try_lock_for(PATIENCE);
    told_another_kind(&cluster, &name, told, read);
}

/// `waiter` waits for `name`'s fair lock while `holder` holds it, and takes its turn once the
/// holder let go; `queued` runs once the waiter is queued, before that.
fn one_turn(
    cluster: &EtcdCluster,
    holder: &LockClient,
    waiter: &LockClient,
    name: &str,
    queued: impl FnOnce(),
) {
    let held = holder.fair_lock(name).lock().expect("lock");
    let (sender, turn) = mpsc::channel();
    let lock = waiter.fair_lock(name);
    thread::spawn(move || {
        let _ = sender.send(lock.lock_owned());
    });
    crate::await_queued(cluster, name, 1);
    queued();
    held.unlock().expect("unlock");
    turn.recv_timeout(PATIENCE)
        .expect("the waiter answered")
        .expect("its turn")
        .unlock()
        .expect("unlock");
}

/// A fair waiter was `told` that `name` is in use as another kind, by `read`, which still
/// reads; no place of it is left under the name.
fn told_another_kind<T: std::fmt::Debug>(
    cluster: &EtcdCluster,
    name: &str,
    told: Result<T, LockError>,
    read: dlocks::LockGuard,
) {
    assert!(
        matches!(told, Err(LockError::WrongKind { .. })),
        "told the name is another kind's: {told:?}"
    );
    let info = cluster.backend().inspect(name).expect("inspect");
    assert_eq!(info.queued_waiters, 0, "no place left: {info:?}");
    assert!(!read.is_lost(), "the reader still reads");
    read.unlock().expect("unlock");
}

/// A waiter's place put lands after the holder let go and the name went to another kind (a
/// reader): the read in the same call finds the reader's hold first, the place goes again, and
/// the waiter is told the name is in use as another kind. Nothing of the fair lock is left
/// under the name.
#[test]
fn a_place_put_after_the_name_went_to_another_kind_goes_again() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let holder = LockClient::new(cluster.backend());
    let reader = LockClient::new(cluster.backend());
    let waiter = LockClient::new(crate::backend_through(&proxy, Duration::from_secs(10)));
    let name = crate::aligned_name("queue-kind");
    let held = holder.fair_lock(name.clone()).lock().expect("lock");
    // The waiter's place: a put of an empty value, on a lease, under the name.
    let prefix = STANDARD.encode(cluster.backend().key_prefix(&name));
    proxy.hold_back_next_all(&[&prefix, r#""value":"","lease""#]);
    let (sender, answer) = mpsc::channel();
    let lock = waiter.fair_lock(name.clone());
    thread::spawn(move || {
        let _ = sender.send(lock.try_lock_owned_for(PATIENCE));
    });
    let deadline = Instant::now() + PATIENCE;
    while proxy.held_back() == 0 {
        assert!(Instant::now() < deadline, "the waiter never put its place");
        thread::sleep(Duration::from_millis(10));
    }

    held.unlock().expect("unlock");
    let read = reader
        .read_write_lock(name.clone())
        .read_lock()
        .try_lock_for(PATIENCE)
        .expect("read")
        .expect("the free name, read");
    assert!(proxy.deliver_held() > 0, "the place put delivered");

    let told = answer.recv_timeout(PATIENCE).expect("the waiter answered");
    told_another_kind(&cluster, &name, told, read);
}

/// A waiter's place put that lands after its waiter gave up (held up in the network past the
/// request's time-out) does not hold the queue up: the give-up could not tell whether the
/// put would land, so the places' lease it was on is let run out, even while another waiter
/// of the same backend keeps waiting on another name. A waiter that comes later takes the
/// lock within that lease's few seconds.
#[test]
fn a_place_put_landing_after_its_waiter_gave_up_goes_with_its_lease() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let shared = crate::backend_through(&proxy, Duration::from_millis(500));
    let gives_up = LockClient::new(shared.clone());
    let keeps_waiting = LockClient::new(shared);
    let holder = LockClient::new(cluster.backend());
    let (name, other) = (
        crate::aligned_name("queue-late"),
        crate::aligned_name("queue-kept"),
    );
    let held = holder.fair_lock(name.clone()).lock().expect("lock");
    let other_held = holder.fair_lock(other.clone()).lock().expect("lock");
    // A waiter of the same backend on another name: its place keeps the places' lease alive.
    let (sender, kept_turn) = mpsc::channel();
    let lock = keeps_waiting.fair_lock(other.clone());
    thread::spawn(move || {
        let _ = sender.send(lock.try_lock_owned_for(PATIENCE));
    });
    crate::await_queued(&cluster, &other, 1);
    // The place put on `name` is held up until its waiter has given up.
    let prefix = STANDARD.encode(cluster.backend().key_prefix(&name));
    proxy.hold_back_next_all(&[&prefix, r#""value":"","lease""#]);
    let gave_up = gives_up
        .fair_lock(name.clone())
        .try_lock_for(Duration::from_secs(2));
    assert!(
        !matches!(gave_up, Ok(Some(_))),
        "the waiter did not take the held lock: {gave_up:?}"
    );
    assert!(proxy.deliver_held() > 0, "the place put delivered, late");

    held.unlock().expect("unlock");
    let later = LockClient::new(cluster.backend());
    let started = Instant::now();
    let taken = later
        .fair_lock(name.clone())
        .try_lock_for(Duration::from_secs(15))
        .expect("wait");
    assert!(
        taken.is_some(),
        "a late waiter was held up by a place nobody waits in"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "held up {:?}",
        started.elapsed()
    );
    taken.expect("taken").unlock().expect("unlock");
    other_held.unlock().expect("unlock");
    if let Ok(Ok(Some(turn))) = kept_turn.recv_timeout(PATIENCE) {
        turn.unlock().expect("unlock");
    }
}
