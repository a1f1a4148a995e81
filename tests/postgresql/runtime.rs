//! PostgreSQL from inside an async runtime: a connection's I/O runs on a runtime of its own,
//! which tokio refuses to block on a thread that already drives one. Connecting, every step, a
//! guard dropped on a worker and the last client and backend dropped there all work without a
//! panic (the conformance suite's `the_blocking_api_works_inside_an_async_runtime` covers the
//! handles on a shared backend).

#![cfg(feature = "postgres")]

use std::time::Duration;

use dlock_test_support::conformance::unique;
use dlock_test_support::postgres_server::PostgresServer;
use dlocks::postgres::PostgresBackend;
use dlocks::{LockClient, LockError};

#[test]
fn a_backend_made_used_and_dropped_inside_tasks_never_panics() {
    let server = PostgresServer::start();
    let url = server.url();
    let name = unique("pg-runtime");
    let observer = LockClient::new(server.backend());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // The same three times: a connection dropped at the end of a runtime once panicked in one
    // run of three.
    for round in 0..3 {
        let (url, task_name) = (url.clone(), name.clone());
        let held = runtime
            .block_on(runtime.spawn(async move {
                let client = LockClient::new(PostgresBackend::connect(&url)?);
                let lock = client.lock(task_name);
                let _guard = lock.lock_owned()?;
                tokio::task::yield_now().await; // it may resume on another worker
                                                // The task ends holding the guard: it and the last client (and its backend,
                                                // with its pool's connections) are dropped here, on a worker.
                lock.is_locked()
            }))
            .expect("the task ended without a panic")
            .expect("PostgreSQL steps inside a task");
        assert!(held);
        assert!(
            !observer.lock(name.clone()).is_locked().expect("is_locked"),
            "the guard dropped by the early return freed the lock at once (round {round})"
        );
    }
    // A backend dropped on the thread that runs `block_on` (the end of `#[tokio::main]`).
    let url_in_main = url.clone();
    runtime
        .block_on(async move {
            let client = LockClient::new(PostgresBackend::connect(&url_in_main)?);
            client
                .lock(unique("pg-runtime-main"))
                .try_lock()?
                .map(|guard| guard.unlock())
                .transpose()?;
            drop(client);
            Ok::<(), LockError>(())
        })
        .expect("PostgreSQL steps in block_on");
    drop(runtime);
    assert!(observer
        .lock(name)
        .try_lock_for(Duration::from_secs(1))
        .expect("try_lock_for")
        .is_some());
}
