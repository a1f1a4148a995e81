//! Server faults: not running, killed, restarted, paused, silent past a lease. Calls fail within
//! their timeouts with clear errors (they never panic or hang), holders are told when their
//! lease is lost, and locks work again once the server is back.

use std::time::{Duration, Instant};

use dlocks::crossbeam_channel::Receiver;
use dlocks::{LeaseChange, LeaseEvent, LockClientBuilder, LockError, LossReason};

use super::{ServerEnv, Timeouts};

/// Waits (bounded: `within`) for the first `Lost` event of lock `name`.
pub fn next_loss_within(events: &Receiver<LeaseEvent>, name: &str, within: Duration) -> LeaseEvent {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = events.recv_timeout(left).expect("a lease event");
        if &*event.name == name {
            if let LeaseChange::Lost { .. } = event.change {
                return event;
            }
        }
    }
}

/// Waits (bounded: 20 s) for the first `Lost` event of lock `name`; returns its reason.
pub fn next_loss(events: &Receiver<LeaseEvent>, name: &str) -> LossReason {
    match next_loss_within(events, name, Duration::from_secs(20)).change {
        LeaseChange::Lost { reason } => reason,
        other => unreachable!("a loss, not {other:?}"),
    }
}

/// Connecting where nothing listens fails as `Unavailable`, naming the server, within the
/// connect timeout (generously: the point is that it does not hang).
pub fn connecting_to_nothing_fails_as_unavailable_within_the_connect_timeout<E: ServerEnv>() {
    let url = E::url_with_nothing_listening();
    let started = Instant::now();
    let error = E::connect_within(&url, Duration::from_millis(500)).expect_err("nothing listens");
    assert!(matches!(error, LockError::Unavailable { .. }), "{error:?}");
    assert!(
        error.to_string().contains("127.0.0.1"),
        "names the server: {error}"
    );
    assert!(
        error.to_string().to_lowercase().contains("refused"),
        "says why: {error}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Every URL of [`ServerEnv::BAD_URLS`] and every build of [`ServerEnv::bad_settings`] is a
/// configuration error; a URL's password is not shown in the error it makes.
pub fn bad_urls_and_settings_are_configuration_errors<E: ServerEnv>() {
    let connect = |url: &str| E::connect_within(url, Duration::from_secs(2));
    for url in E::BAD_URLS {
        let error = connect(url).expect_err(url);
        assert!(
            matches!(error, LockError::Config { .. }),
            "{url}: {error:?}"
        );
        assert!(
            !error.to_string().contains("hunter2"),
            "passwords are not shown: {error}"
        );
    }
    assert!(
        E::BAD_URLS.iter().any(|url| url.contains("hunter2")),
        "one bad URL carries a password"
    );
    for result in E::bad_settings() {
        let error = result.expect_err("refused");
        assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    }
}

/// A killed server: calls fail as unavailable within the timeouts; the watchdog cannot renew,
/// so the holder is told (unreachable) once its lease deadline has passed, and its guard is
/// lost by then; after a restart new locks work, and the old hold is not held.
pub fn a_killed_server_makes_calls_fail_and_the_holder_is_told_then_locks_work_after_a_restart<
    E: ServerEnv,
>() {
    let mut server = E::start();
    let unit = Duration::from_millis(100);
    let lease = unit * 6;
    let client = LockClientBuilder::new(server.backend_with(Timeouts::default()))
        .watchdog_lease(lease)
        .build()
        .expect("client");
    let events = client.lease_events();
    let lock = client.lock("faults:killed");
    let guard = lock.lock().expect("lock");

    server.kill();
    let started = Instant::now();
    let error = lock.is_locked().expect_err("the server is gone");
    assert!(error.is_unavailable(), "{error:?}");
    let error = client
        .lock("faults:other")
        .try_lock()
        .expect_err("the server is gone");
    assert!(error.is_unavailable(), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "errors come within the timeouts"
    );

    // The watchdog cannot renew: the holder is told, and its guard lost, once its lease
    // deadline has passed (well within three more units).
    let lost_by = Instant::now() + lease + unit * 3;
    let loss = next_loss_within(&events, "faults:killed", Duration::from_secs(20));
    assert!(
        matches!(
            loss.change,
            LeaseChange::Lost {
                reason: LossReason::Unreachable
            }
        ),
        "{:?}",
        loss.change
    );
    assert!(
        loss.at <= lost_by,
        "the lease ran out while the server was unreachable, told {:?} late",
        loss.at - lost_by
    );
    assert!(guard.is_lost());

    server.restart();
    // A lease of its own, long enough for a server slow to answer its first calls after the
    // restart (on a loaded machine the client's 600 ms could run out before the answer came).
    let fresh = client
        .lock("faults:after")
        .lock_with_lease(Duration::from_secs(30))
        .expect("new locks work after the restart");
    fresh.unlock().expect("unlock");
    let error = guard.unlock().expect_err("the old hold is gone");
    assert!(error.is_not_held(), "{error:?}");
}

/// A paused server: calls fail as unavailable within the timeouts, saying they timed out
/// ([`ServerEnv::TIMEOUT_WORDS`]), a hold paused past its lease is lost (unreachable), and
/// once the server answers again, so does the lock, and the lapsed hold is free for others.
pub fn a_paused_server_makes_calls_fail_instead_of_hanging_and_a_hold_paused_past_its_lease_is_lost<
    E: ServerEnv,
>() {
    let server = E::start();
    let backend = server.backend_with(Timeouts {
        answer: Some(Duration::from_millis(300)),
        checkout: Some(Duration::from_millis(500)),
        ..Timeouts::default()
    });
    let lease = Duration::from_millis(900);
    let client = LockClientBuilder::new(backend)
        .watchdog_lease(lease)
        .build()
        .expect("client");
    let events = client.lease_events();
    let held = client.lock("faults:paused-holder");
    let guard = held.lock().expect("lock");
    let lock = client.lock("faults:paused");
    lock.lock().expect("lock").unlock().expect("unlock");

    server.pause();
    let started = Instant::now();
    let acquire = lock.try_lock().map(|guard| guard.is_some());
    let status = lock.is_locked();
    let elapsed = started.elapsed();
    // Past the holder's lease: its renewals cannot reach the server.
    let loss = next_loss(&events, "faults:paused-holder");
    server.resume();

    let error = acquire.expect_err("no answer from a paused server");
    assert!(error.is_unavailable(), "{error:?}");
    assert!(
        error.to_string().contains(E::TIMEOUT_WORDS),
        "says it timed out: {error}"
    );
    assert!(status.expect_err("no answer").is_unavailable());
    assert!(
        elapsed < Duration::from_secs(10),
        "bounded by the timeouts, took {elapsed:?}"
    );
    assert_eq!(loss, LossReason::Unreachable);
    assert!(guard.is_lost());

    // Once the server answers again, so does the lock; the lapsed hold is free for others.
    let other = LockClientBuilder::new(server.backend_with(Timeouts::default()))
        .build()
        .expect("another client");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match other.lock("faults:paused-holder").try_lock() {
            Ok(Some(taken)) => {
                taken.unlock().expect("unlock");
                break;
            }
            Ok(None) | Err(_) => {
                assert!(Instant::now() < deadline, "the lapsed lock never came free");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    let mut ok = false;
    for _ in 0..3 {
        if let Ok(Some(guard)) = lock.try_lock() {
            guard.unlock().expect("unlock");
            ok = true;
            break;
        }
    }
    assert!(ok, "locks work again after the server resumed");
    let again = lock.try_lock().expect("works again").expect("free");
    again.unlock().expect("unlock");
}

/// A server that stops answering while a lock is held: the holder is told its lease is lost
/// (unreachable) at its deadline, not before, while the renewal sent to the silent server still
/// waits for its answer (the answer timeout here, 30 s, is far longer than the lease).
pub fn a_hold_on_a_silent_server_is_reported_lost_at_its_deadline_while_the_renewal_waits<
    E: ServerEnv,
>() {
    let server = E::start();
    let backend = server.backend_with(Timeouts {
        answer: Some(Duration::from_secs(30)),
        ..Timeouts::default()
    });
    let client = LockClientBuilder::new(backend)
        .watchdog_lease(Duration::from_millis(1200))
        .build()
        .expect("client");
    let events = client.lease_events();
    let guard = client.lock("faults:silent").lock().expect("lock");
    server.pause();
    let started = Instant::now();
    let lost = next_loss_within(&events, "faults:silent", Duration::from_secs(15));
    let told_after = started.elapsed();
    server.resume();
    assert!(guard.is_lost());
    assert!(
        lost.at >= guard.lease_deadline(),
        "told when its deadline passed, not before"
    );
    assert!(matches!(
        lost.change,
        LeaseChange::Lost {
            reason: LossReason::Unreachable
        }
    ));
    // Told at its deadline (1.2 s at most from the pause), not when the 30 s answer timeout
    // gives the renewal up; the margin is for a loaded machine.
    assert!(
        told_after < Duration::from_secs(15),
        "told {told_after:?} after the pause"
    );
}

/// A call to a server that stopped answering returns within its wait and one answer timeout
/// (Redis's response timeout, PostgreSQL's statement timeout), the wait for a pooled
/// connection included: `try_lock()` within the answer timeout, not the checkout timeout (20 s
/// here), even once the pool's connections have broken.
pub fn a_call_to_a_silent_server_returns_within_one_answer_timeout<E: ServerEnv>() {
    let server = E::start();
    let backend = server.backend_with(Timeouts {
        answer: Some(Duration::from_millis(300)),
        connect: Some(Duration::from_millis(300)),
        checkout: Some(Duration::from_secs(20)),
    });
    let client = LockClientBuilder::new(backend).build().expect("client");
    let lock = client.lock("faults:bounded");
    lock.lock().expect("lock").unlock().expect("unlock");
    server.pause();
    // The first call breaks the pooled connection; the next ones find none.
    for call in 0..3 {
        let started = Instant::now();
        let single = lock.try_lock().map(|guard| guard.is_some());
        let single_took = started.elapsed();
        let started = Instant::now();
        let waiting = lock
            .try_lock_for(Duration::from_millis(100))
            .map(|guard| guard.is_some());
        let waiting_took = started.elapsed();
        assert!(single.expect_err("silent").is_unavailable(), "call {call}");
        assert!(waiting.expect_err("silent").is_unavailable(), "call {call}");
        // 300 ms each, far from the 20 s checkout timeout; the margin is for a loaded machine.
        assert!(
            single_took < Duration::from_secs(8),
            "call {call}: try_lock() took {single_took:?}"
        );
        assert!(
            waiting_took < Duration::from_secs(8),
            "call {call}: try_lock_for(100 ms) took {waiting_took:?}"
        );
    }
    server.resume();
}
