//! dlock's lock protocol as one executable model, checked exhaustively within bounds.
//!
//! - [`store`] is the store: what every backend keeps of a name and what each step of the
//!   backend contract does to it, at an instant of the store's clock. Every backend is held to
//!   it answer by answer (the differential test in `dlock-test-support` runs the same steps on
//!   a real backend and on this store).
//! - [`world`], [`transition`] and [`enabled`] put clients around it: threads that decide as
//!   dlock's engine does (re-enter locally, extend, take a new hold, wait in a fair queue and
//!   believe a grant, hand over, give back, renew node by node), a network that loses replies,
//!   delivers requests late and sends them twice, an operator who force-unlocks, a store that
//!   loses a name's holds, and an outsider who sends grant messages.
//! - [`checks`] are the rules, checked after every step; [`explore()`] visits every sequence of
//!   actions within a run's bounds ([`runs`]), each distinct world once.
//!
//! The model is the definition; the engine and the backends implement it. A change to the
//! protocol is a change here first.

#![allow(clippy::unwrap_used)]

pub mod action;
pub mod canonical;
pub mod checks;
pub mod enabled;
pub mod encoding;
pub mod explore;
pub mod few;
pub mod kind;
pub mod runs;
pub mod step;
pub mod store;
pub mod transition;
pub mod world;

pub use action::{Action, Net};
pub use explore::{explore, Counterexample, Report};
pub use kind::{Family, Kind};
pub use step::{
    Acquire, Answer, Counter, Grant, HoldId, Name, Offer, RequestId, Step, Time, WaiterId,
};
pub use store::{Applied, HandsOver, Store};
pub use world::{Config, Faults, Leases, World};
