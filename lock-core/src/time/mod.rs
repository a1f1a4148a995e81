//! Time: the clock every deadline is read from, timers, and the signal a waiting thread (or
//! future) sleeps on. The lowest layer: it uses nothing else of the crate.

pub(crate) mod clock;
pub(crate) mod deadlines;
mod instant;
pub(crate) mod signal;

pub use instant::{instant_after, MAX_DURATION};
