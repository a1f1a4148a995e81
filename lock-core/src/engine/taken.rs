//! [`Taken`]: what a successful acquire brings back, before it is recorded as a hold. The
//! lowest of the engine's modules: attempts, waits, releases and multi-locks all speak of it.

use std::time::Instant;

use crate::contract::backend::Grant;

/// A successful backend acquire: the lease runs from the instant the request was sent, on the
/// grant's terms.
#[derive(Clone, Copy)]
pub(crate) struct Taken {
    pub(crate) sent_at: Instant,
    pub(crate) grant: Grant,
}

impl Taken {
    /// Taken by this client's own call sent at `sent_at`, on `grant`'s terms.
    pub(crate) fn new(sent_at: Instant, grant: Grant) -> Self {
        Taken { sent_at, grant }
    }
}
