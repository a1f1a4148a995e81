//! The conformance suite on the memory backend driven by a `ManualClock`, plus what only virtual
//! time can show: things happen at exactly the instant the clock reaches, and no test sleeps.

use dlock_test_support as support;
use dlock_test_support::conformance_suite;

use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dlocks::backend::Clock;
use dlocks::testing::{Fault, FaultyBackend, Op};
use dlocks::{
    ClockDrift, LeaseChange, LockClient, LockClientBuilder, LockGuard, LossReason, ManualClock,
    MemoryBackend,
};
use support::env::{ManualMemory, TestEnv};

conformance_suite!(support::env::ManualMemory::new);

const MS: Duration = Duration::from_millis(1);

/// A waiter that heard no release between its first try and its subscription parks without
/// trying again: a wait through one release costs the store two tries, of every exclusive kind.
#[test]
fn a_wait_through_one_release_tries_twice() {
    let env = ManualMemory::new();
    for (kind, make) in support::conformance::exclusive_kinds(&env) {
        let name = format!("two-tries-{kind}");
        let holder = env.client();
        let faulty = env.faulty();
        let waiter = LockClient::new(faulty.clone());
        let (held, waiting) = (make(&holder, &name), make(&waiter, &name));
        let guard = held
            .lock_with_lease(Duration::from_secs(100))
            .expect("lock");
        thread::scope(|s| {
            let got = s.spawn(|| {
                waiting
                    .try_lock_for(Duration::from_secs(50))
                    .expect("wait")
                    .map(|guard| guard.unlock().is_ok())
            });
            env.await_sleepers(1);
            assert_eq!(
                faulty.calls(Op::TryAcquire),
                1,
                "{kind}: parked on its first try"
            );
            guard.unlock().expect("unlock");
            assert_eq!(got.join().expect("waiter"), Some(true), "{kind}");
        });
        assert_eq!(
            faulty.calls(Op::TryAcquire),
            2,
            "{kind}: one try after the release"
        );
    }
}

#[test]
fn a_wait_ends_exactly_at_its_deadline() {
    let env = ManualMemory::new();
    let holder = env.client();
    let _held = holder
        .lock("exact-wait")
        .lock_with_lease(Duration::from_secs(100))
        .expect("lock");
    let waiter = env.client();
    let (done, result) = mpsc::channel();
    thread::spawn(move || {
        let got = waiter
            .lock("exact-wait")
            .try_lock_for(Duration::from_secs(5))
            .expect("wait");
        let _ = done.send(got.is_some());
    });
    env.await_sleepers(1);
    env.advance(Duration::from_secs(5) - MS);
    assert_eq!(
        env.clock.sleepers(),
        1,
        "still waiting 1 ms before the deadline"
    );
    assert!(result.try_recv().is_err());
    env.advance(MS);
    assert_eq!(result.recv(), Ok(false), "gave up at the deadline");
}

/// A skip (a stalled call on another thread, a paused process) carries time past a waiter's
/// deadline: the waiter is still blocked, and counted so, until the next advance runs it late.
/// (A test that advances only while it sees waiters blocked would otherwise wait forever.)
#[test]
fn a_waiter_whose_deadline_a_skip_carried_past_stays_counted_until_the_next_advance() {
    let env = ManualMemory::new();
    let holder = env.client();
    let _held = holder
        .lock("skipped-wait")
        .lock_with_lease(Duration::from_secs(100))
        .expect("lock");
    let (got, _holding) =
        waiting_thread(&env.client(), "skipped-wait", Some(Duration::from_secs(2)));
    env.await_sleepers(1);
    env.clock.skip(Duration::from_secs(3));
    assert_eq!(
        env.clock.sleepers(),
        1,
        "blocked past its deadline until time is advanced"
    );
    assert!(env.clock.wait_for_sleepers(1));
    assert!(got.try_recv().is_err(), "nothing runs on a skip");
    env.advance(Duration::ZERO);
    assert_eq!(got.recv(), Ok(false), "gave up, late, at the advance");
    assert_eq!(env.clock.sleepers(), 0);
}

/// The guard stops trusting its lease exactly the drift margin before the store ends it, and
/// the store ends it exactly when it runs out.
#[test]
fn a_lease_ends_exactly_when_it_runs_out() {
    let env = ManualMemory::new();
    let client = env.client();
    let lock = client.lock("exact-lease");
    let lease = Duration::from_secs(3);
    let trusted = lease - ClockDrift::DEFAULT.margin(lease);
    let guard = lock.lock_with_lease(lease).expect("lock");
    env.advance(trusted - MS);
    assert!(lock.is_locked().expect("held"));
    assert!(!guard.is_lost());
    env.advance(MS);
    assert!(
        guard.is_lost(),
        "given up the margin before the store's end"
    );
    assert!(lock.is_locked().expect("the store still has it"));
    env.advance(lease - trusted - MS);
    assert!(lock.is_locked().expect("held"));
    env.advance(MS);
    assert!(!lock.is_locked().expect("expired"));
}

