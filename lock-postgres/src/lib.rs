//! PostgreSQL backend for dlock: locks shared by every process that reaches one PostgreSQL
//! database, kept as leases in a table, not as session advisory locks.
//!
//! - A lock is a row: its owner(s), hold count and lease end, measured on the server's clock
//!   (`clock_timestamp()`). A holder that dies leaves a row whose lease runs out; nothing pins a
//!   connection while a lock is held, so the pool is free between steps and a transaction-mode
//!   pooler works.
//! - Each lock step is one call of a function in the schema (PL/pgSQL, installed and versioned
//!   by the backend or by a DBA): one round trip, one transaction. An uncontended `lock()` +
//!   `unlock()` costs two. The step's `synchronous_commit` is the backend's
//!   [`Durability`] setting.
//! - Waiters are woken by one `LISTEN` connection per [`PostgresBackend`]: a release of a lock
//!   someone waits for `NOTIFY`s in its own transaction.
//! - The watchdog renews every held lock of a client in one call per tick.
//! - Every call is bounded by the backend's timeouts (connect, statement, pool checkout): an
//!   unreachable or paused server is [`LockError::Unavailable`](dlock_core::LockError), never a
//!   hang.
//!
//! `docs/postgres.md` in the repository describes the schema, the functions, what a row means,
//! the durability choices, poolers, the rights the lock user needs, and how to inspect locks
//! with SQL.
//!
//! # Examples
//!
//! ```no_run
//! use std::time::Duration;
//! use dlocks::LockClient;
//! use dlocks::postgres::PostgresBackend;
//!
//! let backend = PostgresBackend::builder("postgres://app:secret@127.0.0.1:5432/app")
//!     .statement_timeout(Duration::from_secs(1))
//!     .build()?;
//! let client = LockClient::new(backend);
//! let guard = client.lock("orders:42").lock()?;
//! // ... only one thread in every process sharing this database gets here at a time ...
//! guard.unlock()?;
//! # Ok::<(), dlocks::LockError>(())
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod config;
mod connection;
mod durability;
mod error;
pub mod fence;
mod grant_proofs;
mod inspect;
mod keys;
mod listener;
mod pool;
mod schema;
mod synchronizer_info;
mod tls;
mod url;

pub use backend::PostgresBackend;
pub use config::PostgresBackendBuilder;
/// What `inspect`, `list_locks`, `inspect_synchronizer` and `list_synchronizers` answer: the
/// same types on every backend.
pub use dlock_core::backend::{
    HeldAs, LeaderInfo, LockHolder, LockInfo, PermitInfo, SynchronizerInfo,
};
pub use durability::Durability;
pub use inspect::DEFAULT_LIST_LIMIT;
pub use schema::{grant_sql, schema_sql, schema_sql_for, DEFAULT_SCHEMA, SCHEMA_VERSION};
pub use url::redact_url;
