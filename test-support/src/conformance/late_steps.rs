//! A step acts only on the hold it was sent for, however late the network delivers it; a grant
//! is believed only for the attempt it was made to; a lost lease is told at its deadline, even
//! while a call to the store hangs. Each sequence as a user would write it, with the network's
//! faults played by `FaultyBackend`.

use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::Duration;

use dlocks::testing::{Effect, Fault, FaultyBackend, Op};
use dlocks::{LeaseChange, LockClient, LockClientBuilder, LockKind};

use super::{await_answered, unique};
use crate::env::TestEnv;

/// How long a test waits for what another thread reports, in real time.
const PATIENCE: Duration = Duration::from_secs(20);

pub(super) fn client_on(env: &dyn TestEnv, backend: &FaultyBackend) -> LockClient {
    LockClientBuilder::new(Arc::new(backend.clone()))
        .watchdog_lease(env.unit() * 6)
        .build()
        .expect("client")
}

/// A release whose outcome its caller never learned (stuck in the network) reaches the store
/// after the thread took the lock again: it ends nothing but the hold it was sent for.
pub fn a_release_delivered_late_spares_the_threads_next_hold(env: &dyn TestEnv) {
    let unit = env.unit();
    let faulty = env.faulty();
    let client = client_on(env, &faulty);
    let name = unique("late-release");
    let lock = client.lock(name.clone());
    let first = lock.lock_with_lease(unit * 2).expect("lock");
    faulty.inject(Fault::new(Op::Release, Effect::HoldBack).times(1));
    assert!(
        first.unlock().expect_err("held back").is_unavailable(),
        "the caller cannot tell whether it was released"
    );
    // The store still has the first hold until its lease runs out.
    env.advance(unit * 3);
    let second = lock.lock().expect("the thread takes the lock again");
    assert_eq!(faulty.deliver_held(), 1, "the old release arrives now");
    assert!(!second.is_lost());
    assert!(lock.is_held_by_current_thread().expect("status"));
    let other = env.client();
    assert!(
        other.lock(name.clone()).try_lock().expect("try").is_none(),
        "another client got in next to the thread's hold"
    );
    second.unlock().expect("unlock");
}

/// A permit's release stuck in the network reaches the store after the permit's lease ran out
/// and another client took it: it gives back nothing (the semaphore never counts one permit
/// twice).
pub fn a_permits_release_delivered_late_gives_nothing_back(env: &dyn TestEnv) {
    if !env.backend().supports(LockKind::Semaphore) {
        return;
    }
    let unit = env.unit();
    let faulty = env.faulty();
    let client = client_on(env, &faulty);
    let name = unique("late-permit");
    let sem = client.semaphore(name.clone());
    assert!(sem.try_set_permits(1).expect("set"));
    let first = sem.acquire_with_lease(unit * 2).expect("permit");
    faulty.inject(Fault::new(Op::Release, Effect::HoldBack).times(1));
    assert!(
        first.release().expect_err("held back").is_unavailable(),
        "the caller cannot tell whether it was given back"
    );
    env.advance(unit * 3);
    let other = env.client();
    let taken = other
        .semaphore(name.clone())
        .try_acquire()
        .expect("try")
        .expect("the permit came back when its lease ran out");
    assert_eq!(faulty.deliver_held(), 1, "the old release arrives now");
    assert!(!taken.is_lost());
    assert_eq!(
        other
            .semaphore(name)
            .available_permits()
            .expect("available"),
        0,
        "the late release gave back a permit it no longer held"
    );
    taken.release().expect("release");
}

/// A resignation stuck in the network reaches the store after the leadership's lease ran out
/// and another candidate leads: the new leadership stays.
pub fn a_resignation_delivered_late_ends_no_later_leadership(env: &dyn TestEnv) {
    if !env.backend().supports(LockKind::Election) {
        return;
    }
    let unit = env.unit();
    let faulty = env.faulty();
    let client = client_on(env, &faulty);
    let name = unique("late-resign");
    let first = client
        .leader_election(name.clone())
        .campaign("first")
        .expect("campaign");
    faulty.inject(Fault::new(Op::Release, Effect::HoldBack).times(1));
    assert!(
        first.resign().expect_err("held back").is_unavailable(),
        "the caller cannot tell whether it resigned"
    );
    // Nothing renews the leadership now: its watchdog lease (6 units) runs out.
    env.advance(unit * 7);
    let other = env.client();
    let election = other.leader_election(name);
    let second = election
        .try_campaign_for("second", unit * 20)
        .expect("campaign")
        .expect("the first leadership's lease ran out");
    assert_eq!(faulty.deliver_held(), 1, "the old resignation arrives now");
    assert!(!second.is_lost());
    assert_eq!(
        election.leader().expect("leader").as_deref(),
        Some("second"),
        "the late resignation ended the new leadership"
    );
    second.resign().expect("resign");
}

