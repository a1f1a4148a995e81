//! `dlock status`, `dlock list`, `dlock force-unlock` and `dlock leader`: what the server holds,
//! for people (text) and scripts (`--json`); and `dlock postgres-schema`.

use dlocks::backend::SynchronizerInfo;
use dlocks::backend::{HeldAs, LockInfo, LockRef};
use dlocks::LockKind;
use serde_json::{json, Value};

use crate::connect::Backend;
use crate::exit_code::Failure;
use crate::run::human;

fn inspect(backend: &Backend, name: &str) -> Result<LockInfo, Failure> {
    Ok(match backend {
        Backend::Redis(redis) => redis.inspect(name)?,
        Backend::Postgres(postgres) => postgres.inspect(name)?,
    })
}

/// `dlock status NAME`: prints the lock's state; exits 0 whether it is held or free.
pub fn status(url: &str, name: &str, as_json: bool) -> Result<i32, Failure> {
    let backend = crate::connect::backend(url)?;
    let (info, synchronizer) = match &backend {
        Backend::Redis(redis) => {
            let synchronizer = redis.inspect_synchronizer(name)?;
            // A semaphore's or latch's count is a string where a lock would be a hash: not a
            // lock, and not an error when the name is in use as one of those.
            let info = match redis.inspect(name) {
                Ok(info) => Some(info),
                Err(error) if error.is_invalid_argument() && synchronizer.is_in_use() => None,
                Err(error) => return Err(error.into()),
            };
            (info, Some(synchronizer))
        }
        Backend::Postgres(postgres) => {
            // A name is one kind at a time: a synchronizer in use is not a lock.
            let synchronizer = postgres.inspect_synchronizer(name)?;
            let info = if synchronizer.is_in_use() {
                None
            } else {
                Some(postgres.inspect(name)?)
            };
            (info, Some(synchronizer))
        }
    };
    if as_json {
        let mut value = match &info {
            Some(info) => to_json(info),
            None => json!({ "type": "synchronizer", "name": name, "held": false }),
        };
        if let Some(synchronizer) = &synchronizer {
            value["synchronizer"] = synchronizer_json(synchronizer);
        }
        println!("{value}");
    } else {
        match &info {
            Some(info) => println!("{}", describe(info)),
            None => println!("{name:?}: not a lock"),
        }
        for line in synchronizer.iter().flat_map(describe_synchronizer) {
            println!("  {line}");
        }
    }
    Ok(0)
}

/// `dlock leader NAME`: prints the election's leader; exits 0 whether or not anyone leads.
pub fn leader(url: &str, name: &str, as_json: bool) -> Result<i32, Failure> {
    let backend = crate::connect::backend(url)?;
    let leader = backend
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
                    "{name:?}: led by {:?} (token {}, {lease})",
                    leader.candidate, leader.token
                );
            }
            None => println!("{name:?}: nobody leads"),
        }
    }
    Ok(0)
}

/// `dlock list [PATTERN]`: prints the locks held now, one per line, sorted by name.
pub fn list(url: &str, pattern: &str, limit: usize, as_json: bool) -> Result<i32, Failure> {
    let backend = crate::connect::backend(url)?;
    let (locks, synchronizers): (Vec<LockInfo>, Vec<SynchronizerInfo>) = match &backend {
        Backend::Redis(redis) => (
            redis.list_locks(pattern, limit)?,
            redis.list_synchronizers(pattern, limit)?,
        ),
        Backend::Postgres(postgres) => (
            postgres.list_locks(pattern, limit)?,
            postgres.list_synchronizers(pattern, limit)?,
        ),
    };
    if as_json {
        let mut entries: Vec<Value> = locks.iter().map(to_json).collect();
        entries.extend(synchronizers.iter().map(synchronizer_json));
        println!("{}", Value::Array(entries));
    } else if locks.is_empty() && synchronizers.is_empty() {
        println!("no lock matching {pattern:?} is held (and no semaphore permit or leader)");
    } else {
        for info in &locks {
            println!("{}", describe(info));
        }
        for info in &synchronizers {
            println!(
                "{:?}: {}",
                info.name,
                describe_synchronizer(info).join("; ")
            );
        }
        if locks.len() == limit || synchronizers.len() == limit {
            println!("(stopped at --limit {limit}; there may be more)");
        }
    }
    Ok(0)
}

