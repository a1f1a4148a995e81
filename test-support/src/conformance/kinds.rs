//! What every kind of lock does alike (exclusion, reentrancy, leases, the watchdog, bad input),
//! run for each kind through one trait over the handles; and names used as another kind.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use dlocks::{LockClient, LockError, LockGuard};

use super::unique;
use crate::env::TestEnv;

/// The method set every handle shares, for tests that run on each kind.
pub trait AnyLock: Send + Sync {
    fn lock(&self) -> Result<LockGuard, LockError>;
    fn try_lock(&self) -> Result<Option<LockGuard>, LockError>;
    fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>, LockError>;
    fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard, LockError>;
    fn unlock(&self) -> Result<(), LockError>;
    fn is_locked(&self) -> Result<bool, LockError>;
    fn is_held_by_current_thread(&self) -> Result<bool, LockError>;
    fn hold_count(&self) -> Result<u32, LockError>;
    fn remaining_lease(&self) -> Result<Option<Duration>, LockError>;
    fn force_unlock(&self) -> Result<bool, LockError>;
}

macro_rules! any_lock {
    ($($handle:ty),*) => {$(
        impl AnyLock for $handle {
            fn lock(&self) -> Result<LockGuard, LockError> {
                <$handle>::lock(self)
            }
            fn try_lock(&self) -> Result<Option<LockGuard>, LockError> {
                <$handle>::try_lock(self)
            }
            fn try_lock_for(&self, wait: Duration) -> Result<Option<LockGuard>, LockError> {
                <$handle>::try_lock_for(self, wait)
            }
            fn lock_with_lease(&self, lease: Duration) -> Result<LockGuard, LockError> {
                <$handle>::lock_with_lease(self, lease)
            }
            fn unlock(&self) -> Result<(), LockError> {
                <$handle>::unlock(self)
            }
            fn is_locked(&self) -> Result<bool, LockError> {
                <$handle>::is_locked(self)
            }
            fn is_held_by_current_thread(&self) -> Result<bool, LockError> {
                <$handle>::is_held_by_current_thread(self)
            }
            fn hold_count(&self) -> Result<u32, LockError> {
                <$handle>::hold_count(self)
            }
            fn remaining_lease(&self) -> Result<Option<Duration>, LockError> {
                <$handle>::remaining_lease(self)
            }
            fn force_unlock(&self) -> Result<bool, LockError> {
                <$handle>::force_unlock(self)
            }
        }
    )*};
}
any_lock!(
    dlocks::Lock,
    dlocks::FairLock,
    dlocks::ReadLock,
    dlocks::WriteLock
);

/// Makes a handle of one kind from a client and a name.
pub type Maker = fn(&LockClient, &str) -> Box<dyn AnyLock>;