/// The same with the release sent twice (a retry after a lost reply), its second copy
/// arriving after the thread took the lock again.
pub fn a_release_sent_twice_spares_the_threads_next_hold(env: &dyn TestEnv) {
    let faulty = env.faulty();
    let client = client_on(env, &faulty);
    let name = unique("twice-release");
    let lock = client.lock(name.clone());
    faulty.inject(Fault::new(Op::Release, Effect::Duplicate).times(1));
    lock.lock().expect("lock").unlock().expect("released");
    let again = lock.lock().expect("the thread takes the lock again");
    assert_eq!(faulty.deliver_held(), 1, "the copy arrives now");
    assert!(!again.is_lost());
    let other = env.client();
    assert!(
        other.lock(name).try_lock().expect("try").is_none(),
        "another client got in next to the thread's hold"
    );
    again.unlock().expect("unlock");
}

/// A thread's plain hold whose lease ran out is released after the thread became a reader of
/// the same name: the readers' hold stays, and no writer gets in next to it.
pub fn releasing_an_expired_hold_spares_the_threads_hold_of_another_kind(env: &dyn TestEnv) {
    let backend = env.backend();
    if !backend.supports(LockKind::Read) {
        return;
    }
    let unit = env.unit();
    let client = env.client();
    let name = unique("expired-then-read");
    let plain = client
        .lock(name.clone())
        .lock_with_lease(unit * 2)
        .expect("lock");
    env.advance(unit * 3);
    assert!(plain.is_lost());
    let reading = client
        .read_write_lock(name.clone())
        .read_lock()
        .lock()
        .expect("read");
    assert!(
        plain.unlock().expect_err("its lease ran out").is_not_held(),
        "the expired hold says so"
    );
    assert!(!reading.is_lost());
    let writer = env.client();
    assert!(
        writer
            .read_write_lock(name.clone())
            .write_lock()
            .try_lock()
            .expect("try")
            .is_none(),
        "a writer got in next to a reader"
    );
    reading.unlock().expect("unlock");
}

/// A fair waiter's grant message comes after its grant ran out and another waiter took the
/// lock (the first waiter meanwhile tried again, and was queued again): it is not believed.
pub fn a_grant_told_after_it_ran_out_is_not_believed(env: &dyn TestEnv) {
    let backend = env.backend();
    if !backend.supports(LockKind::Fair) || !backend.hands_over(LockKind::Fair) {
        return;
    }
    let unit = env.unit();
    let name = unique("late-grant");
    let holder = env.client();
    let late = env.client();
    let faulty = env.faulty();
    let waiting = client_on(env, &faulty);
    // The waiter, refused, sleeps until this lease would end (or a message wakes it).
    let held = holder
        .fair_lock(name.clone())
        .lock_with_lease(unit * 20)
        .expect("lock");
    // The lease of a grant: the waiting client's watchdog lease, 2 s at most.
    let grant = (unit * 6).min(Duration::from_secs(2));
    let (taken_tx, taken) = mpsc::channel();
    thread::scope(|s| {
        let waiting = &waiting;
        let waited = name.clone();
        s.spawn(move || {
            let got = waiting
                .fair_lock(waited)
                .try_lock_for(unit * 200)
                .expect("wait");
            taken_tx
                .send(got.as_ref().map(|guard| guard.is_lost()))
                .expect("report");
        });
        // Queued, with its offer on the store.
        await_answered(env, &faulty, Op::TryAcquire, 1, 1);
        // The grant the release makes is told late.
        faulty.inject(Fault::new(Op::Message, Effect::HoldBack).times(1));
        held.unlock()
            .expect("release: the waiter is granted the lock");
        // The grant runs out unconfirmed; another client takes the lock.
        env.advance(grant + unit);
        let other = late
            .fair_lock(name.clone())
            .try_lock_for(unit * 20)
            .expect("try")
            .expect("the grant ran out: the lock is free for another");
        // The first waiter's wait goes on: at its timer it tries again, and is queued again.
        env.advance(unit * 22);
        env.await_sleepers(1);
        assert_eq!(
            faulty.deliver_held(),
            1,
            "the old grant message arrives now"
        );
        env.await_sleepers(1);
        assert!(
            taken.try_recv().is_err(),
            "the waiter believed a grant that had run out, while another holds the lock"
        );
        assert!(!other.is_lost());
        other.unlock().expect("unlock");
        let lost = taken
            .recv_timeout(PATIENCE)
            .expect("the waiter is served once the lock is free");
        assert_eq!(lost, Some(false), "it holds the lock now");
    });
}