#[test]
fn the_watchdog_ticks_exactly_every_third_of_its_lease() {
    let env = ManualMemory::new();
    let client = env.client_with_watchdog(Duration::from_secs(6));
    let lock = client.lock("exact-tick");
    let guard = lock.lock().expect("lock");
    env.advance(Duration::from_secs(2) - MS);
    assert_eq!(client.watchdog_stats().batches, 0);
    env.advance(MS);
    assert_eq!(client.watchdog_stats().batches, 1, "ticked at lease/3");
    // Renewed at t = 2 s for 6 s: the lease now reaches t = 8 s, not t = 6 s.
    let deadline = guard.lease_deadline();
    env.advance(Duration::from_secs(2));
    assert_eq!(client.watchdog_stats().batches, 2);
    assert!(guard.lease_deadline() > deadline);
    let left = lock.remaining_lease().expect("ttl").expect("held");
    assert_eq!(left, Duration::from_secs(6), "renewed at this very instant");
    guard.unlock().expect("unlock");
}

#[test]
fn a_lock_left_by_a_dead_holder_is_free_exactly_at_its_lease_end() {
    let env = ManualMemory::new();
    env.client()
        .lock("dead")
        .lock_with_lease(Duration::from_secs(2))
        .expect("lock")
        .leak();
    let survivor = env.client();
    let (done, result) = mpsc::channel();
    thread::spawn(move || {
        let lock = survivor.lock("dead");
        let got = lock.lock().expect("lock");
        let _ = done.send(got.unlock().is_ok());
    });
    env.await_sleepers(1);
    env.advance(Duration::from_secs(2) - MS);
    assert!(result.try_recv().is_err());
    env.advance(MS);
    assert_eq!(result.recv(), Ok(true));
}

#[test]
fn released_and_expired_locks_leave_no_state_behind() {
    let env = ManualMemory::new();
    let client = env.client();
    for i in 0..500 {
        client
            .lock(format!("n{i}"))
            .lock()
            .expect("lock")
            .unlock()
            .expect("unlock");
        client
            .lock(format!("e{i}"))
            .lock_with_lease(Duration::from_secs(1))
            .expect("lock")
            .leak();
    }
    assert_eq!(env.backend.len(), 500);
    env.advance(Duration::from_secs(1));
    assert!(env.backend.is_empty());
}

/// A client with a 6 s watchdog lease whose calls pass through a fault injector.
fn faulty_client() -> (ManualMemory, FaultyBackend, LockClient) {
    let env = ManualMemory::new();
    let faulty = FaultyBackend::new(env.backend());
    let client = LockClientBuilder::new(Arc::new(faulty.clone()))
        .watchdog_lease(Duration::from_secs(6))
        .build()
        .expect("client");
    (env, faulty, client)
}

#[test]
fn a_failed_renewal_is_retried_within_the_lease() {
    let (env, faulty, client) = faulty_client();
    let lock = client.lock("flaky-renewal");
    let guard = lock.lock().expect("lock");
    faulty.inject(Fault::fail(Op::Renew).times(1));
    env.advance(Duration::from_secs(2));
    assert_eq!(client.watchdog_stats().failures, 1);
    assert!(!guard.is_lost());
    // Retried a quarter period later, not a whole one.
    env.advance(Duration::from_millis(500));
    assert_eq!(client.watchdog_stats().renewed, 1);
    assert_eq!(
        lock.remaining_lease().expect("ttl"),
        Some(Duration::from_secs(6))
    );
    guard.unlock().expect("unlock");
}

/// Renewals that fail until half a second before the lease runs out still keep the hold
/// when the store answers again before it does: the last tries come at half the time left,
/// not first at the deadline, when the hold is lost.
#[test]
fn a_renewal_failing_until_just_before_the_deadline_is_tried_again_before_it() {
    let (env, faulty, client) = faulty_client();
    let lock = client.lock("flaky-to-the-end");
    let guard = lock.lock().expect("lock");
    // The tick at 2 s and its retries every 0.5 s, the last at 5.5 s: eight failures.
    faulty.inject(Fault::fail(Op::Renew).times(8));
    env.advance(Duration::from_millis(5500));
    assert_eq!(client.watchdog_stats().failures, 8);
    assert!(!guard.is_lost());
    // The deadline (6 s less the drift margin) passes: the hold was renewed before it.
    env.advance(Duration::from_millis(500));
    assert!(!guard.is_lost(), "lost at its deadline");
    assert_eq!(client.watchdog_stats().renewed, 1);
    assert!(guard.lease_deadline() > env.clock.now() + Duration::from_secs(5));
    guard.unlock().expect("unlock");
}

