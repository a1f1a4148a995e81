//! What every test file shares: the backend environment the conformance suite runs on.

#![allow(dead_code)] // each test binary uses its own part of the support code

#[cfg(feature = "redis")]
pub mod cluster;
pub mod env;
#[cfg(feature = "redis")]
pub mod failover_load;
#[cfg(any(feature = "redis", feature = "postgres"))]
pub mod helper_process;
pub mod lease_model;
#[cfg(feature = "postgres")]
pub mod postgres_server;
#[cfg(feature = "redis")]
pub mod redis_server;
#[cfg(feature = "redis")]
pub mod redisson;
#[cfg(feature = "redis")]
pub mod sentinel;
pub mod tcp_proxy;
#[cfg(any(feature = "redis", feature = "postgres"))]
pub mod test_certificates;
