//! The world the protocol runs in: the store, the clients' threads with what each believes it
//! holds, the network between them (requests delivered late, grants on their way), and what
//! the checks remember. Its bounds are a [`Config`].

use crate::few::Few;
use crate::kind::Kind;
use crate::step::{Answer, Grant, HoldId, Name, RequestId, Step, Time};
use crate::store::{Settings, Store};

/// The leases of the model, in ticks.
#[derive(Clone, Copy, Debug)]
pub struct Leases {
    /// The watchdog's lease (renewed by `Renew`).
    pub watchdog: Time,
    /// A fixed lease, shorter than the watchdog's.
    pub fixed: Time,
    /// The lease a fair grant sets until its holder confirms it.
    pub grant: Time,
    /// A session's lease, from each keep-alive: the watchdog's and a third more, in whole
    /// ticks (etcd's leases are whole seconds), so that a renewal soon after a keep-alive may
    /// count on the session without keeping it alive again.
    pub session: Time,
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
    /// An outsider who can read every lock table or key (so it knows the waiters' offers)
    /// sends grant messages to waiters.
    pub forger: bool,
    /// A thread's call waits in its client's queue before it is sent, and its caller may give
    /// up meanwhile (a dropped future, a timeout): counted as a fault, to keep the bound.
    pub queued: bool,
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
    /// What the store is: what it hands over, how long it keeps its records, its limits.
    pub store: Settings,
    /// How long a request may stay in the network: it lands within this many ticks of being
    /// sent, or never (its connection is closed when its caller gives up). `None`: any time
    /// later (the store must then keep its records for good).
    pub network: Option<Time>,
    /// The backend is etcd's kind: watchdog holds share their client's session, fixed ones
    /// have leases of their own from when they were sent, an acquire of unknown outcome is
    /// remembered and resolved (asked about, then forgotten) once over, and the backend
    /// deletes the holds it remembers as over in its own steps.
    pub sessions: bool,
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
    /// Its latest attempt's number: a grant message naming another is not even a hint.
    pub attempt: u64,
    /// The hold a grant makes (and a claim asks for).
    pub hold: HoldId,
    /// It asked for a fixed lease, not the watchdog's.
    pub fixed: bool,
    /// A grant of its latest offer lasts on the store at least until then: the offer's
    /// attempt was sent then plus the grant's lease, and the store starts the grant later.
    pub granted_until: Time,
}

/// A thread's outline (see [`Thread::outline`]).
pub type Outline = smallvec::SmallVec<[u64; 12]>;

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
    /// Its call waits in its client's queue, not yet sent (the thread waits for it).
    pub calling: bool,
}

impl Thread {
    /// What the thread holds and waits for, in numbers that no numbering of ids changes (times
    /// from `now`): threads of one client are put in the order of their outlines.
    pub fn outline(&self, now: Time) -> Outline {
        let mut outline: Outline = self
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
            outline.push(u64::from(waiting.name));
        }
        outline.push(u64::from(self.calling));
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

/// Something on its way through the network, or waiting to be sent.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum InFlight {
    /// A request that reaches the store later (by `sent` plus the network's bound, or never).
    /// `renewal`: a renewal part whose client still applies its answer when it comes; other
    /// late requests' answers reach nobody.
    Request {
        /// The step.
        step: Step,
        /// Its request id.
        request: RequestId,
        /// When it was sent.
        sent: Time,
        /// For a renewal part: the client waiting for it.
        renewal: Option<u8>,
    },
    /// A grant message on a waiter's channel.
    Grant(Grant),
    /// A thread's lock call waiting in its client's queue: sent when its turn comes, unless
    /// its caller gave up.
    Call(Call),
}

/// A lock call queued by its client, not yet sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Call {
    /// The caller.
    pub thread: u8,
    /// The name.
    pub name: Name,
    /// The kind.
    pub kind: Kind,
    /// On a fixed lease.
    pub fixed: bool,
}

/// What a client's backend remembers of a hold the store may keep though none of its threads
/// counts on it: an acquire of unknown outcome (a copy may still make it), or a hold whose
/// release had an unknown outcome. Once `until` has passed the backend settles it: deletes the
/// hold if the store has it, and, for an acquire not made, moves its session's gate so that
/// no copy makes it later; then forgets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Remembered {
    /// The name.
    pub name: Name,
    /// The kind.
    pub kind: Kind,
    /// The hold.
    pub hold: HoldId,
    /// When its holder's deadline was (or would have been): settled from then on.
    pub until: Time,
    /// Its acquire's outcome is unknown (else its release's).
    pub acquire: bool,
}

/// A client's backend: what it remembers besides its threads' holds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Client {
    /// Holds it remembers to settle.
    pub remembered: Few<Remembered>,
    /// When its session ends as it last granted or kept it alive itself: the store's ends
    /// no earlier (a keep-alive landing late with a renewal's part is not counted).
    pub session_until: Time,
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
    /// The latest deadline a request gave each hold (sent-at plus its lease): a hold nobody
    /// believes blocks its name at most one lease past it.
    pub promised: Few<(HoldId, Time)>,
    /// A step was refused for carrying more operations than the store takes.
    pub oversized: bool,
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
    /// The clients' backends, by client.
    pub clients: Few<Client>,
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
            store: Store::new(config.names.len(), config.store),
            threads: std::iter::repeat_n(Thread::default(), config.threads.len()).collect(),
            clients: std::iter::repeat_n(
                Client::default(),
                config
                    .threads
                    .iter()
                    .max()
                    .map_or(0, |c| usize::from(*c) + 1),
            )
            .collect(),
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
