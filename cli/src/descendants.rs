//! The processes of a job beyond its process group: on Linux, every live descendant of the
//! keeper, found in `/proc`. The keeper is the job's subreaper, so a process that left the
//! group (`timeout`, `setsid`, a daemon's double fork) stays one of them.

use nix::unistd::Pid;

/// The live descendants of `ancestor` (zombies are dead, and left out). Empty where there is no
/// `/proc` to read.
#[cfg(target_os = "linux")]
pub fn of(ancestor: Pid) -> Vec<Pid> {
    use std::collections::HashMap;

    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut parents = HashMap::new();
    let mut live = Vec::new();
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|name| name.parse().ok())
        else {
            continue;
        };
        // A process may end while it is read: it is no longer anyone's to kill.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((state, parent)) = state_and_parent(&stat) else {
            continue;
        };
        parents.insert(pid, parent);
        if state != "Z" {
            live.push(pid);
        }
    }
    live.into_iter()
        .filter(|pid| descends(*pid, ancestor.as_raw(), &parents))
        .map(Pid::from_raw)
        .collect()
}

/// None seen: without a subreaper, a process that left the group is out of reach anyway.
#[cfg(not(target_os = "linux"))]
pub fn of(_ancestor: Pid) -> Vec<Pid> {
    Vec::new()
}

/// The state and the parent's pid from a `/proc/<pid>/stat` line, whose second field (the
/// command's name, in parentheses) may hold spaces and parentheses.
#[cfg(target_os = "linux")]
fn state_and_parent(stat: &str) -> Option<(&str, i32)> {
    let (_, after_name) = stat.rsplit_once(") ")?;
    let mut fields = after_name.split_whitespace();
    let state = fields.next()?;
    let parent = fields.next()?.parse().ok()?;
    Some((state, parent))
}

/// Whether `ancestor` is on `pid`'s chain of parents. A chain is no longer than the number of
/// processes read.
#[cfg(target_os = "linux")]
fn descends(pid: i32, ancestor: i32, parents: &std::collections::HashMap<i32, i32>) -> bool {
    let mut current = pid;
    for _ in 0..parents.len() {
        match parents.get(&current) {
            Some(&parent) if parent == ancestor => return true,
            Some(&parent) => current = parent,
            None => return false,
        }
    }
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_spaces_and_parentheses_is_skipped_whole() {
        let stat = "4242 (a) b (c) S 17 4242 4242 0 -1 4194560";
        assert_eq!(state_and_parent(stat), Some(("S", 17)));
    }

    #[test]
    fn a_chain_of_parents_leads_to_its_ancestor_or_not() {
        let parents = [(10, 1), (11, 10), (12, 11), (20, 1)].into_iter().collect();
        assert!(descends(12, 10, &parents));
        assert!(descends(11, 10, &parents));
        assert!(!descends(20, 10, &parents));
        assert!(!descends(10, 10, &parents));
    }
}
