//! `dlock status`, `dlock list` and `dlock leader`: what the store holds, for people (text, with
//! what the store holds escaped) and scripts (`--json`, exact); and `dlock postgres-schema`.
//! They open the store read-only ([`Access::Read`]).

use dlocks::backend::{HeldAs, LockInfo, LockRef, NameInfo, SynchronizerInfo};
use dlocks::LockKind;
use serde_json::{json, Value};

use crate::connect::{Access, Target};
use crate::escape::{escaped, quoted};
use crate::exit_code::{Failure, NO};
use crate::run::human;

/// `dlock status NAME`: prints the name's state; exits 0 whether it is held or free, or, with
/// `check`, 0 when it is in use and 1 when it is free.
pub fn status(target: &Target, name: &str, as_json: bool, check: bool) -> Result<i32, Failure> {
    let store = crate::connect::backend(target, Access::Read)?;
    // A name is one kind at a time: a synchronizer in use is not a lock.
    let (info, synchronizer) = match store.inspection()?.inspect_name(name)? {
        NameInfo::Lock(info) => (Some(info), SynchronizerInfo::default()),
        NameInfo::Synchronizer(synchronizer) => (None, synchronizer),
        _ => (None, SynchronizerInfo::default()),
    };
    let in_use = synchronizer.is_in_use() || info.as_ref().is_some_and(LockInfo::is_held);
    if as_json {
        let mut value = match &info {
            Some(info) => lock_json(info),
            None => json!({ "type": "synchronizer", "name": name, "held": false }),
        };
        // Only for a name in use as one: a lock has no synchronizer's fields.
        if synchronizer.is_in_use() {
            value["synchronizer"] = synchronizer_json(&synchronizer);
        }
        println!("{value}");
    } else {
        match &info {
            Some(info) => println!("{}", describe(info)),
            None => println!("{}: not a lock", quoted(name)),
        }
        for line in describe_synchronizer(&synchronizer) {
            println!("  {line}");
        }
    }
    Ok(if check && !in_use { NO } else { 0 })
}

/// `dlock leader NAME`: prints the election's leader; exits 0 whether or not anyone leads.
pub fn leader(target: &Target, name: &str, as_json: bool) -> Result<i32, Failure> {
    let store = crate::connect::backend(target, Access::Read)?;
    let leader = store
        .shared()
        .leader(LockRef::new(name, LockKind::Election))?;
    if as_json {
        let value = match &leader {
            Some(leader) => json!({
                "name": name,
                "leader": leader.candidate,
                "token": leader.token,
                "remaining_lease_ms": leader.remaining_lease.map(|lease| lease.as_millis() as u64),
            }),
            None => json!({ "name": name, "leader": null }),
        };
        println!("{value}");
    } else {
        match leader {
            Some(leader) => {
                let lease = leader.remaining_lease.map_or_else(
                    || "no lease".to_owned(),
                    |lease| format!("lease {} left", human(lease)),
                );
                println!(
                    "{}: led by {} (token {}, {lease})",
                    quoted(name),
                    quoted(&leader.candidate),
                    leader.token
                );
            }
            None => println!("{}: nobody leads", quoted(name)),
        }
    }
    Ok(0)
}

/// `dlock list [PATTERN]`: prints the locks held now, one per line, sorted by name.
pub fn list(target: &Target, pattern: &str, limit: usize, as_json: bool) -> Result<i32, Failure> {
    let store = crate::connect::backend(target, Access::Read)?;
    let inspection = store.inspection()?;
    let locks = inspection.list_locks(pattern, limit)?;
    let synchronizers = inspection.list_synchronizers(pattern, limit)?;
    if as_json {
        let mut entries: Vec<Value> = locks.iter().map(lock_json).collect();
        entries.extend(synchronizers.iter().map(synchronizer_json));
        println!("{}", Value::Array(entries));
    } else if locks.is_empty() && synchronizers.is_empty() {
        println!(
            "no lock matching {} is held (and no semaphore permit or leader)",
            quoted(pattern)
        );
    } else {
        for info in &locks {
            println!("{}", describe(info));
        }
        for info in &synchronizers {
            println!(
                "{}: {}",
                quoted(&info.name),
                describe_synchronizer(info).join("; ")
            );
        }
        if locks.len() == limit || synchronizers.len() == limit {
            println!("(stopped at --limit {limit}; there may be more)");
        }
    }
    Ok(0)
}

