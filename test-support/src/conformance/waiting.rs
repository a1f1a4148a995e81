//! Waiting: woken by releases, bounded by the wait, capped by the holder's lease.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use dlocks::testing::{Fault, FaultyBackend, Op};
use dlocks::LockClient;

use super::{await_answered, unique};
use crate::env::TestEnv;

pub fn waiter_wakes_on_release_without_time_passing(env: &dyn TestEnv) {
    let name = unique("wake");
    let unit = env.unit();
    let holder = env.client();
    let lock = holder.lock(name.clone());
    let guard = lock.lock_with_lease(unit * 1000).expect("lock");
    let waiter = env.client();
    let (done, woken) = std::sync::mpsc::channel();
    thread::scope(|s| {
        s.spawn(move || {
            let lock = waiter.lock(name.clone());
            let guard = lock.try_lock_for(unit * 1000).expect("wait");
            let _ = done.send(guard.map(|guard| guard.unlock().is_ok()));
        });
        env.await_sleepers(1);
        guard.unlock().expect("unlock");
        // No time is advanced: only the release can wake the waiter before the holder's lease
        // (1000 units) or its own wait would. Bounded in real time so a missed wake-up fails.
        let result = woken.recv_timeout(unit * 250 + Duration::from_secs(5));
        if result.is_err() {
            // Let the stuck waiter finish so the scope can end, then fail.
            env.advance(unit * 1000);
        }
        assert_eq!(result, Ok(Some(true)), "woken by the release");
    });
}

pub fn try_lock_for_times_out(env: &dyn TestEnv) {
    let name = unique("timeout");
    let unit = env.unit();
    let holder = env.client();
    let _held = holder
        .lock(name.clone())
        .lock_with_lease(unit * 1000)
        .expect("lock");
    let waiter = env.client();
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            let lock = waiter.lock(name.clone());
            let got = lock.try_lock_for(unit * 3).expect("wait");
            got.is_none()
        });
        env.await_sleepers(1);
        env.advance(unit * 3);
        assert!(
            waiting.join().expect("waiter"),
            "Ok(None) once the wait is over"
        );
    });
}

pub fn zero_wait_is_a_single_try(env: &dyn TestEnv) {
    let name = unique("zero-wait");
    let holder = env.client();
    let _held = holder.lock(name.clone()).lock().expect("lock");
    let other = env.client();
    let lock = other.lock(name);
    assert!(lock.try_lock_for(Duration::ZERO).expect("try").is_none());
    assert!(lock
        .try_lock_with_lease(Duration::ZERO, env.unit())
        .expect("try")
        .is_none());
}

/// Seed scenario: 1000 threads `try_lock_with_lease(10 ms wait, 10 s lease)`: exactly one wins.
pub fn seed_1000_threads_short_wait_long_lease_exactly_one_acquires(env: &dyn TestEnv) {
    const THREADS: usize = 1000;
    let name = unique("seed-1000");
    let client = env.client();
    let acquired = AtomicUsize::new(0);
    let returned = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..THREADS {
            let lock = client.lock(name.clone());
            let (acquired, returned) = (&acquired, &returned);
            s.spawn(move || {
                let got = lock
                    .try_lock_with_lease(Duration::from_millis(10), Duration::from_secs(10))
                    .expect("try_lock_with_lease");
                if let Some(guard) = got {
                    acquired.fetch_add(1, Ordering::SeqCst);
                    guard.leak(); // keep it for the 10 s lease
                }
                returned.fetch_add(1, Ordering::SeqCst);
            });
        }
        if env.is_virtual_time() {
            env.await_sleepers(THREADS - 1);
            env.advance(Duration::from_millis(10));
        }
    });
    assert_eq!(returned.load(Ordering::SeqCst), THREADS);
    assert_eq!(acquired.load(Ordering::SeqCst), 1);
}

