//! Waiters in turn, on a store that keeps them
//! ([`keeps_turns`](dlocks::backend::DistributedLock::keeps_turns)): the plain lock's waiters,
//! and a read-write lock's writers. A free lock goes to the waiter refused first, not to
//! whoever asks first; a waiter that gives up hands its turn on at once, and one that died
//! holds a free lock up only while its mark lives. On a store that does not keep them,
//! whoever asks first takes a free lock.

use std::thread;
use std::time::Duration;

use dlocks::backend::{AcquireRequest, LockRef};
use dlocks::testing::Op;
use dlocks::{LockClient, LockError, LockGuard, LockKind};
use parking_lot::Mutex;

use super::late_steps::client_on;
use super::{await_answered, hold_up_next_try, new_owner, unique};
use crate::env::TestEnv;

/// A kind whose waiters the store keeps in turn; each case below runs on both.
#[derive(Clone, Copy, Debug)]
enum InTurn {
    /// The plain (reentrant) lock.
    Plain,
    /// A read-write lock's write side.
    Write,
}

impl InTurn {
    /// `name`'s lock of this kind on `client`, waited for at most `wait` (`None`: a single
    /// try).
    fn take(
        self,
        client: &LockClient,
        name: &str,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>, LockError> {
        match (self, wait) {
            (InTurn::Plain, Some(wait)) => client.lock(name).try_lock_for(wait),
            (InTurn::Plain, None) => client.lock(name).try_lock(),
            (InTurn::Write, Some(wait)) => {
                client.read_write_lock(name).write_lock().try_lock_for(wait)
            }
            (InTurn::Write, None) => client.read_write_lock(name).write_lock().try_lock(),
        }
    }

    /// `name`'s lock of this kind on `client`, taken.
    fn hold(self, client: &LockClient, name: &str) -> LockGuard {
        match self {
            InTurn::Plain => client.lock(name).lock(),
            InTurn::Write => client.read_write_lock(name).write_lock().lock(),
        }
        .expect("lock")
    }

    fn kind(self) -> LockKind {
        match self {
            InTurn::Plain => LockKind::Reentrant,
            InTurn::Write => LockKind::Write,
        }
    }

    fn unique(self, prefix: &str) -> String {
        unique(&format!("{prefix}-{self:?}"))
    }
}

/// A waiter refused while the lock was held takes it once free, before a client that asks
/// while the waiter's next try is still on its way.
pub fn a_plain_waiter_takes_the_free_lock_before_a_newcomer(env: &dyn TestEnv) {
    waiter_takes_the_free_lock_before_a_newcomer(env, InTurn::Plain);
}

/// A writer refused while the lock was held takes it once free, before a writer that asks
/// while the first one's next try is still on its way: writers cannot starve one another.
pub fn a_writer_takes_the_free_lock_before_a_newcomer(env: &dyn TestEnv) {
    waiter_takes_the_free_lock_before_a_newcomer(env, InTurn::Write);
}

fn waiter_takes_the_free_lock_before_a_newcomer(env: &dyn TestEnv, in_turn: InTurn) {
    let name = in_turn.unique("turn-before-newcomer");
    let unit = env.unit();
    let turns = env.backend().keeps_turns();
    let observed = env.faulty();
    let (holder, waiter, newcomer) = (env.client(), client_on(env, &observed), env.client());
    let held = in_turn.hold(&holder, &name);
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            in_turn
                .take(&waiter, &name, Some(unit * 500))
                .expect("wait")
                .map(|guard| guard.unlock().is_ok())
        });
        // Its first try refused (and its mark made).
        await_answered(env, &observed, Op::TryAcquire, 1, 1);
        // Its next try, made at the release, is held up on its way: the lock is free when the
        // newcomer asks.
        let (arrived, go) = hold_up_next_try(&observed);
        held.unlock().expect("unlock");
        arrived
            .recv_timeout(Duration::from_secs(30))
            .expect("the waiter tries again at the release");
        let taken = in_turn.take(&newcomer, &name, None).expect("try");
        assert_eq!(
            taken.is_some(),
            !turns,
            "a newcomer takes a free lock only where waiters are not kept in turn"
        );
        if let Some(guard) = taken {
            guard.unlock().expect("unlock");
        }
        go.send(()).expect("the held try goes on");
        assert_eq!(waiting.join().expect("waiter"), Some(true));
    });
}