/// One line for a lock: `"name": held (exclusive) by ..., lease 12.0s left`.
pub fn describe(info: &LockInfo) -> String {
    let mut text = format!("{}: ", quoted(&info.name));
    if info.is_held() {
        text.push_str(&format!(
            "held ({}) by {}",
            info.held_as.as_str(),
            holders(info)
        ));
        match info.remaining_lease {
            Some(lease) => text.push_str(&format!(", lease {} left", human(lease))),
            None => text.push_str(", no lease (held until released)"),
        }
    } else {
        text.push_str("free");
    }
    if info.queued_waiters > 0 {
        text.push_str(&format!(", {} queued", info.queued_waiters));
    } else if let Some(waiting @ 1..) = info.subscribers {
        let clients = if waiting == 1 { "client" } else { "clients" };
        text.push_str(&format!(", {waiting} {clients} waiting"));
    }
    if let Some(token) = info.last_fencing_token {
        text.push_str(&format!(", last fencing token {token}"));
    }
    text
}

/// What a name holds as a semaphore, a latch and an election, a line each (none when unused).
fn describe_synchronizer(info: &SynchronizerInfo) -> Vec<String> {
    let mut lines = Vec::new();
    if !info.permits_held.is_empty() {
        let permits: Vec<String> = info
            .permits_held
            .iter()
            .map(|permit| match permit.remaining_lease {
                Some(lease) => format!("{} ({} left)", escaped(&permit.id), human(lease)),
                None => format!("{} (no lease)", escaped(&permit.id)),
            })
            .collect();
        lines.push(format!(
            "semaphore: {} available, {} held: {}",
            info.count.unwrap_or(0),
            permits.len(),
            permits.join(", ")
        ));
    } else if let Some(count) = info.count {
        lines.push(match info.counts.as_deref() {
            Some("latch") => format!("latch: count {count}"),
            Some("semaphore") => format!("semaphore: {count} available, none held"),
            _ => format!(
                "count {count}: a latch's count, or the available permits of a semaphore with \
                 none held"
            ),
        });
    }
    if let Some(leader) = &info.leader {
        let lease = leader.remaining_lease.map_or_else(
            || "no lease".to_owned(),
            |lease| format!("lease {} left", human(lease)),
        );
        lines.push(format!(
            "election: led by {} (token {}, {lease})",
            quoted(&leader.candidate),
            leader.token
        ));
    }
    lines
}

fn synchronizer_json(info: &SynchronizerInfo) -> Value {
    json!({
        "type": "synchronizer",
        "name": info.name,
        "count": info.count,
        "permits_held": info.permits_held.iter().map(|permit| json!({
            "id": permit.id,
            "remaining_lease_ms": permit.remaining_lease.map(|lease| lease.as_millis() as u64),
        })).collect::<Vec<_>>(),
        "leader": info.leader.as_ref().map(|leader| json!({
            "candidate": leader.candidate,
            "owner": leader.owner,
            "token": leader.token,
            "remaining_lease_ms": leader.remaining_lease.map(|lease| lease.as_millis() as u64),
        })),
    })
}