/// Seed scenario: 100 threads `try_lock_with_lease(10 s wait, 5 ms lease)`, none unlocking:
/// each lease runs out in turn and every thread acquires.
pub fn seed_100_threads_long_wait_short_lease_all_acquire(env: &dyn TestEnv) {
    const THREADS: usize = 100;
    let name = unique("seed-100");
    let client = env.client();
    let acquired = AtomicUsize::new(0);
    thread::scope(|s| {
        for _ in 0..THREADS {
            let lock = client.lock(name.clone());
            let acquired = &acquired;
            s.spawn(move || {
                let got = lock
                    .try_lock_with_lease(Duration::from_secs(10), Duration::from_millis(5))
                    .expect("try_lock_with_lease");
                if let Some(guard) = got {
                    acquired.fetch_add(1, Ordering::SeqCst);
                    guard.leak(); // never unlocked: the lease hands it on
                }
            });
        }
        if env.is_virtual_time() {
            for holders in 1..THREADS {
                env.await_sleepers(THREADS - holders);
                env.advance(Duration::from_millis(5));
            }
        }
    });
    assert_eq!(acquired.load(Ordering::SeqCst), THREADS);
}

/// A store that stops answering for a while (a failover, a restart) does not end a thread's
/// wait: its retries fail, it tries again after a pause, and it takes the lock once the store
/// answers again.
pub fn a_waiter_rides_out_a_store_that_stops_answering_within_its_wait(env: &dyn TestEnv) {
    let name = unique("outage-wait");
    let unit = env.unit();
    let (guard, faulty, waiter) = held_with_a_waiter_behind_faults(env, &name);
    let taken = AtomicBool::new(false);
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            waiter
                .lock(name.clone())
                .try_lock_for(unit * 1000)
                .map(|guard| {
                    guard.map(|guard| {
                        taken.store(true, Ordering::SeqCst);
                        guard.unlock().is_ok()
                    })
                })
        });
        // Its first try refused, before the store stops answering.
        await_answered(env, &faulty, Op::TryAcquire, 1, 1);
        faulty.inject(Fault::fail(Op::TryAcquire));
        answered_all(&faulty, Op::TryAcquire);
        let before = faulty.calls(Op::TryAcquire);
        // The release wakes the waiter, whose retry the store does not answer; nor the next.
        guard.unlock().expect("unlock");
        let until = Instant::now() + Duration::from_secs(20);
        // A wake-up by a release is the store's, not the clock's: time is moved on only once
        // the woken waiter has made its retry, or a manual clock could run past its whole wait
        // before it is scheduled.
        while faulty.calls(Op::TryAcquire) < before + 1 && Instant::now() < until {
            thread::sleep(Duration::from_millis(1));
        }
        while faulty.calls(Op::TryAcquire) < before + 3 && Instant::now() < until {
            env.advance(outage_pause());
        }
        assert!(
            faulty.calls(Op::TryAcquire) >= before + 3,
            "the waiter tried again"
        );
        faulty.clear();
        let until = Instant::now() + Duration::from_secs(20);
        // Time stops once the waiter holds the lock: moved on while its thread is not
        // scheduled yet, a manual clock would run past the hold's lease before its unlock.
        while !waiting.is_finished() && !taken.load(Ordering::SeqCst) && Instant::now() < until {
            env.advance(outage_pause());
        }
        if !waiting.is_finished() && !taken.load(Ordering::SeqCst) {
            // Let it end its wait, so the scope can end, then fail.
            env.advance(unit * 1000);
        }
        assert_eq!(
            waiting.join().expect("waiter").expect("no error"),
            Some(true),
            "the lock taken once the store answered"
        );
    });
}

