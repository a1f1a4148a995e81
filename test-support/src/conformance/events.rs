//! Lease events: the holder is told when its lease is lost, and why.

use std::sync::{mpsc, Arc};
use std::time::Duration;

use dlocks::crossbeam_channel::Receiver;
use dlocks::{LeaseChange, LeaseEvent, LockClientBuilder, LossReason};
use parking_lot::Mutex;

use super::unique;
use crate::env::TestEnv;

/// The next `Lost` event on `events` for `name`, waiting at most `within` of real time (a real
/// clock's watchdog reports from its own thread, a little after the instant).
fn next_loss(events: &Receiver<LeaseEvent>, name: &str, within: Duration) -> LossReason {
    let deadline = std::time::Instant::now() + within + Duration::from_secs(5);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let event = events
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("no lease event for {name}"));
        if &*event.name != name {
            continue;
        }
        match event.change {
            LeaseChange::Lost { reason } => return reason,
            LeaseChange::RenewalFailed { .. } | LeaseChange::RenewalRecovered { .. } => continue,
            other => panic!("unexpected event {other:?}"),
        }
    }
}

pub fn a_fixed_lease_running_out_while_held_is_reported(env: &dyn TestEnv) {
    let name = unique("event-expired");
    let client = env.client();
    let events = client.lease_events();
    let lock = client.lock(name.clone());
    let guard = lock.lock_with_lease(env.unit() * 2).expect("lock");
    env.advance(env.unit() * 3);
    assert_eq!(next_loss(&events, &name, env.unit()), LossReason::Expired);
    assert!(guard.is_lost());
    let error = guard.unlock().expect_err("lost");
    assert!(
        matches!(
            error,
            dlocks::LockError::LeaseLost {
                reason: LossReason::Expired,
                ..
            }
        ),
        "{error:?}"
    );
    // Released in time: nothing to report.
    lock.lock_with_lease(env.unit() * 2)
        .expect("lock")
        .unlock()
        .expect("unlock");
    env.advance(env.unit() * 3);
    assert!(
        events.try_recv().is_err(),
        "a released lease is not reported"
    );
}

pub fn a_force_unlocked_hold_is_reported_at_the_next_renewal(env: &dyn TestEnv) {
    let name = unique("event-forced");
    let lease = env.unit() * 6;
    let client = env.client_with_watchdog(lease);
    let events = client.lease_events();
    let guard = client.lock(name.clone()).lock().expect("lock");
    assert!(env
        .client()
        .lock(name.clone())
        .force_unlock()
        .expect("force"));
    env.advance(lease / 3 + lease / 30);
    let reason = next_loss(&events, &name, lease);
    assert!(
        matches!(reason, LossReason::ForceUnlocked | LossReason::Gone),
        "{reason:?}"
    );
    assert!(guard.is_lost());
}

pub fn a_hold_taken_over_by_another_owner_is_reported(env: &dyn TestEnv) {
    let name = unique("event-taken");
    let lease = env.unit() * 6;
    let client = env.client_with_watchdog(lease);
    let events = client.lease_events();
    let guard = client.lock(name.clone()).lock().expect("lock");
    let other = env.client();
    let other_lock = other.lock(name.clone());
    assert!(other_lock.force_unlock().expect("force"));
    let theirs = other_lock
        .lock_with_lease(env.unit() * 100)
        .expect("taken over");
    env.advance(lease / 3 + lease / 30);
    assert_eq!(next_loss(&events, &name, lease), LossReason::TakenOver);
    assert!(guard.is_lost());
    theirs.unlock().expect("unlock");
}

pub fn lease_events_reach_the_callback_and_every_receiver(env: &dyn TestEnv) {
    let name = unique("event-fanout");
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let (tx, called) = mpsc::channel();
    let tx = Mutex::new(tx);
    let client = {
        let seen = seen.clone();
        LockClientBuilder::new(env.backend())
            .watchdog_lease(env.unit() * 6)
            .on_lease_event(move |event| {
                seen.lock().push(event.name.to_string());
                let _ = tx.lock().send(());
            })
            .build()
            .expect("client")
    };
    let (first, second) = (client.lease_events(), client.lease_events());
    let dropped = client.lease_events();
    drop(dropped); // a receiver that went away is simply skipped
    let guard = client
        .lock(name.clone())
        .lock_with_lease(env.unit())
        .expect("lock");
    env.advance(env.unit() * 2);
    assert_eq!(next_loss(&first, &name, env.unit()), LossReason::Expired);
    assert_eq!(next_loss(&second, &name, env.unit()), LossReason::Expired);
    called
        .recv_timeout(env.unit() + Duration::from_secs(5))
        .expect("the callback ran");
    assert_eq!(*seen.lock(), vec![name]);
    assert_eq!(client.lease_events_dropped(), 0);
    drop(guard);
}