/// The exclusive kinds the environment's backend keeps.
pub fn exclusive_kinds(env: &dyn TestEnv) -> Vec<(&'static str, Maker)> {
    let all: [(&'static str, dlocks::LockKind, Maker); 3] = [
        ("reentrant", dlocks::LockKind::Reentrant, |c, n| {
            Box::new(c.lock(n))
        }),
        ("fair", dlocks::LockKind::Fair, |c, n| {
            Box::new(c.fair_lock(n))
        }),
        ("write", dlocks::LockKind::Write, |c, n| {
            Box::new(c.read_write_lock(n).write_lock())
        }),
    ];
    let backend = env.backend();
    all.into_iter()
        .filter(|(_, kind, _)| backend.supports(*kind))
        .map(|(name, _, make)| (name, make))
        .collect()
}

pub fn every_exclusive_kind_excludes_reenters_and_releases(env: &dyn TestEnv) {
    for (kind, make) in exclusive_kinds(env) {
        let name = unique(kind);
        let (a, b) = (env.client(), env.client());
        let (mine, theirs) = (make(&a, &name), make(&b, &name));
        assert!(!mine.is_locked().expect("is_locked"), "{kind}");
        let outer = mine.lock().expect("lock");
        let inner = mine.try_lock().expect("reenter").expect("reentrant");
        assert_eq!(mine.hold_count().expect("count"), 2, "{kind}");
        assert!(
            theirs.try_lock().expect("try").is_none(),
            "{kind}: excluded"
        );
        assert!(theirs.is_locked().expect("is_locked"), "{kind}");
        assert!(!theirs.is_held_by_current_thread().expect("held"), "{kind}");
        let left = theirs.remaining_lease().expect("lease").expect("a lease");
        assert!(left <= env.unit() * 60, "{kind}: watchdog lease {left:?}");
        drop(inner);
        assert!(
            theirs.try_lock().expect("try").is_none(),
            "{kind}: still held once"
        );
        outer.unlock().expect("unlock");
        assert!(
            !mine.is_locked().expect("is_locked"),
            "{kind}: released at the last"
        );
        let theirs_now = theirs.try_lock().expect("try").expect("free for the other");
        assert!(
            mine.unlock().expect_err("nothing held").is_not_held(),
            "{kind}"
        );
        drop(theirs_now);
    }
}

pub fn every_exclusive_kind_loses_no_update_under_contention(env: &dyn TestEnv) {
    const THREADS: usize = 8;
    const ROUNDS: usize = 20;
    for (kind, make) in exclusive_kinds(env) {
        let name = unique(kind);
        let counter = AtomicU64::new(0);
        let inside = AtomicUsize::new(0);
        thread::scope(|s| {
            for _ in 0..THREADS {
                let client = env.client();
                let handle = make(&client, &name);
                let (counter, inside) = (&counter, &inside);
                s.spawn(move || {
                    let _client = client;
                    for _ in 0..ROUNDS {
                        let guard = handle.lock().expect("lock");
                        assert_eq!(
                            inside.fetch_add(1, Ordering::SeqCst),
                            0,
                            "{kind}: two holders"
                        );
                        let value = counter.load(Ordering::SeqCst);
                        thread::yield_now();
                        counter.store(value + 1, Ordering::SeqCst);
                        inside.fetch_sub(1, Ordering::SeqCst);
                        guard.unlock().expect("unlock");
                    }
                });
            }
        });
        assert_eq!(
            counter.into_inner(),
            (THREADS * ROUNDS) as u64,
            "{kind}: lost updates"
        );
    }
}

pub fn every_exclusive_kind_expires_and_is_renewed(env: &dyn TestEnv) {
    let unit = env.unit();
    // Every kind at once, each on a name and a client of its own: the leases of all of them
    // run out, or are renewed, in the same time.
    let kinds: Vec<(&str, LockClient, Box<dyn AnyLock>)> = exclusive_kinds(env)
        .into_iter()
        .map(|(kind, make)| {
            let client = env.client_with_watchdog(unit * 6);
            let lock = make(&client, &unique(kind));
            (kind, client, lock)
        })
        .collect();
    let fixed: Vec<LockGuard> = kinds
        .iter()
        .map(|(_, _, lock)| lock.lock_with_lease(unit * 2).expect("lock"))
        .collect();
    env.advance(unit * 3);
    for ((kind, _, lock), fixed) in kinds.iter().zip(fixed) {
        assert!(fixed.is_lost(), "{kind}: a fixed lease ends");
        assert!(!lock.is_locked().expect("is_locked"), "{kind}");
        assert!(fixed.unlock().expect_err("lost").is_not_held(), "{kind}");
    }
    let renewed: Vec<LockGuard> = kinds
        .iter()
        .map(|(_, _, lock)| lock.lock().expect("lock"))
        .collect();
    for _ in 0..6 {
        env.advance(unit * 2 + unit / 5);
    }
    for ((kind, _, lock), renewed) in kinds.iter().zip(renewed) {
        assert!(!renewed.is_lost(), "{kind}: the watchdog renews it");
        assert!(lock.is_held_by_current_thread().expect("held"), "{kind}");
        renewed.unlock().expect("unlock");
    }
}

pub fn every_exclusive_kind_is_forced_open_and_wakes_its_waiter(env: &dyn TestEnv) {
    let unit = env.unit();
    for (kind, make) in exclusive_kinds(env) {
        let name = unique(kind);
        let (holder, waiter, admin) = (env.client(), env.client(), env.client());
        let held = make(&holder, &name);
        let guard = held.lock_with_lease(unit * 1000).expect("lock");
        let waiting = make(&waiter, &name);
        thread::scope(|s| {
            let got = s.spawn(|| {
                waiting
                    .try_lock_for(unit * 500)
                    .expect("wait")
                    .map(|guard| guard.unlock().is_ok())
            });
            env.await_sleepers(1);
            assert!(make(&admin, &name).force_unlock().expect("force"), "{kind}");
            assert_eq!(
                got.join().expect("waiter"),
                Some(true),
                "{kind}: woken, no time passed"
            );
        });
        assert!(!held.is_held_by_current_thread().expect("held"), "{kind}");
        assert!(
            guard.is_lost(),
            "{kind}: the holder learns it was forced open"
        );
    }
}

pub fn every_kind_rejects_bad_input(env: &dyn TestEnv) {
    let client = env.client();
    let empty = String::new();
    let rw = client.read_write_lock(empty.clone());
    let handles: Vec<(&str, Box<dyn AnyLock>)> = vec![
        ("fair", Box::new(client.fair_lock(empty))),
        ("read", Box::new(rw.read_lock())),
        ("write", Box::new(rw.write_lock())),
    ];
    for (kind, lock) in handles {
        for result in [
            lock.lock().map(drop),
            lock.try_lock().map(drop),
            lock.is_locked().map(drop),
            lock.force_unlock().map(drop),
            lock.unlock(),
        ] {
            assert!(
                matches!(
                    result,
                    Err(LockError::InvalidArgument {
                        argument: "name",
                        ..
                    })
                ),
                "{kind}: {result:?}"
            );
        }
    }
    let fair = client.fair_lock(unique("bad-lease"));
    assert!(matches!(
        fair.lock_with_lease(Duration::ZERO),
        Err(LockError::InvalidArgument {
            argument: "lease",
            ..
        })
    ));
    assert!(matches!(
        fair.try_lock_for(dlocks::MAX_DURATION * 2),
        Err(LockError::InvalidArgument {
            argument: "wait",
            ..
        })
    ));
    assert!(!fair.is_locked().expect("nothing taken"));
    let bad = dlocks::LockClientBuilder::new(env.backend())
        .fair_wait_timeout(Duration::ZERO)
        .build();
    assert!(matches!(
        bad,
        Err(LockError::InvalidArgument {
            argument: "fair_wait_timeout",
            ..
        })
    ));
}

pub(super) fn assert_wrong_kind<T: std::fmt::Debug>(result: Result<T, LockError>, what: &str) {
    match result {
        Err(LockError::WrongKind { found, .. }) => assert!(!found.is_empty(), "{what}"),
        other => panic!("{what}: expected WrongKind, got {other:?}"),
    }
}

pub fn a_name_in_use_as_one_kind_refuses_the_others(env: &dyn TestEnv) {
    let unit = env.unit();
    let (a, b) = (env.client(), env.client());

    // A read-write lock, held for reading: not a plain lock, not a fair lock.
    let name = unique("kind-rw");
    let reading = a
        .read_write_lock(name.clone())
        .read_lock()
        .lock()
        .expect("read");
    assert_wrong_kind(b.lock(name.clone()).try_lock(), "plain on read-write");
    assert_wrong_kind(b.lock(name.clone()).lock(), "plain lock() on read-write");
    assert_wrong_kind(b.fair_lock(name.clone()).try_lock(), "fair on read-write");
    assert!(!reading.is_lost(), "nothing changed");
    reading.unlock().expect("unlock");

    // A plain lock: not a read-write lock.
    let name = unique("kind-plain");
    let held = a.lock(name.clone()).lock().expect("lock");
    let rw = b.read_write_lock(name.clone());
    assert_wrong_kind(rw.read_lock().try_lock(), "read on plain");
    assert_wrong_kind(rw.write_lock().try_lock(), "write on plain");
    assert!(a
        .lock(name.clone())
        .is_held_by_current_thread()
        .expect("held"));
    held.unlock().expect("unlock");

    // A fair lock with a waiter in its queue: not a plain lock (which would jump the queue).
    let name = unique("kind-fair");
    let fair_held = a.fair_lock(name.clone()).lock().expect("lock");
    let queued = env.client();
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            queued
                .fair_lock(name.clone())
                .try_lock_for(unit * 1000)
                .expect("wait")
                .map(|guard| guard.unlock().is_ok())
        });
        env.await_sleepers(1);
        // The queue is kept beside the lock: every other kind is refused with a queue there
        // as without one.
        assert_wrong_kind(
            b.lock(name.clone()).try_lock(),
            "plain on a queued fair lock",
        );
        assert_wrong_kind(
            b.fenced_lock(name.clone()).try_lock(),
            "fenced on a queued fair lock",
        );
        let rw = b.read_write_lock(name.clone());
        assert_wrong_kind(rw.read_lock().try_lock(), "read on a queued fair lock");
        assert_wrong_kind(rw.write_lock().try_lock(), "write on a queued fair lock");
        assert!(!fair_held.is_lost(), "nothing changed");
        fair_held.unlock().expect("unlock");
        assert_eq!(
            waiter.join().expect("waiter"),
            Some(true),
            "the queue went on"
        );
    });
}
