//! The dlock contract and algorithm: the user's [`LockClient`] / [`Lock`] / [`LockGuard`],
//! per-thread reentrancy, waiting woken by releases, the lease watchdog and lease events; and,
//! in [`backend`], the contract a storage backend implements.
//!
//! This crate does no I/O of its own: a backend (`dlock-memory`, `dlock-redis`,
//! `dlock-postgres`) stores the locks. Most programs use the `dlocks` crate, which re-exports
//! this one with the backends.
//!
//! # How a lock is held
//!
//! - An acquire asks the backend once; if another owner holds the lock, the thread subscribes
//!   to the lock's releases, retries, and then sleeps until a release is announced or the
//!   holder's lease runs out (never a fixed polling interval).
//! - A thread that already holds the lock re-enters it locally, without a backend call, while
//!   its lease is known valid.
//! - Locks taken without an explicit lease get the client's watchdog lease, which one thread
//!   per client renews every third of the lease, for all such holds in one backend call.
//! - A guard whose lease was lost says so ([`LockGuard::is_lost`]), its unlock fails with
//!   [`LockError::LeaseLost`], and the client pushes a [`LeaseEvent`] saying why.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The layers, lowest first; each uses only the layers before it (see docs/architecture.md and
// tests/layers.rs).
mod client;
mod contract;
mod engine;
mod handles;
mod time;

pub use contract::backend;
pub use engine::metrics;

pub use client::{
    LockClient, LockClientBuilder, DEFAULT_FAIR_WAIT_TIMEOUT, DEFAULT_WATCHDOG_LEASE,
    MAX_CLIENT_NAME_LEN, MIN_WATCHDOG_LEASE,
};
pub use contract::error::{BoxError, LockError};
pub use contract::hand_off::HandOff;
pub use contract::kind::LockKind;
pub use contract::lease::ClockDrift;
pub use contract::limits::{MAX_COUNT, MAX_DURATION, MAX_NAME_LEN};
pub use contract::loss::LossReason;
pub use engine::events::{LeaseChange, LeaseEvent, LEASE_EVENT_BUFFER};
pub use engine::leader_watch::LeaderChanges;
pub use engine::watchdog::WatchdogStats;
pub use handles::election::{LeaderElection, Leadership};
pub use handles::fair_lock::FairLock;
pub use handles::fenced_lock::{FencedLock, FencedLockGuard};
pub use handles::guard::LockGuard;
pub use handles::latch::CountDownLatch;
pub use handles::lock::Lock;
pub use handles::multi_lock::{MultiLock, MultiLockGuard, MultiLockMember};
pub use handles::owned_guard::OwnedLockGuard;
pub use handles::read_write_lock::{ReadLock, ReadWriteLock, WriteLock};
pub use handles::semaphore::{Permit, Semaphore};

/// The channel crate lease events are delivered through, so its types can be named without
/// depending on it.
pub use crossbeam_channel;