/// A thread that lets the lock go while another thread of its client waits does not hand it
/// to that thread past a waiter of another client refused before it: that waiter takes the
/// lock first.
pub fn a_hand_off_within_a_client_waits_for_an_earlier_waiter(env: &dyn TestEnv) {
    let name = unique("turn-hand-off");
    let unit = env.unit();
    let turns = env.backend().keeps_turns();
    let (other_observed, own_observed) = (env.faulty(), env.faulty());
    let (other, own) = (
        client_on(env, &other_observed),
        client_on(env, &own_observed),
    );
    let held = own.lock(name.clone()).lock().expect("lock");
    let order = Mutex::new(Vec::new());
    let take_turn = |client: &dlocks::LockClient, who: &'static str| {
        let guard = client
            .lock(name.clone())
            .try_lock_for(unit * 500)
            .expect("wait")
            .expect("its turn came");
        order.lock().push(who);
        guard.unlock().expect("unlock");
    };
    thread::scope(|s| {
        s.spawn(|| take_turn(&other, "another client's waiter"));
        // Its first try refused (and its mark made).
        await_answered(env, &other_observed, Op::TryAcquire, 1, 1);
        s.spawn(|| take_turn(&own, "the holder's client's waiter"));
        // The holder's own try, then its client's waiter's refused.
        await_answered(env, &own_observed, Op::TryAcquire, 2, 2);
        held.unlock().expect("unlock");
    });
    let expected = ["another client's waiter", "the holder's client's waiter"];
    if turns {
        assert_eq!(*order.lock(), expected);
    } else {
        assert_eq!(order.lock().len(), 2);
    }
}

/// A waiter that gives up hands its turn on at once: the waiter refused after it takes the lock
/// at its release, well within the time the first one's mark would live.
pub fn a_plain_waiter_that_gives_up_hands_its_turn_on_at_once(env: &dyn TestEnv) {
    waiter_that_gives_up_hands_its_turn_on_at_once(env, InTurn::Plain);
}

/// A writer that gives up hands its turn on to the next writer at once.
pub fn a_writer_that_gives_up_hands_its_turn_on_at_once(env: &dyn TestEnv) {
    waiter_that_gives_up_hands_its_turn_on_at_once(env, InTurn::Write);
}

fn waiter_that_gives_up_hands_its_turn_on_at_once(env: &dyn TestEnv, in_turn: InTurn) {
    let name = in_turn.unique("turn-given-up");
    let unit = env.unit();
    let (holder, first, second) = (env.client(), env.client(), env.client());
    let held = in_turn.hold(&holder, &name);
    thread::scope(|s| {
        let giving_up = s.spawn(|| {
            in_turn
                .take(&first, &name, Some(unit * 8))
                .expect("wait")
                .is_none()
        });
        env.await_sleepers(1);
        // A wait that ends before a mark the first waiter left behind would run out (it lives
        // for seconds): only its leaving lets this one in within it.
        let next = s.spawn(|| {
            in_turn
                .take(&second, &name, Some(unit * 12))
                .expect("wait")
                .map(|guard| guard.unlock().is_ok())
        });
        env.await_sleepers(2);
        // The first waiter's wait ends; then the holder lets go.
        env.advance(unit * 9);
        assert!(giving_up.join().expect("first waiter"), "it gave up");
        held.unlock().expect("unlock");
        assert_eq!(next.join().expect("second waiter"), Some(true));
    });
}

/// A waiter that died while waiting (its try marked it, and it never came back) holds a free
/// lock up for no longer than its mark lives.
pub fn a_dead_plain_waiter_holds_a_free_lock_up_only_while_its_mark_lives(env: &dyn TestEnv) {
    dead_waiter_holds_a_free_lock_up_only_while_its_mark_lives(env, InTurn::Plain);
}

/// A writer that died while waiting holds a free lock up for no longer than its mark lives.
pub fn a_dead_writer_holds_a_free_lock_up_only_while_its_mark_lives(env: &dyn TestEnv) {
    dead_waiter_holds_a_free_lock_up_only_while_its_mark_lives(env, InTurn::Write);
}

fn dead_waiter_holds_a_free_lock_up_only_while_its_mark_lives(env: &dyn TestEnv, in_turn: InTurn) {
    let name = in_turn.unique("turn-dead-waiter");
    let unit = env.unit();
    let turns = env.backend().keeps_turns();
    let holder = env.client();
    let held = in_turn.hold(&holder, &name);
    let (dead, dead_waiter) = (new_owner(), new_owner());
    let refused = env
        .backend()
        .try_acquire(
            &AcquireRequest::new(LockRef::new(&name, in_turn.kind()), &dead, unit * 50)
                .queued_as(&dead_waiter)
                .waiting(true, unit * 4),
        )
        .expect("the dead waiter's try");
    assert!(!refused.is_acquired(), "the lock is held");
    held.unlock().expect("unlock");
    let late = env.client();
    assert_eq!(
        in_turn.take(&late, &name, None).expect("try").is_none(),
        turns,
        "the dead waiter's mark holds a free lock off where waiters are kept in turn"
    );
    thread::scope(|s| {
        let waiting = s.spawn(|| {
            in_turn
                .take(&late, &name, Some(unit * 500))
                .expect("wait")
                .map(|guard| guard.unlock().is_ok())
        });
        env.await_sleepers(1);
        env.advance(unit * 5);
        assert_eq!(
            waiting.join().expect("waiter"),
            Some(true),
            "in once the mark ran out"
        );
    });
}
