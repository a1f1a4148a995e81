//! The world the protocol runs in: the store, the clients' threads with what each believes it
//! holds, the network between them (requests delivered late, grants on their way), and what
//! the checks remember. Its bounds are a [`Config`].

use crate::few::Few;
use crate::kind::Kind;
use crate::step::{Answer, Grant, HoldId, Name, RequestId, Step, Time};
use crate::store::{HandsOver, Store};

/// The leases of the model, in ticks.
#[derive(Clone, Copy, Debug)]
pub struct Leases {
    /// The watchdog's lease (renewed by `Renew`).
    pub watchdog: Time,
    /// A fixed lease, shorter than the watchdog's.
    pub fixed: Time,
    /// The lease a fair grant sets until its holder confirms it.
    pub grant: Time,
}

/// Which faults and outside actions a run explores.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// How many faults one sequence meets at most (replies lost, requests late or sent twice,
    /// store losses, forged grants).
    pub max: u8,
    /// A reply is lost after the store took the step.
    pub lost_replies: bool,
    /// A request reaches the store late, after its sender gave up on its reply.
    pub late_requests: bool,
    /// A request the backend sends again (a dropped connection) reaches the store twice.
    pub resends: bool,
    /// An operator force-unlocks a name (one of the faults).
    pub force_unlock: bool,
    /// How many more times an operator may force-unlock a name in one sequence, besides the
    /// faults (to meet a force unlock and a fault together).
    pub extra_force_unlocks: u8,
    /// The store loses a name's holds (a failover without the last writes).
    pub store_loss: bool,
    /// An outsider sends grant messages to waiters.
    pub forger: bool,
}

/// The bounds of a run: who acts, on which names as which kinds, and what may go wrong.
#[derive(Clone, Debug)]
pub struct Config {
    /// A short name for the run, in reports.
    pub title: &'static str,
    /// Each thread's client: `[0, 0, 1]` is two clients, the first with two threads.
    pub threads: Vec<u8>,
    /// For each name, the kinds threads take it as (several: the name used as several kinds).
    pub names: Vec<Vec<Kind>>,
    /// The node each name lives on (a renewal is told node by node).
    pub nodes: Vec<u8>,
    /// The leases.
    pub leases: Leases,
    /// The faults.
    pub faults: Faults,
    /// A semaphore's permits and a latch's count, when set.
    pub permits: u64,
    /// What `release_to` hands over.
    pub hands_over: HandsOver,
    /// How many steps a sequence has at most.
    pub depth: usize,
}

/// How a thread holds a name, as its client believes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LocalHold {
    /// The name.
    pub name: Name,
    /// The kind.
    pub kind: Kind,
    /// The hold's id on the store.
    pub id: HoldId,
    /// Its guards.
    pub count: u8,
    /// The local deadline: sent-at plus the lease granted.
    pub deadline: Time,
    /// Renewed by the watchdog (else a fixed lease).
    pub watchdog: bool,
    /// An extend of it failed: it is not re-entered locally until the store confirms it.
    pub unconfirmed: bool,
    /// Known lost (final).
    pub lost: bool,
    /// Its token, for kinds that issue one.
    pub token: Option<u64>,
}

impl LocalHold {
    /// Whether its guards say they hold at `now`.
    pub fn believed(&self, now: Time) -> bool {
        self.count > 0 && !self.lost && now < self.deadline
    }
}

/// A fair waiter queued on the store, waiting for its turn.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Waiting {
    /// The name.
    pub name: Name,
    /// Its latest attempt's secret number (a grant is believed for it alone).
    pub attempt: u64,
    /// The hold a grant makes.
    pub hold: HoldId,
    /// When that attempt was sent: a grant's lease runs from no earlier.
    pub refused_at: Time,
}

/// One thread of a client.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Thread {
    /// Its holds.
    pub holds: Few<LocalHold>,
    /// Acquires whose outcome is unknown: the thread's next acquire of the name asks as the
    /// same hold.
    pub unknown: Few<(Name, Kind, HoldId)>,
    /// Its wait in a fair lock's queue.
    pub waiting: Option<Waiting>,
}

