//! dlock: Redisson-class distributed locks for threaded Rust programs.
//!
//! A blocking API with RAII guards over a pluggable backend: [`MemoryBackend`] in-process (with
//! a [`ManualClock`] for deterministic tests) and, with the `redis` feature (the default),
//! `redis::RedisBackend` on a Redis server, a master behind Sentinel, or a Redis Cluster, with
//! Redisson's key layout so Java and Rust services share locks.
//!
//! The crate root is the user's side; [`backend`] is the contract a storage backend implements;
//! [`testing`] has what tests of lock-using code need. A program that only needs the in-process
//! backend depends on `dlocks` with `default-features = false` (no Redis client); `postgres`
//! adds the PostgreSQL backend, `etcd` the etcd backend, `tls` TLS for all three, and `async`
//! the futures: `lock_async`, `try_lock_for_async`, `unlock_async`, `acquire_async`,
//! `wait_async`, `campaign_async`, ... (on any executor; a waiting future holds no thread, and
//! one dropped at any point leaves nothing held or queued).
//!
//! ```
//! # #[cfg(feature = "async")]
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! use dlocks::{LockClient, MemoryBackend};
//!
//! let client = LockClient::new(MemoryBackend::new());
//! let orders = client.lock("orders:42");
//! let guard = orders.lock_async().await?;        // an owned guard: Send, kept across .await
//! assert!(orders.try_lock_async().await?.is_none()); // owned holds are not reentrant
//! guard.unlock_async().await?;
//! # Ok::<(), dlocks::LockError>(())
//! # }).unwrap();
//! ```
//!
//! # The lock family
//!
//! Every kind comes from a [`LockClient`], has the same methods (`lock`, `try_lock`,
//! `try_lock_for`, `lock_with_lease`, `try_lock_with_lease`, `is_locked`, `hold_count`,
//! `remaining_lease`, `force_unlock`, ...), per-thread reentrancy, the watchdog and lease
//! events.
//!
//! | kind | get it with | use it when |
//! |---|---|---|
//! | reentrant lock ([`Lock`]) | [`client.lock(name)`](LockClient::lock) | one holder at a time, arrival order does not matter (the fastest; Redisson's `RLock`) |
//! | fenced lock ([`FencedLock`]) | [`client.fenced_lock(name)`](LockClient::fenced_lock), then [`guard.token()`](FencedLockGuard::token) | the protected resource can refuse stale writers: every hold gets a token, strictly increasing per name |
//! | fair lock ([`FairLock`]) | [`client.fair_lock(name)`](LockClient::fair_lock) | holders served first come, first served across every process |
//! | read-write lock ([`ReadWriteLock`]) | [`client.read_write_lock(name)`](LockClient::read_write_lock), then `.read_lock()` / `.write_lock()` | many readers at once, or one writer |
//! | multi-lock ([`MultiLock`]) | `MultiLock::new([a.lock("x"), b.lock("y")])` | several locks, of any kinds, clients and backends, taken all or none, without deadlock |
//! | RedLock | `LockClient::new(dlocks::redis::RedLockBackend::new(vec![n1, n2, n3])?)` | one lock on a majority of independent Redis masters |
//! | owned guard ([`OwnedLockGuard`]) | `lock.lock_owned()` on every handle | a hold not tied to a thread: `Send`, released from any thread |
//! | semaphore ([`Semaphore`]) | [`client.semaphore(name)`](LockClient::semaphore), then [`acquire()`](Semaphore::acquire) → [`Permit`] | at most N holders at once; a dead holder's permit comes back with its lease |
//! | count-down latch ([`CountDownLatch`]) | [`client.count_down_latch(name)`](LockClient::count_down_latch) | wait until N things are done |
//! | leader election ([`LeaderElection`]) | [`client.leader_election(name)`](LockClient::leader_election), then [`campaign(id)`](LeaderElection::campaign) → [`Leadership`] | one leader at a time, with a fencing token |
//!
//! A name is one kind at a time: asking for it as another kind is [`LockError::WrongKind`].
//!
//! # Examples
//!
//! Taking a lock (on the in-process backend here; the code is the same on every backend):
//!
//! ```
//! use std::time::Duration;
//! use dlocks::{LockClient, MemoryBackend};
//!
//! let client = LockClient::new(MemoryBackend::new());
//! let orders = client.lock("orders:42");
//! let guard = orders.lock()?;                       // blocks; renewed by the watchdog
//! assert!(orders.try_lock_for(Duration::from_millis(10))?.is_some()); // reentrant
//! drop(guard);
//! # Ok::<(), dlocks::LockError>(())
//! ```
//!
//! On Redis (`redis://user:password@host:port/db`, `rediss://` for TLS;
//! `RedisBackend::builder(url)` sets the pool and timeouts):
//!
//! ```no_run
//! # #[cfg(feature = "redis")] {
//! use dlocks::redis::RedisBackend;
//! use dlocks::LockClient;
//!
//! let client = LockClient::new(RedisBackend::connect("redis://127.0.0.1:6379/0")?);
//! let guard = client.lock("orders:42").lock()?;
//! guard.unlock()?;
//! # }
//! # Ok::<(), dlocks::LockError>(())
//! ```
//!
//! Testing code that takes locks: a [`ManualClock`] moves only when the test advances it, and
//! leases, renewals and timed-out waits happen at exactly that time, without sleeping:
//!
//! ```
//! use std::time::Duration;
//! use dlocks::{LockClient, ManualClock, MemoryBackend};
//!
//! let clock = ManualClock::new();
//! let backend = MemoryBackend::with_clock(clock.clone());
//! let worker = LockClient::new(backend.clone());
//! let other = LockClient::new(backend); // another process, as far as the lock can tell
//!
//! // The watchdog keeps renewing a lock taken without a lease (30 s, renewed every 10 s).
//! let renewed = worker.lock("nightly").lock()?;
//! clock.advance(Duration::from_secs(120));
//! assert!(!renewed.is_lost());
//! assert!(other.lock("nightly").try_lock()?.is_none());
//! renewed.unlock()?;
//!
//! // A fixed lease ends exactly when it runs out; another owner may take the lock then.
//! let fixed = worker.lock("nightly").lock_with_lease(Duration::from_secs(10))?;
//! clock.advance(Duration::from_secs(10));
//! assert!(fixed.is_lost());
//! assert!(other.lock("nightly").try_lock()?.is_some());
//! # Ok::<(), dlocks::LockError>(())
//! ```
#![cfg_attr(docsrs, feature(doc_cfg))]

