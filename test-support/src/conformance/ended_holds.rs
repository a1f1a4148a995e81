//! An ended hold stays ended: a hold the store ended (force-unlocked here; expired, or lost with
//! the store's data, the same to the store) is never made again under its id, not even by its
//! own thread's next acquire that would extend it; its guards report it lost, with a lease
//! event. And one node of several that stops answering holds up only its own holds' renewals.

use std::sync::Arc;

use dlocks::testing::{Effect, Fault, Op};
use dlocks::{LeaseChange, LockClient, LockClientBuilder, LockKind};

use super::kinds::AnyLock;
use super::unique;
use crate::env::TestEnv;

/// A kind a thread holds and extends, the handle of it, and the handle another client takes
/// the name with to exclude it.
type Extendable = (
    &'static str,
    LockKind,
    fn(&LockClient, &str) -> Box<dyn AnyLock>,
    fn(&LockClient, &str) -> Box<dyn AnyLock>,
);

fn extendable_kinds(env: &dyn TestEnv) -> Vec<Extendable> {
    let all: [Extendable; 4] = [
        (
            "reentrant",
            LockKind::Reentrant,
            |c, n| Box::new(c.lock(n)),
            |c, n| Box::new(c.lock(n)),
        ),
        (
            "fair",
            LockKind::Fair,
            |c, n| Box::new(c.fair_lock(n)),
            |c, n| Box::new(c.fair_lock(n)),
        ),
        (
            "write",
            LockKind::Write,
            |c, n| Box::new(c.read_write_lock(n).write_lock()),
            |c, n| Box::new(c.read_write_lock(n).write_lock()),
        ),
        (
            "read",
            LockKind::Read,
            |c, n| Box::new(c.read_write_lock(n).read_lock()),
            |c, n| Box::new(c.read_write_lock(n).write_lock()),
        ),
    ];
    let backend = env.backend();
    all.into_iter()
        .filter(|(_, kind, _, _)| backend.supports(*kind))
        .collect()
}

/// Thread T holds the name on a fixed lease; an operator force-unlocks it; client U takes it
/// and lets it go; T asks for the lock again with the watchdog, which would extend its hold.
/// The store must not make T's ended hold again: T gets a new hold, and its first guard reports
/// the loss (`is_lost`, a lease event, `unlock` fails), although it never renewed.
pub fn an_extend_never_brings_back_a_force_unlocked_hold(env: &dyn TestEnv) {
    let unit = env.unit();
    for (kind, _, mine, conflicting) in extendable_kinds(env) {
        let name = unique(&format!("ended-{kind}"));
        let (t, u, operator) = (env.client(), env.client(), env.client());
        let events = t.lease_events();
        let lock = mine(&t, &name);
        let first = lock.lock_with_lease(unit * 30).expect("lock");
        assert!(
            mine(&operator, &name).force_unlock().expect("force"),
            "{kind}: it was held"
        );
        conflicting(&u, &name)
            .try_lock()
            .expect("try")
            .unwrap_or_else(|| panic!("{kind}: free after the force unlock"))
            .unlock()
            .expect("unlock");
        let second = lock.lock().expect("the thread takes the lock again");
        assert!(
            first.is_lost(),
            "{kind}: the force-unlocked hold came back under its old guard"
        );
        let lost: Vec<_> = events
            .try_iter()
            .filter(|event| {
                event.owner.as_str() == first.owner()
                    && matches!(event.change, LeaseChange::Lost { .. })
            })
            .collect();
        assert_eq!(lost.len(), 1, "{kind}: one lease event for the ended hold");
        assert_ne!(second.owner(), first.owner(), "{kind}: a hold of its own");
        assert!(!second.is_lost(), "{kind}");
        assert!(
            conflicting(&u, &name).try_lock().expect("try").is_none(),
            "{kind}: the new hold excludes"
        );
        let error = first.unlock().expect_err("the ended hold is not released");
        assert!(
            matches!(error, dlocks::LockError::LeaseLost { .. }),
            "{kind}: {error:?}"
        );
        assert!(
            conflicting(&u, &name).try_lock().expect("try").is_none(),
            "{kind}: the old guard's unlock left the new hold alone"
        );
        second.unlock().expect("unlock");
    }
}

