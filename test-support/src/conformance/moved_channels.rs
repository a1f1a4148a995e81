//! Subscriptions that lapse as they are made: the channel moved away before the store confirmed
//! it (on a cluster, a slot moving while the waiter subscribed where an older slot map placed
//! it). The waiter subscribes again where the channel lives now, and a release still wakes it.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dlocks::testing::{Effect, Fault, FaultyBackend, Op};
use dlocks::{LockClient, LockClientBuilder, LockError, LockGuard};

use super::unique;
use crate::env::TestEnv;

/// How many subscriptions in a row lapse as they are made.
const LAPSES: u64 = 2;

/// A waiter on the plain lock whose first subscriptions lapse is woken by the release.
pub fn a_waiter_whose_subscriptions_lapse_is_woken_by_the_release(env: &dyn TestEnv) {
    woken_after_lapses(
        env,
        "lapsed-plain",
        |client, name, lease| client.lock(name).lock_with_lease(lease),
        |client, name, wait| client.lock(name).try_lock_for(wait),
    );
}

/// A fair waiter whose first subscriptions lapse is woken when its turn comes.
pub fn a_fair_waiter_whose_subscriptions_lapse_is_woken_in_its_turn(env: &dyn TestEnv) {
    woken_after_lapses(
        env,
        "lapsed-fair",
        |client, name, lease| client.fair_lock(name).lock_with_lease(lease),
        |client, name, wait| client.fair_lock(name).try_lock_for(wait),
    );
}

/// `name` held (by `hold`) for a long lease; a waiter (`wait`) whose first [`LAPSES`]
/// subscriptions lapse; the holder lets go once the waiter has subscribed past them, and no
/// time passes: only the release can wake the waiter before the lease (1000 units) or its own
/// wait would.
fn woken_after_lapses(
    env: &dyn TestEnv,
    prefix: &str,
    hold: impl Fn(&LockClient, &str, Duration) -> Result<LockGuard, LockError>,
    wait: impl Fn(&LockClient, &str, Duration) -> Result<Option<LockGuard>, LockError> + Sync,
) {
    let name = unique(prefix);
    let unit = env.unit();
    let guard = hold(&env.client(), &name, unit * 1000).expect("lock");
    let faulty = env.faulty();
    let waiter = LockClientBuilder::new(Arc::new(faulty.clone()))
        .build()
        .expect("client");
    faulty.inject(Fault::new(Op::Subscribe, Effect::Lapse).times(LAPSES));
    let (done, woken) = std::sync::mpsc::channel();
    thread::scope(|s| {
        s.spawn(|| {
            let result = wait(&waiter, &name, unit * 1000);
            let _ = done.send(result.map(|guard| guard.map(|guard| guard.unlock().is_ok())));
        });
        let subscribed = subscribed_past_the_lapses(&faulty);
        guard.unlock().expect("unlock");
        let result = woken.recv_timeout(unit * 250 + Duration::from_secs(5));
        if result.is_err() {
            // Let the stuck waiter finish so the scope can end, then fail.
            env.advance(unit * 1000);
        }
        assert!(
            subscribed,
            "the waiter subscribed again after its subscriptions lapsed"
        );
        let result = result.expect("woken by the release");
        assert_eq!(
            result.expect("no error"),
            Some(true),
            "woken by the release"
        );
    });
}

/// Whether the waiter made a subscription past the lapsing ones and its every call so far was
/// answered (bounded in real time).
fn subscribed_past_the_lapses(faulty: &FaultyBackend) -> bool {
    let until = Instant::now() + Duration::from_secs(30);
    while faulty.calls(Op::Subscribe) <= LAPSES || faulty.answered(Op::Subscribe) <= LAPSES {
        if Instant::now() >= until {
            return false;
        }
        thread::sleep(Duration::from_millis(1));
    }
    true
}
