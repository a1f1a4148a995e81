//! The in-process dlock backend and test support: real leases and expiry in a sharded map,
//! driven by the system clock or by a [`ManualClock`] that a test advances, so tests of code
//! that takes locks are deterministic and never sleep; and [`FaultyBackend`], which wraps any
//! backend to make it slow, failing or forgetful.
#![cfg_attr(docsrs, feature(doc_cfg))]

mod fault;
mod faulty_backend;
mod faulty_subscription;
mod held_step;
mod manual_clock;
mod memory_backend;

pub use fault::{Call, Effect, Fault, Op};
pub use faulty_backend::FaultyBackend;
pub use manual_clock::ManualClock;
pub use memory_backend::MemoryBackend;
