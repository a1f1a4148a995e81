//! The fair lock (and the plain lock of clients that queue their waiters): first come, first
//! served across clients (processes); a waiter that gives up leaves the queue at once, one that
//! dies is dropped after its place times out; a release wakes the head of the queue and the one
//! behind it, never the whole queue.

use std::sync::Arc;
use std::thread;

use dlocks::backend::{AcquireRequest, DistributedLock, LockRef, OwnerId};
use dlocks::testing::{Fault, FaultyBackend, Op};
use dlocks::{HandOff, LockClient, LockClientBuilder};
use parking_lot::Mutex;

use super::kinds::assert_wrong_kind;
use super::{await_asleep, unique};
use crate::env::TestEnv;

pub fn fair_waiters_from_different_clients_get_the_lock_in_arrival_order(env: &dyn TestEnv) {
    const WAITERS: usize = 5;
    let name = unique("fair-order");
    let unit = env.unit();
    let holder = env.client();
    let held = holder.fair_lock(name.clone()).lock().expect("lock");
    let order = Mutex::new(Vec::new());
    thread::scope(|s| {
        for i in 0..WAITERS {
            let client = env.client(); // each waiter a process of its own
            let (waiter_name, order) = (name.clone(), &order);
            s.spawn(move || {
                let guard = client
                    .fair_lock(waiter_name)
                    .try_lock_for(unit * 1000)
                    .expect("wait")
                    .expect("its turn came");
                order.lock().push(i);
                guard.unlock().expect("unlock");
            });
            // The next one arrives once this one is queued.
            await_queued(env, &name, i + 1);
        }
        held.unlock().expect("unlock");
    });
    assert_eq!(*order.lock(), (0..WAITERS).collect::<Vec<_>>());
}

/// Waits until `count` waiters are queued for `name`: on the store where the backend inspects
/// its locks (a waiter's first step can take longer than any fixed pause on a loaded machine);
/// else as the environment tells (the in-process backend's waiters queue before they sleep).
fn await_queued(env: &dyn TestEnv, name: &str, count: usize) {
    if !crate::store_queue::await_queued(&*env.backend(), name, count as u64) {
        env.await_sleepers(count);
    }
}

/// A thread whose owned guard went to another thread, still holding, waits for the lock again:
/// it queues behind the waiters that came before it and ahead of those that came after, and is
/// served in that turn once the guard it gave away is let go.
pub fn a_thread_that_gave_its_guard_away_queues_again_in_turn(env: &dyn TestEnv) {
    let name = unique("fair-guard-given");
    let unit = env.unit();
    let (client, earlier, later) = (env.client(), env.client(), env.client());
    let lock = client.fair_lock(name.clone());
    let given = lock.lock_owned().expect("lock");
    let order = Mutex::new(Vec::new());
    let take_turn = |client: &LockClient, who: &'static str| {
        let guard = client
            .fair_lock(name.clone())
            .try_lock_for(unit * 1000)
            .expect("wait")
            .expect("its turn came");
        order.lock().push(who);
        guard.unlock().expect("unlock");
    };
    // Each comes once the one before it is in the queue (as the store shows it; on the
    // in-process backend, once it sleeps).
    thread::scope(|s| {
        s.spawn(|| take_turn(&earlier, "a client before"));
        await_queued(env, &name, 1);
        s.spawn(|| {
            // Queues once this thread waits again.
            await_queued(env, &name, 2);
            take_turn(&later, "a client after");
        });
        s.spawn(|| {
            // The guard's new thread lets it go once all three wait.
            await_queued(env, &name, 3);
            given.unlock().expect("unlock the guard given away");
        });
        take_turn(&client, "this thread again");
    });
    assert_eq!(
        *order.lock(),
        ["a client before", "this thread again", "a client after"]
    );
}

