//! The handle types users hold, one file per kind, and their guards: thin wrappers that name a
//! lock and call the engine. They use the engine, the contract and time; never the client.

pub(crate) mod election;
pub(crate) mod fair_lock;
pub(crate) mod fenced_lock;
pub(crate) mod guard;
pub(crate) mod latch;
pub(crate) mod lock;
pub(crate) mod multi_lock;
pub(crate) mod owned_guard;
pub(crate) mod read_write_lock;
pub(crate) mod semaphore;
