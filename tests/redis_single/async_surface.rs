//! The async surface on a real `redis-server` (one per test, started by the harness).

#![cfg(all(feature = "redis", feature = "async"))]

dlock_test_support::async_suite!(dlock_test_support::redis_server::RedisEnv::start);