pub fn a_fair_waiter_that_gives_up_leaves_the_queue_at_once(env: &dyn TestEnv) {
    let name = unique("fair-give-up");
    let unit = env.unit();
    let held = env.client().fair_lock(name.clone()).lock().expect("lock");
    let (impatient, patient) = (env.client(), env.client());
    thread::scope(|s| {
        let gave_up = s.spawn(|| {
            impatient
                .fair_lock(name.clone())
                .try_lock_for(unit * 3)
                .expect("wait")
                .is_none()
        });
        env.await_sleepers(1);
        let second = s.spawn(|| {
            patient
                .fair_lock(name.clone())
                .try_lock_for(unit * 1000)
                .expect("wait")
                .map(|guard| guard.unlock().map_err(|error| error.to_string()))
        });
        env.await_sleepers(2);
        env.advance(unit * 3);
        assert!(gave_up.join().expect("impatient"), "its wait ran out");
        // Had the first waiter stayed at the head of the queue, the second would now wait for
        // its place to time out; it left, so the release goes straight to the second.
        held.unlock().expect("unlock");
        assert_eq!(second.join().expect("patient"), Some(Ok(())));
    });
}

pub fn a_dead_fair_waiter_holds_up_the_queue_only_until_its_place_times_out(env: &dyn TestEnv) {
    let name = unique("fair-dead");
    let unit = env.unit();
    let slot = unit * 4;
    let client = |_| {
        LockClientBuilder::new(env.backend())
            .watchdog_lease(unit * 6)
            .fair_wait_timeout(slot)
            .build()
            .expect("client")
    };
    let (holder, live) = (client(0), client(1));
    let held = holder.fair_lock(name.clone()).lock().expect("lock");
    // A waiter that queued and then died: its process is gone, nothing will take it out.
    let dead = super::new_owner();
    let request = AcquireRequest::new(LockRef::new(&name, dlocks::LockKind::Fair), &dead, unit)
        .waiting(true, slot);
    env.backend().try_acquire(&request).expect("queued");
    thread::scope(|s| {
        // It lets the lock go at once, while the test may still be moving time on.
        let waiter = s.spawn(|| {
            live.fair_lock(name.clone())
                .try_lock_for(unit * 1000)
                .expect("wait")
                .map(|guard| guard.unlock().map_err(|error| error.to_string()))
        });
        env.await_sleepers(1);
        held.unlock().expect("unlock");
        if env.is_virtual_time() {
            // The dead waiter is at the head: its place holds for its slot after the release.
            env.advance(slot - unit);
            assert!(
                !waiter.is_finished(),
                "still behind the dead waiter's place"
            );
        }
        env.advance(slot * 2);
        assert_eq!(
            waiter.join().expect("live waiter"),
            Some(Ok(())),
            "the dead waiter was dropped and the live one got the lock, and let it go"
        );
    });
}

/// A fair waiter on a lease of its own is handed the lock by the release, on a short grant
/// lease, and claims it with the lease it asked for: held once, for that lease.
pub fn a_fair_waiter_on_a_lease_of_its_own_claims_its_grant_with_its_lease(env: &dyn TestEnv) {
    let name = unique("fair-fixed-grant");
    let unit = env.unit();
    let lease = std::time::Duration::from_secs(60).max(unit * 60);
    let (holder, waiter) = (env.client(), env.client());
    let held = holder.fair_lock(name.clone()).lock().expect("lock");
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            let lock = waiter.fair_lock(name.clone());
            let guard = lock
                .try_lock_with_lease(unit * 100, lease)
                .expect("wait")
                .expect("granted within its wait");
            let counted = lock.hold_count().expect("hold count");
            let left = lock.remaining_lease().expect("lease").expect("a lease");
            guard.unlock().expect("unlock");
            (counted, left)
        });
        await_queued(env, &name, 1);
        held.unlock().expect("unlock");
        let (counted, left) = waiting.join().expect("waiter");
        assert_eq!(counted, 1, "held once");
        assert!(
            left > lease / 2,
            "held for the lease it asked for, not the grant's: {left:?} of {lease:?}"
        );
    });
    assert!(
        !holder.fair_lock(name).is_locked().expect("status"),
        "one unlock let it go"
    );
}