/// A renewal that hangs (the store stopped answering) does not hold up the news: the hold is
/// reported lost at its deadline, before the call returns.
pub fn a_lease_is_reported_lost_at_its_deadline_while_a_renewal_hangs(env: &dyn TestEnv) {
    let unit = env.unit();
    let faulty = env.faulty();
    let client = client_on(env, &faulty);
    let events = client.lease_events();
    let name = unique("hung-renewal");
    let lock = client.lock(name.clone());
    if env.is_virtual_time() {
        // On a clock moved by hand a call that hangs is one that returns when the time it
        // took has passed: the first renewal (at 2 units) takes 10.
        faulty.inject(Fault::delay(Op::Renew, unit * 10).times(1));
        let guard = lock.lock().expect("lock");
        env.advance(unit * 2);
        assert!(
            guard.is_lost(),
            "its deadline passed while the renewal hung"
        );
        let event = events.try_recv().expect("told as soon as the call is over");
        assert!(
            matches!(event.change, LeaseChange::Lost { .. }),
            "{event:?}"
        );
        return;
    }
    // A renewal that hangs until the test lets it go.
    let (go, gate) = mpsc::channel::<()>();
    let gate = Mutex::new(Some(gate));
    faulty.observe(move |call| {
        if call.op == Op::Renew {
            if let Some(gate) = gate.lock().expect("gate").take() {
                let _ = gate.recv_timeout(PATIENCE * 2);
            }
        }
    });
    let guard = lock.lock().expect("lock");
    let deadline = guard.lease_deadline();
    let event = loop {
        let event = events
            .recv_timeout(PATIENCE)
            .expect("the loss is told while the renewal still hangs");
        if matches!(event.change, LeaseChange::Lost { .. }) {
            break event;
        }
    };
    assert!(guard.is_lost());
    assert!(
        event.at >= deadline,
        "told when the deadline passed, not before"
    );
    go.send(()).expect("let the renewal go");
}

/// A name is refused, for every kind, when it would share a key with another name on some
/// store: the same answer on every backend.
pub fn names_that_would_share_keys_are_refused_for_every_kind(env: &dyn TestEnv) {
    let client = env.client();
    let backend = env.backend();
    for name in [
        "{orders}",
        "redisson_lock_queue:{orders}",
        "redisson_unlock_latch:{orders}:1",
        "dlock_kind:{orders}",
        "half{open",
        "closed}first{x}",
        "{}empty",
        "{tag}x:timeout",
        "{tag}x:c1:1:rwlock_timeout:1",
    ] {
        let refused = |result: Result<(), dlocks::LockError>, what: &str| {
            assert!(
                matches!(
                    result,
                    Err(dlocks::LockError::InvalidArgument {
                        argument: "name",
                        ..
                    })
                ),
                "{name:?} as {what}: {result:?}"
            );
        };
        refused(client.lock(name).try_lock().map(drop), "a lock");
        refused(
            client.fenced_lock(name).try_lock().map(drop),
            "a fenced lock",
        );
        if backend.supports(LockKind::Fair) {
            refused(client.fair_lock(name).try_lock().map(drop), "a fair lock");
        }
        if backend.supports(LockKind::Read) {
            let rw = client.read_write_lock(name);
            refused(rw.read_lock().try_lock().map(drop), "a read lock");
            refused(rw.write_lock().try_lock().map(drop), "a write lock");
        }
        if backend.supports(LockKind::Semaphore) {
            refused(
                client.semaphore(name).try_set_permits(1).map(drop),
                "a semaphore",
            );
        }
        if backend.supports(LockKind::Latch) {
            refused(
                client.count_down_latch(name).try_set_count(1).map(drop),
                "a latch",
            );
        }
        if backend.supports(LockKind::Election) {
            refused(
                client.leader_election(name).leader().map(drop),
                "an election",
            );
        }
    }
    // A hash tag followed by more is an ordinary name.
    let tagged = client.lock("{orders}:42");
    tagged
        .lock()
        .expect("a tagged name")
        .unlock()
        .expect("unlock");
}
