//! Beyond locks: the semaphore with leased permits, the count-down latch, leader election and
//! guards not tied to a thread, on the same engine (waiting, the watchdog, lease events).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use dlocks::testing::{Fault, FaultyBackend, Op};
use dlocks::{LeaseChange, LockClientBuilder, LossReason};

use super::unique;
use crate::env::TestEnv;

/// How long a test waits for what another thread reports, in real time.
const PATIENCE: Duration = Duration::from_secs(20);

pub fn a_semaphore_lets_in_at_most_its_permits(env: &dyn TestEnv) {
    let name = unique("semaphore");
    let (a, b) = (env.client(), env.client());
    let sem = a.semaphore(name.clone());
    assert_eq!(sem.available_permits().expect("available"), 0);
    assert!(
        sem.try_acquire().expect("try").is_none(),
        "no permits set yet"
    );
    assert!(sem.try_set_permits(2).expect("set"));
    assert!(!sem.try_set_permits(5).expect("set once only"));
    let first = sem.acquire().expect("first permit");
    let second = b
        .semaphore(name.clone())
        .try_acquire()
        .expect("try")
        .expect("second permit");
    assert_ne!(first.id(), second.id());
    assert_eq!(first.id().len(), 32);
    assert!(
        sem.try_acquire().expect("try").is_none(),
        "both permits held"
    );
    assert_eq!(sem.available_permits().expect("available"), 0);
    second.release().expect("release");
    assert_eq!(sem.available_permits().expect("available"), 1);
    sem.add_permits(2).expect("add");
    assert_eq!(sem.available_permits().expect("available"), 3);
    let more: Vec<_> = (0..3)
        .map(|_| sem.try_acquire().expect("try").expect("a permit"))
        .collect();
    assert!(sem.try_acquire().expect("try").is_none());
    drop(more);
    drop(first);
    assert_eq!(sem.available_permits().expect("available"), 4);
}

pub fn a_permit_is_released_from_another_thread(env: &dyn TestEnv) {
    let name = unique("semaphore-send");
    let client = env.client();
    let sem = client.semaphore(name);
    sem.try_set_permits(1).expect("set");
    let permit = sem.acquire().expect("permit");
    assert!(!permit.is_lost());
    let released = thread::spawn(move || permit.release())
        .join()
        .expect("thread");
    released.expect("released from another thread");
    assert_eq!(sem.available_permits().expect("available"), 1);
}

pub fn a_dead_holders_permit_comes_back_when_its_lease_ends(env: &dyn TestEnv) {
    let name = unique("semaphore-dead");
    let unit = env.unit();
    let (dead, waiting) = (env.client(), env.client());
    let sem = dead.semaphore(name.clone());
    sem.try_set_permits(1).expect("set");
    // A holder that dies: nothing ever releases its permit.
    std::mem::forget(sem.acquire_with_lease(unit * 3).expect("permit"));
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            waiting
                .semaphore(name.clone())
                .try_acquire_for(unit * 100)
                .expect("wait")
                .map(|permit| permit.release().is_ok())
        });
        env.await_sleepers(1);
        env.advance(unit * 4);
        assert_eq!(
            waiter.join().expect("waiter"),
            Some(true),
            "the permit came back with the lease's end and went to the waiter"
        );
    });
}

pub fn the_watchdog_keeps_a_permit_and_reports_its_loss(env: &dyn TestEnv) {
    let name = unique("semaphore-watchdog");
    let unit = env.unit();
    let lease = unit * 6;
    let client = env.client_with_watchdog(lease);
    let events = client.lease_events();
    let sem = client.semaphore(name.clone());
    sem.try_set_permits(1).expect("set");
    let kept = sem.acquire().expect("permit");
    for _ in 0..12 {
        env.advance(lease / 3 + lease / 30);
    }
    assert!(!kept.is_lost(), "renewed for four leases");
    assert!(env
        .client()
        .semaphore(name.clone())
        .try_acquire()
        .expect("try")
        .is_none());
    drop(kept);
    // A permit on a fixed lease that runs out while held is reported, like a lock's.
    let fixed = sem.acquire_with_lease(unit * 2).expect("permit");
    env.advance(unit * 3);
    let event = events.recv_timeout(PATIENCE).expect("a lease event");
    assert_eq!(event.kind, dlocks::LockKind::Semaphore);
    assert!(matches!(
        event.change,
        LeaseChange::Lost {
            reason: LossReason::Expired
        }
    ));
    assert!(fixed.is_lost());
    assert!(fixed.release().is_err());
    assert_eq!(sem.available_permits().expect("available"), 1);
}

