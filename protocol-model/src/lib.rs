//! dlock's lock protocol as one executable model, checked exhaustively within bounds.
//!
//! - [`store`] is the store: what every backend keeps of a name and what each step of the
//!   backend contract does to it, at an instant of the store's clock. Every backend is held to
//!   it answer by answer (the differential test in `dlock-test-support` runs the same steps on
//!   a real backend and on this store).
//!   What it keeps besides holds lapses ([`records`]); a client's holds may share one lease,
//!   its session ([`session`]).
//! - [`world`], [`transition`] and [`enabled`] put clients around it: threads that decide as
//!   dlock's engine does ([`engine`]: re-enter locally, extend, take a new hold, wait in a fair
//!   queue and claim a grant, hand over, give back; [`renewal`]: renew node by node), their
//!   backends' own memory ([`backend`]: attempts of unknown outcome resolved and forgotten,
//!   holds over deleted within the store's limits), a network that loses replies, delivers
//!   requests late (within a bound) and sends them twice, callers who give up while their call
//!   is queued, an operator who force-unlocks, a store that loses a name's holds, and an
//!   outsider who reads the store and sends grant messages.
//! - [`checks`] are the rules, checked after every step; [`explore()`] visits every sequence of
//!   actions within a run's bounds ([`runs`]), each distinct world once.
//!
//! The model is the definition; the engine and the backends implement it. A change to the
//! protocol is a change here first.

#![allow(clippy::unwrap_used)]

pub mod action;
pub mod backend;
pub mod canonical;
pub mod checks;
pub mod enabled;
pub mod encoding;
pub mod engine;
pub mod explore;
pub mod few;
pub mod kind;
pub mod name;
pub mod records;
pub mod renewal;
pub mod runs;
pub mod session;
pub mod step;
pub mod store;
pub mod transition;
pub mod world;

pub use action::{Action, Net};
pub use explore::{explore, Counterexample, Report};
pub use kind::{Family, Kind};
pub use records::{Keep, Keeps};
pub use step::{
    Acquire, Answer, Counter, Grant, HoldId, Name, Offer, RequestId, Step, Tenure, Time, WaiterId,
};
pub use store::{Applied, HandsOver, Settings, Store};
pub use world::{Config, Faults, Leases, World};
