//! The lease rule: a guard that says it holds has a lease in the store that ends no earlier than
//! its local deadline. One test per way it used to break, each through the public API.

use std::sync::{mpsc, Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use dlocks::testing::{Fault, FaultyBackend, Op};
use dlocks::{LockClient, LockClientBuilder, LockGuard, MultiLock};

use super::kinds::{exclusive_kinds, AnyLock};
use super::late_steps::client_on;
use super::unique;
use crate::env::TestEnv;

/// How long a test waits for something that happens on its own (a renewal in flight) before it
/// fails.
const PATIENCE: Duration = Duration::from_secs(10);

/// Checks the lease rule for `guard` on `lock`: unless the guard already says its lease is
/// lost, the store holds the lock for at least as long as the guard trusts it.
pub fn assert_store_outlives(env: &dyn TestEnv, lock: &dyn AnyLock, guard: &LockGuard, what: &str) {
    let clock = env.backend().clock();
    // The guard's belief first: a renewal landing meanwhile only moves the store's end later.
    let deadline = guard.lease_deadline();
    if guard.is_lost() {
        return;
    }
    let remaining = lock.remaining_lease().expect("the store's lease");
    let after = clock.now();
    let Some(remaining) = remaining else {
        panic!("{what}: the guard says it holds, and the store has no lease");
    };
    // The store answered between the two clock readings, in whole milliseconds.
    let store_end = after + remaining + Duration::from_millis(1);
    assert!(
        deadline <= store_end,
        "{what}: the guard trusts its lease {:?} longer than the store keeps it",
        deadline - store_end
    );
}

/// Re-entering a hold with another lease mode (the watchdog on a long fixed lease, or a shorter
/// fixed lease) never shortens what the store keeps: the guard keeps trusting the long lease,
/// so the store must keep it too.
pub fn a_reentry_on_another_lease_never_shortens_the_stores(env: &dyn TestEnv) {
    let unit = env.unit();
    for (kind, make) in exclusive_kinds(env) {
        let name = unique(kind);
        // Its watchdog asks for far less than the long lease at each renewal.
        let client = env.client_with_watchdog(unit * 6);
        let lock = make(&client, &name);
        let long = lock.lock_with_lease(unit * 60).expect("lock");
        let watchdog = lock.lock().expect("re-enter on the watchdog lease");
        assert_store_outlives(env, &*lock, &watchdog, kind);
        let short = lock
            .lock_with_lease(unit * 2)
            .expect("re-enter on a short lease");
        assert_store_outlives(env, &*lock, &short, kind);
        let left = lock.remaining_lease().expect("lease").expect("held");
        assert!(left > unit * 30, "{kind}: the store kept only {left:?}");
        // After the watchdog's renewals too (each asks for 6 units only).
        env.advance(unit * 7);
        assert!(!long.is_lost(), "{kind}");
        assert_store_outlives(env, &*lock, &long, kind);
        let other = env.client();
        assert!(
            make(&other, &name).try_lock().expect("try").is_none(),
            "{kind}: another owner took the lock its holder still trusts"
        );
        drop((short, watchdog));
        long.unlock().expect("unlock");
    }
}

/// A watchdog renewal held up on its way to the store arrives after its owner released the lock
/// and took it again on a longer fixed lease: it must not cut that lease back to the watchdog's.
pub fn a_late_renewal_never_shortens_a_newer_hold(env: &dyn TestEnv) {
    let unit = env.unit();
    let faulty = FaultyBackend::new(env.backend());
    let client = client_on(env, &faulty);
    let lock = client.lock(unique("late-renewal"));
    // The first renewal waits at the door of the store until the test lets it in.
    let (arrived_tx, arrived) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let gate = Mutex::new(Some((arrived_tx, go_rx)));
    faulty.observe(move |call| {
        if call.op == Op::Renew {
            let first = gate.lock().expect("gate").take();
            if let Some((arrived, go)) = first {
                let _ = arrived.send(());
                let _ = go.recv_timeout(PATIENCE);
            }
        }
    });
    let first = lock.lock().expect("lock");
    thread::scope(|s| {
        // The first tick falls due at 2 units.
        let ticking = s.spawn(|| env.advance(unit * 3));
        arrived
            .recv_timeout(PATIENCE)
            .expect("the watchdog renews at its first tick");
        first.unlock().expect("unlock");
        let second = lock.lock_with_lease(unit * 60).expect("lock again");
        go.send(()).expect("let the renewal in");
        ticking.join().expect("advance");
        // On a real clock the renewal lands on its own time: wait until it has been answered.
        let limit = Instant::now() + PATIENCE;
        while faulty.answered(Op::Renew) == 0 && Instant::now() < limit {
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(faulty.answered(Op::Renew), 1, "the late renewal landed");
        // It was for the first hold: the second, a hold of its own, is not renewed by it.
        assert_eq!(client.watchdog_stats().renewed, 0);
        assert!(!second.is_lost());
        assert_store_outlives(env, &lock, &second, "after the late renewal");
        let left = lock.remaining_lease().expect("lease").expect("held");
        assert!(left > unit * 30, "the store kept only {left:?}");
        second.unlock().expect("unlock");
    });
}

/// An extend that failed (the request or its reply lost) leaves the hold as it was, trusted
/// until its deadline, but the next re-entry asks the store before counting on it again.
pub fn a_failed_extend_is_confirmed_by_the_store_before_the_next_reentry(env: &dyn TestEnv) {
    let unit = env.unit();
    for fault in [
        Fault::fail(Op::TryAcquire),
        Fault::lose_reply(Op::TryAcquire),
    ] {
        let faulty = FaultyBackend::new(env.backend());
        let client = client_on(env, &faulty);
        let lock = client.lock(unique("failed-extend"));
        let held = lock.lock_with_lease(unit * 30).expect("lock");
        faulty.inject(fault.times(1));
        let error = lock
            .lock_with_lease(unit * 60)
            .expect_err("the extend fails");
        assert!(error.is_unavailable(), "{error}");
        assert!(
            !held.is_lost(),
            "the hold it would have extended is still there"
        );
        assert_store_outlives(env, &lock, &held, "after a failed extend");
        let asked = faulty.calls(Op::TryAcquire);
        let again = lock.lock_with_lease(unit).expect("re-enter");
        assert_eq!(
            faulty.calls(Op::TryAcquire),
            asked + 1,
            "the re-entry after a failed extend asks the store"
        );
        let once_more = lock.lock_with_lease(unit).expect("re-enter");
        assert_eq!(
            faulty.calls(Op::TryAcquire),
            asked + 1,
            "confirmed: the next re-entry is local again"
        );
        assert_eq!(lock.hold_count().expect("count"), 3);
        drop((once_more, again));
        held.unlock().expect("unlock");
    }
}

/// A multi-lock taken on the watchdog lease, one of whose members the thread already holds on a
/// short fixed lease: the member's hold must become a watchdog hold (renewed), not be counted
/// as taken on a lease that runs out under the multi-lock.
pub fn a_multi_lock_renews_a_member_held_on_a_fixed_lease(env: &dyn TestEnv) {
    let unit = env.unit();
    let prefix = unique("multi-fixed");
    // A watchdog lease the wait below outlasts: only renewals keep the members.
    let (me, other) = (env.client_with_watchdog(unit * 6), env.client());
    let (a, b) = (
        me.lock(format!("{prefix}:a")),
        me.lock(format!("{prefix}:b")),
    );
    let fixed = a.lock_with_lease(unit * 2).expect("lock");
    let multi = MultiLock::new([a.clone(), b.clone()]);
    let guard = multi.lock().expect("multi-lock");
    env.advance(unit * 7);
    assert!(!guard.is_lost(), "every member is renewed");
    assert!(!fixed.is_lost(), "the member's hold is the watchdog's now");
    assert_store_outlives(env, &a, &fixed, "the member held on a fixed lease");
    assert!(
        other
            .lock(format!("{prefix}:a"))
            .try_lock()
            .expect("try")
            .is_none(),
        "another owner took a member of a held multi-lock"
    );
    guard.unlock().expect("unlock");
    fixed.unlock().expect("unlock");
    assert!(!a.is_locked().expect("status"));
}

/// A multi-lock whose members are all held by the thread already, on leases that cover it,
/// takes them without a store call (and a store that fails meanwhile is not asked).
pub fn a_multi_lock_of_members_already_held_needs_no_store_call(env: &dyn TestEnv) {
    let prefix = unique("multi-held");
    let faulty = FaultyBackend::new(env.backend());
    let client = client_on(env, &faulty);
    let (a, b) = (
        client.lock(format!("{prefix}:a")),
        client.lock(format!("{prefix}:b")),
    );
    let (ga, gb) = (a.lock().expect("lock"), b.lock().expect("lock"));
    faulty.inject(Fault::fail(Op::TryAcquire));
    let guard = MultiLock::new([a.clone(), b.clone()])
        .lock()
        .expect("re-entered locally");
    assert_eq!(a.hold_count().expect("count"), 2);
    faulty.clear();
    drop(guard);
    drop((ga, gb));
    assert!(!a.is_locked().expect("status") && !b.is_locked().expect("status"));
}
