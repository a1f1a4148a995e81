//! The backends `dlock` reaches, one entry per URL family: which URLs are its own, how they
//! are shown without their password, and how the backend is opened for a command. Everything
//! else `dlock` does goes through the backend contract (steps and inspection), so a backend
//! is one entry here.

mod etcd;
mod postgres;
mod redis;

use std::sync::Arc;

use dlocks::backend::DistributedLock;

use crate::connect::{Access, Target};
use crate::exit_code::Failure;

/// A backend opened for a command.
pub type Opened = Arc<dyn DistributedLock>;

/// One URL family and the backend it names.
pub struct Scheme {
    /// The store's name in messages: "Redis", "PostgreSQL".
    pub store: &'static str,
    /// Whether `url` is one of this family's.
    pub claims: fn(url: &str) -> bool,
    /// `url` without its password, for messages and screens.
    pub redact: fn(url: &str) -> String,
    /// Opens the backend `target` names, for what the command does (`access`). An
    /// unreachable store exits with 69, a malformed URL with 2.
    pub open: fn(target: &Target, access: Access) -> Result<Opened, Failure>,
    /// Whether the backend keeps its locks in a schema `--schema` names.
    pub takes_schema: bool,
}

/// The families, tried in order; the last one takes every URL the others do not claim, and
/// says itself what is wrong with one it cannot use.
static SCHEMES: [&Scheme; 3] = [&postgres::SCHEME, &etcd::SCHEME, &redis::SCHEME];

/// The family of `url`.
pub fn of(url: &str) -> &'static Scheme {
    let last = SCHEMES[SCHEMES.len() - 1];
    SCHEMES
        .iter()
        .copied()
        .find(|scheme| (scheme.claims)(url))
        .unwrap_or(last)
}
