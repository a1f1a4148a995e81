//! `dlock force-unlock NAME`: frees a lock by releasing the holds it has, each by its id, so that
//! what it frees is what it saw (and prints); `--if-holder ID` frees it only from that hold.
//!
//! A release acts only on the hold it names, in one atomic step on the store: a hold taken
//! between the look and the release is never freed by mistake. The plain form looks again
//! when a hold it saw was gone by the time it acted (the lock changed hands), a few times, and
//! then frees whoever holds it with the store's force-unlock step, saying so.

use std::sync::Arc;

use dlocks::backend::{DistributedLock, HeldAs, LockHolder, LockInfo, LockRef, OwnerId};
use dlocks::LockKind;
use serde_json::{json, Value};

use crate::connect::{Access, Target};
use crate::escape::{escaped, quoted};
use crate::exit_code::{Failure, NO};

/// How many times the plain form looks and releases before it forces.
const TRIES: usize = 3;

/// `dlock force-unlock NAME [--if-holder ID]`.
pub fn force_unlock(
    target: &Target,
    name: &str,
    if_holder: Option<&str>,
    as_json: bool,
) -> Result<i32, Failure> {
    let backend = crate::connect::backend(target, Access::Unlock)?;
    let inspection = backend.inspection()?;
    let inspect = || -> Result<LockInfo, Failure> { Ok(inspection.inspect(name)?) };
    let store: Arc<dyn DistributedLock> = backend.shared();
    let info = inspect()?;
    match if_holder {
        Some(id) => if_holder_only(&store, &info, id, as_json),
        None => {
            let mut freed = Vec::new();
            let mut info = info;
            for _ in 0..TRIES {
                if !info.is_held() {
                    return report(name, &freed, false, as_json);
                }
                let kind = kind_of(&info);
                let mut changed = false;
                for holder in &info.holders {
                    let owner = OwnerId::from_raw(holder.owner.as_str());
                    if store
                        .release(LockRef::new(name, kind), &owner)?
                        .is_released()
                    {
                        freed.push((holder.clone(), info.held_as));
                    } else {
                        changed = true;
                    }
                }
                if !changed {
                    return report(name, &freed, false, as_json);
                }
                info = inspect()?;
            }
            if info.is_held() {
                store.force_unlock(LockRef::new(name, kind_of(&info)))?;
                return report(name, &freed, true, as_json);
            }
            report(name, &freed, false, as_json)
        }
    }
}

/// `--if-holder ID`: one release of hold `id`, which acts only if that hold still holds the
/// lock.
fn if_holder_only(
    store: &Arc<dyn DistributedLock>,
    info: &LockInfo,
    id: &str,
    as_json: bool,
) -> Result<i32, Failure> {
    let name = info.name.as_str();
    let seen = info.holders.iter().find(|holder| holder.owner == id);
    let released = match seen {
        Some(_) => store
            .release(LockRef::new(name, kind_of(info)), &OwnerId::from_raw(id))?
            .is_released(),
        None => false,
    };
    if as_json {
        let freed: Vec<Value> = seen
            .filter(|_| released)
            .map(|holder| holder_json(holder, info.held_as))
            .into_iter()
            .collect();
        println!(
            "{}",
            json!({ "name": name, "unlocked": released, "freed": freed, "forced": false })
        );
    } else if released {
        println!(
            "lock {} force-unlocked: freed the hold {}",
            quoted(name),
            escaped(id)
        );
    } else if info.is_held() && seen.is_some() {
        println!(
            "lock {} is no longer held by {}: nothing changed",
            quoted(name),
            escaped(id)
        );
    } else if info.is_held() {
        println!(
            "lock {} is not held by {} (it is held by {}): nothing changed",
            quoted(name),
            escaped(id),
            crate::inspect::holders(info)
        );
    } else {
        println!(
            "lock {} is not held by {} (it is free): nothing changed",
            quoted(name),
            escaped(id)
        );
    }
    Ok(if released { 0 } else { NO })
}

/// The kind a lock's holds are released as: the one the store holds it as. On Redis an
/// exclusive hold with a queue is a fair lock's (its release also tells the head of the
/// queue).
fn kind_of(info: &LockInfo) -> LockKind {
    match info.held_as {
        HeldAs::Read => LockKind::Read,
        HeldAs::Write => LockKind::Write,
        HeldAs::Fair => LockKind::Fair,
        _ if info.queued_waiters > 0 => LockKind::Fair,
        _ => LockKind::Reentrant,
    }
}

/// Prints what was freed: `freed` the holds released by their ids, `forced` whether the
/// store's force-unlock freed whoever held the lock after that.
fn report(
    name: &str,
    freed: &[(LockHolder, HeldAs)],
    forced: bool,
    as_json: bool,
) -> Result<i32, Failure> {
    if as_json {
        let holds: Vec<Value> = freed
            .iter()
            .map(|(holder, held_as)| holder_json(holder, *held_as))
            .collect();
        let unlocked = forced || !freed.is_empty();
        println!(
            "{}",
            json!({ "name": name, "unlocked": unlocked, "freed": holds, "forced": forced })
        );
        return Ok(0);
    }
    let holds: Vec<String> = freed
        .iter()
        .map(|(holder, held_as)| {
            let mut info = LockInfo::free(name);
            info.held_as = *held_as;
            info.holders = vec![holder.clone()];
            format!("{} ({})", crate::inspect::holders(&info), held_as.as_str())
        })
        .collect();
    match (freed.is_empty(), forced) {
        (true, false) => println!("lock {} was not locked", quoted(name)),
        (false, false) => println!(
            "lock {} force-unlocked (it was held by {})",
            quoted(name),
            holds.join(", ")
        ),
        (_, true) => println!(
            "lock {} force-unlocked: its holder changed each time it was looked at, so it was \
             freed from whoever held it then{}",
            quoted(name),
            if holds.is_empty() {
                String::new()
            } else {
                format!(" (before that: freed {})", holds.join(", "))
            }
        ),
    }
    Ok(0)
}

fn holder_json(holder: &LockHolder, held_as: HeldAs) -> Value {
    json!({ "owner": holder.owner, "held_as": held_as.as_str() })
}
