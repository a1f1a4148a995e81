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
        store_loss: true,
        forger: true,
    }
}

/// The runs, each exhaustive within its depth.
pub fn all() -> Vec<Config> {
    let base = |title, names: Vec<Vec<Kind>>, depth| Config {
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
    };
    vec![
        base(
            "reentrant and fenced locks",
            vec![vec![Kind::Reentrant], vec![Kind::Fenced]],
            8,
        ),
        base(
            "a name used as a lock and a read-write lock",
            vec![vec![Kind::Reentrant, Kind::Read], vec![Kind::Election]],
            8,
        ),
        base(
            "fair locks: queues and grants",
            vec![vec![Kind::Fair], vec![Kind::Election]],
            8,
        ),
        base(
            "read-write locks",
            vec![vec![Kind::Read, Kind::Write], vec![Kind::Election]],
            8,
        ),
        base(
            "semaphores and latches, and names used as them and as locks",
            vec![
                vec![Kind::Semaphore, Kind::Election],
                vec![Kind::Latch, Kind::Fenced],
            ],
            8,
        ),
        base(
            "leader elections",
            vec![vec![Kind::Election], vec![Kind::Election]],
            8,
        ),
    ]
}