#[test]
fn an_unreachable_backend_loses_the_guard_when_its_lease_runs_out() {
    let (env, faulty, client) = faulty_client();
    let lock = client.lock("unreachable");
    let guard = lock.lock().expect("lock");
    faulty.inject(Fault::fail(Op::Renew));
    let step = Duration::from_millis(500);
    // Ticks at 2 s, then retries every 0.5 s: lost at the first retry at or past 6 s, not before.
    while env.clock.elapsed() < Duration::from_secs(6) - step {
        env.advance(step);
        assert!(!guard.is_lost(), "lost before the lease ran out");
        assert_eq!(client.watchdog_stats().lost, 0);
    }
    env.advance(step);
    assert_eq!(client.watchdog_stats().lost, 1);
    assert!(client.watchdog_stats().failures >= 8, "kept trying");
    assert!(guard.is_lost());
    assert!(guard.unlock().expect_err("lost").is_not_held());
}

/// Tried as a new user would: a watchdog lock, then time moved in steps, checking the lock
/// after each. No `wait_for_sleepers`: taking the lock scheduled its renewals with the clock.
#[test]
fn a_watchdog_lock_lives_through_thirty_five_second_steps_1000_times() {
    for round in 0..1000 {
        let clock = ManualClock::new();
        let client = LockClient::new(MemoryBackend::with_clock(clock.clone()));
        let lock = client.lock("report");
        let guard = lock.lock().expect("lock");
        for step in 1..=30 {
            clock.advance(Duration::from_secs(5));
            assert!(
                lock.is_locked().expect("is_locked"),
                "round {round}: lost after {step} steps"
            );
        }
        assert!(!guard.is_lost());
        assert_eq!(client.watchdog_stats().renewed, 15, "one renewal per 10 s");
        guard.unlock().expect("unlock");
    }
}

/// The same with ten locks held on three threads, three of them with fixed leases that run out
/// in between: the watchdog ones live on, each fixed one ends at its instant and is reported.
#[test]
fn ten_locks_on_three_threads_with_fixed_leases_running_out_1000_times() {
    // (thread, name, fixed lease in seconds or 0 for the watchdog)
    const LOCKS: [(usize, &str, u64); 10] = [
        (0, "w0", 0),
        (0, "w1", 0),
        (0, "w2", 0),
        (0, "f0", 13),
        (1, "w3", 0),
        (1, "w4", 0),
        (1, "f1", 37),
        (2, "w5", 0),
        (2, "w6", 0),
        (2, "f2", 61),
    ];
    for round in 0..1000 {
        let clock = ManualClock::new();
        let client = LockClient::new(MemoryBackend::with_clock(clock.clone()));
        let events = client.lease_events();
        let (ready_tx, ready) = mpsc::channel();
        let mut finish = Vec::new();
        let mut threads = Vec::new();
        for t in 0..3 {
            let (client, ready_tx) = (client.clone(), ready_tx.clone());
            let (finish_tx, finish_rx) = mpsc::channel::<()>();
            finish.push(finish_tx);
            threads.push(thread::spawn(move || {
                let guards: Vec<_> = LOCKS
                    .iter()
                    .filter(|(thread, _, _)| *thread == t)
                    .map(|(_, name, lease)| {
                        let lock = client.lock(*name);
                        let guard = match lease {
                            0 => lock.lock(),
                            secs => lock.lock_with_lease(Duration::from_secs(*secs)),
                        };
                        (*lease, guard.expect("lock"))
                    })
                    .collect();
                ready_tx.send(()).expect("ready");
                finish_rx.recv().expect("finish");
                for (lease, guard) in guards {
                    assert_eq!(guard.is_lost(), lease != 0, "{}", guard.name());
                }
            }));
        }
        for _ in 0..3 {
            ready.recv().expect("a thread took its locks");
        }
        for step in 1..=30u64 {
            clock.advance(Duration::from_secs(5));
            let now = step * 5;
            for (_, name, lease) in LOCKS {
                let expected = lease == 0 || now < lease;
                assert_eq!(
                    client.lock(name).is_locked().expect("is_locked"),
                    expected,
                    "round {round}: {name} at {now} s"
                );
            }
        }
        let lost: Vec<(String, LossReason, Duration)> = events
            .try_iter()
            .map(|event| match event.change {
                LeaseChange::Lost { reason } => (
                    event.name.to_string(),
                    reason,
                    event.at.duration_since(clock.now() - clock.elapsed()),
                ),
                other => panic!("unexpected event {other:?}"),
            })
            .collect();
        let trusted = |secs| {
            let lease = Duration::from_secs(secs);
            lease - ClockDrift::DEFAULT.margin(lease)
        };
        assert_eq!(
            lost,
            vec![
                ("f0".to_owned(), LossReason::Expired, trusted(13)),
                ("f1".to_owned(), LossReason::Expired, trusted(37)),
                ("f2".to_owned(), LossReason::Expired, trusted(61)),
            ],
            "round {round}: each fixed lease reported at the instant its guard stopped trusting it"
        );
        for finish in finish {
            finish.send(()).expect("finish");
        }
        for thread in threads {
            thread.join().expect("holder thread");
        }
    }
}