impl Thread {
    /// What the thread holds and waits for, in numbers that no numbering of ids changes (times
    /// from `now`): threads of one client are put in the order of their outlines.
    pub fn outline(&self, now: Time) -> Vec<u64> {
        let mut outline: Vec<u64> = self
            .holds
            .iter()
            .map(|h| {
                let left = h.deadline.saturating_sub(now).min(255);
                u64::from(h.name) << 40
                    | (h.kind as u64) << 32
                    | u64::from(h.count) << 24
                    | left << 8
                    | u64::from(h.watchdog) << 3
                    | u64::from(h.unconfirmed) << 2
                    | u64::from(h.lost) << 1
                    | u64::from(h.token.is_some())
            })
            .collect();
        outline.sort_unstable();
        outline.push(u64::MAX);
        outline.extend(
            self.unknown
                .iter()
                .map(|(name, kind, _)| u64::from(*name) << 8 | *kind as u64),
        );
        outline.push(u64::MAX);
        if let Some(waiting) = &self.waiting {
            outline.push(
                u64::from(waiting.name) << 16 | waiting.refused_at.saturating_sub(now).min(255),
            );
        }
        outline
    }

    /// Its hold of `kind` on `name`.
    pub fn hold(&self, name: Name, kind: Kind) -> Option<&LocalHold> {
        self.holds.iter().find(|h| h.name == name && h.kind == kind)
    }

    /// The same, to change.
    pub fn hold_mut(&mut self, name: Name, kind: Kind) -> Option<&mut LocalHold> {
        self.holds
            .iter_mut()
            .find(|h| h.name == name && h.kind == kind)
    }
}

/// Something on its way through the network.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum InFlight {
    /// A request that reaches the store later. `renewal`: a renewal part whose client still
    /// applies its answer when it comes (the client and when it was sent); other late
    /// requests' answers reach nobody.
    Request {
        /// The step.
        step: Step,
        /// Its request id.
        request: RequestId,
        /// For a renewal part: the client waiting for it, and when it was sent.
        renewal: Option<(u8, Time)>,
    },
    /// A grant message on a waiter's channel.
    Grant(Grant),
}

/// What the checks remember across steps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Memory {
    /// Holds the store ended (force-unlocked, lost) while a thread held them, with the
    /// deadline the thread's hold had then: it may never believe past it.
    pub ended: Few<(HoldId, Time)>,
    /// The highest token a new hold was given, per name.
    pub tokens: Few<(Name, u64)>,
    /// The first answer of each latched request still in the network.
    pub first_answers: Few<(RequestId, Answer)>,
    /// Attempt numbers an outsider heard in grant messages.
    pub heard: Few<u64>,
    /// The permits ever set or added, per name: never more believers.
    pub permits: Few<(Name, u64)>,
    /// Set-once requests that set a count or permits: each sets once.
    pub armed: Few<RequestId>,
    /// A node answered a renewal and its answer was not applied at once.
    pub unapplied: bool,
}

/// The whole state of a run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct World {
    /// The store's clock (and the clients': one clock in the model).
    pub now: Time,
    /// The store.
    pub store: Store,
    /// The threads, in the order of [`Config::threads`].
    pub threads: Few<Thread>,
    /// What is on its way.
    pub network: Few<InFlight>,
    /// What the checks remember.
    pub memory: Memory,
    /// Faults met so far.
    pub faults: u8,
    /// Force unlocks made so far.
    pub forced: u8,
    /// The next fresh hold id, request id and attempt number.
    pub next_id: u32,
}

impl World {
    /// The world at the start of a run of `config`.
    pub fn new(config: &Config) -> Self {
        World {
            now: 0,
            store: Store::new(config.names.len(), config.hands_over),
            threads: std::iter::repeat_n(Thread::default(), config.threads.len()).collect(),
            network: Few::new(),
            memory: Memory::default(),
            faults: 0,
            forced: 0,
            next_id: 1,
        }
    }

    /// A fresh hold id.
    pub fn fresh_hold(&mut self) -> HoldId {
        self.next_id += 1;
        HoldId(self.next_id)
    }

    /// A fresh request id.
    pub fn fresh_request(&mut self) -> RequestId {
        self.next_id += 1;
        RequestId(self.next_id)
    }

    /// A fresh attempt number (a secret: nobody else can name it).
    pub fn fresh_attempt(&mut self) -> u64 {
        self.next_id += 1;
        u64::from(self.next_id)
    }
}
