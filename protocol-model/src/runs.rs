//! The bounded runs the exhaustive check makes: together they cover every kind, every step
//! and every fault, each within bounds small enough to explore every sequence.

use crate::kind::Kind;
use crate::records::{Keep, Keeps};
use crate::step::Time;
use crate::store::{HandsOver, Settings};
use crate::world::{Config, Faults, Leases};

/// The leases of every run: a watchdog lease of 3 ticks, a fixed one of 2, grants of 2 (a
/// fixed lease shorter than the watchdog's, so that taking the lock again with the watchdog
/// extends the hold).
const LEASES: Leases = Leases {
    watchdog: 3,
    fixed: 2,
    grant: 2,
    session: 3,
};

/// A store like Redis or PostgreSQL, reached through a network that may deliver a request any
/// time later: it hands a reentrant lock and a permit over in place, and keeps its records
/// (tombstones, latched answers) for good (the etcd run has them lapse, behind a network that
/// delivers within a bound).
fn store() -> Settings {
    Settings {
        hands_over: HandsOver {
            reentrant: true,
            permit: true,
        },
        keeps: Keeps::ALWAYS,
        ops_per_step: None,
        turns: false,
        proofs: false,
        lock_turns: true,
    }
}

/// The etcd run's leases: shorter, so that an attempt is over, resolved and forgotten within
/// a few ticks.
const ETCD_LEASES: Leases = Leases {
    watchdog: 2,
    fixed: 1,
    grant: 1,
    session: 3,
};

/// How long a request may stay in etcd's network: as long as the watchdog's lease, so that a
/// copy landing late (an attempt resolved meanwhile) is within reach, and a hold a late copy
/// makes on a lease of its own ends within a lease of its request's deadline.
const ETCD_NETWORK: Time = 2;

/// A store like etcd: watchdog holds on their client's session, fixed ones on leases of their
/// own; no release record at all, tombstones and set-once answers kept one tick longer than a
/// request can take to land; at most two operations per transaction (etcd's 128, scaled to
/// the model's few holds).
fn etcd_store() -> Settings {
    Settings {
        hands_over: HandsOver {
            reentrant: true,
            permit: false,
        },
        keeps: Keeps {
            tombstones: Keep::For(ETCD_NETWORK + 1),
            releases: Keep::Never,
            set_once: Keep::For(ETCD_NETWORK + 1),
        },
        ops_per_step: Some(2),
        turns: false,
        proofs: false,
        lock_turns: true,
    }
}

/// Two clients, the first with two threads.
fn threads() -> Vec<u8> {
    vec![0, 0, 1]
}

/// Every fault, one sequence meeting at most `max` of them.
fn every_fault(max: u8) -> Faults {
    Faults {
        max,
        lost_replies: true,
        late_requests: true,
        resends: true,
        force_unlock: true,
        extra_force_unlocks: 0,
        store_loss: true,
        forger: true,
        queued: false,
    }
}

/// A run over `names` (each name's kinds), one node per name, every fault, at most two per
/// sequence.
fn run(title: &'static str, names: Vec<Vec<Kind>>, depth: usize) -> Config {
    Config {
        title,
        threads: threads(),
        nodes: (0..names.len() as u8).collect(),
        names,
        leases: LEASES,
        faults: every_fault(2),
        permits: 1,
        store: store(),
        network: None,
        sessions: false,
        depth,
    }
}

/// Reentrant and fenced locks, with a force unlock besides a fault (a late copy of an acquire
/// meeting a hold force-unlocked meanwhile), and calls queued by their client whose callers
/// may give up.
pub fn reentrant_and_fenced() -> Config {
    Config {
        faults: Faults {
            extra_force_unlocks: 1,
            queued: true,
            ..every_fault(2)
        },
        ..run(
            "reentrant and fenced locks",
            vec![vec![Kind::Reentrant], vec![Kind::Fenced]],
            6,
        )
    }
}

/// One name used both as a lock and as a read-write lock.
pub fn lock_and_read_write() -> Config {
    run(
        "a name used as a lock and a read-write lock",
        vec![vec![Kind::Reentrant, Kind::Read], vec![Kind::Election]],
        6,
    )
}

/// Fair locks: queues, grants and their expiry.
pub fn fair() -> Config {
    run(
        "fair locks: queues and grants",
        vec![vec![Kind::Fair], vec![Kind::Election]],
        6,
    )
}

/// Fair locks on a store whose grant messages carry the offer's secret (PostgreSQL): a
/// waiter on the watchdog's lease believes such a grant without a claim; forged ones still
/// carry none.
pub fn fair_proven() -> Config {
    Config {
        store: Settings {
            proofs: true,
            ..store()
        },
        ..run(
            "fair locks: grants proven by the offer's secret",
            vec![vec![Kind::Fair], vec![Kind::Election]],
            6,
        )
    }
}

/// Read-write locks.
pub fn read_write() -> Config {
    run(
        "read-write locks",
        vec![vec![Kind::Read, Kind::Write], vec![Kind::Election]],
        6,
    )
}

/// Semaphores and latches, each name also used as a lock.
pub fn semaphores_and_latches() -> Config {
    run(
        "semaphores and latches, and names used as them and as locks",
        vec![
            vec![Kind::Semaphore, Kind::Election],
            vec![Kind::Latch, Kind::Fenced],
        ],
        6,
    )
}

/// A store like etcd and its backend: sessions shared by a client's watchdog holds, attempts
/// of unknown outcome resolved and forgotten, late copies landing after that, records that
/// lapse, a limit of operations per transaction, and an operator who deletes a name's keys or
/// force-unlocks besides a fault. One store (a renewal is late whole, with its keep-alive).
pub fn etcd() -> Config {
    Config {
        title: "etcd: sessions, resolved attempts, lapsing records, step limits",
        threads: vec![0, 0],
        names: vec![vec![Kind::Read], vec![Kind::Reentrant]],
        nodes: vec![0, 0],
        leases: ETCD_LEASES,
        faults: Faults {
            extra_force_unlocks: 1,
            forger: false,
            ..every_fault(2)
        },
        permits: 1,
        store: etcd_store(),
        network: Some(ETCD_NETWORK),
        sessions: true,
        depth: 7,
    }
}

/// etcd's fair lock: a release's grant is the waiter's turn, seen on its watch and believed
/// at once until the grant's lease ends, then renewed onto the session; waiters of two
/// clients, besides a third thread's reentrant lock, with late requests, lost replies, force
/// unlocks and the store losing the name.
pub fn etcd_turns() -> Config {
    Config {
        title: "etcd: fair turns believed from the watch",
        threads: vec![0, 1],
        names: vec![vec![Kind::Fair], vec![Kind::Reentrant]],
        store: Settings {
            turns: true,
            ..etcd_store()
        },
        ..etcd()
    }
}

/// Leader elections on two names.
pub fn elections() -> Config {
    run(
        "leader elections",
        vec![vec![Kind::Election], vec![Kind::Election]],
        8,
    )
}

/// Every run, each exhaustive within its depth.
pub fn all() -> Vec<Config> {
    vec![
        reentrant_and_fenced(),
        lock_and_read_write(),
        fair(),
        fair_proven(),
        read_write(),
        semaphores_and_latches(),
        elections(),
        etcd(),
        etcd_turns(),
    ]
}
