//! The multi-lock: every member or none, bounded waits, no deadlock between opposite orders,
//! a lost member loses the whole set, members of any kind.

use std::thread;

use dlocks::{LeaseChange, LockError, MultiLock};

use super::unique;
use crate::env::TestEnv;

pub fn a_multi_lock_takes_every_member_or_none(env: &dyn TestEnv) {
    let prefix = unique("multi-all");
    let names: Vec<String> = (0..3).map(|i| format!("{prefix}:{i}")).collect();
    let (me, other) = (env.client(), env.client());
    let multi = MultiLock::new(names.iter().map(|n| me.lock(n.clone())));
    let blocker = other
        .lock(names[1].clone())
        .lock()
        .expect("another owner takes one");
    assert!(
        multi.try_lock().expect("try").is_none(),
        "one member is held elsewhere"
    );
    for name in [&names[0], &names[2]] {
        assert!(
            !other.lock(name.clone()).is_locked().expect("status"),
            "nothing was kept"
        );
    }
    assert!(multi.is_locked().expect("is_locked"), "a member is held");
    blocker.unlock().expect("unlock");
    let guard = multi.try_lock().expect("try").expect("all free now");
    assert!(multi.is_held_by_current_thread().expect("held"));
    assert_eq!(multi.hold_count().expect("count"), 1);
    for name in &names {
        assert!(
            other.lock(name.clone()).try_lock().expect("try").is_none(),
            "{name} is held"
        );
    }
    let again = multi.lock().expect("reentrant as a whole");
    assert_eq!(multi.hold_count().expect("count"), 2);
    drop(again);
    guard.unlock().expect("unlock every member");
    for name in &names {
        assert!(
            !other.lock(name.clone()).is_locked().expect("status"),
            "{name} was released"
        );
    }
}

pub fn a_multi_lock_waits_for_a_held_member_within_its_bound(env: &dyn TestEnv) {
    let prefix = unique("multi-wait");
    let unit = env.unit();
    let (me, other) = (env.client(), env.client());
    let (a, b) = (format!("{prefix}:a"), format!("{prefix}:b"));
    let held = other
        .lock(b.clone())
        .lock_with_lease(unit * 1000)
        .expect("lock");
    let multi = MultiLock::new([me.lock(a.clone()), me.lock(b.clone())]);
    thread::scope(|s| {
        let timed = s.spawn(|| multi.try_lock_for(unit * 3).expect("wait").is_none());
        env.await_sleepers(1);
        assert!(
            !other.lock(a.clone()).is_locked().expect("status"),
            "holds nothing while waiting"
        );
        env.advance(unit * 3);
        assert!(timed.join().expect("waiter"), "gave up at its bound");
        let waiting = s.spawn(|| multi.lock().map(|guard| guard.unlock().is_ok()));
        env.await_sleepers(1);
        held.unlock().expect("unlock");
        assert!(
            waiting.join().expect("waiter").expect("lock"),
            "woken by the release"
        );
    });
}

pub fn two_threads_taking_one_set_in_opposite_orders_never_deadlock(env: &dyn TestEnv) {
    // The two threads contend in every round, so a deadlock or a livelock shows within the
    // first few; more rounds only add the store's time (a thousand each took 35 s on a
    // three-member etcd cluster, the costliest case of the suite).
    const ROUNDS: usize = 300;
    let prefix = unique("multi-order");
    let (x, y) = (format!("{prefix}:x"), format!("{prefix}:y"));
    thread::scope(|s| {
        for reversed in [false, true] {
            let client = env.client();
            let (x, y) = (x.clone(), y.clone());
            s.spawn(move || {
                let (first, second) = if reversed { (y, x) } else { (x, y) };
                let multi = MultiLock::new([client.lock(first), client.lock(second)]);
                for _ in 0..ROUNDS {
                    multi.lock().expect("lock").unlock().expect("unlock");
                }
            });
        }
    });
}

pub fn a_lost_member_loses_the_set_and_unlock_still_releases_the_rest(env: &dyn TestEnv) {
    let prefix = unique("multi-lost");
    let lease = env.unit() * 6;
    let me = env.client_with_watchdog(lease);
    let other = env.client();
    let names: Vec<String> = (0..3).map(|i| format!("{prefix}:{i}")).collect();
    let multi = MultiLock::new(names.iter().map(|n| me.lock(n.clone())));
    let events = me.lease_events();
    let guard = multi.lock().expect("lock");
    assert!(other.lock(names[1].clone()).force_unlock().expect("force"));
    env.advance(lease / 3 + lease / 30);
    // The watchdog's next tick finds the member gone and says so (at once on a manual clock;
    // from its own thread, right after the tick, on a real one).
    let event = events
        .recv_timeout(lease * 2)
        .expect("a lease event for the lost member");
    assert_eq!(&*event.name, names[1].as_str());
    assert!(
        matches!(event.change, LeaseChange::Lost { .. }),
        "{event:?}"
    );
    assert!(guard.is_lost(), "one member lost: the set is lost");
    let error = guard.unlock().expect_err("a member's lease was lost");
    assert!(matches!(error, LockError::LeaseLost { .. }), "{error:?}");
    for name in &names {
        assert!(
            !other.lock(name.clone()).is_locked().expect("status"),
            "{name} released"
        );
    }
}

pub fn a_multi_lock_of_every_kind_and_bad_sets(env: &dyn TestEnv) {
    let prefix = unique("multi-kinds");
    let me = env.client();
    let other = env.client();
    let multi = MultiLock::new([me.lock(format!("{prefix}:plain"))])
        .and(me.fair_lock(format!("{prefix}:fair")))
        .and(me.read_write_lock(format!("{prefix}:rw")).write_lock())
        .and(me.read_write_lock(format!("{prefix}:shared")).read_lock());
    let reader = other
        .read_write_lock(format!("{prefix}:shared"))
        .read_lock()
        .lock()
        .expect("another reader");
    let guard = multi
        .try_lock()
        .expect("try")
        .expect("a read member shares with readers");
    assert!(other
        .fair_lock(format!("{prefix}:fair"))
        .try_lock()
        .expect("try")
        .is_none());
    assert!(other
        .read_write_lock(format!("{prefix}:rw"))
        .read_lock()
        .try_lock()
        .expect("try")
        .is_none());
    guard.unlock().expect("unlock");
    drop(reader);

    let invalid = |result: Result<Option<dlocks::MultiLockGuard>, LockError>| {
        matches!(
            result,
            Err(LockError::InvalidArgument {
                argument: "members",
                ..
            })
        )
    };
    assert!(
        invalid(MultiLock::new(Vec::<dlocks::Lock>::new()).try_lock()),
        "no member"
    );
    let twice = MultiLock::new([
        me.lock(format!("{prefix}:x")),
        me.lock(format!("{prefix}:x")),
    ]);
    assert!(invalid(twice.try_lock()), "a member twice");
    assert!(
        !me.lock(format!("{prefix}:x")).is_locked().expect("status"),
        "nothing taken"
    );
}
