//! A model-based check of the lease rule and of exclusion: random sequences of operations by two
//! clients of three threads each, on every kind of lock and synchronizer the store keeps, on
//! the same few names (and names that would alias them), while faults are injected into every
//! kind of call (failed calls, lost replies, slow requests and replies, steps held back in the
//! network and delivered late or in reverse, steps sent twice, messages held back, one node
//! failing alone) and time moves. After every step:
//!
//! - every guard that says it holds is backed by the store until at least its deadline;
//! - (on virtual time) never two believing holders of one name, unless both read; never more
//!   believing permit holders than permits; never two believing leaders;
//! - fencing tokens strictly increase per name, from hold to hold;
//! - a latch is open only once it may have been counted down to zero;
//! - a guard whose deadline has passed was reported `Lost` (within a small bound on real time).
//!
//! A sequence is made from its seed alone; a failure prints the seed and the steps, and
//! `DLOCK_MODEL_SEED=<seed>` replays that sequence (the threads' interleaving with the
//! watchdog may differ, the operations do not).

mod checks;
mod sequence;
#[cfg(any(feature = "redis", feature = "postgres", feature = "etcd"))]
mod server;
mod worker;

#[cfg(any(feature = "redis", feature = "postgres", feature = "etcd"))]
pub use server::{
    answers_as_the_protocol_model_through_a_faulty_network,
    random_sequences_through_a_faulty_network_keep_the_rules, ServerModel,
};

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use dlocks::backend::DistributedLock;
use dlocks::testing::{FaultyBackend, ManualClock};

use super::tcp_proxy::TcpProxy;
use sequence::Sequence;
use worker::Workers;

/// One sequence's store: the backend the clients use (faults injected), the same store seen
/// without faults (for the checks), its clock if time is virtual, and the network in front of
/// it if it is a real server.
pub struct Store {
    pub faulty: FaultyBackend,
    pub raw: Arc<dyn DistributedLock>,
    pub clock: Option<ManualClock>,
    /// Prefix of the sequence's lock names (sequences may share a server).
    pub prefix: String,
    /// The proxy between the clients and the server, whose faults become steps too.
    pub proxy: Option<Arc<TcpProxy>>,
}

/// What a run is made of: durations on the backend's scale, and how many sequences.
pub struct Model {
    pub watchdog: Duration,
    pub short_lease: Duration,
    pub long_lease: Duration,
    pub wait: Duration,
    /// How far time moves in an "advance" step (one chosen at random).
    pub advances: Vec<Duration>,
    /// How long an injected delay lasts (one chosen at random).
    pub delays: Vec<Duration>,
    pub steps: usize,
    /// Sequences run side by side (each with its own threads and lock names).
    pub parallel: usize,
    /// How long after its deadline a lost lease may be reported (zero on virtual time).
    pub loss_slack: Duration,
    /// What the requests the proxy holds back contain (`""`: any request), one chosen at random.
    pub hold_back: &'static [&'static str],
}

/// A disturbance of the world outside the store's API (a replica paused, say), toggled by a
/// step of its own.
pub type Disturb<'a> = &'a (dyn Fn(bool) + Sync);

/// The seeds a run covers: `DLOCK_MODEL_SEED=<seed>` for one, else `0..default_count`, or
/// `DLOCK_MODEL_SEQUENCES=<count>`.
pub fn seeds(default_count: u64) -> Vec<u64> {
    if let Some(seed) = std::env::var("DLOCK_MODEL_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
    {
        return vec![seed];
    }
    let count = std::env::var("DLOCK_MODEL_SEQUENCES")
        .ok()
        .and_then(|count| count.parse().ok())
        .unwrap_or(default_count);
    (0..count).collect()
}

/// Runs a sequence for each seed, `model.parallel` at a time; panics with the seed and the
/// steps of the first that breaks a rule.
pub fn run(
    model: &Model,
    seeds: &[u64],
    make_store: &(dyn Fn(u64) -> Store + Sync),
    disturb: Option<Disturb<'_>>,
) {
    let chunk = seeds.len().div_ceil(model.parallel.max(1)).max(1);
    thread::scope(|s| {
        for part in seeds.chunks(chunk) {
            s.spawn(move || {
                let workers = Workers::start();
                for &seed in part {
                    Sequence::new(model, seed, make_store(seed), &workers, disturb).run();
                }
            });
        }
    });
}
