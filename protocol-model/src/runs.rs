//! The bounded runs the exhaustive check makes: together they cover every kind, every step
//! and every fault, each within bounds small enough to explore every sequence.

use crate::kind::Kind;
use crate::store::HandsOver;
use crate::world::{Config, Faults, Leases};

/// The leases of every run: a watchdog lease of 3 ticks, a fixed one of 2, grants of 2 (a
/// fixed lease shorter than the watchdog's, so that taking the lock again with the watchdog
/// extends the hold).
const LEASES: Leases = Leases {
    watchdog: 3,
    fixed: 2,
    grant: 2,
};

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
    }
}

/// A run over `names` (each name's kinds), one node per name, every fault, at most one per
/// sequence.
fn run(title: &'static str, names: Vec<Vec<Kind>>, depth: usize) -> Config {
    Config {
        title,
        threads: threads(),
        nodes: (0..names.len() as u8).collect(),
        names,
        leases: LEASES,
        faults: every_fault(1),
        permits: 1,
        hands_over: HandsOver {
            reentrant: true,
            permit: true,
        },
        depth,
    }
}

/// Reentrant and fenced locks, with a force unlock besides a fault: a late copy of an acquire
/// meeting a hold force-unlocked meanwhile.
pub fn reentrant_and_fenced() -> Config {
    Config {
        faults: Faults {
            extra_force_unlocks: 1,
            ..every_fault(1)
        },
        ..run(
            "reentrant and fenced locks",
            vec![vec![Kind::Reentrant], vec![Kind::Fenced]],
            8,
        )
    }
}

/// One name used both as a lock and as a read-write lock.
pub fn lock_and_read_write() -> Config {
    run(
        "a name used as a lock and a read-write lock",
        vec![vec![Kind::Reentrant, Kind::Read], vec![Kind::Election]],
        7,
    )
}

/// Fair locks: queues, grants and their expiry.
pub fn fair() -> Config {
    run(
        "fair locks: queues and grants",
        vec![vec![Kind::Fair], vec![Kind::Election]],
        8,
    )
}

/// Read-write locks.
pub fn read_write() -> Config {
    run(
        "read-write locks",
        vec![vec![Kind::Read, Kind::Write], vec![Kind::Election]],
        7,
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
        7,
    )
}

/// Leader elections on two names.
pub fn elections() -> Config {
    run(
        "leader elections",
        vec![vec![Kind::Election], vec![Kind::Election]],
        9,
    )
}

/// Every run, each exhaustive within its depth.
pub fn all() -> Vec<Config> {
    vec![
        reentrant_and_fenced(),
        lock_and_read_write(),
        fair(),
        read_write(),
        semaphores_and_latches(),
        elections(),
    ]
}
