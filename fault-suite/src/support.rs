//! The test harness's process control (`redis-server` processes, the proxy), shared with the
//! workspace's tests.

#![allow(dead_code)]

#[path = "../../tests/support/env.rs"]
pub mod env;
#[path = "../../tests/support/postgres_server.rs"]
pub mod postgres_server;
#[path = "../../tests/support/redis_server.rs"]
pub mod redis_server;
#[path = "../../tests/support/tcp_proxy.rs"]
pub mod tcp_proxy;
#[path = "../../tests/support/test_certificates.rs"]
pub mod test_certificates;