pub fn permit_waiters_of_a_client_are_served_in_arrival_order(env: &dyn TestEnv) {
    const WAITERS: usize = 4;
    let name = unique("semaphore-fifo");
    let client = env.client();
    let sem = client.semaphore(name.clone());
    sem.try_set_permits(1).expect("set");
    let held = sem.acquire().expect("permit");
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let (go, went) = mpsc::channel();
    thread::scope(|s| {
        for waiter in 0..WAITERS {
            let (sem, order, go) = (sem.clone(), order.clone(), go.clone());
            s.spawn(move || {
                let permit = sem
                    .try_acquire_for(PATIENCE * 3)
                    .expect("wait")
                    .expect("permit");
                order.lock().push(waiter);
                go.send(()).expect("report");
                permit.release().expect("release");
            });
            // The next one arrives once this one waits.
            env.await_sleepers(waiter + 1);
        }
        drop(held);
        for _ in 0..WAITERS {
            went.recv_timeout(PATIENCE).expect("a waiter got a permit");
        }
    });
    assert_eq!(*order.lock(), (0..WAITERS).collect::<Vec<_>>());
}

pub fn a_latch_opens_at_zero_and_wakes_its_waiters(env: &dyn TestEnv) {
    let name = unique("latch");
    let unit = env.unit();
    let (a, b) = (env.client(), env.client());
    let latch = a.count_down_latch(name.clone());
    assert_eq!(latch.count().expect("count"), 0);
    assert!(
        latch.wait_for(Duration::ZERO).expect("open"),
        "never set: open"
    );
    assert!(latch.try_set_count(2).expect("set"));
    assert!(!latch.try_set_count(7).expect("set once"));
    assert_eq!(latch.count().expect("count"), 2);
    let woken = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..2 {
            let (latch, woken) = (latch.clone(), &woken);
            s.spawn(move || {
                assert!(latch.wait_for(unit * 1000).expect("wait"), "opened");
                woken.fetch_add(1, Ordering::SeqCst);
            });
        }
        env.await_sleepers(2);
        let other = b.count_down_latch(name.clone());
        other.count_down().expect("count down");
        assert_eq!(latch.count().expect("count"), 1);
        assert_eq!(woken.load(Ordering::SeqCst), 0, "still closed");
        other.count_down().expect("count down");
    });
    assert_eq!(woken.load(Ordering::SeqCst), 2);
    assert_eq!(latch.count().expect("count"), 0);
    latch.count_down().expect("an open latch stays open");
    assert!(latch.try_set_count(1).expect("set again once open"));
    assert!(!latch.wait_for(Duration::ZERO).expect("closed again"));
}

pub fn one_leader_at_a_time_with_increasing_tokens(env: &dyn TestEnv) {
    let name = unique("election");
    let (a, b) = (env.client(), env.client());
    let (ea, eb) = (
        a.leader_election(name.clone()),
        b.leader_election(name.clone()),
    );
    assert_eq!(eb.leader().expect("leader"), None);
    let leading = ea.campaign("node-a").expect("campaign");
    assert_eq!(leading.candidate(), "node-a");
    assert_eq!(eb.leader().expect("leader").as_deref(), Some("node-a"));
    assert!(eb
        .try_campaign_for("node-b", Duration::ZERO)
        .expect("try")
        .is_none());
    // Not reentrant: the same client and thread campaigning again waits like anyone.
    assert!(ea
        .try_campaign_for("node-a", Duration::ZERO)
        .expect("try")
        .is_none());
    let first = leading.token();
    let resigned = thread::spawn(move || leading.resign())
        .join()
        .expect("thread");
    resigned.expect("resigned from another thread");
    assert_eq!(eb.leader().expect("leader"), None);
    let next = eb.campaign("node-b").expect("campaign");
    assert!(next.token() > first, "{} > {first}", next.token());
    assert_eq!(ea.leader().expect("leader").as_deref(), Some("node-b"));
    assert!(ea.campaign("").is_err(), "an empty candidate id is refused");
    drop(next);
}

