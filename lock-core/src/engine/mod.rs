//! The one acquire / wait / reentrancy / release algorithm, shared by every kind of lock,
//! with the watchdog that renews leases and the queues waiters sleep in.
//!
//! A handle (`Lock`, and the other kinds' handles) is a [`Handle`]: the client's state and the
//! lock it names. Everything a handle does is here, so a new kind is a new
//! [`LockKind`](crate::LockKind) handled by the backends and a thin handle type, never a copy
//! of this module. It uses the contract and time layers, never a handle or the client.

mod acquire;
mod ask;
mod attempt;
pub(crate) mod client_state;
pub(crate) mod events;
#[cfg(feature = "async")]
mod futures;
mod handle;
pub(crate) mod hold;
mod inspect;
#[cfg(feature = "async")]
pub(crate) mod lane;
pub(crate) mod leader_watch;
pub(crate) mod metered_backend;
pub mod metrics;
mod multi;
pub(crate) mod outage;
pub(crate) mod presence;
mod release;
pub(crate) mod renewer;
pub(crate) mod runner;
pub(crate) mod step_aside;
mod synchronizer_steps;
mod taken;
#[cfg(feature = "async")]
pub(crate) mod task_runner;
mod wait;
pub(crate) mod wait_queue;
pub(crate) mod watchdog;
#[cfg(feature = "async")]
pub(crate) mod workers;

pub(crate) use handle::Handle;
pub(crate) use multi::TryAll;
pub(crate) use release::ReleaseStep;
