//! Guards and futures dropped by async code: an early return, a request cut short, a future
//! dropped after the lock was handed to it. The lock is free at once, never at its lease's end.

use std::future::Future;
use std::task::{Context, Poll};
use std::time::Duration;

use dlocks::{Lock, LockError, LockKind};

use super::{keeps, lasting_client, service_runtime, within_a_second};
use crate::conformance::unique;
use crate::env::TestEnv;

/// A request handler: takes the lock, then gives up with `?` (the guard dropped by the early
/// return, on whichever worker the task is on).
async fn refused_request(lock: Lock) -> Result<(), LockError> {
    let guard = lock.lock_async().await?;
    tokio::task::yield_now().await;
    let refused: Result<(), LockError> = Err(LockError::invalid("request", "refused"));
    refused?;
    guard.unlock_async().await
}

pub fn a_guard_dropped_by_async_code_frees_the_lock_at_once(env: &dyn TestEnv) {
    let runtime = service_runtime();
    let name = unique("async-dropped");
    let (client, other) = (lasting_client(env), env.client());
    let lock = client.lock(&name);

    let answer = runtime
        .block_on(runtime.spawn(refused_request(lock.clone())))
        .expect("the task ended without a panic");
    assert!(answer.is_err_and(|error| error.is_invalid_argument()));
    let taken = runtime.block_on(within_a_second(
        "after an early return",
        other.lock(&name).lock_async(),
    ));
    drop(taken);

    // A request cut short by its time-out (as axum or hyper drop the future of a request
    // whose client went away) after it had the lock.
    let cut = lock.clone();
    let timed_out = runtime
        .block_on(runtime.spawn(async move {
            tokio::time::timeout(Duration::from_millis(50), async move {
                let _guard = cut.lock_async().await?;
                std::future::pending::<()>().await;
                Ok::<(), LockError>(())
            })
            .await
        }))
        .expect("the task ended without a panic");
    assert!(timed_out.is_err(), "cut short");
    let taken = runtime.block_on(within_a_second(
        "after a cancelled request",
        other.lock(&name).lock_async(),
    ));
    drop(taken);

    // The last handle of the client dropped in a task before the guard it made.
    let guard = runtime.block_on(lock.lock_async()).expect("lock_async");
    runtime
        .block_on(runtime.spawn(async move {
            drop((lock, client));
            tokio::task::yield_now().await;
            drop(guard);
        }))
        .expect("dropped without a panic");
    let taken = runtime.block_on(within_a_second(
        "after its client went",
        other.lock(&name).lock_async(),
    ));
    drop(taken);
}

/// Polls `future` for `within` of real time, leaving it where it got to.
fn drive<F: Future + Unpin>(runtime: &tokio::runtime::Runtime, future: &mut F, within: Duration) {
    runtime.block_on(async {
        let _ = tokio::time::timeout(within, future).await;
    });
}

/// Polls `future` once (with a waker that does nothing).
fn poll_once<F: Future + Unpin>(future: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(future).poll(&mut Context::from_waker(std::task::Waker::noop()))
}

pub fn a_lock_handed_to_a_dropped_future_comes_back_at_once(env: &dyn TestEnv) {
    let runtime = service_runtime();
    let settle = Duration::from_millis(200);
    // The same client: its release hands the lock straight to its waiting future (where the
    // backend hands over), which is dropped before it is polled again.
    let name = unique("async-handed");
    let (client, other) = (lasting_client(env), env.client());
    let held = client.lock(&name).lock().expect("lock");
    let mut waiting = Box::pin(client.lock(&name).lock_async());
    drive(&runtime, &mut waiting, settle);
    env.await_sleepers(1);
    // Waited long enough to be handed the lock rather than see its releaser take it again.
    env.advance(Duration::from_millis(2));
    held.unlock().expect("unlock");
    drop(waiting);
    let taken = runtime.block_on(within_a_second(
        "a lock handed to a dropped future",
        other.lock(&name).lock_async(),
    ));
    drop(taken);

    // A future dropped before its first poll does nothing; one dropped after a single poll
    // leaves nothing either.
    let never = client.lock(&name).lock_async();
    drop(never);
    let mut once = Box::pin(client.lock(&name).lock_async());
    let _ = poll_once(&mut once);
    drop(once);
    let taken = runtime.block_on(within_a_second(
        "after futures dropped early",
        other.lock(&name).lock_async(),
    ));
    drop(taken);

    // A fair lock: the store grants the lock to the head of its queue, a future of another
    // client, dropped once granted.
    if keeps(env, LockKind::Fair) {
        let name = unique("async-fair-granted");
        let (holder, waiter, third) = (lasting_client(env), lasting_client(env), env.client());
        let held = holder.fair_lock(&name).lock().expect("lock");
        let mut waiting = Box::pin(waiter.fair_lock(&name).lock_async());
        drive(&runtime, &mut waiting, settle);
        env.await_sleepers(1);
        // The release grants the lock to the head of the store's queue in the same step.
        held.unlock().expect("unlock");
        drop(waiting);
        let taken = runtime.block_on(within_a_second(
            "a fair lock granted to a dropped future",
            third.fair_lock(&name).lock_async(),
        ));
        drop(taken);
    }

    // A semaphore's permit handed to a dropped future.
    if keeps(env, LockKind::Semaphore) {
        let name = unique("async-permit-handed");
        let semaphore = client.semaphore(&name);
        assert!(semaphore.try_set_permits(1).expect("set"));
        let permit = semaphore.acquire().expect("permit");
        let mut waiting = Box::pin(semaphore.acquire_async());
        drive(&runtime, &mut waiting, settle);
        env.await_sleepers(1);
        env.advance(Duration::from_millis(2));
        permit.release().expect("release");
        drop(waiting);
        let back = runtime.block_on(within_a_second(
            "a permit handed to a dropped future",
            other.semaphore(&name).acquire_async(),
        ));
        drop(back);
    }
}

/// A write request cut short while it waited behind a reader: nobody waits to write any more,
/// so the next reader comes in at once (a writer's mark left behind would hold it off for
/// seconds).
pub fn a_writer_future_dropped_while_waiting_holds_no_reader_off(env: &dyn TestEnv) {
    if !keeps(env, LockKind::Write) {
        return;
    }
    let runtime = service_runtime();
    let name = unique("async-dropped-writer");
    let (reader, writer, late) = (lasting_client(env), lasting_client(env), env.client());
    let reading = reader
        .read_write_lock(&name)
        .read_lock()
        .lock()
        .expect("read");
    let write = writer.read_write_lock(&name).write_lock();
    let cut = runtime.block_on(async {
        tokio::time::timeout(Duration::from_millis(200), write.lock_async()).await
    });
    assert!(cut.is_err(), "the write waits behind the reader");
    let taken = runtime.block_on(within_a_second(
        "a new reader after the waiting writer's future was dropped",
        late.read_write_lock(&name).read_lock().lock_async(),
    ));
    drop(taken);
    reading.unlock().expect("unlock");
}
