//! The async surface on every backend, written once and run by
//! [`async_suite!`](crate::async_suite): every kind taken, waited for and released by futures,
//! guards dropped by async code, and acquires cancelled at any point leaving nothing held or
//! queued. Each test runs its futures on a tokio runtime of its own (four workers), as a
//! service would.

#![allow(dead_code)]

mod cancel;
mod dropped;
mod surface;

pub use cancel::*;
pub use dropped::*;
pub use surface::*;

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use dlocks::{LockClient, LockError, LockKind, OwnedLockGuard};

use crate::env::TestEnv;

/// Instantiates every test of the async surface for the environment made by `$make_env` (a
/// path to a `fn() -> impl TestEnv`), or, written `server $server`, by a server harness's
/// [`ServerEnv::conformance_env`](crate::server_cases::ServerEnv::conformance_env). Kinds the backend does not keep are left out by each test.
#[macro_export]
macro_rules! async_suite {
    (server $server:ty) => {
        /// The async surface's environment on the server harness.
        fn async_env() -> impl $crate::env::TestEnv {
            <$server as $crate::server_cases::ServerEnv>::conformance_env()
        }
        $crate::async_suite!(async_env);
    };
    ($make_env:path) => {
        $crate::async_suite!(@tests $make_env;
            futures_take_wait_for_and_release_every_exclusive_kind,
            a_future_waits_out_its_bound_and_a_fixed_lease_runs_out,
            readers_share_and_a_writer_waits_by_futures,
            semaphores_latches_and_elections_by_futures,
            a_guard_dropped_by_async_code_frees_the_lock_at_once,
            a_lock_handed_to_a_dropped_future_comes_back_at_once,
            a_writer_future_dropped_while_waiting_holds_no_reader_off,
            a_thousand_cancelled_acquires_leave_the_lock_free,
            a_thousand_cancelled_fair_acquires_leave_no_queue_entry,
            a_thousand_cancelled_permit_acquires_leave_every_permit,
            a_burst_of_cancelled_acquires_sends_none_of_their_queued_steps,
        );
    };
    (@tests $make_env:path; $($test:ident,)*) => {
        $(
            #[test]
            fn $test() {
                let env = $make_env();
                $crate::async_cases::$test(&env);
            }
        )*
    };
}

/// A runtime like a service's: four workers, timers.
pub fn service_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// A boxed future of an owned guard, whatever the kind.
pub type Acquiring = Pin<Box<dyn Future<Output = Result<OwnedLockGuard, LockError>> + Send>>;

/// The future of a lock of one kind, from a client and a name.
pub type AsyncMaker = fn(&LockClient, &str) -> Acquiring;

/// The exclusive kinds the environment's backend keeps, each as a maker of `lock_async`.
pub fn exclusive_kinds(env: &dyn TestEnv) -> Vec<(LockKind, AsyncMaker)> {
    let all: [(LockKind, AsyncMaker); 4] = [
        (LockKind::Reentrant, |c, n| Box::pin(c.lock(n).lock_async())),
        (LockKind::Fenced, |c, n| {
            Box::pin(c.fenced_lock(n).lock_async())
        }),
        (LockKind::Fair, |c, n| Box::pin(c.fair_lock(n).lock_async())),
        (LockKind::Write, |c, n| {
            Box::pin(c.read_write_lock(n).write_lock().lock_async())
        }),
    ];
    let backend = env.backend();
    all.into_iter()
        .filter(|(kind, _)| *kind == LockKind::Reentrant || backend.supports(*kind))
        .collect()
}

/// A client whose holds outlive every test (a 30 s watchdog lease): a lock it leaked would
/// stay taken, never freed by its lease ending within a test's second.
pub fn lasting_client(env: &dyn TestEnv) -> LockClient {
    env.client_with_watchdog(Duration::from_secs(30))
}

/// Whether the environment's backend keeps `kind`.
pub fn keeps(env: &dyn TestEnv, kind: LockKind) -> bool {
    env.backend().supports(kind)
}

/// What `acquiring` gives within a second of real time (whatever the environment's clock):
/// a lock that is free, or freed by a release already on its way, is taken in that time.
pub async fn within_a_second<T>(
    what: &str,
    acquiring: impl Future<Output = Result<T, LockError>>,
) -> T {
    match tokio::time::timeout(Duration::from_secs(1), acquiring).await {
        Ok(Ok(taken)) => taken,
        Ok(Err(error)) => panic!("{what}: {error}"),
        Err(_) => panic!("{what}: not taken within a second"),
    }
}
