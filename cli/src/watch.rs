//! `dlock watch NAME`: one line per change of a name (taken by whom, released, its lease run
//! out, taken over, queue length), for people or, with `--json`, for scripts; read with the
//! backend's inspection and never written.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::json;

use crate::exit_code::Failure;
use crate::snapshot::{self, Entry};

/// How often the name is read: a change shows within this much (plus a round trip).
const POLL: Duration = Duration::from_millis(200);

/// `dlock watch NAME`: runs until interrupted (or, for tests and scripts, until `changes`
/// lines were printed).
pub fn watch(url: &str, name: &str, as_json: bool, changes: Option<u64>) -> Result<i32, Failure> {
    let backend = crate::connect::backend(url)?;
    let mut last: Option<Option<Entry>> = None;
    let mut seen_at = Instant::now();
    let mut printed = 0;
    loop {
        let now = snapshot::take_one(&backend, name)?;
        let since_seen = seen_at.elapsed();
        seen_at = Instant::now();
        if last.as_ref() != Some(&now) {
            let before = last.as_ref().and_then(Option::as_ref);
            if let Some(line) = change(before, now.as_ref(), since_seen, name, as_json) {
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
/// `since_seen`: how long ago `before` was read.
fn change(
    before: Option<&Entry>,
    after: Option<&Entry>,
    since_seen: Duration,
    name: &str,
    as_json: bool,
) -> Option<String> {
    let event = match (before, after) {
        (None, None) => "free",
        (None, Some(_)) => "taken",
        // Gone when its lease was about to end: it ran out, the holder did not release it
        // (the holder lost it, or died). A release just before would read the same.
        (Some(before), None)
            if before
                .lease_left
                .is_some_and(|left| left <= since_seen + POLL) =>
        {
            "expired"
        }
        (Some(_), None) => "released",
        (Some(before), Some(after)) if before.holder != after.holder => "taken over",
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
                "held_for_ms": after.and_then(|entry| entry.held_for).map(|held| held.as_millis() as u64),
                "lease_left_ms": after.and_then(|entry| entry.lease_left).map(|left| left.as_millis() as u64),
                "waiters": after.map_or(0, |entry| entry.waiters),
                "detail": after.map(|entry| entry.detail.clone()),
            })
            .to_string(),
        );
    }
    Some(match after {
        None => format!("{name:?} {event}"),
        Some(entry) => {
            let queue = if entry.waiters > 0 {
                format!(", {} waiting", entry.waiters)
            } else {
                String::new()
            };
            let detail = if entry.detail.is_empty() {
                String::new()
            } else {
                format!(", {}", entry.detail)
            };
            format!(
                "{name:?} {event}: {} by {}{queue}{detail}",
                entry.kind, entry.holder
            )
        }
    })
}