/// Every event on `events` so far, as (lock, what, instant since the clock started).
fn drain(
    events: &dlocks::crossbeam_channel::Receiver<dlocks::LeaseEvent>,
    clock: &ManualClock,
) -> Vec<(String, String, Duration)> {
    let start = clock.now() - clock.elapsed();
    events
        .try_iter()
        .map(|event| {
            let what = match event.change {
                LeaseChange::Lost { reason } => format!("lost: {reason:?}"),
                LeaseChange::RenewalFailed { deadline, .. } => {
                    format!("renewal failed, valid until {:?}", deadline - start)
                }
                LeaseChange::RenewalRecovered { failures } => {
                    format!("renewal recovered after {failures}")
                }
                other => format!("{other:?}"),
            };
            (event.name.to_string(), what, event.at - start)
        })
        .collect()
}

#[test]
fn failing_renewals_warn_once_and_report_the_recovery() {
    let (env, faulty, client) = faulty_client();
    let events = client.lease_events();
    let guard = client.lock("flaky").lock().expect("lock");
    faulty.inject(Fault::fail(Op::Renew).times(2));
    // The tick at 2 s fails, its retry at 2.5 s too, the one at 3 s renews.
    env.advance(Duration::from_secs(3));
    let secs = Duration::from_secs;
    assert_eq!(
        drain(&events, &env.clock),
        vec![
            (
                "flaky".to_owned(),
                "renewal failed, valid until 5.938s".to_owned(),
                secs(2)
            ),
            (
                "flaky".to_owned(),
                "renewal recovered after 2".to_owned(),
                secs(3)
            ),
        ]
    );
    assert!(!guard.is_lost());
    guard.unlock().expect("unlock");
}

#[test]
fn an_unreachable_backend_is_reported_when_the_lease_runs_out() {
    let (env, faulty, client) = faulty_client();
    let events = client.lease_events();
    let _guard = client.lock("cut-off").lock().expect("lock");
    faulty.inject(Fault::fail(Op::Renew));
    env.advance(Duration::from_secs(10));
    let secs = Duration::from_secs;
    assert_eq!(
        drain(&events, &env.clock),
        vec![
            (
                "cut-off".to_owned(),
                "renewal failed, valid until 5.938s".to_owned(),
                secs(2)
            ),
            (
                "cut-off".to_owned(),
                "lost: Unreachable".to_owned(),
                Duration::from_millis(5938)
            ),
        ]
    );
}

#[test]
fn force_unlock_and_take_over_are_told_apart_at_the_tick_that_finds_them() {
    let env = ManualMemory::new();
    let client = env.client_with_watchdog(Duration::from_secs(6));
    let events = client.lease_events();
    let _forced = client.lock("forced").lock().expect("lock");
    let _taken = client.lock("taken").lock().expect("lock");
    env.advance(Duration::from_secs(1));
    let other = env.client();
    other.lock("forced").force_unlock().expect("force");
    other.lock("taken").force_unlock().expect("force");
    let theirs = other
        .lock("taken")
        .lock_with_lease(Duration::from_secs(60))
        .expect("take over");
    env.advance(Duration::from_secs(1));
    let mut found = drain(&events, &env.clock);
    found.sort();
    let secs = Duration::from_secs;
    assert_eq!(
        found,
        vec![
            (
                "forced".to_owned(),
                "lost: ForceUnlocked".to_owned(),
                secs(2)
            ),
            ("taken".to_owned(), "lost: TakenOver".to_owned(), secs(2)),
        ]
    );
    theirs.unlock().expect("unlock");
}