/// The holders, escaped: `billing@host-7 pid 4242, for 12.0s (hold id)`, or the hold id alone.
pub fn holders(info: &LockInfo) -> String {
    let read_write = matches!(info.held_as, HeldAs::Read | HeldAs::Write);
    let holders: Vec<String> = info
        .holders
        .iter()
        .map(|holder| {
            let times = if holder.holds == 1 {
                String::new()
            } else {
                format!(" ×{}", holder.holds)
            };
            let write = if read_write && holder.write {
                " (write)"
            } else {
                ""
            };
            let owner = escaped(&holder.owner);
            let record = holder.client.as_ref();
            let since = record
                .and_then(|record| record.held_for)
                .map(|held| format!(", for {}", human(held)))
                .unwrap_or_default();
            match record.and_then(|record| record.client.as_ref()) {
                Some(client) => format!(
                    "{}@{} pid {}{gone}{write}{times}{since} ({owner})",
                    escaped(&client.name),
                    escaped(&client.host),
                    client.pid,
                    // Killed (kill -9) on this host: its lock stays until its lease runs out.
                    gone = if client.process_gone() {
                        " (no such process on this host: its lock frees when its lease runs out)"
                    } else {
                        ""
                    },
                ),
                // A store that keeps records has none for it: its client stopped refreshing it
                // (it died, or was stopped) or is not dlock's (Redisson's).
                None if record.is_some() => {
                    format!("{owner}{write}{times} (no client record: gone, or not a dlock client)")
                }
                None => format!("{owner}{write}{times}"),
            }
        })
        .collect();
    holders.join(", ")
}

/// A lock as JSON. `write` is a read-write lock's only: for the other kinds it would say
/// nothing true.
pub fn lock_json(info: &LockInfo) -> Value {
    let read_write = matches!(info.held_as, HeldAs::Read | HeldAs::Write);
    json!({
        "type": "lock",
        "name": info.name,
        "held": info.is_held(),
        "held_as": info.held_as.as_str(),
        "holders": info.holders.iter().map(|holder| {
            let mut value = json!({
                "owner": holder.owner,
                "holds": holder.holds,
                "client": holder.client.as_ref().and_then(|record| record.client.as_ref()).map(|client| json!({
                    "name": client.name,
                    "host": client.host,
                    "pid": client.pid,
                    "process_gone": client.process_gone(),
                })),
                "held_for_ms": holder.client.as_ref()
                    .and_then(|record| record.held_for)
                    .map(|held| held.as_millis() as u64),
            });
            if read_write {
                value["write"] = Value::Bool(holder.write);
            }
            value
        }).collect::<Vec<_>>(),
        "remaining_lease_ms": info.remaining_lease.map(|lease| lease.as_millis() as u64),
        "queued_waiters": info.queued_waiters,
        "subscribers": info.subscribers,
        "last_fencing_token": info.last_fencing_token,
    })
}

/// `dlock postgres-schema --fence`: prints the fence's SQL for schema `schema` (default
/// `public`) of the data's database, and the grants of `grant_to`.
pub fn postgres_fence(schema: Option<&str>, grant_to: Option<&str>) -> Result<i32, Failure> {
    let schema = schema.unwrap_or("public");
    print!("{}", dlocks::fence::postgres::install_sql(schema)?);
    if let Some(role) = grant_to {
        print!("{}", dlocks::fence::postgres::grant_sql(schema, role)?);
    }
    Ok(0)
}

/// `dlock postgres-schema`: prints the schema's SQL (unlogged lease tables when `ephemeral`)
/// and the grants of `grant_to`.
pub fn postgres_schema(
    schema: Option<&str>,
    grant_to: Option<&str>,
    ephemeral: bool,
) -> Result<i32, Failure> {
    let schema = schema.unwrap_or(dlocks::postgres::DEFAULT_SCHEMA);
    let durability = if ephemeral {
        dlocks::postgres::Durability::Ephemeral
    } else {
        dlocks::postgres::Durability::On
    };
    print!("{}", dlocks::postgres::schema_sql_for(schema, durability)?);
    if let Some(role) = grant_to {
        print!("{}", dlocks::postgres::grant_sql(schema, role)?);
    }
    Ok(0)
}
