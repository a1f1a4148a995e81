//! A model-based check of the lease rule: random sequences of lock operations by two clients
//! of three threads each, with faults injected into every kind of backend call and time moved
//! in between; after every step, for every guard that says it holds, the store must hold the
//! lock for that guard's owner until at least the guard's deadline, and (on virtual time) no
//! two owners may both believe they hold one lock.
//!
//! A sequence is made from its seed alone; a failure prints the seed and the steps, and
//! `DLOCK_MODEL_SEED=<seed>` replays that sequence (the threads' interleaving with the
//! watchdog may differ, the operations do not).

use std::fmt;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use dlock::backend::{DistributedLock, LockRef, OwnerId};
use dlock::testing::{Effect, Fault, FaultyBackend, ManualClock, Op};
use dlock::{LockClient, LockClientBuilder, LockGuard, LockKind, MultiLock, MultiLockGuard};

/// One sequence's store: the backend the clients use (faults injected), the same store seen
/// without faults (for the checks), and its clock if time is virtual.
pub struct Store {
    pub faulty: FaultyBackend,
    pub raw: Arc<dyn DistributedLock>,
    pub clock: Option<ManualClock>,
    /// Prefix of the sequence's lock names (sequences may share a server).
    pub prefix: String,
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
/// steps of the first that breaks the rule.
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

/// The six threads (two clients × three threads), kept across sequences.
struct Workers {
    threads: Vec<(Sender<Cmd>, Receiver<Reply>, JoinHandle<()>)>,
}

impl Workers {
    fn start() -> Self {
        let threads = (0..6)
            .map(|_| {
                let (cmd_tx, cmd_rx) = mpsc::channel();
                let (reply_tx, reply_rx) = mpsc::channel();
                let handle = thread::spawn(move || worker(cmd_rx, reply_tx));
                (cmd_tx, reply_rx, handle)
            })
            .collect();
        Workers { threads }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for (tx, _, handle) in self.threads.drain(..) {
            drop(tx);
            let _ = handle.join();
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Lease {
    Watchdog,
    Short,
    Long,
}

enum Cmd {
    Start(LockClient),
    Lock {
        name: String,
        fair: bool,
        lease: Option<Duration>,
        wait: Duration,
    },
    Multi {
        names: [String; 2],
        lease: Option<Duration>,
        wait: Duration,
    },
    Unlock(usize),
    Report,
    Finish,
}

enum Reply {
    /// What the command did, and how many guards the worker holds now.
    Done(String, usize),
    Report(Vec<Belief>),
}

/// What one guard believes, read by its own thread: the deadline first, then whether it
/// says it is lost (a renewal landing in between only moves the store's end later).
#[derive(Debug)]
struct Belief {
    /// Each lock the guard holds, with its kind and its hold's id on the store.
    holds: Vec<(String, LockKind, OwnerId)>,
    deadline: Instant,
    lost: bool,
}

enum Held {
    One(LockGuard, String, LockKind),
    Many(MultiLockGuard, Vec<String>),
}

fn worker(commands: Receiver<Cmd>, replies: Sender<Reply>) {
    let mut client: Option<LockClient> = None;
    let mut held: Vec<Held> = Vec::new();
    while let Ok(cmd) = commands.recv() {
        let reply = match cmd {
            Cmd::Start(new) => {
                client = Some(new);
                Reply::Done("started".into(), 0)
            }
            Cmd::Lock {
                name,
                fair,
                lease,
                wait,
            } => {
                let Some(client) = &client else {
                    continue;
                };
                let (got, kind) = if fair {
                    let lock = client.fair_lock(name.clone());
                    let got = match lease {
                        Some(lease) => lock.try_lock_with_lease(wait, lease),
                        None => lock.try_lock_for(wait),
                    };
                    (got, LockKind::Fair)
                } else {
                    let lock = client.lock(name.clone());
                    let got = match lease {
                        Some(lease) => lock.try_lock_with_lease(wait, lease),
                        None => lock.try_lock_for(wait),
                    };
                    (got, LockKind::Reentrant)
                };
                let outcome = match got {
                    Ok(Some(guard)) => {
                        held.push(Held::One(guard, name, kind));
                        "taken".into()
                    }
                    Ok(None) => "not taken".into(),
                    Err(error) => format!("error: {error}"),
                };
                Reply::Done(outcome, 0)
            }
            Cmd::Multi { names, lease, wait } => {
                let Some(client) = &client else {
                    continue;
                };
                let multi = MultiLock::new(names.iter().map(|name| client.lock(name.clone())));
                let got = match lease {
                    Some(lease) => multi.try_lock_with_lease(wait, lease),
                    None => multi.try_lock_for(wait),
                };
                let outcome = match got {
                    Ok(Some(guard)) => {
                        held.push(Held::Many(guard, names.to_vec()));
                        "taken".into()
                    }
                    Ok(None) => "not taken".into(),
                    Err(error) => format!("error: {error}"),
                };
                Reply::Done(outcome, 0)
            }
            Cmd::Unlock(pick) => {
                if held.is_empty() {
                    Reply::Done("nothing held".into(), 0)
                } else {
                    let result = match held.remove(pick % held.len()) {
                        Held::One(guard, ..) => guard.unlock(),
                        Held::Many(guard, _) => guard.unlock(),
                    };
                    Reply::Done(
                        match result {
                            Ok(()) => "released".into(),
                            Err(error) => format!("release error: {error}"),
                        },
                        0,
                    )
                }
            }
            Cmd::Report => {
                let beliefs = held
                    .iter()
                    .map(|held| match held {
                        Held::One(guard, name, kind) => {
                            let deadline = guard.lease_deadline();
                            Belief {
                                holds: vec![(
                                    name.clone(),
                                    *kind,
                                    OwnerId::from_raw(guard.owner()),
                                )],
                                deadline,
                                lost: guard.is_lost(),
                            }
                        }
                        Held::Many(guard, names) => {
                            let deadline = guard.lease_deadline().unwrap_or_else(|| {
                                panic!("a multi-lock guard of {names:?} without members")
                            });
                            Belief {
                                holds: guard
                                    .holds()
                                    .into_iter()
                                    .map(|(name, kind, owner)| {
                                        (name.to_owned(), kind, OwnerId::from_raw(owner))
                                    })
                                    .collect(),
                                deadline,
                                lost: guard.is_lost(),
                            }
                        }
                    })
                    .collect();
                Reply::Report(beliefs)
            }
            Cmd::Finish => {
                held.clear();
                client = None;
                Reply::Done("finished".into(), 0)
            }
        };
        let reply = match reply {
            Reply::Done(outcome, _) => Reply::Done(outcome, held.len()),
            report => report,
        };
        if replies.send(reply).is_err() {
            return;
        }
    }
}

/// One step, as printed when a sequence fails.
enum Step {
    Lock {
        worker: usize,
        name: String,
        fair: bool,
        lease: Lease,
        wait: Duration,
    },
    Multi {
        worker: usize,
        lease: Lease,
        wait: Duration,
    },
    Unlock {
        worker: usize,
        pick: usize,
    },
    Advance(Duration),
    Fault(Op, Effect),
    Disturb(bool),
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Lock {
                worker,
                name,
                fair,
                lease,
                wait,
            } => write!(
                f,
                "worker {worker}: {} {name} lease {lease:?} wait {wait:?}",
                if *fair { "fair lock" } else { "lock" }
            ),
            Step::Multi {
                worker,
                lease,
                wait,
            } => write!(
                f,
                "worker {worker}: multi-lock lease {lease:?} wait {wait:?}"
            ),
            Step::Unlock { worker, pick } => write!(f, "worker {worker}: unlock guard #{pick}"),
            Step::Advance(by) => write!(f, "advance {by:?}"),
            Step::Fault(op, effect) => write!(f, "fault: next {op:?} {effect:?}"),
            Step::Disturb(on) => write!(f, "disturb: {on}"),
        }
    }
}

struct Sequence<'a> {
    model: &'a Model,
    seed: u64,
    store: Store,
    workers: &'a Workers,
    disturb: Option<Disturb<'a>>,
    rng: fastrand::Rng,
    log: Vec<String>,
    /// How many guards each worker holds, as its last answer said: only those with guards are
    /// asked what they believe.
    holding: std::cell::Cell<[usize; 6]>,
}

impl<'a> Sequence<'a> {
    fn new(
        model: &'a Model,
        seed: u64,
        store: Store,
        workers: &'a Workers,
        disturb: Option<Disturb<'a>>,
    ) -> Self {
        Sequence {
            model,
            seed,
            store,
            workers,
            disturb,
            rng: fastrand::Rng::with_seed(seed),
            log: Vec::new(),
            holding: std::cell::Cell::new([0; 6]),
        }
    }