/// An acquire whose first try the store does not answer (a failover or a leader election under
/// way; the try failed, or it ran and its reply was lost) tries again as the same hold within
/// its wait, and holds once the store answers: a hold the unanswered try made is re-entered,
/// not waited for. A try that may not wait gets the error at once.
pub fn a_first_try_the_store_does_not_answer_is_made_again_within_the_wait(env: &dyn TestEnv) {
    let unit = env.unit();
    for fault in [
        Fault::fail(Op::TryAcquire),
        Fault::lose_reply(Op::TryAcquire),
    ] {
        let name = unique("outage-first");
        let faulty = env.faulty();
        let client = dlocks::LockClientBuilder::new(std::sync::Arc::new(faulty.clone()))
            .watchdog_lease(unit * 6)
            .build()
            .expect("client");
        let lock = client.lock(name.clone());
        faulty.inject(Fault::fail(Op::TryAcquire));
        let error = lock.try_lock().expect_err("one try, unanswered");
        assert!(error.is_unavailable(), "{error:?}");
        faulty.clear();
        faulty.inject(fault.clone());
        let before = faulty.calls(Op::TryAcquire);
        thread::scope(|s| {
            let waiting = s.spawn(|| {
                lock.try_lock_for(unit * 1000)
                    .map(|guard| guard.map(|guard| (guard.is_lost(), guard.unlock().is_ok())))
            });
            let until = Instant::now() + Duration::from_secs(20);
            // Time moves on only while the waiter sleeps between its tries.
            while faulty.calls(Op::TryAcquire) < before + 2 && Instant::now() < until {
                env.await_sleepers(1);
                env.advance(outage_pause());
            }
            // The store answers again; the waiter's next try (after at most the longest pause)
            // takes the lock.
            faulty.clear();
            env.await_sleepers(1);
            env.advance(outage_pause());
            assert_eq!(
                waiting.join().expect("waiter").expect("no error"),
                Some((false, true)),
                "{fault:?}: the lock taken within the wait once the store answered"
            );
        });
        assert!(
            env.client().lock(name).try_lock().expect("try").is_some(),
            "{fault:?}: nothing left held"
        );
    }
}

/// A wait without a bound (`lock()`) does not wait forever for a store that stays silent: after
/// one watchdog lease of failed retries in a row, it returns the store's error, and leaves
/// nothing held.
pub fn a_wait_without_a_bound_returns_the_error_of_a_store_silent_for_a_lease(env: &dyn TestEnv) {
    let name = unique("outage-lock");
    let (guard, faulty, waiter) = held_with_a_waiter_behind_faults(env, &name);
    thread::scope(|s| {
        let waiting = s.spawn(|| waiter.lock(name.clone()).lock().map(drop));
        // Its first try refused, before the store stops answering.
        await_answered(env, &faulty, Op::TryAcquire, 1, 1);
        faulty.inject(Fault::fail(Op::TryAcquire));
        answered_all(&faulty, Op::TryAcquire);
        guard.unlock().expect("unlock");
        let until = Instant::now() + Duration::from_secs(20);
        while !waiting.is_finished() && Instant::now() < until {
            env.advance(outage_pause());
        }
        let gave_up = waiting.is_finished();
        if !gave_up {
            // Let it take the lock, so the scope can end, then fail.
            faulty.clear();
            env.advance(outage_pause());
        }
        let result = waiting.join().expect("waiter");
        assert!(
            gave_up,
            "lock() still waited for a silent store: {result:?}"
        );
        let error = result.expect_err("the store never answered");
        assert!(error.is_unavailable(), "{error:?}");
    });
    faulty.clear();
    let other = env.client();
    assert!(
        other.lock(name).try_lock().expect("try").is_some(),
        "nothing left held"
    );
}

