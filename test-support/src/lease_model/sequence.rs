//! One random sequence: its steps, made from its seed, and how each is carried out.

use std::fmt;
use std::sync::mpsc::RecvTimeoutError;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dlocks::testing::{Effect, Fault, Op};
use dlocks::{LeaseEvent, LockClient, LockClientBuilder, LockKind};

use super::checks::Tracked;
use super::worker::{Cmd, Outcome, Reply, Workers};
use super::{Disturb, Model, Store};

/// A semaphore's permits in a sequence.
pub(crate) const PERMITS: u64 = 2;
/// A latch's count at the start of a sequence.
pub(crate) const LATCH_COUNT: u64 = 3;

#[derive(Clone, Copy, Debug)]
pub(crate) enum Lease {
    Watchdog,
    Short,
    Long,
}

/// A fault of the network in front of a real server (the proxy's).
#[derive(Debug)]
pub(crate) enum NetworkFault {
    /// The next request containing this text (any, if empty) is held back.
    HoldNext(&'static str),
    /// Held requests reach the server now (newest first: `true`).
    Deliver(bool),
    /// The server's messages to subscribers wait, or flow again.
    HoldMessages(bool),
}

/// One step, as printed when a sequence fails.
pub(crate) enum Step {
    Take {
        worker: usize,
        name: &'static str,
        kind: LockKind,
        lease: Lease,
        wait: Duration,
    },
    Multi {
        worker: usize,
        lease: Lease,
        wait: Duration,
    },
    Permit {
        worker: usize,
        name: &'static str,
        lease: Lease,
        wait: Duration,
    },
    Campaign {
        worker: usize,
        name: &'static str,
        wait: Duration,
    },
    CountDown {
        worker: usize,
    },
    AwaitLatch {
        worker: usize,
        wait: Duration,
    },
    Unlock {
        worker: usize,
        pick: usize,
    },
    Advance(Duration),
    Fault(Fault),
    Deliver {
        reverse: bool,
    },
    Network(NetworkFault),
    Disturb(bool),
}

impl fmt::Debug for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Take {
                worker,
                name,
                kind,
                lease,
                wait,
            } => write!(
                f,
                "worker {worker}: {kind} {name} lease {lease:?} wait {wait:?}"
            ),
            Step::Multi {
                worker,
                lease,
                wait,
            } => write!(
                f,
                "worker {worker}: multi-lock a+b lease {lease:?} wait {wait:?}"
            ),
            Step::Permit {
                worker,
                name,
                lease,
                wait,
            } => write!(
                f,
                "worker {worker}: permit of {name} lease {lease:?} wait {wait:?}"
            ),
            Step::Campaign { worker, name, wait } => {
                write!(f, "worker {worker}: campaign {name} wait {wait:?}")
            }
            Step::CountDown { worker } => write!(f, "worker {worker}: count down l"),
            Step::AwaitLatch { worker, wait } => {
                write!(f, "worker {worker}: await latch l {wait:?}")
            }
            Step::Unlock { worker, pick } => write!(f, "worker {worker}: unlock guard #{pick}"),
            Step::Advance(by) => write!(f, "advance {by:?}"),
            Step::Fault(fault) => write!(f, "fault: {fault:?}"),
            Step::Deliver { reverse } => write!(
                f,
                "deliver held steps{}",
                if *reverse { " newest first" } else { "" }
            ),
            Step::Network(fault) => write!(f, "network: {fault:?}"),
            Step::Disturb(on) => write!(f, "disturb: {on}"),
        }
    }
}

pub(crate) struct Sequence<'a> {
    pub(crate) model: &'a Model,
    pub(crate) seed: u64,
    pub(crate) store: Store,
    workers: &'a Workers,
    disturb: Option<Disturb<'a>>,
    rng: fastrand::Rng,
    pub(crate) log: Vec<String>,
    /// How many guards each worker holds, as its last answer said: only those with guards are
    /// asked what they believe.
    pub(crate) holding: std::cell::Cell<[usize; 6]>,
    /// Each client's lease events, from its start.
    pub(crate) events: Vec<dlocks::crossbeam_channel::Receiver<LeaseEvent>>,
    pub(crate) tracked: Tracked,
}