#[test]
fn a_panicking_event_callback_does_not_stop_the_watchdog() {
    let env = ManualMemory::new();
    let client = LockClientBuilder::new(env.backend())
        .watchdog_lease(Duration::from_secs(6))
        .on_lease_event(|_| panic!("a careless callback"))
        .build()
        .expect("client");
    let short = client
        .lock("short")
        .lock_with_lease(Duration::from_secs(1))
        .expect("lock");
    let long = client.lock("long").lock().expect("lock");
    env.advance(Duration::from_secs(20));
    assert!(short.is_lost(), "reported (to a callback that panicked)");
    assert!(!long.is_lost(), "and the watchdog went on renewing");
    assert!(client
        .lock("long")
        .is_held_by_current_thread()
        .expect("held"));
}

/// The in-process store tells every kind apart, even a fair lock with nobody queued (on Redis
/// that one looks exactly like a plain lock, as in Redisson).
#[test]
fn the_memory_backend_tells_a_fair_lock_from_a_plain_one_even_without_waiters() {
    let env = ManualMemory::new();
    let (a, b) = (env.client(), env.client());
    let fair = a.fair_lock("kinds").lock().expect("fair");
    let error = b.lock("kinds").try_lock().expect_err("a fair lock");
    assert!(
        matches!(&error, dlocks::LockError::WrongKind { found, .. } if found == "a fair lock"),
        "{error:?}"
    );
    assert!(b.lock("kinds").is_locked().is_err());
    fair.unlock().expect("unlock");
    // Free again: the name can be used as any kind.
    b.lock("kinds")
        .lock()
        .expect("plain now")
        .unlock()
        .expect("unlock");
}

/// A thread that takes a lock with `take` (waiting as it says), reports whether it got it,
/// and keeps it until the test lets go of the returned sender (the test looks at the store
/// meanwhile).
fn holding_thread(
    take: impl FnOnce() -> Option<LockGuard> + Send + 'static,
) -> (mpsc::Receiver<bool>, mpsc::Sender<()>) {
    let (done, got) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    thread::spawn(move || {
        let guard = take();
        let _ = done.send(guard.is_some());
        // Ends when the test drops its sender.
        let _ = released.recv();
        drop(guard);
    });
    (got, release)
}

/// A thread of `client` that waits for `name` (for `wait`, or without bound); see
/// [`holding_thread`].
fn waiting_thread(
    client: &LockClient,
    name: &'static str,
    wait: Option<Duration>,
) -> (mpsc::Receiver<bool>, mpsc::Sender<()>) {
    let lock = client.lock(name);
    holding_thread(move || match wait {
        Some(wait) => lock.try_lock_for(wait).expect("wait"),
        None => Some(lock.lock().expect("lock")),
    })
}

#[test]
fn a_release_hands_the_lock_to_a_waiter_of_its_client_with_no_acquire_of_its_own() {
    let (env, faulty, client) = faulty_client();
    let guard = client.lock("handed").lock().expect("lock");
    let (got, _holding) = waiting_thread(&client, "handed", None);
    env.await_sleepers(1);
    // The waiter has waited long enough that the releasing thread may not re-take it first.
    env.advance(MS);
    let acquires = faulty.calls(Op::TryAcquire);
    guard.unlock().expect("unlock");
    assert_eq!(got.recv(), Ok(true));
    assert_eq!(
        faulty.calls(Op::TryAcquire),
        acquires,
        "the waiter made no acquire: the release gave it the lock"
    );
    // The store has the waiter as holder, not the releaser.
    assert!(client.lock("handed").is_locked().expect("status"));
    assert!(!client
        .lock("handed")
        .is_held_by_current_thread()
        .expect("status"));
}

#[test]
fn a_release_right_after_the_waiter_arrived_lets_the_releaser_barge() {
    let (env, faulty, client) = faulty_client();
    let guard = client.lock("barging").lock().expect("lock");
    let (got, _holding) = waiting_thread(&client, "barging", None);
    env.await_sleepers(1);
    // No time has passed since the waiter queued: the release only wakes it, and it acquires.
    let acquires = faulty.calls(Op::TryAcquire);
    guard.unlock().expect("unlock");
    assert_eq!(got.recv(), Ok(true));
    assert_eq!(faulty.calls(Op::TryAcquire), acquires + 1);
}

