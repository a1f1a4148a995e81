//! One name, one kind: every pair of kinds on one name, from one thread and from two clients,
//! gets the same answer on every backend. A second kind is refused (`WrongKind`), except where
//! two kinds are one lock on the store (the reentrant and the fenced lock, the two sides of a
//! read-write lock): then it is excluded like any other holder, and a thread's own second kind
//! is still refused (a writer may read; a reader asking to write would wait for itself).

use std::time::Duration;

use dlocks::{LockClient, LockError, LockKind};

use super::unique;
use crate::env::TestEnv;

/// What a client does with a name as one kind: holds it, or (a latch) counts on it.
enum InUse {
    Guard(dlocks::LockGuard),
    Fenced(dlocks::FencedLockGuard),
    Permit(dlocks::Permit),
    Counting,
    Leading(dlocks::Leadership),
}

impl InUse {
    fn is_lost(&self) -> bool {
        match self {
            InUse::Guard(guard) => guard.is_lost(),
            InUse::Fenced(guard) => guard.is_lost(),
            InUse::Permit(permit) => permit.is_lost(),
            InUse::Counting => false,
            InUse::Leading(leadership) => leadership.is_lost(),
        }
    }
}

const KINDS: [LockKind; 8] = [
    LockKind::Reentrant,
    LockKind::Fenced,
    LockKind::Fair,
    LockKind::Read,
    LockKind::Write,
    LockKind::Semaphore,
    LockKind::Latch,
    LockKind::Election,
];

/// The kinds a thread holds as itself (the others are holds of their own, or nothing held).
fn held_by_thread(kind: LockKind) -> bool {
    matches!(
        kind,
        LockKind::Reentrant | LockKind::Fenced | LockKind::Fair | LockKind::Read | LockKind::Write
    )
}

/// The kinds that are one lock on the store.
fn same_lock(a: LockKind, b: LockKind) -> bool {
    let family = |kind| match kind {
        LockKind::Reentrant | LockKind::Fenced => 0,
        LockKind::Read | LockKind::Write => 1,
        _ => 2,
    };
    a == b || (family(a) == family(b) && family(a) < 2)
}

/// Starts using `name` as `kind`, without waiting: `Ok(None)` if another holder has it.
fn use_as(client: &LockClient, kind: LockKind, name: &str) -> Result<Option<InUse>, LockError> {
    Ok(match kind {
        LockKind::Reentrant => client.lock(name).try_lock()?.map(InUse::Guard),
        LockKind::Fenced => client.fenced_lock(name).try_lock()?.map(InUse::Fenced),
        LockKind::Fair => client.fair_lock(name).try_lock()?.map(InUse::Guard),
        LockKind::Read => client
            .read_write_lock(name)
            .read_lock()
            .try_lock()?
            .map(InUse::Guard),
        LockKind::Write => client
            .read_write_lock(name)
            .write_lock()
            .try_lock()?
            .map(InUse::Guard),
        LockKind::Semaphore => {
            let semaphore = client.semaphore(name);
            semaphore.try_set_permits(1)?;
            semaphore.try_acquire()?.map(InUse::Permit)
        }
        LockKind::Latch => {
            let latch = client.count_down_latch(name);
            // A latch in use: counting down from 2, and not open.
            latch.try_set_count(2)?;
            (!latch.wait_for(Duration::ZERO)?).then_some(InUse::Counting)
        }
        LockKind::Election => client
            .leader_election(name)
            .try_campaign_for("candidate", Duration::ZERO)?
            .map(InUse::Leading),
        other => panic!("no test for {other}"),
    })
}

/// Every kind of the pair the backend keeps.
fn kept(env: &dyn TestEnv) -> Vec<LockKind> {
    let backend = env.backend();
    KINDS
        .into_iter()
        .filter(|kind| backend.supports(*kind))
        .collect()
}

fn check_pairs(env: &dyn TestEnv, same_thread: bool) {
    let kinds = kept(env);
    for &first in &kinds {
        for &second in &kinds {
            if first == second {
                continue;
            }
            let name = unique("one-kind");
            let (a, b) = (env.client(), env.client());
            let asking = if same_thread { &a } else { &b };
            let what = format!(
                "{} holding {first}, {second} asked{}",
                env.name(),
                if same_thread {
                    " by the same thread"
                } else {
                    " by another client"
                }
            );
            let held = use_as(&a, first, &name)
                .unwrap_or_else(|error| panic!("{what}: first use failed: {error}"))
                .unwrap_or_else(|| panic!("{what}: the fresh name was in use"));
            let answer = use_as(asking, second, &name);
            let thread_pair = same_thread && held_by_thread(first) && held_by_thread(second);
            match answer {
                // A writer may read.
                Ok(Some(inner)) if thread_pair && first == LockKind::Write => {
                    assert_eq!(second, LockKind::Read, "{what}");
                    drop(inner);
                }
                Err(LockError::WouldDeadlock { .. })
                    if thread_pair && (first, second) == (LockKind::Read, LockKind::Write) => {}
                // One lock on the store: excluded like any other holder.
                Ok(None) if !same_thread && same_lock(first, second) => {}
                Err(LockError::WrongKind {
                    name: ref refused,
                    expected,
                    ref found,
                }) if !same_lock(first, second) || same_thread => {
                    assert_eq!(refused, &name, "{what}");
                    assert_eq!(expected, second, "{what}");
                    assert!(!found.is_empty(), "{what}");
                }
                other => panic!(
                    "{what}: expected it refused, got {:?}",
                    other.map(|held| held.is_some())
                ),
            }
            // Nothing the refused attempt did touched the first use.
            assert!(!held.is_lost(), "{what}: the first use was lost");
            if first != LockKind::Latch {
                // Readers share: a writer is what one excludes.
                let probe = if first == LockKind::Read {
                    LockKind::Write
                } else {
                    first
                };
                let third = env.client();
                assert!(
                    matches!(use_as(&third, probe, &name), Ok(None)),
                    "{what}: the first use no longer excludes a third client"
                );
            }
            drop(held);
        }
    }
}

pub fn a_thread_using_a_name_as_one_kind_is_refused_every_other_kind(env: &dyn TestEnv) {
    check_pairs(env, true);
}

pub fn two_clients_never_use_one_name_as_two_kinds(env: &dyn TestEnv) {
    check_pairs(env, false);
}