    fn run(mut self) {
        let clients: Vec<LockClient> = (0..2)
            .map(|_| {
                LockClientBuilder::new(Arc::new(self.store.faulty.clone()))
                    .watchdog_lease(self.model.watchdog)
                    .build()
                    .expect("client")
            })
            .collect();
        for worker in 0..6 {
            self.ask(worker, Cmd::Start(clients[worker / 3].clone()));
        }
        drop(clients);
        let mut disturbed = false;
        for _ in 0..self.model.steps {
            let step = self.next_step(disturbed);
            self.log.push(format!("{step:?}"));
            let outcome = self.perform(&step);
            if let Step::Disturb(on) = step {
                disturbed = on;
            }
            if let Some(outcome) = outcome {
                if let Some(last) = self.log.last_mut() {
                    last.push_str(&format!(" -> {outcome}"));
                }
            }
            self.settle();
            self.check();
        }
        self.store.faulty.clear();
        if disturbed {
            if let Some(disturb) = self.disturb {
                disturb(false);
            }
        }
        for worker in 0..6 {
            self.ask(worker, Cmd::Finish);
        }
        self.settle();
    }

    fn next_step(&mut self, disturbed: bool) -> Step {
        let names = ["a", "b", "f"];
        let rng = &mut self.rng;
        let lease = match rng.u8(0..3) {
            0 => Lease::Watchdog,
            1 => Lease::Short,
            _ => Lease::Long,
        };
        let wait = if rng.bool() {
            Duration::ZERO
        } else {
            self.model.wait
        };
        let roll = rng.u8(0..100);
        let disturbs = self.disturb.is_some() && roll >= 96;
        match roll {
            _ if disturbs => Step::Disturb(!disturbed),
            0..=34 => {
                let name = names[rng.usize(0..names.len())];
                Step::Lock {
                    worker: rng.usize(0..6),
                    name: name.to_owned(),
                    fair: name == "f",
                    lease,
                    wait,
                }
            }
            35..=44 => Step::Multi {
                worker: rng.usize(0..6),
                lease,
                wait,
            },
            45..=69 => Step::Unlock {
                worker: rng.usize(0..6),
                pick: rng.usize(0..8),
            },
            70..=87 => Step::Advance(self.model.advances[rng.usize(0..self.model.advances.len())]),
            _ => {
                let op = [
                    Op::TryAcquire,
                    Op::Release,
                    Op::Renew,
                    Op::Status,
                    Op::Subscribe,
                ][rng.usize(0..5)];
                let delay = self.model.delays[rng.usize(0..self.model.delays.len())];
                let effect = match rng.u8(0..4) {
                    0 => Effect::Fail,
                    1 => Effect::LoseReply,
                    2 => Effect::Delay(delay),
                    _ => Effect::DelayReply(delay),
                };
                Step::Fault(op, effect)
            }
        }
    }