/// `dlock force-unlock NAME`: frees the lock with the script of its kind (so its waiters are
/// woken on the right channel); exits 0 whether or not it was held.
pub fn force_unlock(url: &str, name: &str, as_json: bool) -> Result<i32, Failure> {
    let backend = crate::connect::backend(url)?;
    let info = inspect(&backend, name)?;
    let client = dlocks::LockClient::new(backend.shared());
    let unlocked = match info.held_as {
        HeldAs::Free => false,
        HeldAs::Read => client.read_write_lock(name).read_lock().force_unlock()?,
        HeldAs::Write => client.read_write_lock(name).write_lock().force_unlock()?,
        HeldAs::Fair => client.fair_lock(name).force_unlock()?,
        // A fair lock's release also tells the head of its queue.
        _ if info.queued_waiters > 0 => client.fair_lock(name).force_unlock()?,
        _ => client.lock(name).force_unlock()?,
    };
    if as_json {
        println!("{}", json!({ "name": name, "unlocked": unlocked }));
    } else if unlocked {
        let holders = holders(&info);
        println!("lock {name:?} force-unlocked (it was held by {holders})");
    } else {
        println!("lock {name:?} was not locked");
    }
    Ok(0)
}

fn describe(info: &LockInfo) -> String {
    let mut text = format!("{:?}: ", info.name);
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
        text.push_str(&format!(", {waiting} clients waiting"));
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
                Some(lease) => format!("{} ({} left)", permit.id, human(lease)),
                None => format!("{} (no lease)", permit.id),
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
            "election: led by {:?} (token {}, {lease})",
            leader.candidate, leader.token
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

fn holders(info: &LockInfo) -> String {
    let holders: Vec<String> = info
        .holders
        .iter()
        .map(|holder| {
            let times = if holder.holds == 1 {
                String::new()
            } else {
                format!(" ×{}", holder.holds)
            };
            let write = if holder.write { " (write)" } else { "" };
            // Who, from its client's record: `billing@host-7 pid 4242, for 12.0 s (hold id)`.
            let record = holder.client.as_ref();
            let since = record
                .and_then(|record| record.held_for)
                .map(|held| format!(", for {}", human(held)))
                .unwrap_or_default();
            match record.and_then(|record| record.client.as_ref()) {
                Some(client) => format!(
                    "{}@{} pid {}{write}{times}{since} ({})",
                    client.name, client.host, client.pid, holder.owner
                ),
                // A store that keeps records has none for it: its client stopped refreshing it
                // (it died, or was stopped) or is not dlock's (Redisson's).
                None if record.is_some() => {
                    format!(
                        "{}{write}{times} (no client record: gone, or not a dlock client)",
                        holder.owner
                    )
                }
                None => format!("{}{write}{times}", holder.owner),
            }
        })
        .collect();
    holders.join(", ")
}

fn to_json(info: &LockInfo) -> Value {
    json!({
        "type": "lock",
        "name": info.name,
        "held": info.is_held(),
        "held_as": info.held_as.as_str(),
        "holders": info.holders.iter().map(|holder| json!({
            "owner": holder.owner,
            "holds": holder.holds,
            "write": holder.write,
            "client": holder.client.as_ref().and_then(|record| record.client.as_ref()).map(|client| json!({
                "name": client.name,
                "host": client.host,
                "pid": client.pid,
            })),
            "held_for_ms": holder.client.as_ref()
                .and_then(|record| record.held_for)
                .map(|held| held.as_millis() as u64),
        })).collect::<Vec<_>>(),
        "remaining_lease_ms": info.remaining_lease.map(|lease| lease.as_millis() as u64),
        "queued_waiters": info.queued_waiters,
        "subscribers": info.subscribers,
        "last_fencing_token": info.last_fencing_token,
    })
}

/// `dlock postgres-schema`: prints the schema's SQL (unlogged lease tables when `ephemeral`)
/// and the grants of `grant_to`.
pub fn postgres_schema(
    schema: &str,
    grant_to: Option<&str>,
    ephemeral: bool,
) -> Result<i32, Failure> {
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