/// A leader cut off from the store is told it lost the leadership no later than another
/// candidate takes it over.
pub fn a_cut_off_leader_is_told_before_another_leads(env: &dyn TestEnv) {
    let name = unique("election-cut");
    let unit = env.unit();
    let lease = unit * 6;
    let faulty = FaultyBackend::new(env.backend());
    let cut_off = LockClientBuilder::new(Arc::new(faulty.clone()))
        .watchdog_lease(lease)
        .build()
        .expect("client");
    let events = cut_off.lease_events();
    let leading = cut_off
        .leader_election(name.clone())
        .campaign("node-a")
        .expect("campaign");
    faulty.inject(Fault::fail(Op::Renew));
    let next = env.client();
    thread::scope(|s| {
        let campaign = s.spawn(|| {
            let leadership = next
                .leader_election(name.clone())
                .try_campaign_for("node-b", unit * 100)
                .expect("campaign")
                .expect("leads once the old lease ends");
            leadership.token()
        });
        env.await_sleepers(1);
        env.advance(lease + unit);
        let token = campaign.join().expect("campaign");
        assert!(leading.is_lost(), "the old leader knows");
        assert!(token > leading.token());
    });
    let lost = loop {
        let event = events.recv_timeout(PATIENCE).expect("a Lost event");
        if matches!(event.change, LeaseChange::Lost { .. }) {
            break event;
        }
    };
    assert_eq!(lost.kind, dlocks::LockKind::Election);
    faulty.clear();
}

pub fn an_observer_sees_every_leader_change(env: &dyn TestEnv) {
    let name = unique("election-observe");
    let (a, b) = (env.client(), env.client());
    let changes = b.leader_election(name.clone()).observe().expect("observe");
    assert_eq!(changes.recv_timeout(PATIENCE), Ok(None), "nobody leads yet");
    let leading = a
        .leader_election(name.clone())
        .campaign("node-a")
        .expect("campaign");
    assert_eq!(
        changes.recv_timeout(PATIENCE),
        Ok(Some("node-a".to_owned()))
    );
    leading.resign().expect("resign");
    assert_eq!(changes.recv_timeout(PATIENCE), Ok(None));
    let next = b
        .leader_election(name.clone())
        .campaign("node-b")
        .expect("campaign");
    assert_eq!(
        changes.recv_timeout(PATIENCE),
        Ok(Some("node-b".to_owned()))
    );
    drop(next);
}

pub fn an_owned_guard_is_not_reentrant_and_is_released_from_another_thread(env: &dyn TestEnv) {
    let name = unique("owned");
    let client = env.client();
    let lock = client.lock(name.clone());
    let guard = lock.lock_owned().expect("lock");
    assert!(!guard.is_lost());
    assert!(guard.owner().starts_with(client.id()));
    assert!(
        lock.try_lock_owned().expect("try").is_none(),
        "a second owned guard waits like anyone"
    );
    assert!(
        lock.try_lock().expect("try").is_none(),
        "the thread itself does not hold it"
    );
    assert!(!lock.is_held_by_current_thread().expect("held"));
    let unlocked = thread::spawn(move || guard.unlock())
        .join()
        .expect("thread");
    unlocked.expect("unlocked from another thread");
    assert!(!lock.is_locked().expect("status"));
    // The watchdog renews it.
    let lease = env.unit() * 6;
    let kept = env
        .client_with_watchdog(lease)
        .lock(name.clone())
        .lock_owned()
        .expect("lock");
    for _ in 0..12 {
        env.advance(lease / 3 + lease / 30);
    }
    assert!(!kept.is_lost());
    assert!(lock.is_locked().expect("status"));
    drop(kept);
    assert!(!lock.is_locked().expect("status"));
}