    fn lease_of(&self, lease: Lease) -> Option<Duration> {
        match lease {
            Lease::Watchdog => None,
            Lease::Short => Some(self.model.short_lease),
            Lease::Long => Some(self.model.long_lease),
        }
    }

    fn name(&self, name: &str) -> String {
        format!("{}:{name}", self.store.prefix)
    }

    fn perform(&mut self, step: &Step) -> Option<String> {
        match step {
            Step::Lock {
                worker,
                name,
                fair,
                lease,
                wait,
            } => Some(self.ask_waiting(
                *worker,
                Cmd::Lock {
                    name: self.name(name),
                    fair: *fair,
                    lease: self.lease_of(*lease),
                    wait: *wait,
                },
                *wait,
            )),
            Step::Multi {
                worker,
                lease,
                wait,
            } => Some(self.ask_waiting(
                *worker,
                Cmd::Multi {
                    names: [self.name("a"), self.name("b")],
                    lease: self.lease_of(*lease),
                    wait: *wait,
                },
                *wait,
            )),
            Step::Unlock { worker, pick } => {
                Some(self.ask_waiting(*worker, Cmd::Unlock(*pick), Duration::ZERO))
            }
            Step::Advance(by) => {
                match &self.store.clock {
                    Some(clock) => clock.advance(*by),
                    None => thread::sleep(*by),
                }
                None
            }
            Step::Fault(op, effect) => {
                self.store.faulty.inject(Fault::new(*op, *effect).times(1));
                None
            }
            Step::Disturb(on) => {
                if let Some(disturb) = self.disturb {
                    disturb(*on);
                }
                None
            }
        }
    }

