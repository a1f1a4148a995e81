//! Every backend held to the protocol model, answer by answer: the same random sequences of
//! backend steps (every kind's acquire, extend, release, hand-over, renewal, status, force
//! unlock, counter steps, leaders, a fair queue's grants), with faults (replies cut, requests
//! held up and delivered late, leases running out), run on a real backend and on
//! `dlock_protocol_model::Store`. Each answer must be one the model allows (granted, refused,
//! gone, released, renewed, the token order, counts); a backend that answers otherwise fails
//! with the shortest sequence that shows it (found by taking steps away while it still fails).
//!
//! Time: the model's clock is the store's, in microseconds from the sequence's start. On a real
//! store a step lands somewhere between when it was sent and when its answer came: a lease
//! ending in that window may or may not have run out when it landed, and the model follows
//! both (see the `follow` module).

mod follow;
mod sequence;
mod shrink;
mod targets;

use std::sync::Arc;
use std::time::Duration;

use dlock_protocol_model::Step;
use dlocks::backend::DistributedLock;

pub use sequence::Op;
pub use targets::{FaultyTarget, ProxyTarget};

/// What the names of the sequences' locks begin with.
pub const NAME_PREFIX: &str = "dlock-diff:";

/// A fault of the network, armed for the next step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The step reaches the store; its reply does not reach the backend (a dropped connection):
    /// the backend sends it again, or tells its caller it does not know.
    CutReply,
    /// The step is held up on its way, and reaches the store when held requests are delivered.
    HoldBack,
}

/// A backend to hold to the model, and the faults and the clock the sequences use on it.
pub trait Target {
    /// A short name, in reports.
    fn name(&self) -> &'static str;

    /// The backend, as the faults reach it.
    fn backend(&self) -> Arc<dyn DistributedLock>;

    /// The store's time since `start` (this target's own clock).
    fn now(&self) -> Duration;

    /// Lets `by` pass on the store's clock (a manual clock moves; a real one is waited on).
    fn wait(&self, by: Duration);

    /// Arms `fault` for the next step `step`, which names `needle` (its lock's name): false if
    /// this target cannot make it.
    fn arm(&self, fault: Fault, step: &Step, needle: &str) -> bool;

    /// Whether the fault armed for the step just taken met it (a step the backend answers
    /// without the network meets none), and disarms what was not met.
    fn fired(&self) -> bool;

    /// Delivers what was held up; how many requests.
    fn deliver(&self) -> usize;

    /// Whether a request held up may be lost when delivered: a store that drops a request
    /// whose client has gone (etcd's gateway cancels it with the connection), as a network
    /// that drops requests would. The default: every one lands.
    fn may_lose_held(&self) -> bool {
        false
    }

    /// How long past the end of its lease a hold may still be on the store for a request that
    /// lands late (etcd ends a lease up to its resolution later: whole seconds, and a lessor
    /// that looks every half second). The backend's own next steps count the hold over at its
    /// lease's end, but a request it sent before then, held up in the network, can meet it.
    /// The default: none.
    fn lingering(&self) -> Duration {
        Duration::ZERO
    }

    /// How much later than its send time a step may land on the store beyond its answer's
    /// arrival (clocks read apart): zero on a manual clock.
    fn slack(&self) -> Duration;

    /// The short lease of the sequences (one that runs out within a sequence).
    fn short_lease(&self) -> Duration;
}

/// How many sequences and steps a run makes.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    /// Sequences.
    pub sequences: u64,
    /// Steps in each.
    pub steps: usize,
}

/// Seeds whose sequences once showed a backend answering otherwise than the model (each a
/// defect since fixed): the first sequences of every run, on every backend.
const FOUND: &[u64] = &[
    6225557176849861217,
    10492431971428600412,
    2442168430842272091,
    15109970464748339012,
    5743959637307541275,
    3854190562932453309,
    13145853290537707131,
    10243813869404407024,
    7723353108986492025,
    3479946602815291474,
    2698475133283252322,
    2583185105368683798,
    15421693021717257395,
    10337473869740098372,
    1069935014627016806,
    534909381937086744,
    18266683674846480948,
    17280286957924508616,
    1397515937070453723,
    7209183268274559702,
    13220901987182469239,
    6801663190354386640,
    13250247703872944293,
    11238505204047919861,
    5468319581247036898,
    2161658092467220648,
    13532212264015797149,
    33540291926286881,
    4896248461601122416,
];

/// Runs `bounds.sequences` sequences or more on `target`, each checked against the model; panics with
/// the shortest failing sequence found within a minute of shrinking. A run starts with every
/// seed that once found a defect (more than `bounds.sequences` of them if there are), and
/// draws fresh seeds for the rest, a quarter of `bounds.sequences` at least (so runs add up
/// to more sequences than any one makes), printed when a sequence fails or panics:
/// `DLOCK_DIFF_SEED=<seed>` replays that sequence, `DLOCK_DIFF_SEQUENCES=<n>` runs `n` (a long
/// run).
pub fn run(target: &dyn Target, bounds: Bounds) {
    let seeds: Vec<u64> = match std::env::var("DLOCK_DIFF_SEED")
        .ok()
        .and_then(|seed| seed.parse().ok())
    {
        Some(seed) => vec![seed],
        None => {
            let sequences = std::env::var("DLOCK_DIFF_SEQUENCES")
                .ok()
                .and_then(|sequences| sequences.parse().ok())
                .unwrap_or(bounds.sequences);
            // Every found seed, whatever the bound: a defect fixed once is looked for again on
            // every backend, in every run. Fresh ones make up the rest, and a quarter of the
            // run at least: a run whose found seeds fill it would look for nothing new.
            let fresh = sequences
                .saturating_sub(FOUND.len() as u64)
                .max(sequences / 4);
            FOUND
                .iter()
                .copied()
                .chain((0..fresh).map(|_| fastrand::u64(..)))
                .collect()
        }
    };
    let mut steps = 0;
    for seed in seeds {
        // Named however the sequence ends (a backend that panics included).
        let named = NamedOnPanic { target, seed };
        let ops = sequence::generate(seed, bounds.steps, &*target.backend());
        steps += ops.len();
        if let Err(failure) = follow::check(target, &ops) {
            // Said before shrinking, which takes a while: the seed is known whatever follows.
            eprintln!(
                "{}: the sequence of seed {seed} answered differently from the model \
                 (DLOCK_DIFF_SEED={seed} replays it); shrinking it:\n{}",
                target.name(),
                failure.text
            );
            let (shortest, failure) = shrink::shortest(target, ops, failure);
            drop(named);
            let listing: Vec<String> = shortest
                .iter()
                .enumerate()
                .map(|(at, op)| format!("  {}. {op:?}", at + 1))
                .collect();
            panic!(
                "{}: the backend answered differently from the model (seed {seed}, \
                 DLOCK_DIFF_SEED={seed} replays it), shortest sequence:\n{}\n{failure}",
                target.name(),
                listing.join("\n"),
                failure = failure.text
            );
        }
    }
    println!(
        "{}: {} steps of the model matched answer by answer",
        target.name(),
        steps
    );
}

/// Prints a sequence's seed if it panics, to replay it.
struct NamedOnPanic<'a> {
    target: &'a dyn Target,
    seed: u64,
}

impl Drop for NamedOnPanic<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "{}: the sequence of seed {seed} panicked (DLOCK_DIFF_SEED={seed} replays it)",
                self.target.name(),
                seed = self.seed
            );
        }
    }
}

/// The long lease of the sequences: never runs out within one.
pub const LONG_LEASE: Duration = Duration::from_secs(120);
