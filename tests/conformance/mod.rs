//! The conformance suite: every behaviour of the public API that does not depend on the backend,
//! written once and run on each backend by [`conformance_suite!`].

#![allow(dead_code)]

use std::time::Duration;

use crate::support::env::TestEnv;

/// Instantiates every conformance test for the environment made by `$make_env`
/// (a path to a `fn() -> impl TestEnv`).
#[macro_export]
macro_rules! conformance_suite {
    ($make_env:path) => {
        $crate::conformance_suite!(@tests $make_env;
            uncontended_lock_and_release,
        );
    };
    (@tests $make_env:path; $($test:ident,)*) => {
        $(
            #[test]
            fn $test() {
                let env = $make_env();
                $crate::conformance::$test(&env);
            }
        )*
    };
}

/// A lock name no other test uses.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}:{}", uuid::Uuid::new_v4())
}

pub fn uncontended_lock_and_release(env: &dyn TestEnv) {
    let client = env.client();
    let lock = client.lock(unique("plain"));
    let guard = lock.lock().expect("lock");
    assert!(lock.is_locked().expect("is_locked"));
    assert!(lock.is_held_by_current_thread().expect("held"));
    guard.unlock().expect("unlock");
    assert!(!lock.is_locked().expect("is_locked"));
    let _ = Duration::ZERO;
}