/// The same for the fenced lock: the thread's new hold carries a token above the one the
/// client that held the name in between was given.
pub fn an_extend_never_brings_back_a_force_unlocked_fenced_hold(env: &dyn TestEnv) {
    if !env.backend().supports(LockKind::Fenced) {
        return;
    }
    let unit = env.unit();
    let name = unique("ended-fenced");
    let (t, u) = (env.client(), env.client());
    let lock = t.fenced_lock(name.clone());
    let first = lock.lock_with_lease(unit * 30).expect("lock");
    assert!(u.fenced_lock(name.clone()).force_unlock().expect("force"));
    let between = u.fenced_lock(name.clone()).lock().expect("free");
    let between_token = between.token();
    between.unlock().expect("unlock");
    let second = lock.lock().expect("lock again");
    assert!(first.is_lost(), "the ended hold came back");
    assert!(
        second.token() > between_token && between_token > first.token(),
        "tokens {} then {between_token} then {}",
        first.token(),
        second.token()
    );
    second.unlock().expect("unlock");
}

/// One node of several stops answering renewals for longer than a lease: the holds of the
/// other nodes are renewed on time all the same (each node's answer is applied as it comes,
/// and the silent node is waited for a third of the lease at most), and only the silent node's
/// hold is reported lost.
pub fn a_silent_node_holds_up_no_other_nodes_renewals(env: &dyn TestEnv) {
    let unit = env.unit();
    let faulty = env.faulty();
    let client = LockClientBuilder::new(Arc::new(faulty.clone()))
        .watchdog_lease(unit * 6)
        .build()
        .expect("client");
    let events = client.lease_events();
    let (silent, healthy) = (unique("silent-node"), unique("healthy-node"));
    let on_silent = client.lock(silent.clone()).lock().expect("lock");
    let on_healthy = client.lock(healthy.clone()).lock().expect("lock");
    faulty.inject(Fault::new(Op::Renew, Effect::Delay(unit * 60)).on_node([silent.clone()]));
    // Four leases: only renewals keep the healthy node's hold.
    for _ in 0..12 {
        env.advance(unit * 2);
    }
    assert!(on_silent.is_lost(), "the silent node's hold ran out");
    assert!(
        !on_healthy.is_lost(),
        "the healthy node's hold was lost: {:?}",
        events.try_iter().collect::<Vec<_>>()
    );
    assert!(
        env.client()
            .lock(healthy)
            .try_lock()
            .expect("try")
            .is_none(),
        "the healthy node's hold is still on the store"
    );
    let lost: Vec<_> = events
        .try_iter()
        .filter(|event| matches!(event.change, LeaseChange::Lost { .. }))
        .map(|event| event.name.to_string())
        .collect();
    assert_eq!(
        lost,
        [silent],
        "only the silent node's hold was reported lost"
    );
    faulty.clear();
    on_healthy.unlock().expect("unlock");
}

/// A thread's acquire reaches the store twice (a copy held up in the network, as a request
/// sent again after a dropped connection can be): the first makes the hold and the thread
/// holds the lock; an operator force-unlocks it; then the late copy arrives. It must not make
/// the hold again: the name is free for another client, and the thread's next renewal finds
/// its hold gone.
pub fn a_late_copy_of_an_acquire_never_brings_back_a_force_unlocked_hold(env: &dyn TestEnv) {
    let unit = env.unit();
    let faulty = env.faulty();
    let client = LockClientBuilder::new(Arc::new(faulty.clone()))
        .watchdog_lease(unit * 6)
        .build()
        .expect("client");
    let name = unique("late-copy");
    faulty.inject(Fault::new(Op::TryAcquire, Effect::Duplicate).times(1));
    let guard = client.lock(name.clone()).lock().expect("lock");
    assert!(env
        .client()
        .lock(name.clone())
        .force_unlock()
        .expect("force"));
    assert_eq!(faulty.deliver_held(), 1, "the late copy arrives now");
    let other = env.client();
    let taken = other
        .lock(name.clone())
        .try_lock()
        .expect("try")
        .expect("the late copy made the force-unlocked hold again");
    // The thread's renewals find its hold gone.
    for _ in 0..6 {
        env.advance(unit * 2);
    }
    assert!(guard.is_lost(), "the ended hold was renewed");
    taken.unlock().expect("the other client held it all along");
}