#[test]
fn a_waiter_whose_wait_ends_while_the_lock_is_handed_to_it_holds_it() {
    let (env, faulty, client) = faulty_client();
    // Guards stay on their thread: the holder is a thread that releases when told.
    let (go, release) = mpsc::channel::<()>();
    let (held, holding) = mpsc::channel();
    let releaser = {
        let client = client.clone();
        thread::spawn(move || {
            let guard = client.lock("at-the-deadline").lock().expect("lock");
            let _ = held.send(());
            release.recv().expect("told to release");
            guard.unlock()
        })
    };
    holding.recv().expect("held");
    let (got, _holding) =
        waiting_thread(&client, "at-the-deadline", Some(Duration::from_millis(10)));
    env.await_sleepers(1);
    env.advance(MS);
    // The hand-off takes effect on the store, and its reply is slow: meanwhile the waiter's
    // wait ends.
    faulty.inject(Fault::delay_reply(Op::Release, Duration::from_millis(300)).times(1));
    let (in_flight, started) = mpsc::channel();
    let in_flight = parking_lot::Mutex::new(Some(in_flight));
    faulty.observe(move |call| {
        if call.op == Op::Release {
            if let Some(in_flight) = in_flight.lock().take() {
                let _ = in_flight.send(());
            }
        }
    });
    go.send(()).expect("the holder is waiting");
    started.recv().expect("the release started");
    env.advance(Duration::from_millis(10));
    // Either it holds the lock or it has let it go; never neither: here it holds it.
    assert_eq!(got.recv(), Ok(true), "the waiter returned holding the lock");
    assert!(client.lock("at-the-deadline").is_locked().expect("status"));
    releaser.join().expect("releaser").expect("unlock");
}

#[test]
fn a_hand_off_whose_outcome_is_unknown_is_checked_by_the_waiter() {
    let (env, faulty, client) = faulty_client();
    let guard = client.lock("unknown").lock().expect("lock");
    let (got, _holding) = waiting_thread(&client, "unknown", None);
    env.await_sleepers(1);
    env.advance(MS);
    // The store hands the lock over, and the reply is lost: the releaser hears an error.
    faulty.inject(Fault::lose_reply(Op::Release).times(1));
    let error = guard.unlock().expect_err("the reply was lost");
    assert!(error.is_unavailable(), "{error:?}");
    // The waiter asks the store, finds it holds the lock, and returns with it.
    assert_eq!(got.recv(), Ok(true));
    let status = faulty.calls(Op::Status);
    assert!(status >= 1, "the waiter checked with the store");
}

#[test]
fn a_fair_release_hands_the_lock_to_the_head_waiter_which_claims_it() {
    let (env, faulty, waiter_client) = faulty_client();
    // Another hold of the waiter's client: the claim renews nothing of it.
    let other = waiter_client
        .lock("fair-handed-other")
        .lock()
        .expect("lock");
    let holder = env.client();
    let guard = holder.fair_lock("fair-handed").lock().expect("lock");
    let fair = waiter_client.fair_lock("fair-handed");
    let (got, _holding) =
        holding_thread(move || fair.try_lock_for(Duration::from_secs(60)).ok()?);
    env.await_sleepers(1);
    let acquires = faulty.calls(Op::TryAcquire);
    guard.unlock().expect("unlock");
    // Reserved for the head: no other process can take it before the waiter claims it.
    let barger = env.client();
    assert!(
        barger
            .fair_lock("fair-handed")
            .try_lock()
            .expect("try_lock")
            .is_none(),
        "the release handed the lock to the queue's head"
    );
    assert!(got.recv().expect("answer"), "the waiter got the lock");
    assert_eq!(
        faulty.calls(Op::TryAcquire),
        acquires + 1,
        "the waiter believed the grant from the store's answer to its own claim"
    );
    assert_eq!(waiter_client.watchdog_stats().batches, 0, "no renewal");
    // The claim set the whole watchdog lease (6 s), not the grant's 2 s.
    env.advance(Duration::from_secs(3));
    let fair = holder.fair_lock("fair-handed");
    assert!(
        fair.is_locked().expect("status"),
        "held past the grant lease"
    );
    other.unlock().expect("unlock");
}

#[test]
fn a_granted_waiter_that_cannot_claim_keeps_the_lock_no_longer_than_the_grant_lease() {
    let (env, faulty, waiter_client) = faulty_client();
    let holder = env.client();
    let guard = holder.fair_lock("fair-unclaimed").lock().expect("lock");
    let fair = waiter_client.fair_lock("fair-unclaimed");
    let (got, _holding) =
        holding_thread(move || fair.try_lock_for(Duration::from_secs(60)).ok()?);
    env.await_sleepers(1);
    // The waiter's steps fail from now on: as if it had died right after the grant.
    faulty.inject(Fault::fail(Op::TryAcquire));
    guard.unlock().expect("unlock");
    env.advance(Duration::from_secs(2));
    let fair = holder.fair_lock("fair-unclaimed");
    assert!(
        !fair.is_locked().expect("status"),
        "free when the 2 s grant lease ran out"
    );
    let taken = fair.try_lock().expect("try_lock");
    assert!(taken.is_some());
    env.advance(Duration::from_secs(60));
    assert!(!got.recv().expect("answer"), "the waiter never held it");
}