/// A fair waiter on a lease of its own that can no longer reach the store (its process hung or
/// cut off) holds the queue up only for a grant lease, as one on the watchdog lease does: the
/// release grants it the lock on that short lease, which runs out unclaimed. Without a grant
/// its place would hold the queue for its slot (its wait, here longer than the next waiter's).
pub fn a_cut_off_fair_waiter_on_a_lease_of_its_own_holds_the_queue_up_only_for_a_grant(
    env: &dyn TestEnv,
) {
    if !env.backend().hands_over(dlocks::LockKind::Fair) {
        // A store that makes no grants (etcd): a place lives while its process keeps it.
        return;
    }
    let name = unique("fair-cut-off");
    let unit = env.unit();
    let lease = unit * 6;
    let client = |backend: Arc<dyn DistributedLock>| {
        LockClientBuilder::new(backend)
            .watchdog_lease(unit * 6)
            .build()
            .expect("client")
    };
    let cut = env.faulty();
    let (holder, doomed, live) = (
        client(env.backend()),
        client(Arc::new(cut.clone())),
        client(env.backend()),
    );
    let held = holder.fair_lock(name.clone()).lock().expect("lock");
    thread::scope(|s| {
        let doomed_wait = s.spawn(|| {
            doomed
                .fair_lock(name.clone())
                .try_lock_with_lease(unit * 60, lease)
                .map(|guard| guard.is_some())
        });
        await_queued(env, &name, 1);
        // From now on none of its calls reaches the store.
        for op in [Op::TryAcquire, Op::Release, Op::Renew, Op::CancelWait] {
            cut.inject(Fault::fail(op));
        }
        let live_wait = s.spawn(|| {
            live.fair_lock(name.clone())
                .try_lock_with_lease(unit * 40, lease)
                .expect("wait")
                .is_some()
        });
        await_queued(env, &name, 2);
        held.unlock().expect("unlock");
        // Time for the grant's lease (at most 2 s) to run out, and the next waiter's timer
        // (at most the holder's lease, 6 units). A guard taken meanwhile may see its own lease
        // run out as time moves on here: only whether the lock was taken is checked.
        for _ in 0..30 {
            if live_wait.is_finished() {
                break;
            }
            env.advance(unit.max(std::time::Duration::from_millis(500)));
        }
        if !live_wait.is_finished() {
            // Still behind the cut-off waiter's place: its wait runs out.
            env.advance(unit * 40);
        }
        assert!(
            live_wait.join().expect("live waiter"),
            "the waiter behind the cut-off one got the lock within its wait"
        );
        // Back in touch, the cut-off waiter takes the free lock within its wait.
        cut.clear();
        for _ in 0..30 {
            if doomed_wait.is_finished() {
                break;
            }
            env.advance(unit);
        }
        if !doomed_wait.is_finished() {
            env.advance(unit * 60);
        }
        let doomed_got = doomed_wait.join().expect("cut-off waiter");
        assert!(matches!(doomed_got, Ok(true)), "{doomed_got:?}");
    });
}

