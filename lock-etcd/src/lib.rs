//! The etcd backend of dlock: locks on etcd (3.4 or later) in the layout of etcd's own
//! `concurrency.Mutex` and `Election`, so `etcdctl lock`, `etcdctl elect` and Go services
//! exclude dlock's holders and are excluded by them.
//!
//! ```no_run
//! use dlock_core::LockClient;
//! use dlock_etcd::EtcdBackend;
//!
//! let backend = EtcdBackend::connect("http://127.0.0.1:2379")?;
//! let client = LockClient::new(backend);
//! let guard = client.lock("orders:42").lock()?;
//! guard.unlock()?;
//! # Ok::<(), dlock_core::LockError>(())
//! ```
//!
//! It speaks etcd's v3 JSON gateway over HTTP/1.1 with a small blocking client of its own (no
//! async runtime, no gRPC stack, no protoc). A client's watchdog holds share one etcd lease
//! (a session, as etcd's `concurrency.Session`), renewed by one keep-alive per watchdog tick
//! however many holds it carries; a hold on a fixed lease gets a lease of its own, rounded up
//! to whole seconds (etcd's leases are whole seconds). Waiters watch the lock's keys from a
//! known revision instead of polling. See `docs/etcd.md` for the keys of every kind, and the
//! faults a cluster rides out.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod backend;
mod client_records;
mod config;
pub mod fence;
mod gate;
mod glob;
mod holds;
mod http;
mod inspect;
mod keys;
mod leases;
mod place_lease;
mod reader_marks;
mod revisions;
mod steps;
#[cfg(feature = "tls")]
mod tls;
mod transport;
mod turns;
mod watch;
mod wire;

pub use backend::EtcdBackend;
pub use config::EtcdBackendBuilder;