#[test]
fn a_fair_waiter_whose_wait_ends_as_the_lock_is_handed_to_it_holds_it_or_gives_it_back() {
    let (env, faulty, waiter_client) = faulty_client();
    let holder = env.client();
    // Guards stay on their thread: the holder is a thread that releases when told.
    let (go, release) = mpsc::channel::<()>();
    let (held, holding) = mpsc::channel();
    let releaser = thread::spawn(move || {
        let guard = holder.fair_lock("fair-deadline").lock().expect("lock");
        let _ = held.send(());
        release.recv().expect("told to release");
        guard.unlock()
    });
    holding.recv().expect("held");
    let fair = waiter_client.fair_lock("fair-deadline");
    let (got, holding) =
        holding_thread(move || fair.try_lock_for(Duration::from_millis(10)).expect("wait"));
    env.await_sleepers(1);
    // The waiter's last attempt, at its deadline, finds the lock held, and its answer is slow
    // to come back; the holder releases meanwhile, and the release hands the lock to the
    // waiter, whose wait has ended.
    faulty.inject(Fault::delay_reply(Op::TryAcquire, Duration::from_millis(200)).times(1));
    let go = parking_lot::Mutex::new(Some(go));
    faulty.observe(move |call| {
        if call.op == Op::TryAcquire {
            if let Some(go) = go.lock().take() {
                let _ = go.send(());
            }
        }
    });
    env.advance(Duration::from_millis(10));
    releaser.join().expect("releaser").expect("unlock");
    let holds = got.recv().expect("the waiter's answer");
    let fair = waiter_client.fair_lock("fair-deadline");
    // Never neither: it holds the lock, or the lock is free.
    assert!(
        holds || !fair.is_locked().expect("status"),
        "the waiter gave up and the lock stayed taken"
    );
    drop(holding);
}

/// Every renewal sets the deadline from when it was sent, the drift margin kept: exactly
/// `tick + lease − margin`, at each tick (the margin is not only kept at the first grant).
#[test]
fn every_renewal_keeps_the_drift_margin() {
    let env = ManualMemory::new();
    let lease = Duration::from_secs(6);
    let client = env.client_with_watchdog(lease);
    let start = env.clock.now();
    let guard = client.lock("renewed-margin").lock().expect("lock");
    let margin = ClockDrift::DEFAULT.margin(lease);
    assert_eq!(guard.lease_deadline() - start, lease - margin);
    for tick in 1..=5u32 {
        env.advance(Duration::from_secs(2));
        assert_eq!(
            guard.lease_deadline() - start,
            Duration::from_secs(2) * tick + lease - margin,
            "after the renewal at {} s",
            2 * tick
        );
    }
    // A client asking for a wider margin gets it on every deadline too.
    let wide = ClockDrift::new(0.1, Duration::from_millis(50)).expect("drift");
    let careful = LockClientBuilder::new(env.backend())
        .watchdog_lease(lease)
        .clock_drift(wide)
        .build()
        .expect("client");
    assert_eq!(careful.clock_drift(), wide);
    let at = env.clock.now();
    let guard = careful.lock("renewed-wide-margin").lock().expect("lock");
    env.advance(Duration::from_secs(2));
    assert_eq!(
        guard.lease_deadline() - at,
        Duration::from_secs(2) + lease - Duration::from_millis(650)
    );
}

