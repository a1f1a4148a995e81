//! A step sent again while its first attempt is still at work on the server: the connection
//! failed under it (reset by the network) while the first attempt waited for a row another
//! transaction held. The client sends the step again at once, on a new connection, and that
//! copy must answer as the first attempt did, not find what the first attempt did and answer
//! from that.
//!
//! The row is held by a transaction of the test's own (standing for a slow server: another
//! session's long step on the same lock). The client cancels a call whose connection failed
//! (see `abandoned_steps.rs`); here that cancel is held up in the network, as it may be.

#![cfg(feature = "postgres")]

use std::thread;
use std::time::Duration;

use dlock_test_support::conformance::new_owner;
use dlock_test_support::postgres_server::{PostgresServer, RowsHeld, CANCEL_REQUEST};
use dlock_test_support::server_cases::{ServerEnv, Timeouts};
use dlock_test_support::tcp_proxy::TcpProxy;
use dlocks::backend::{Acquire, AcquireRequest, DistributedLock, LockRef};
use dlocks::{LockClient, LockKind};

/// A server, the fault proxy in front of it, and a client through the proxy.
struct Retried {
    server: PostgresServer,
    proxy: TcpProxy,
    client: LockClient,
}

impl Retried {
    fn start() -> Retried {
        let server = PostgresServer::start();
        let proxy = TcpProxy::start(server.port());
        let client = server.client_through(&proxy);
        Retried {
            server,
            proxy,
            client,
        }
    }

    /// Runs `step` (on this thread: a guard stays on its thread) while its first attempt waits
    /// on `name`'s row: the connection is cut under it, the copy sent again waits too, then the
    /// row is let go.
    fn with_the_first_attempt_at_work<T>(&self, name: &str, step: impl FnOnce() -> T) -> T {
        self.with_a_step_between(name, None::<fn()>, step).0
    }

    /// Plays `case` on a new server (given a backend through the proxy, and an operator's)
    /// until the acquire's copy comes after the operator's force-unlock (`case` answers
    /// `true`), up to five times. PostgreSQL does not promise the order in which the sessions
    /// waiting for one row get it: now and then the copy gets it first, re-enters the first
    /// attempt's hold, and the force-unlock then ends that hold (`case` checks that it did,
    /// and answers `false`).
    fn until_the_copy_comes_after_the_force_unlock(
        case: impl Fn(&Retried, &dyn DistributedLock, &dyn DistributedLock) -> bool,
    ) {
        for _ in 0..5 {
            let retried = Retried::start();
            let backend = retried
                .server
                .backend_through(&retried.proxy, Timeouts::default());
            let operator = retried.server.backend();
            if case(&retried, &*backend, &operator) {
                return;
            }
        }
        panic!("the acquire's copy never came after the force-unlock in five tries");
    }

    /// As [`with_the_first_attempt_at_work`](Self::with_the_first_attempt_at_work), with
    /// `between` (another client's step on the same row) queued behind the first attempt and
    /// ahead of the copy sent again; its answer too.
    fn with_a_step_between<T, U: Send>(
        &self,
        name: &str,
        between: Option<impl FnOnce() -> U + Send>,
        step: impl FnOnce() -> T,
    ) -> (T, Option<U>) {
        let (server, proxy) = (&self.server, &self.proxy);
        let row = RowsHeld::hold_made(&server.url(), name);
        thread::scope(|scope| {
            let faults = scope.spawn(move || {
                server.await_lock_waits(1);
                let mut waiting = 1;
                let between = between.map(|between| {
                    let queued = scope.spawn(between);
                    waiting += 1;
                    server.await_lock_waits(waiting);
                    queued
                });
                // The client's cancel of the first attempt, sent when its connection fails,
                // does not get through: the attempt stays at work.
                proxy.hold_back_next_bytes(&CANCEL_REQUEST);
                proxy.sever();
                server.await_lock_waits(waiting + 1);
                row.let_go();
                between.map(|queued| queued.join().expect("the step between"))
            });
            let answer = step();
            (answer, faults.join().expect("the faults"))
        })
    }
}

#[test]
fn a_set_once_step_sent_again_while_its_first_attempt_works_answers_as_that_attempt() {
    let retried = Retried::start();
    let latch = retried.client.count_down_latch("retried:latch");
    let set = retried.with_the_first_attempt_at_work(latch.name(), || latch.try_set_count(2));
    assert!(
        set.expect("the step"),
        "the first attempt set the count: the copy must say so"
    );
    assert_eq!(latch.count().expect("count"), 2);
}

#[test]
fn a_release_sent_again_while_its_first_attempt_works_answers_released() {
    let retried = Retried::start();
    let rw = retried.client.read_write_lock("retried:read");
    let guard = rw.read_lock().lock().expect("read");
    let released = retried.with_the_first_attempt_at_work(rw.name(), || guard.unlock());
    released.expect("the first attempt released the hold: the copy must say so");
    assert!(rw.write_lock().try_lock().expect("try").is_some());
}

