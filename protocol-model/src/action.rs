//! The actions a world can take: a thread's call (answered, or met by a fault), a renewal, a
//! late request or a grant arriving, time passing, an operator, a store losing data, an
//! outsider forging a grant.

use std::fmt;

use crate::kind::Kind;
use crate::step::{Counter, Name};

/// What the network does to one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Net {
    /// The store takes the step and the caller gets its answer.
    Answered,
    /// The store takes the step; its reply is lost: the caller gets an error.
    ReplyLost,
    /// The request is held up: the caller gets an error now, and the store takes the step
    /// whenever the network delivers it.
    Late,
    /// The connection drops after the store took the step: the backend sends it again, and
    /// the caller gets the second answer.
    Resent,
    /// The first copy is held up; the backend sends it again, the caller gets that answer,
    /// and the first copy reaches the store later.
    ResentFirstLate,
    /// The call waits in its client's queue, not yet sent: it is sent when the network
    /// delivers it, unless its caller gave up first (a dropped future, a timeout).
    Queued,
}

impl Net {
    /// Whether it is a fault (counted against the run's bound).
    pub fn is_fault(self) -> bool {
        self != Net::Answered
    }
}

/// One step of a run.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Action {
    /// A thread takes `kind` on `name`, on the watchdog's lease or a fixed one (a latch: waits
    /// until it is open, once).
    Lock {
        /// The thread.
        thread: usize,
        /// The name.
        name: Name,
        /// The kind.
        kind: Kind,
        /// On a fixed lease.
        fixed: bool,
        /// The call's fate.
        net: Net,
    },
    /// A thread waits for the fair lock `name` in the store's queue, with a grant offer (or,
    /// when it waits already, tries again with a new one).
    Wait {
        /// The thread.
        thread: usize,
        /// The name.
        name: Name,
        /// For a hold on a fixed lease (the grant's lease is the shorter of it and the grant
        /// lease), not the watchdog's.
        fixed: bool,
    },
    /// A waiting thread gives up: it leaves the queue and gives back a grant it may have had;
    /// or its call, still queued, is dropped.
    GiveUp {
        /// The thread.
        thread: usize,
    },
    /// A thread drops one guard of its hold of `kind` on `name`.
    Unlock {
        /// The thread.
        thread: usize,
        /// The name.
        name: Name,
        /// The kind.
        kind: Kind,
        /// The release's fate.
        net: Net,
    },
    /// A thread releases its reentrant hold straight to another thread of its client.
    HandOver {
        /// The thread.
        thread: usize,
        /// The name.
        name: Name,
        /// The thread handed the lock.
        to: usize,
    },
    /// A thread's counter step on a semaphore or latch.
    Count {
        /// The thread.
        thread: usize,
        /// The name.
        name: Name,
        /// The step.
        step: Counter,
        /// The call's fate.
        net: Net,
    },
    /// A client's watchdog renews its holds, each node's part answered as it comes; the
    /// part of `late_node` is held up.
    Renew {
        /// The client.
        client: u8,
        /// The node whose part is late, if any.
        late_node: Option<u8>,
    },
    /// The network delivers what it held up (by its place).
    Deliver(usize),
    /// Time passes one tick.
    Tick,
    /// An operator force-unlocks `name` as `kind`.
    ForceUnlock {
        /// The name.
        name: Name,
        /// The kind.
        kind: Kind,
    },
    /// The store loses what it kept of `name`'s holds.
    Lose {
        /// The name.
        name: Name,
    },
    /// An outsider (who reads the store) sends a grant naming `attempt` on `thread`'s channel.
    Forge {
        /// The waiter.
        thread: usize,
        /// The attempt named.
        attempt: u64,
    },
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::Lock {
                thread,
                name,
                kind,
                fixed,
                net,
            } => write!(
                f,
                "thread {thread}: {kind:?} n{name} on {} lease ({net:?})",
                if *fixed { "a fixed" } else { "the watchdog" }
            ),
            Action::Wait {
                thread,
                name,
                fixed,
            } => write!(
                f,
                "thread {thread}: waits for fair n{name} on {} lease",
                if *fixed { "a fixed" } else { "the watchdog" }
            ),
            Action::GiveUp { thread } => write!(f, "thread {thread}: gives up"),
            Action::Unlock {
                thread,
                name,
                kind,
                net,
            } => write!(f, "thread {thread}: unlocks {kind:?} n{name} ({net:?})"),
            Action::HandOver { thread, name, to } => {
                write!(f, "thread {thread}: hands n{name} over to thread {to}")
            }
            Action::Count {
                thread,
                name,
                step,
                net,
            } => write!(f, "thread {thread}: {step:?} on n{name} ({net:?})"),
            Action::Renew { client, late_node } => match late_node {
                Some(node) => write!(f, "client {client} renews; node {node}'s part is late"),
                None => write!(f, "client {client} renews"),
            },
            Action::Deliver(at) => write!(f, "the network delivers (or the queue sends) #{at}"),
            Action::Tick => write!(f, "a tick passes"),
            Action::ForceUnlock { name, kind } => {
                write!(f, "an operator force-unlocks {kind:?} n{name}")
            }
            Action::Lose { name } => write!(f, "the store loses n{name}'s holds"),
            Action::Forge { thread, attempt } => write!(
                f,
                "an outsider sends a grant of attempt {attempt} to thread {thread}"
            ),
        }
    }
}