/// A release that lands between a waiter's first try and its subscription wakes the waiter,
/// for every exclusive kind and for a reader behind a writer: no time passes, and the holder's
/// lease is long. (A waiter whose backend already listened for the lock's releases before that
/// try skips its retry after subscribing only if its backend heard no announcement meanwhile:
/// here it heard one.)
pub fn a_release_before_the_waiters_subscription_wakes_it(env: &dyn TestEnv) {
    let unit = env.unit();
    let mut cases: Vec<(&str, super::Maker, super::Maker)> = super::exclusive_kinds(env)
        .into_iter()
        .map(|(kind, make)| (kind, make, make))
        .collect();
    if env.backend().supports(dlocks::LockKind::Read) {
        cases.push((
            "read behind a write",
            |c, n| Box::new(c.read_write_lock(n).write_lock()),
            |c, n| Box::new(c.read_write_lock(n).read_lock()),
        ));
    }
    for (kind, make_held, make_waiting) in cases {
        let name = unique("release-before-subscription");
        let holder = env.client();
        let faulty = env.faulty();
        let waiter = dlocks::LockClientBuilder::new(std::sync::Arc::new(faulty.clone()))
            .watchdog_lease(unit * 60)
            .build()
            .expect("client");
        let (held, waiting) = (make_held(&holder, &name), make_waiting(&waiter, &name));
        // A wait through one release first: the waiter's backend listens for the name's
        // releases from then on (for as long as it keeps a channel nobody waits on).
        let guard = held.lock_with_lease(unit * 1000).expect("lock");
        thread::scope(|s| {
            let got = s.spawn(|| waiting.try_lock_for(unit * 1000).expect("wait").map(drop));
            env.await_sleepers(1);
            guard.unlock().expect("unlock");
            assert_eq!(got.join().expect("waiter"), Some(()), "{kind}: warmed up");
        });
        let guard = held.lock_with_lease(unit * 1000).expect("lock");
        // The waiter's subscription waits until the holder has released.
        let (subscribing, at_subscribe) = std::sync::mpsc::channel();
        let (released, after_release) = std::sync::mpsc::channel::<()>();
        let after_release = std::sync::Mutex::new(after_release);
        faulty.observe(move |call| {
            if call.op == Op::Subscribe {
                let _ = subscribing.send(());
                if let Ok(after_release) = after_release.lock() {
                    let _ = after_release.recv_timeout(Duration::from_secs(30));
                }
            }
        });
        let (done, woken) = std::sync::mpsc::channel();
        thread::scope(|s| {
            s.spawn(|| {
                let got = waiting.try_lock_for(unit * 1000).expect("wait");
                let _ = done.send(got.map(|guard| guard.unlock().is_ok()));
            });
            at_subscribe
                .recv_timeout(Duration::from_secs(30))
                .expect("the waiter's first try refused, and it subscribes");
            guard.unlock().expect("unlock");
            drop(released);
            // Bounded in real time so a missed wake-up fails (virtual time does not move).
            let bound = match env.is_virtual_time() {
                true => Duration::from_secs(10),
                false => unit * 250 + Duration::from_secs(5),
            };
            let result = woken.recv_timeout(bound);
            if result.is_err() {
                // Let the stuck waiter finish so the scope can end, then fail.
                env.advance(unit * 1000);
            }
            assert_eq!(result, Ok(Some(true)), "{kind}: woken by the release");
        });
    }
}

/// Returns once every `op` call made through `faulty` has been answered (bounded: 30 s). After
/// a fault is injected, a call that began before it may still be on its way to the store (a
/// waiter's retry, on a slow server): it lands unaffected, and after a release that follows
/// it would take the lock. Waiting for it first makes the fault hold from the release on.
fn answered_all(faulty: &FaultyBackend, op: Op) {
    let until = Instant::now() + Duration::from_secs(30);
    while faulty.answered(op) < faulty.calls(op) {
        assert!(Instant::now() < until, "a {op:?} call never returned");
        thread::sleep(Duration::from_millis(1));
    }
}

/// `name` held for a long lease by one client, and another client whose store calls go through
/// a `FaultyBackend`, to wait for it.
fn held_with_a_waiter_behind_faults(
    env: &dyn TestEnv,
    name: &str,
) -> (dlocks::LockGuard, FaultyBackend, LockClient) {
    let guard = env
        .client()
        .lock(name)
        .lock_with_lease(env.unit() * 1000)
        .expect("lock");
    let faulty = env.faulty();
    let waiter = dlocks::LockClientBuilder::new(std::sync::Arc::new(faulty.clone()))
        .watchdog_lease(env.unit() * 6)
        .build()
        .expect("client");
    (guard, faulty, waiter)
}

/// The longest pause a waiter makes between two retries the store did not answer.
fn outage_pause() -> Duration {
    Duration::from_secs(1)
}