    /// Sends `cmd` to `worker` and waits for its answer; on virtual time, a worker that blocks
    /// waiting (for up to `wait`) gets its time moved on.
    fn ask_waiting(&self, worker: usize, cmd: Cmd, wait: Duration) -> String {
        let (tx, rx, _) = &self.workers.threads[worker];
        tx.send(cmd).expect("worker alive");
        let limit = Instant::now() + Duration::from_secs(30) + wait * 4;
        loop {
            match rx.recv_timeout(Duration::from_millis(1)) {
                Ok(Reply::Done(outcome, held)) => {
                    let mut holding = self.holding.get();
                    holding[worker] = held;
                    self.holding.set(holding);
                    return outcome;
                }
                Ok(Reply::Report(_)) => self.fail("a worker answered out of turn"),
                Err(RecvTimeoutError::Disconnected) => self.fail("a worker died"),
                Err(RecvTimeoutError::Timeout) => {}
            }
            if let Some(clock) = &self.store.clock {
                if clock.sleepers() > 0 {
                    clock.advance(wait);
                }
            }
            if Instant::now() > limit {
                self.fail(&format!("worker {worker} did not answer"));
            }
        }
    }

    fn ask(&self, worker: usize, cmd: Cmd) -> Reply {
        let (tx, rx, _) = &self.workers.threads[worker];
        tx.send(cmd).expect("worker alive");
        rx.recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| self.fail(&format!("worker {worker} did not answer")))
    }

    /// Lets the work that fell due run (on virtual time: the watchdog's late ticks).
    fn settle(&self) {
        if let Some(clock) = &self.store.clock {
            clock.advance(Duration::ZERO);
        }
    }

    fn now(&self) -> Instant {
        self.store.raw.clock().now()
    }

    fn check(&self) {
        let mut beliefs = Vec::new();
        for (worker, held) in self.holding.get().into_iter().enumerate() {
            if held == 0 {
                continue;
            }
            match self.ask(worker, Cmd::Report) {
                Reply::Report(mut some) => beliefs.append(&mut some),
                Reply::Done(..) => self.fail("a worker answered out of turn"),
            }
        }
        let held: Vec<&Belief> = beliefs.iter().filter(|belief| !belief.lost).collect();
        for belief in &held {
            for (name, kind, owner) in &belief.holds {
                self.check_store(belief, name, *kind, owner);
            }
        }
        if self.store.clock.is_some() {
            // Time stands still while the guards are read: two beliefs at once are two owners.
            for (i, one) in held.iter().enumerate() {
                for other in &held[i + 1..] {
                    for (name, _, owner) in &one.holds {
                        let shared = other.holds.iter().find(|(theirs, _, their_owner)| {
                            theirs == name && their_owner != owner
                        });
                        if shared.is_some() {
                            self.fail(&format!(
                                "two owners believe they hold {name}: {one:?} and {other:?}"
                            ));
                        }
                    }
                }
            }
        }
    }

    fn check_store(&self, belief: &Belief, name: &str, kind: LockKind, owner: &OwnerId) {
        let before = self.now();
        let status = match self.store.raw.status(LockRef::new(name, kind), owner) {
            Ok(status) => status,
            Err(error) => {
                if self.store.clock.is_some() {
                    self.fail(&format!("the store's status of {name} failed: {error}"));
                }
                // A real store may be unreachable for a moment (a paused replica does not
                // stop the master; a loaded machine may): nothing to check then.
                return;
            }
        };
        let after = self.now();
        if !status.held_by_owner {
            // The guard's belief must have ended before the store was asked.
            if belief.deadline > before {
                self.fail(&format!(
                    "{name}: the guard trusts its lease {:?} past the moment the store no longer \
                     held it for {owner} ({status:?})",
                    belief.deadline - before,
                ));
            }
            return;
        }
        let Some(remaining) = status.remaining_lease else {
            return; // no expiry at all
        };
        let store_end = after + remaining + Duration::from_millis(1);
        if belief.deadline > store_end {
            self.fail(&format!(
                "{name}: the guard of {owner} trusts its lease {:?} longer than the store keeps it",
                belief.deadline - store_end
            ));
        }
    }

    fn fail(&self, what: &str) -> ! {
        panic!(
            "lease rule broken in sequence {} (replay: DLOCK_MODEL_SEED={}): {what}\nsteps:\n  {}",
            self.seed,
            self.seed,
            self.log.join("\n  ")
        );
    }
}