/// A backend whose renewal panics (for a while) does not end the watchdog: the failure is
/// reported like an unreachable store's, renewal is retried, and the holds live on.
#[test]
fn a_backend_that_panics_while_renewing_does_not_stop_the_watchdog() {
    use dlocks::backend::{
        Acquire, AcquireRequest, DistributedLock, HoldRef, LockRef, LockStatus, OwnerId, Release,
        ReleaseSubscription, Renewal,
    };
    use dlocks::LockError;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// The memory backend, whose next `panics` renewals panic.
    struct PanickyRenewals {
        inner: MemoryBackend,
        panics: AtomicU32,
    }

    impl DistributedLock for PanickyRenewals {
        fn try_acquire(&self, request: &AcquireRequest<'_>) -> Result<Acquire, LockError> {
            self.inner.try_acquire(request)
        }
        fn release(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<Release, LockError> {
            self.inner.release(lock, owner)
        }
        fn renew(&self, holds: &[HoldRef<'_>], lease: Duration) -> Result<Vec<Renewal>, LockError> {
            let left = self.panics.load(Ordering::SeqCst);
            if left > 0 {
                self.panics.store(left - 1, Ordering::SeqCst);
                panic!("a bug in the backend's renewal");
            }
            self.inner.renew(holds, lease)
        }
        fn status(&self, lock: LockRef<'_>, owner: &OwnerId) -> Result<LockStatus, LockError> {
            self.inner.status(lock, owner)
        }
        fn force_unlock(&self, lock: LockRef<'_>) -> Result<bool, LockError> {
            self.inner.force_unlock(lock)
        }
        fn subscribe(
            &self,
            lock: LockRef<'_>,
            owner: &OwnerId,
        ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
            self.inner.subscribe(lock, owner)
        }
        fn clock(&self) -> Arc<dyn Clock> {
            self.inner.clock()
        }
    }

    let env = ManualMemory::new();
    let backend = PanickyRenewals {
        inner: env.backend.clone(),
        panics: AtomicU32::new(2),
    };
    let client = LockClientBuilder::new(Arc::new(backend))
        .watchdog_lease(Duration::from_secs(6))
        .build()
        .expect("client");
    let events = client.lease_events();
    let guard = client.lock("panicky").lock().expect("lock");
    // The tick at 2 s panics, its retry at 2.5 s too, the one at 3 s renews.
    env.advance(Duration::from_secs(3));
    let seen = drain(&events, &env.clock);
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(seen[0].1.starts_with("renewal failed"), "{seen:?}");
    assert_eq!(seen[1].1, "renewal recovered after 2", "{seen:?}");
    // And it goes on renewing.
    env.advance(Duration::from_secs(60));
    assert!(!guard.is_lost());
    assert_eq!(client.watchdog_stats().failures, 2);
    guard.unlock().expect("unlock");
}

/// Work in progress (a release on its way to the store) holds time moved by another thread,
/// except while its own thread waits for time: then time moves, and the work goes on after.
#[test]
fn work_in_progress_holds_the_clock_unless_its_thread_waits_for_time() {
    use dlocks::backend::{Signal, TimerRole, Wake};

    let clock = ManualClock::new();
    let (marked, mark_made) = mpsc::channel();
    let (advancing, next) = mpsc::channel::<()>();
    let worker = {
        let clock = clock.clone();
        thread::spawn(move || {
            let mark = clock.work_in_progress();
            marked.send(()).expect("test");
            next.recv().expect("test");
            // Time has been asked to move: it has not, past the work under way.
            let before = clock.elapsed();
            // The work now waits a second of the clock's time: time moves to it, no further
            // (the clock waits for the woken work before it goes on).
            let timer = clock.timer(TimerRole::Waiter);
            timer.set(Some(clock.now() + Duration::from_secs(1)));
            let signal = Arc::new(Signal::new());
            let wake = timer.wait(&signal, signal.generation());
            let woken_at = clock.elapsed();
            drop(mark);
            (before, wake, woken_at)
        })
    };
    mark_made.recv().expect("worker");
    let mover = {
        let clock = clock.clone();
        thread::spawn(move || clock.advance(Duration::from_secs(5)))
    };
    advancing.send(()).expect("worker");
    let (before, wake, woken_at) = worker.join().expect("worker");
    mover.join().expect("advance");
    assert_eq!(before, Duration::ZERO, "time moved past work in progress");
    assert_eq!(wake, Wake::DeadlineReached);
    assert_eq!(
        woken_at,
        Duration::from_secs(1),
        "the work's own wait ended on time"
    );
    assert_eq!(clock.elapsed(), Duration::from_secs(5));
}

/// A plain waiter whose mark ran out (it made no attempt for its whole slot) waits again as a
/// new waiter: after the waiters marked meanwhile, as on the networked stores.
#[test]
fn a_plain_waiter_whose_mark_ran_out_waits_after_those_marked_meanwhile() {
    use dlocks::backend::{AcquireRequest, DistributedLock, LockRef, OwnerId};
    let env = ManualMemory::new();
    let backend = env.backend();
    let name = "turn-mark-ran-out";
    let owner = |what: &str| OwnerId::from_raw(format!("client-{what}:1"));
    let (holder, first, second) = (owner("holder"), owner("first"), owner("second"));
    let slot = 4 * MS;
    let attempt = |who: &OwnerId| {
        let request = AcquireRequest::new(LockRef::reentrant(name), who, 100 * MS)
            .queued_as(who)
            .waiting(true, slot);
        backend.try_acquire(&request).expect("an attempt")
    };
    assert!(attempt(&holder).is_acquired());
    assert!(!attempt(&first).is_acquired(), "held");
    env.advance(slot + MS);
    // The first waiter's mark ran out; the second marks itself, then the first again.
    assert!(!attempt(&second).is_acquired(), "held");
    assert!(!attempt(&first).is_acquired(), "held");
    assert!(backend
        .release(LockRef::reentrant(name), &holder)
        .expect("release")
        .is_released());
    assert!(
        !attempt(&first).is_acquired(),
        "the second waiter's turn: the first's mark ran out before it marked itself"
    );
    assert!(attempt(&second).is_acquired(), "the second waiter's turn");
}