/// A release wakes the head of the queue, not the queue. On a store that grants the head the
/// lock (a Redisson queue) the waiter behind the head looks once too, at once or (Redis and
/// PostgreSQL, which tell it when the grant runs out) then: it would take over were the head
/// dead. On a store whose release is the head's turn (etcd's queue,
/// no grant), the one behind waits for the head's place to go, as an etcd `Mutex` contender
/// waits for the keys older than its own: one attempt a release.
pub fn a_fair_release_wakes_the_head_not_the_queue(env: &dyn TestEnv) {
    const WAITERS: usize = 6;
    let name = unique("fair-one-wake");
    let unit = env.unit();
    let observed = FaultyBackend::new(env.backend());
    let client = || {
        LockClientBuilder::new(Arc::new(observed.clone()))
            .watchdog_lease(unit * 6)
            .build()
            .expect("client")
    };
    let held = client()
        .fair_lock(name.clone())
        .lock_with_lease(unit * 1000)
        .expect("lock");
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let (acquired_tx, acquired) = std::sync::mpsc::channel::<()>();
    let acquired_tx = Mutex::new(acquired_tx);
    thread::scope(|s| {
        for i in 0..WAITERS {
            let (client, waiter_name, release_rx) = (client(), name.clone(), &release_rx);
            let acquired_tx = &acquired_tx;
            s.spawn(move || {
                let guard = client
                    .fair_lock(waiter_name)
                    .lock_with_lease(unit * 1000)
                    .expect("wait");
                // The first one in says so and holds on until told, so the others stay queued.
                if i == 0 {
                    let _ = acquired_tx.lock().send(());
                    let _ = release_rx.lock().recv();
                }
                guard.unlock().expect("unlock");
            });
            // Queued on the store in this order (a waiter's first step can take longer than
            // any fixed pause on a loaded machine), then asleep once subscribed, each try
            // answered (a retry still on its way would count as the release's).
            crate::store_queue::await_queued(&*env.backend(), &name, i as u64 + 1);
            await_asleep(env, &observed, i + 1);
        }
        // Dropped on the way out, even by a failed assertion, so the queue always drains.
        let release_tx = release_tx;
        let before = observed.calls(Op::TryAcquire);
        held.unlock().expect("unlock");
        // The head takes the lock (one attempt). Where the release grants, the waiter behind
        // it looks once (within the grant's lease) and sleeps again; the ones behind them are
        // not woken at all.
        let woken = if env.backend().hands_over(dlocks::LockKind::Fair) {
            2
        } else {
            1
        };
        acquired
            .recv_timeout(unit * 100 + std::time::Duration::from_secs(10))
            .expect("the head got the lock");
        // The waiter behind may still be on its way to its look (a busy machine): wait for it,
        // then for every waiter to be asleep again, and count.
        let attempts = || observed.calls(Op::TryAcquire) - before;
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while attempts() < woken && std::time::Instant::now() < until {
            thread::sleep(std::time::Duration::from_millis(1));
        }
        env.await_sleepers(WAITERS - 1);
        assert_eq!(
            attempts(),
            woken,
            "{woken} attempts for one release, whatever the queue's length"
        );
        release_tx.send(()).expect("let the queue go");
    });
}

/// A new client (a process of its own) whose plain locks queue on the store.
fn queueing_client(env: &dyn TestEnv) -> LockClient {
    LockClientBuilder::new(env.backend())
        .watchdog_lease(env.unit() * 6)
        .lock_hand_off(HandOff::Queue)
        .build()
        .expect("client")
}

pub fn plain_locks_of_queueing_clients_are_granted_in_arrival_order(env: &dyn TestEnv) {
    const WAITERS: usize = 4;
    let name = unique("queued-plain");
    let unit = env.unit();
    let held = queueing_client(env)
        .lock(name.clone())
        .lock()
        .expect("lock");
    let racing = env.client();
    let order = Mutex::new(Vec::new());
    thread::scope(|s| {
        for i in 0..WAITERS {
            let client = queueing_client(env);
            let (waiter_name, order) = (name.clone(), &order);
            s.spawn(move || {
                // Every other waiter asks for the name's fair lock: with the queue they are one
                // lock, and wait in one queue.
                let guard = if i % 2 == 0 {
                    client.lock(waiter_name).try_lock_for(unit * 1000)
                } else {
                    client.fair_lock(waiter_name).try_lock_for(unit * 1000)
                };
                let guard = guard.expect("wait").expect("its turn came");
                order.lock().push(i);
                guard.unlock().expect("unlock");
            });
            // The next one arrives once this one is queued.
            await_queued(env, &name, i + 1);
        }
        // A client that races for the name is refused it, with or without a wait: it would
        // jump the queue.
        let jumping = racing.lock(name.clone());
        assert_wrong_kind(jumping.try_lock(), "a racing try on a queued name");
        assert_wrong_kind(jumping.try_lock_for(unit), "a racing wait on a queued name");
        assert!(!held.is_lost(), "nothing changed");
        held.unlock().expect("unlock");
    });
    assert_eq!(*order.lock(), (0..WAITERS).collect::<Vec<_>>());
    // With the queue empty and no holder, the name is free for any kind again.
    let after = racing.lock(name).try_lock().expect("try_lock");
    assert!(after.is_some(), "the queue left nothing behind");
}
