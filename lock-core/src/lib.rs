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

pub mod backend;
mod client;
mod clock;
mod election;
mod engine;
mod error;
mod events;
mod fair_lock;
mod fenced_lock;
mod guard;
mod hold;
mod kind;
mod latch;
mod leader_watch;
mod lease;
mod limits;
mod lock;
mod lock_info;
mod multi_lock;
mod outage;
mod owned_guard;
mod owner;
mod read_write_lock;
mod renewer;
mod semaphore;
mod signal;
mod step_aside;
mod wait_queue;
mod watchdog;

pub use client::{
    LockClient, LockClientBuilder, DEFAULT_FAIR_WAIT_TIMEOUT, DEFAULT_WATCHDOG_LEASE,
    MIN_WATCHDOG_LEASE,
};
pub use election::{LeaderElection, Leadership};
pub use error::{BoxError, LockError};
pub use events::{LeaseChange, LeaseEvent, LossReason, LEASE_EVENT_BUFFER};
pub use fair_lock::FairLock;
pub use fenced_lock::{FencedLock, FencedLockGuard};
pub use guard::LockGuard;
pub use kind::LockKind;
pub use latch::CountDownLatch;
pub use leader_watch::LeaderChanges;
pub use lease::ClockDrift;
pub use limits::{MAX_COUNT, MAX_DURATION, MAX_NAME_LEN};
pub use lock::Lock;
pub use multi_lock::{MultiLock, MultiLockGuard, MultiLockMember};
pub use owned_guard::OwnedLockGuard;
pub use read_write_lock::{ReadLock, ReadWriteLock, WriteLock};
pub use semaphore::{Permit, Semaphore};
pub use watchdog::WatchdogStats;

/// The channel crate lease events are delivered through, so its types can be named without
/// depending on it.
pub use crossbeam_channel;