/// A reentrant lock's release keeps no latch: sent again, it answers from what became of the
/// hold (released, since it is not among the holds that ended otherwise), after the first
/// attempt's delete is done.
#[test]
fn a_reentrant_release_sent_again_while_its_first_attempt_works_answers_released() {
    let retried = Retried::start();
    let lock = retried.client.lock("retried:reentrant");
    let guard = lock.lock().expect("lock");
    let released = retried.with_the_first_attempt_at_work(lock.name(), || guard.unlock());
    released.expect("the first attempt released the hold: the copy must say so");
    assert!(lock.try_lock().expect("try").is_some());
}

/// An operator's force-unlock ends the hold an acquire's first attempt made (of `kind`), while
/// the copy sent again waits behind it for the name's row: the copy must answer that the hold
/// is gone, not make it again. A hold that ended without its release is never made again under
/// its id: its client would take the copy's answer for the first attempt's, and go on renewing
/// a hold the operator ended. (Should the copy get the row first, the lock still ends free,
/// and the case is played again: see `until_the_copy_comes_after_the_force_unlock`.)
fn an_acquire_sent_again_after_a_force_unlock_ended_its_hold_answers_gone(kind: LockKind) {
    Retried::until_the_copy_comes_after_the_force_unlock(|retried, backend, operator| {
        let name = format!("retried:forced:{kind}");
        let lock = LockRef::new(&name, kind);
        let owner = new_owner();
        let (acquired, ended) =
            retried.with_a_step_between(&name, Some(|| operator.force_unlock(lock)), || {
                backend.try_acquire(&AcquireRequest::new(lock, &owner, Duration::from_secs(30)))
            });
        assert!(
            ended.expect("the force-unlock ran").expect("force-unlock"),
            "the force-unlock found the first attempt's {kind} hold and ended it"
        );
        assert!(
            !operator.status(lock, &owner).expect("status").locked,
            "the {kind} lock stays free after the force-unlock: {acquired:?}"
        );
        match acquired {
            Ok(Acquire::Gone { .. }) => true,
            // The copy came first, and re-entered the hold the force-unlock then ended.
            Ok(Acquire::Acquired(_)) => false,
            other => {
                panic!("the copy must answer gone, not make the ended {kind} hold again: {other:?}")
            }
        }
    });
}

#[test]
fn a_reentrant_acquire_sent_again_after_a_force_unlock_answers_gone() {
    an_acquire_sent_again_after_a_force_unlock_ended_its_hold_answers_gone(LockKind::Reentrant);
}

#[test]
fn a_fenced_acquire_sent_again_after_a_force_unlock_answers_gone() {
    an_acquire_sent_again_after_a_force_unlock_ended_its_hold_answers_gone(LockKind::Fenced);
}

#[test]
fn a_write_acquire_sent_again_after_a_force_unlock_answers_gone() {
    an_acquire_sent_again_after_a_force_unlock_ended_its_hold_answers_gone(LockKind::Write);
}

#[test]
fn a_read_acquire_sent_again_after_a_force_unlock_answers_gone() {
    an_acquire_sent_again_after_a_force_unlock_ended_its_hold_answers_gone(LockKind::Read);
}

#[test]
fn a_campaign_sent_again_after_a_force_unlock_answers_gone() {
    an_acquire_sent_again_after_a_force_unlock_ended_its_hold_answers_gone(LockKind::Election);
}

/// The same in a batch (`try_acquire_many`): the batch rolls back whole when one of its
/// acquires finds its hold ended; that one answers gone, and the others are sent again.
#[test]
fn a_batch_sent_again_after_a_force_unlock_answers_gone_for_the_ended_hold_alone() {
    Retried::until_the_copy_comes_after_the_force_unlock(|retried, backend, operator| {
        let (forced, other) = (
            LockRef::new("retried:batch:forced", LockKind::Reentrant),
            LockRef::new("retried:batch:other", LockKind::Reentrant),
        );
        let owner = new_owner();
        let lease = Duration::from_secs(30);
        let (acquired, ended) = retried.with_a_step_between(
            forced.name,
            Some(|| operator.force_unlock(forced)),
            || {
                backend.try_acquire_many(&[
                    AcquireRequest::new(forced, &owner, lease),
                    AcquireRequest::new(other, &owner, lease),
                ])
            },
        );
        assert!(ended.expect("the force-unlock ran").expect("force-unlock"));
        let acquired = acquired.expect("the batch");
        assert!(!operator.status(forced, &owner).expect("status").locked);
        assert!(
            operator
                .status(other, &owner)
                .expect("status")
                .held_by_owner
        );
        match &acquired[0] {
            Acquire::Gone { .. } => {
                assert!(acquired[1].is_acquired(), "the other taken: {acquired:?}");
                true
            }
            // The copy came first, and re-entered the hold the force-unlock then ended.
            Acquire::Acquired(_) => false,
            _ => panic!("the ended hold alone is gone: {acquired:?}"),
        }
    });
}
