//! The steps of a multi-lock round on one client's members: all taken or none kept.

use std::sync::Arc;

use super::handle::Handle;
use super::runner::InPlace;
use super::taken::Taken;
use crate::contract::backend::{Acquire, AcquireRequest, HoldRef};
use crate::contract::error::LockError;
use crate::contract::kind::LockKind;
use crate::contract::loss::LossReason;
use crate::contract::owner::OwnerId;
use crate::engine::hold::{self, Hold, LeaseMode};

/// What a multi-lock step found among one client's members.
pub(crate) enum TryAll {
    /// Every member is held now (re-entered or taken), in the order given.
    Taken(Vec<Arc<Hold>>),
    /// Nothing was kept: the member at `index` is held by another owner.
    Blocked { index: usize },
}

impl Handle {
    /// Whether `self` and `other` are locks of the same client.
    pub(crate) fn same_client(&self, other: &Handle) -> bool {
        Arc::ptr_eq(&self.client, &other.client)
    }

    /// What orders the members of a multi-lock, the same way for every thread.
    pub(crate) fn order_key(&self) -> (&str, u8, u64) {
        let kind = match self.kind() {
            LockKind::Reentrant => 0,
            LockKind::Fair => 1,
            LockKind::Read => 2,
            LockKind::Write => 3,
            LockKind::Fenced => 4,
            LockKind::Semaphore => 5,
            LockKind::Latch => 6,
            LockKind::Election => 7,
        };
        (self.name(), kind, self.client.key)
    }

    /// The acquire step of a multi-lock for `members`, all of one client: members this thread
    /// already holds on a lease that covers the request are re-entered; the others are asked
    /// for together (one backend call; a member this thread holds on a lease that does not cover
    /// the request, as an extend of that hold), and either all of them are taken, or none: what
    /// was taken is given back and the first member found held is reported.
    pub(crate) fn try_all(members: &[&Handle], mode: LeaseMode) -> Result<TryAll, LockError> {
        let Some(first) = members.first() else {
            return Ok(TryAll::Taken(Vec::new()));
        };
        let now = first.now();
        for member in members {
            member.check()?;
            member.check_own_holds(now)?;
        }
        let mut reentered: Vec<Option<Arc<Hold>>> = vec![None; members.len()];
        // Members asked of the store, each with the hold it would extend.
        let mut asked: Vec<(usize, Option<Arc<Hold>>)> = Vec::new();
        for (index, member) in members.iter().enumerate() {
            match hold::find(member.client.key, member.name(), member.kind()) {
                Some(hold) if hold.covers(mode, now) => {
                    hold.increment();
                    reentered[index] = Some(hold);
                }
                Some(hold) => match hold.loss(now) {
                    Some(reason) => {
                        member.abandon(&hold, reason);
                        asked.push((index, None));
                    }
                    None => asked.push((index, Some(hold))),
                },
                None => asked.push((index, None)),
            }
        }
        let Some((first_asked, _)) = asked.first() else {
            return Ok(TryAll::Taken(reentered.into_iter().flatten().collect()));
        };
        // Each member asked of the store under its hold's id: the extended hold's, or a new one
        // (a later round asks under new ones again, so a late give-back of this round's never
        // meets them).
        let owners: Vec<OwnerId> = asked
            .iter()
            .map(|(index, extending)| {
                extending
                    .as_ref()
                    .map_or_else(|| members[*index].new_hold_id(), |hold| hold.owner.clone())
            })
            .collect();
        let write_holds: Vec<Option<Arc<Hold>>> = asked
            .iter()
            .map(|(index, _)| members[*index].write_hold(now))
            .collect();
        let requests: Vec<AcquireRequest<'_>> = asked
            .iter()
            .zip(&owners)
            .zip(&write_holds)
            .map(|(((index, extending), owner), write_hold)| {
                let member = members[*index];
                AcquireRequest::new(member.target.as_ref(), owner, member.lease_of(mode))
                    .reentering(extending.is_some())
                    .under_write_hold(write_hold.as_ref().map(|hold| &hold.owner))
            })
            .collect();
        let sent_at = first.now();
        let found = match first.client.backend.try_acquire_many(&requests) {
            Ok(found) if found.len() == requests.len() => Ok(found),
            Ok(found) => Err(LockError::protocol(format!(
                "the backend answered {} acquire attempts with {} results",
                requests.len(),
                found.len()
            ))),
            Err(error) => Err(error.on_lock(members[*first_asked].name())),
        };
        let found = match found {
            Ok(found) => found,
            Err(error) => {
                // Nothing is known of what the store did: extended holds are confirmed before
                // they are re-entered again, and the backend gave back what it could.
                for (_, extending) in &asked {
                    if let Some(hold) = extending {
                        hold.mark_unconfirmed();
                    }
                }
                Self::give_back(members, &reentered, &[], &[], &[]);
                return Err(error);
            }
        };
        if let Some(position) = found.iter().position(|found| !found.is_acquired()) {
            for ((index, extending), found) in asked.iter().zip(&found) {
                if let (Some(hold), false) = (extending, found.is_acquired()) {
                    // The store ended the hold this thread believed valid, or another owner
                    // has the lock: either way it is gone.
                    let reason = match found {
                        Acquire::Gone { reason } => *reason,
                        _ => LossReason::TakenOver,
                    };
                    members[*index].abandon(hold, reason);
                }
            }
            Self::give_back(members, &reentered, &asked, &owners, &found);
            return Ok(TryAll::Blocked {
                index: asked[position].0,
            });
        }
        let mut holds = reentered;
        for (position, ((index, extending), outcome)) in asked.iter().zip(&found).enumerate() {
            let Acquire::Acquired(grant) = outcome else {
                continue;
            };
            let taken_now = Taken::new(sent_at, *grant);
            let owner = &owners[position];
            match members[*index].held(&InPlace, extending.clone(), mode, taken_now, owner, false) {
                Ok(hold) => holds[*index] = Some(hold),
                Err(error) => {
                    // Give back everything: what was recorded (`held` gave back its own), and
                    // what was taken but not recorded yet.
                    for hold in holds.iter().flatten() {
                        let _ = members[0].release_member(hold);
                    }
                    let rest = &asked[position + 1..];
                    let rest_owners = &owners[position + 1..];
                    Self::give_back(members, &[], rest, rest_owners, &found[position + 1..]);
                    return Err(error);
                }
            }
        }
        Ok(TryAll::Taken(holds.into_iter().flatten().collect()))
    }

