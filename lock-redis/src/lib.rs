//! Redis backend for dlock: locks shared by every process that reaches one Redis server, laid
//! out exactly as Redisson 3.24+ lays them out, so Java services using Redisson and Rust services
//! using dlock exclude each other and wake each other's waiters.
//!
//! - Commands go through an [`r2d2`] pool of blocking [`redis`] connections with `TCP_NODELAY`
//!   set and every read, write and connect bounded by the configured timeouts.
//! - Each operation is one Lua script run by `EVALSHA` (one round trip): an uncontended
//!   `lock()` + `unlock()` costs two. Scripts are reloaded transparently after `NOSCRIPT`.
//! - Waiters are woken by one dedicated pub/sub connection per [`RedisBackend`], which
//!   subscribes to a lock's channel while the process has waiters on it.
//! - The watchdog renews every held lock of a client in one round trip per tick.
//! - On a Redis Cluster ([`RedisBackend::cluster_builder`]) each lock lives on its slot's
//!   master; a step's calls go to each master as one pipeline, masters in parallel; waiters
//!   use sharded pub/sub on the master that owns the lock's channel.
//! - When the master has replicas, every lock-changing step is followed in the same pipeline
//!   by `WAIT` for them (Redisson's `checkLockSyncedSlaves`): an acquire no replica
//!   acknowledged is undone and fails with [`LockError::NotReplicated`](dlock_core::LockError).
//!
//! `docs/redis.md` in the repository describes the key layout, the scripts, the ACL rights the
//! lock user needs, and what happens on each kind of fault.
//!
//! # Examples
//!
//! ```no_run
//! use std::time::Duration;
//! use dlocks::LockClient;
//! use dlocks::redis::RedisBackend;
//!
//! let backend = RedisBackend::builder("redis://127.0.0.1:6379/0")
//!     .response_timeout(Duration::from_secs(1))
//!     .build()?;
//! let client = LockClient::new(backend);
//! let guard = client.lock("orders:42").lock()?;
//! // ... only one thread in every process sharing this Redis gets here at a time ...
//! guard.unlock()?;
//! # Ok::<(), dlocks::LockError>(())
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod batch;
mod cluster;
mod commands;
mod config;
mod connection;
mod error;
pub mod fence;
mod hosts_url;
mod inspect;
mod keys;
mod layout;
mod pubsub;
mod red_lock;
mod redact;
mod replica_sync;
mod request_id;
mod resp;
mod scripts;
mod synchronizer_info;
mod tidying;

pub use backend::RedisBackend;
pub use config::RedisBackendBuilder;
/// What `inspect` and `list_locks` answer: the same types on every backend.
pub use dlock_core::backend::{HeldAs, LockHolder, LockInfo};
pub use dlock_core::backend::{LeaderInfo, PermitInfo, SynchronizerInfo};
pub use inspect::DEFAULT_LIST_LIMIT;
pub use keys::{
    channel_name, fair_channel_name, fair_grant_name, fair_queue_name, fair_timeout_name,
    fencing_token_name, lock_waiter_marks_name, lock_waiters_name, read_timeout_prefix,
    read_waiters_name, read_write_channel_name, unlock_latch_name, write_field, write_order_name,
    write_waiters_name, CHANNEL_PREFIX, FAIR_GRANT_PREFIX, FAIR_QUEUE_PREFIX, FAIR_TIMEOUT_PREFIX,
    FENCING_TOKEN_PREFIX, GRANT_MESSAGE_PREFIX, LOCK_WAITERS_PREFIX, LOCK_WAITER_MARKS_PREFIX,
    READ_UNLOCK_MESSAGE, READ_WAITERS_PREFIX, READ_WRITE_CHANNEL_PREFIX, UNLOCK_LATCH_PREFIX,
    UNLOCK_MESSAGE, WRITE_ORDER_PREFIX, WRITE_WAITERS_PREFIX,
};
pub use red_lock::{
    RedLockBackend, RedLockBuilder, DEFAULT_CLOCK_DRIFT_FACTOR, DEFAULT_NODE_TIMEOUT,
};
pub use redact::redact_url;
#[doc(hidden)]
pub use scripts::{lua_steps, LUA_PREAMBLES};
