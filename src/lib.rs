//! dlock: Redisson-class distributed locks for threaded Rust programs.
//!
//! A blocking API with RAII guards over a pluggable backend: [`MemoryBackend`] in-process (with
//! a [`ManualClock`] for deterministic tests) and, with the `redis` feature, `redis::RedisBackend`.
//! The crate root is the user's side; [`backend`] is the contract a storage backend implements;
//! [`testing`] has what tests of lock-using code need.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use dlock::{LockClient, MemoryBackend};
//!
//! let client = LockClient::new(MemoryBackend::new());
//! let orders = client.lock("orders:42");
//! let guard = orders.lock()?;                       // blocks; renewed by the watchdog
//! assert!(orders.try_lock_for(Duration::from_millis(10))?.is_some()); // reentrant
//! drop(guard);
//! # Ok::<(), dlock::LockError>(())
//! ```

pub use lock_core::*;
pub use lock_memory::{ManualClock, MemoryBackend};

/// What tests of lock-using code need: a clock moved by hand, the in-process store, and a
/// wrapper that makes any backend slow, failing or forgetful.
pub mod testing {
    pub use lock_memory::{Call, Effect, Fault, FaultyBackend, ManualClock, MemoryBackend, Op};
}

/// The Redis backend.
#[cfg(feature = "redis")]
pub use lock_redis as redis;
