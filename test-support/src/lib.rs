//! What dlock's tests, benchmarks and fault suite share: the backend environment the
//! conformance suite runs on, the harnesses that start real servers, and the suite itself.
//!
//! Features: `redis` for the Redis harnesses (single server, replicas, Sentinel, Cluster) and
//! Redisson's scripts, `postgres` for the PostgreSQL harness, `etcd` for the etcd harness,
//! `async` for the cases of the async surface.

// Harness code: its items are documented where it helps a test reader, not as a library API.
#![allow(missing_docs)]

#[cfg(feature = "async")]
pub mod async_cases;
#[cfg(feature = "redis")]
pub mod cluster;
pub mod conformance;
pub mod differential;
pub mod env;
#[cfg(feature = "etcd")]
pub mod etcd_server;
#[cfg(feature = "redis")]
pub mod failover_load;
#[cfg(feature = "postgres")]
pub mod fake_clock;
#[cfg(any(feature = "redis", feature = "postgres", feature = "etcd"))]
pub mod helper_process;
pub mod lease_model;
pub mod network;
pub mod ports;
#[cfg(feature = "postgres")]
pub mod postgres_server;
#[cfg(feature = "redis")]
pub mod redis_server;
#[cfg(feature = "redis")]
pub mod redisson;
#[cfg(feature = "redis")]
pub mod sentinel;
#[cfg(any(feature = "redis", feature = "postgres", feature = "etcd"))]
pub mod server_cases;
#[cfg(any(feature = "redis", feature = "postgres", feature = "etcd"))]
mod signals;
pub mod store_queue;
pub mod tcp_proxy;
#[cfg(any(feature = "redis", feature = "postgres"))]
pub mod test_certificates;
pub mod threads;
pub mod wait_queue;

/// docs/architecture.md's example of a backend's test `main.rs` compiles against these macros.
#[cfg(all(doctest, feature = "redis"))]
#[doc = include_str!("../../docs/architecture.md")]
struct ArchitectureDocExamples;

/// docs/fencing.md's examples compile against the fence of each store (with the drivers a
/// writer brings: `postgres`, `redis`).
#[cfg(all(doctest, feature = "redis", feature = "postgres", feature = "etcd"))]
#[doc = include_str!("../../docs/fencing.md")]
struct FencingDocExamples;