pub fn an_owned_fenced_guard_carries_its_token(env: &dyn TestEnv) {
    let name = unique("owned-fenced");
    let client = env.client();
    let fenced = client.fenced_lock(name.clone());
    let first = fenced.lock_owned().expect("lock");
    let token = first.fencing_token().expect("a token");
    drop(first);
    let second = fenced.lock_owned().expect("lock");
    assert!(second.fencing_token().expect("a token") > token);
    drop(second);
    let plain = client.lock(name).lock_owned().expect("plain");
    assert_eq!(plain.fencing_token(), None);
}

/// A candidate waiting to lead is woken by the leader's resignation, not by its lease's end.
pub fn a_waiting_candidate_leads_as_soon_as_the_leader_resigns(env: &dyn TestEnv) {
    let name = unique("election-resign");
    let unit = env.unit();
    let (a, b) = (env.client(), env.client());
    let leading = a
        .leader_election(name.clone())
        .campaign("node-a")
        .expect("campaign");
    thread::scope(|s| {
        let campaign = s.spawn(|| {
            b.leader_election(name.clone())
                .try_campaign_for("node-b", unit * 3)
                .expect("campaign")
                .map(|leadership| leadership.candidate().to_owned())
        });
        env.await_sleepers(1);
        leading.resign().expect("resign");
        // No time passes: the resignation's message wakes the candidate.
        assert_eq!(
            campaign.join().expect("campaign").as_deref(),
            Some("node-b"),
            "the candidate led before its wait ended"
        );
    });
}

/// The threads of this process named `name`, from `/proc/self/task`.
fn threads_named(name: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .map(|tasks| {
            tasks
                .flatten()
                .filter(|task| {
                    std::fs::read_to_string(task.path().join("comm"))
                        .is_ok_and(|comm| comm.trim() == name)
                })
                .count()
        })
        .unwrap_or(0)
}

/// Waits (bounded, in real time) until `count()` is `expected`.
fn settles_at(count: impl Fn() -> usize, expected: usize) -> bool {
    let limit = std::time::Instant::now() + PATIENCE;
    while count() != expected {
        if std::time::Instant::now() > limit {
            return false;
        }
        thread::sleep(Duration::from_millis(2));
    }
    true
}

/// Observing an election costs a thread while the changes are wanted: dropping them ends it,
/// with no leader change needed.
pub fn dropping_an_elections_changes_ends_the_thread_that_watched(env: &dyn TestEnv) {
    let client = env.client();
    let election = client.leader_election(unique("observed"));
    let before = threads_named("dlock-leader-wa");
    let changes = election.observe().expect("observe");
    assert_eq!(
        changes.recv_timeout(PATIENCE).ok(),
        Some(None),
        "nobody leads"
    );
    assert!(
        settles_at(|| threads_named("dlock-leader-wa"), before + 1),
        "a thread watches"
    );
    drop(changes);
    assert!(
        settles_at(|| threads_named("dlock-leader-wa"), before),
        "the watching thread ended with its changes"
    );
}

/// A latch keeps any count up to `MAX_COUNT` exactly, and refuses more (a count no store keeps
/// exactly would be read back wrong).
pub fn latch_counts_are_kept_exactly_up_to_the_largest(env: &dyn TestEnv) {
    let client = env.client();
    let latch = client.count_down_latch(unique("big-count"));
    assert!(matches!(
        latch.try_set_count(dlocks::MAX_COUNT + 1),
        Err(dlocks::LockError::InvalidArgument {
            argument: "count",
            ..
        })
    ));
    assert_eq!(latch.count().expect("count"), 0, "nothing was set");
    assert!(latch.try_set_count(dlocks::MAX_COUNT).expect("set"));
    assert_eq!(latch.count().expect("count"), dlocks::MAX_COUNT);
    latch.count_down().expect("count down");
    assert_eq!(latch.count().expect("count"), dlocks::MAX_COUNT - 1);
    assert!(
        !latch.wait_for(Duration::ZERO).expect("wait"),
        "far from open"
    );
}
