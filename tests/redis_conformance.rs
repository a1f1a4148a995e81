//! The conformance suite on a real `redis-server` (one per test, started by the harness).

#![cfg(feature = "redis")]

mod conformance;
mod support;

conformance_suite!(support::redis_server::RedisEnv::start);
