//! The blocking API called from inside an async runtime (tokio's): it works there as on any
//! thread, without a panic, and a guard dropped on a runtime's worker (an early return, a
//! request cancelled by a time-out) frees the lock at once.

use std::time::Duration;

use dlocks::{Lock, LockError};

use super::unique;
use crate::env::TestEnv;

/// A runtime like a service's: several workers, timers.
fn service_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A request handler that takes the lock and then gives up with `?` before the end: the
/// owned guard is dropped by the early return, on whichever worker ran the task.
async fn refused_request(lock: Lock) -> Result<(), LockError> {
    let guard = lock.lock_owned()?;
    tokio::task::yield_now().await; // the task may resume on another worker
    let refused: Result<(), LockError> = Err(LockError::invalid("request", "refused"));
    refused?;
    guard.unlock()
}

pub fn the_blocking_api_works_inside_an_async_runtime(env: &dyn TestEnv) {
    let name = unique("in-runtime");
    let (client, observer) = (env.client(), env.client());
    let runtime = service_runtime();
    let lock = client.lock(name.clone());
    let outside = observer.lock(name.clone());

    // An early return drops the guard on a worker: the lock is free when the task ends.
    let answer = runtime
        .block_on(runtime.spawn(refused_request(lock.clone())))
        .expect("the task ended without a panic");
    assert!(answer.is_err_and(|error| error.is_invalid_argument()));
    assert!(!outside.is_locked().expect("is_locked"), "freed at once");

    // A request cut short by its time-out while it held the lock (the future dropped on the
    // worker, as axum or hyper drop a request whose client went away): freed at once too.
    let cancelled = lock.clone();
    let timed_out = runtime
        .block_on(runtime.spawn(async move {
            tokio::time::timeout(Duration::from_millis(20), async move {
                let _guard = cancelled.lock_owned()?;
                std::future::pending::<()>().await;
                Ok::<(), LockError>(())
            })
            .await
        }))
        .expect("the task ended without a panic");
    assert!(timed_out.is_err(), "the request was cut short");
    assert!(!outside.is_locked().expect("is_locked"), "freed at once");

    // Thread-bound guards, re-entered and released within one task; `try_*` and status calls.
    let in_task = lock.clone();
    let counted = runtime
        .block_on(runtime.spawn(async move {
            let outer = in_task.lock()?;
            let inner = in_task.try_lock()?.expect("re-entered");
            let count = in_task.hold_count()?;
            drop(inner);
            outer.unlock()?;
            Ok::<u32, LockError>(count)
        }))
        .expect("the task ended without a panic")
        .expect("lock calls inside a task");
    assert_eq!(counted, 2);

    // The last handle of a client dropped on a worker.
    runtime
        .block_on(runtime.spawn(async move { drop((lock, client)) }))
        .expect("dropped without a panic");
    drop(runtime);
    assert!(outside
        .try_lock_for(env.unit())
        .expect("try_lock_for")
        .is_some());
}