pub use dlock_core::{
    backend, crossbeam_channel, metrics, BoxError, ClockDrift, CountDownLatch, FairLock,
    FencedLock, FencedLockGuard, HandOff, LeaderChanges, LeaderElection, Leadership, LeaseChange,
    LeaseEvent, Lock, LockClient, LockClientBuilder, LockError, LockGuard, LockKind, LossReason,
    MultiLock, MultiLockGuard, MultiLockMember, OwnedLockGuard, Permit, ReadLock, ReadWriteLock,
    Semaphore, WatchdogStats, WriteLock, DEFAULT_FAIR_WAIT_TIMEOUT, DEFAULT_WATCHDOG_LEASE,
    LEASE_EVENT_BUFFER, MAX_CLIENT_NAME_LEN, MAX_COUNT, MAX_DURATION, MAX_NAME_LEN,
    MIN_WATCHDOG_LEASE,
};
pub use dlock_memory::{ManualClock, MemoryBackend};

pub mod fence;

/// What tests of lock-using code need: a clock moved by hand, the in-process store, and a
/// wrapper that makes any backend slow, failing or forgetful.
pub mod testing {
    pub use dlock_memory::{Call, Effect, Fault, FaultyBackend, ManualClock, MemoryBackend, Op};
}

// Inlined: their pages are this crate's (`cargo doc --no-deps` would leave them out, and a
// user depends on `dlocks`, not on the backend crates).
#[cfg(feature = "redis")]
#[doc(inline)]
pub use dlock_redis as redis;

#[cfg(feature = "postgres")]
#[doc(inline)]
pub use dlock_postgres as postgres;

#[cfg(feature = "etcd")]
#[doc(inline)]
pub use dlock_etcd as etcd;

/// The Rust examples of the README and the docs, compiled (and run, unless marked `no_run`) as
/// doc tests, so they keep up with the API.
#[cfg(doctest)]
mod documentation_examples {
    #[doc = include_str!("../README.md")]
    struct Readme;

    #[doc = include_str!("../docs/operations.md")]
    struct Operations;

    #[cfg_attr(feature = "redis", doc = include_str!("../docs/redis.md"))]
    struct Redis;

    #[cfg_attr(feature = "postgres", doc = include_str!("../docs/postgres.md"))]
    struct Postgres;

    #[cfg_attr(feature = "etcd", doc = include_str!("../docs/etcd.md"))]
    struct Etcd;
}
