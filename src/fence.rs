//! Fencing where the data lives: the check that makes a fencing token mean something.
//!
//! A lease lock cannot stop a holder that paused (a GC pause, a stopped VM, a slow network)
//! from writing after its lease ran out and the next holder took the lock. A
//! [`FencedLock`](crate::FencedLock) gives each hold a token higher than every earlier hold's
//! of that name; the store that keeps the data refuses a write whose token is older than one
//! that already wrote, in the same atomic step as the write. Then a late write is refused, not
//! applied over the newer holder's.
//!
//! The rule, for any store: keep per resource the newest token that wrote it; a write with a
//! token below it is refused ([`LockError::StaleToken`](crate::LockError::StaleToken)), a write
//! with the same token or a higher one is applied and the token kept, the check and the write
//! in one atomic step (one transaction, one script, one compare-and-swap).
//!
//! - PostgreSQL (`postgres` feature): [`postgres::install`] once, then [`postgres::check`]
//!   inside the transaction that writes (or `SELECT dlock_fence(resource, token)` from any
//!   driver).
//! - Redis (`redis` feature): [`redis::set`], [`redis::delete`], [`redis::hset`] and
//!   [`redis::FencedScript`], each one script.
//! - etcd (`etcd` feature): the hold's key and create revision to compare in the writer's own
//!   transaction ([`etcd::OwnerCompare`], etcd's `IsOwner`).
//! - Anything else: the rule above, as in this in-process register:
//!
//! ```
//! use std::collections::HashMap;
//! use dlocks::{LockClient, LockError, MemoryBackend};
//!
//! /// A register that keeps the rule: a value per resource, and the newest token that wrote it.
//! #[derive(Default)]
//! struct Register(HashMap<String, (u64, String)>);
//!
//! impl Register {
//!     fn write(&mut self, resource: &str, token: u64, value: &str) -> Result<(), LockError> {
//!         let newest = self.0.get(resource).map_or(0, |(newest, _)| *newest);
//!         if token < newest {
//!             return Err(LockError::StaleToken { resource: resource.into(), token, newest });
//!         }
//!         self.0.insert(resource.into(), (token, value.into()));
//!         Ok(())
//!     }
//! }
//!
//! let client = LockClient::new(MemoryBackend::new());
//! let mut register = Register::default();
//! let first = client.fenced_lock("report").lock()?;
//! let late = first.token();
//! first.unlock()?;
//! let second = client.fenced_lock("report").lock()?;
//! register.write("report", second.token(), "new")?;
//! let refused = register.write("report", late, "old").unwrap_err();
//! assert!(refused.is_stale_token());
//! # Ok::<(), LockError>(())
//! ```
//!
//! Tokens of one lock name increase whichever backend hands them out, so use one lock name per
//! resource (or a resource per lock name). `docs/fencing.md` in the repository shows each store
//! from a user's side, etcd's own comparison included.

#[cfg(feature = "postgres")]
#[doc(inline)]
pub use dlock_postgres::fence as postgres;

#[cfg(feature = "redis")]
#[doc(inline)]
pub use dlock_redis::fence as redis;

#[cfg(feature = "etcd")]
#[doc(inline)]
pub use dlock_etcd::fence as etcd;