    /// After a multi step that is not kept: the re-entered holds count down again, and the
    /// holds the backend made in this step go back. Holds this step extended stay as they are
    /// (the store never shortened them, and the thread still relies on them).
    pub(super) fn give_back(
        members: &[&Handle],
        reentered: &[Option<Arc<Hold>>],
        asked: &[(usize, Option<Arc<Hold>>)],
        owners: &[OwnerId],
        found: &[Acquire],
    ) {
        for hold in reentered.iter().flatten() {
            hold.decrement();
        }
        let given: Vec<HoldRef<'_>> = asked
            .iter()
            .zip(owners)
            .zip(found)
            .filter(|(((_, extending), _), found)| extending.is_none() && found.is_acquired())
            .map(|(((index, _), owner), _)| HoldRef {
                lock: members[*index].target.as_ref(),
                owner,
            })
            .collect();
        if let (Some(first), false) = (members.first(), given.is_empty()) {
            for (result, hold) in first.client.backend.release_many(&given).iter().zip(&given) {
                if let Err(error) = result {
                    tracing::warn!(lock = hold.lock.name, %error, "dlock: giving back a multi-lock member failed; its lease will end it");
                }
            }
        }
    }

    /// Releases a hold of any member of this client (used by a multi-lock, whose holds are of
    /// several handles).
    pub(crate) fn release_member(&self, hold: &Arc<Hold>) -> Result<(), LockError> {
        Handle::new(
            self.client.clone(),
            hold.target.name.clone(),
            hold.target.kind,
        )
        .release_one(hold)
    }
}