impl<'a> Sequence<'a> {
    pub(crate) fn new(
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
            events: Vec::new(),
            tracked: Tracked::default(),
        }
    }

    pub(crate) fn run(mut self) {
        let clients: Vec<LockClient> = (0..2)
            .map(|_| {
                LockClientBuilder::new(Arc::new(self.store.faulty.clone()))
                    .watchdog_lease(self.model.watchdog)
                    .build()
                    .expect("client")
            })
            .collect();
        self.events = clients.iter().map(LockClient::lease_events).collect();
        self.set_up_synchronizers();
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
            if let Some(outcome) = &outcome {
                if let Some(last) = self.log.last_mut() {
                    last.push_str(&format!(" -> {outcome}"));
                }
                self.note(&step, outcome);
            }
            self.settle();
            self.check();
        }
        self.store.faulty.clear();
        if let Some(proxy) = &self.store.proxy {
            proxy.stop_holding_back();
            proxy.hold_subscriber_messages(false);
            proxy.deliver_held();
        }
        self.store.faulty.deliver_held();
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

    /// The semaphore's permits and the latch's count, set before the first step.
    fn set_up_synchronizers(&self) {
        let setup = LockClient::new(self.store.raw.clone());
        if self.store.raw.supports(LockKind::Semaphore) {
            setup
                .semaphore(self.name("s"))
                .try_set_permits(PERMITS as u32)
                .expect("set the permits");
        }
        if self.store.raw.supports(LockKind::Latch) {
            setup
                .count_down_latch(self.name("l"))
                .try_set_count(LATCH_COUNT)
                .expect("set the count");
        }
    }

    /// The sequence's lock name for `name`: a hash tag of the sequence's own, so names that
    /// would alias (`{t}`) can be tried.
    pub(crate) fn name(&self, name: &str) -> String {
        match name {
            // A whole hash tag: would share the keys of the name inside it.
            "alias" => format!("{{{}:a}}", self.store.prefix),
            name => format!("{}:{name}", self.store.prefix),
        }
    }

    fn next_step(&mut self, disturbed: bool) -> Step {
        let synchronizers = self.store.raw.supports(LockKind::Semaphore);
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
        let worker = rng.usize(0..6);
        let roll = rng.u8(0..100);
        if self.disturb.is_some() && roll >= 97 {
            return Step::Disturb(!disturbed);
        }
        match roll {
            0..=27 => {
                // Every kind on the same names, mostly the kind a name is meant for.
                let (name, kinds): (&'static str, &[LockKind]) = match rng.u8(0..10) {
                    0..=3 => (
                        "a",
                        &[
                            LockKind::Reentrant,
                            LockKind::Fenced,
                            LockKind::Read,
                            LockKind::Write,
                        ],
                    ),
                    4..=5 => ("b", &[LockKind::Reentrant, LockKind::Fenced]),
                    6..=7 => ("f", &[LockKind::Fair, LockKind::Fair, LockKind::Reentrant]),
                    8 => ("alias", &[LockKind::Reentrant, LockKind::Fair]),
                    _ => (
                        ["a", "f", "s", "e"][rng.usize(0..4)],
                        &[LockKind::Reentrant, LockKind::Fair, LockKind::Write],
                    ),
                };
                let kind = kinds[rng.usize(0..kinds.len())];
                let kind = if self.store.raw.supports(kind) {
                    kind
                } else {
                    LockKind::Reentrant
                };
                Step::Take {
                    worker,
                    name,
                    kind,
                    lease,
                    wait,
                }
            }
            28..=33 => Step::Multi {
                worker,
                lease,
                wait,
            },
            34..=39 if synchronizers => Step::Permit {
                worker,
                name: if rng.u8(0..8) == 0 { "a" } else { "s" },
                lease,
                wait,
            },
            40..=42 if synchronizers => Step::Campaign {
                worker,
                name: if rng.u8(0..8) == 0 { "b" } else { "e" },
                wait,
            },
            43..=44 if synchronizers => Step::CountDown { worker },
            45..=46 if synchronizers => Step::AwaitLatch { worker, wait },
            34..=65 => Step::Unlock {
                worker,
                pick: rng.usize(0..8),
            },
            66..=79 => Step::Advance(self.model.advances[rng.usize(0..self.model.advances.len())]),
            80..=92 => Step::Fault(self.random_fault()),
            93..=96 => match &self.store.proxy {
                Some(_) if rng.bool() && !self.model.hold_back.is_empty() => {
                    let needles = self.model.hold_back;
                    Step::Network(match rng.u8(0..4) {
                        0 => NetworkFault::HoldNext(needles[rng.usize(0..needles.len())]),
                        1 => NetworkFault::HoldMessages(true),
                        2 => NetworkFault::HoldMessages(false),
                        _ => NetworkFault::Deliver(rng.bool()),
                    })
                }
                _ => Step::Deliver {
                    reverse: rng.bool(),
                },
            },
            _ => Step::Advance(self.model.advances[rng.usize(0..self.model.advances.len())]),
        }
    }

    fn random_fault(&mut self) -> Fault {
        let rng = &mut self.rng;
        let delay = self.model.delays[rng.usize(0..self.model.delays.len())];
        let op = [
            Op::TryAcquire,
            Op::Release,
            Op::Renew,
            Op::Status,
            Op::Subscribe,
            Op::CancelWait,
            Op::Message,
            Op::Counter,
        ][rng.usize(0..8)];
        let effect = match rng.u8(0..6) {
            0 => Effect::Fail,
            1 => Effect::LoseReply,
            2 => Effect::Delay(delay),
            3 => Effect::DelayReply(delay),
            4 => Effect::HoldBack,
            // A copy the backend itself could send (it resends releases, acquires and
            // renewals, never a count-down).
            _ if op != Op::Counter => Effect::Duplicate,
            _ => Effect::HoldBack,
        };
        let fault = Fault::new(op, effect).times(1);
        if op == Op::Renew && rng.u8(0..3) == 0 {
            // One node of the store, keeping a and b, fails alone.
            let node = [self.name("a"), self.name("b")];
            return fault.on_node(node);
        }
        fault
    }

    fn lease_of(&self, lease: Lease) -> Option<Duration> {
        match lease {
            Lease::Watchdog => None,
            Lease::Short => Some(self.model.short_lease),
            Lease::Long => Some(self.model.long_lease),
        }
    }

    fn perform(&mut self, step: &Step) -> Option<Outcome> {
        match step {
            Step::Take {
                worker,
                name,
                kind,
                lease,
                wait,
            } => Some(self.ask_waiting(
                *worker,
                Cmd::Take {
                    name: self.name(name),
                    kind: *kind,
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
                    names: vec![self.name("a"), self.name("b")],
                    lease: self.lease_of(*lease),
                    wait: *wait,
                },
                *wait,
            )),
            Step::Permit {
                worker,
                name,
                lease,
                wait,
            } => Some(self.ask_waiting(
                *worker,
                Cmd::Permit {
                    name: self.name(name),
                    lease: self.lease_of(*lease),
                    wait: *wait,
                },
                *wait,
            )),
            Step::Campaign { worker, name, wait } => Some(self.ask_waiting(
                *worker,
                Cmd::Campaign {
                    name: self.name(name),
                    wait: *wait,
                },
                *wait,
            )),
            Step::CountDown { worker } => Some(self.ask_waiting(
                *worker,
                Cmd::CountDown {
                    name: self.name("l"),
                },
                Duration::ZERO,
            )),
            Step::AwaitLatch { worker, wait } => Some(self.ask_waiting(
                *worker,
                Cmd::AwaitLatch {
                    name: self.name("l"),
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
            Step::Fault(fault) => {
                self.store.faulty.inject(fault.clone());
                None
            }
            Step::Deliver { reverse } => {
                if *reverse {
                    self.store.faulty.deliver_held_in_reverse();
                } else {
                    self.store.faulty.deliver_held();
                }
                None
            }
            Step::Network(fault) => {
                if let Some(proxy) = &self.store.proxy {
                    match fault {
                        NetworkFault::HoldNext(needle) => proxy.hold_back_next(needle),
                        NetworkFault::Deliver(true) => {
                            proxy.deliver_held_in_reverse();
                        }
                        NetworkFault::Deliver(false) => {
                            proxy.deliver_held();
                        }
                        NetworkFault::HoldMessages(held) => proxy.hold_subscriber_messages(*held),
                    }
                }
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
    fn ask_waiting(&self, worker: usize, cmd: Cmd, wait: Duration) -> Outcome {
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

    pub(crate) fn ask(&self, worker: usize, cmd: Cmd) -> Reply {
        self.send(worker, cmd);
        self.answer(worker)
    }

    pub(crate) fn send(&self, worker: usize, cmd: Cmd) {
        let (tx, _, _) = &self.workers.threads[worker];
        tx.send(cmd).expect("worker alive");
    }

    /// The worker's answer to what it was sent.
    pub(crate) fn answer(&self, worker: usize) -> Reply {
        let (_, rx, _) = &self.workers.threads[worker];
        rx.recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| self.fail(&format!("worker {worker} did not answer")))
    }

    /// Lets the work that fell due run (on virtual time: the watchdog's late ticks).
    fn settle(&self) {
        if let Some(clock) = &self.store.clock {
            clock.advance(Duration::ZERO);
        }
    }

    pub(crate) fn fail(&self, what: &str) -> ! {
        panic!(
            "rule broken in sequence {} (replay: DLOCK_MODEL_SEED={}): {what}\nsteps:\n  {}",
            self.seed,
            self.seed,
            self.log.join("\n  ")
        );
    }
}
