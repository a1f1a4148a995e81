//! `dlock watch NAME`: one line per change of a name (taken by whom, released, its lease run
//! out, handed over to another hold, queue length), for people (what the store holds escaped)
//! or, with `--json`, for scripts; read with the backend's inspection and never written.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::connect::{Access, Target};
use crate::escape::{escaped, quoted};
use crate::exit_code::Failure;
use crate::snapshot::{self, Entry};

/// How often the name is read: a change shows within this much (plus a round trip).
const POLL: Duration = Duration::from_millis(200);

/// `dlock watch NAME`: runs until interrupted (or, for tests and scripts, until `changes`
/// lines were printed).
pub fn watch(
    target: &Target,
    name: &str,
    as_json: bool,
    changes: Option<u64>,
) -> Result<i32, Failure> {
    let backend = crate::connect::backend(target, Access::Read)?;
    let inspection = backend.inspection()?;
    let mut last: Option<Option<Entry>> = None;
    let mut seen_at = Instant::now();
    let mut printed = 0;
    loop {
        let now = snapshot::take_one(inspection, name)?;
        let since_seen = seen_at.elapsed();
        seen_at = Instant::now();
        if last.as_ref() != Some(&now) {
            let before = last.as_ref().and_then(Option::as_ref);
            let slack = since_seen + POLL + inspection.lease_resolution();
            if let Some(line) = change(before, now.as_ref(), slack, name, as_json) {
                println!("{line}");
                printed += 1;
                if changes.is_some_and(|changes| printed >= changes) {
                    return Ok(0);
                }
            }
            last = Some(now);
        }
        std::thread::sleep(POLL);
    }
}

/// The line for a change from `before` to `after` (`None`: free), if it is one worth a line
/// (a lease that only got shorter is not).
/// `slack`: how much later than `before`'s remaining lease a hold that ran out may be gone
/// (`before` was read a while ago, the reads are a poll apart, and the store may tell its
/// leases coarsely).
fn change(
    before: Option<&Entry>,
    after: Option<&Entry>,
    slack: Duration,
    name: &str,
    as_json: bool,
) -> Option<String> {
    // Gone when its lease was about to end: it ran out, the holder did not release it (the
    // holder lost it, or died). A release just before would read the same.
    let ran_out = |before: &Entry| before.lease_left.is_some_and(|left| left <= slack);
    let event = match (before, after) {
        (None, None) => "free",
        (None, Some(_)) => "taken",
        (Some(before), None) if ran_out(before) => "expired",
        (Some(_), None) => "released",
        // Another hold now (of another process, or another thread of the same one): released
        // and taken again between two reads, or taken once the lease ran out.
        (Some(before), Some(after)) if before.holds != after.holds && ran_out(before) => {
            "expired, taken"
        }
        (Some(before), Some(after)) if before.holds != after.holds => "handed over",
        (Some(before), Some(after)) if before.holder != after.holder => "changed",
        (Some(before), Some(after)) if before.waiters != after.waiters => "queue",
        (Some(before), Some(after))
            if before.detail != after.detail || before.kind != after.kind =>
        {
            "changed"
        }
        _ => return None,
    };
    let at_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64);
    if as_json {
        return Some(
            json!({
                "at_ms": at_ms,
                "name": name,
                "event": event,
                "kind": after.map(|entry| entry.kind),
                "holder": after.map(|entry| entry.holder.clone()),
                "holds": after.map(|entry| entry.holds.clone()),
                "held_for_ms": after.and_then(|entry| entry.held_for).map(|held| held.as_millis() as u64),
                "lease_left_ms": after.and_then(|entry| entry.lease_left).map(|left| left.as_millis() as u64),
                "waiters": after.map_or(0, |entry| entry.waiters),
                "detail": after.map(|entry| entry.detail.clone()),
            })
            .to_string(),
        );
    }
    let name = quoted(name);
    Some(match after {
        None => format!("{name} {event}"),
        Some(entry) => {
            let queue = if entry.waiters > 0 {
                format!(", {} waiting", entry.waiters)
            } else {
                String::new()
            };
            let detail = if entry.detail.is_empty() {
                String::new()
            } else {
                format!(", {}", escaped(&entry.detail))
            };
            format!(
                "{name} {event}: {} by {}{queue}{detail}",
                entry.kind,
                escaped(&entry.holder)
            )
        }
    })
}
