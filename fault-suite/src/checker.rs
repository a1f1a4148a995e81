//! Checks one run's history: the workers' records, the register's log, the fault windows.

use std::time::Duration;

use crate::history::{Outcome, Record};
use crate::injector::FaultWindow;
use crate::options::Mode;
use crate::register::LogEntry;
use crate::worker::PERMITS;
use crate::worker_pool::Ending;

/// What the checker found in one run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Findings {
    /// Operations whose write the register accepted.
    pub done: usize,
    /// Operations whose lock call failed.
    pub errors: usize,
    /// Operations whose critical section (from the lock's return to the write's return)
    /// overlapped another one's in real time: the lock did not exclude them. In the semaphore
    /// mode: sections (from the acquire's return to the worker's last look at its permit,
    /// still held) that began while as many others as there are permits were under way.
    pub overlaps: usize,
    /// Fenced holds whose token was not above every token of the holds acquired before them
    /// (`None` when the run was not fenced).
    pub token_regressions: Option<usize>,
    /// Fenced accesses the register accepted with a token older than one it had seen, or the
    /// same token from another hold (`None` when the run was not fenced).
    pub stale_accepted: Option<usize>,
    /// Fenced accesses the register refused as stale.
    pub stale_refused: usize,
    /// Updates overwritten by a write whose writer had read the register before them.
    pub lost_updates: u64,
    /// Calls longer than their bound (outside a pause of their own process), and workers that
    /// did not stop in time.
    pub hangs: usize,
    /// Operations that panicked, and workers that exited with a panic.
    pub panics: usize,
    /// Workers that exited with another failure.
    pub crashes: usize,
    /// From the end of each fault to the first operation started after it that got its write
    /// in: the longest over the run's faults; `None` if progress never resumed.
    pub recovery: Option<Duration>,
    /// Problems of the run itself (a fault that could not be injected).
    pub notes: Vec<String>,
}

/// Checks the run. `call_bound` is the longest a single call may take.
pub fn check(
    records: &[Record],
    log: &[LogEntry],
    windows: &[FaultWindow],
    ending: Ending,
    mode: Mode,
    call_bound: Duration,
) -> Findings {
    let fenced = mode == Mode::Fenced;
    let tokened = mode.has_tokens();
    let allowed = if mode == Mode::Semaphore {
        PERMITS as usize
    } else {
        1
    };
    let mut findings = Findings {
        done: count(records, Outcome::Done),
        errors: count(records, Outcome::Error),
        overlaps: match mode {
            Mode::Latch => count(records, Outcome::OpenedEarly),
            _ => overlaps(records, allowed),
        },
        token_regressions: tokened.then(|| token_regressions(records)),
        stale_accepted: fenced.then(|| stale_accepted(log)),
        stale_refused: log.iter().filter(|entry| !entry.accepted).count(),
        lost_updates: log
            .iter()
            .filter(|entry| entry.write && entry.accepted)
            .map(|entry| entry.lost_updates)
            .sum(),
        hangs: ending.hung,
        panics: count(records, Outcome::Panic) + ending.panicked,
        crashes: ending.crashed - ending.panicked,
        recovery: Some(Duration::ZERO),
        notes: windows.iter().filter_map(|w| w.note.clone()).collect(),
    };
    let bound_us = call_bound.as_micros() as u64;
    findings.hangs += records
        .iter()
        .filter(|record| record.longest_call_us > bound_us && !paused_during(record, windows))
        .count();
    // Progress resumed with the first write after the fault, whenever its operation started:
    // an acquire made during the fault goes on trying within its wait, and takes the lock once
    // the store answers again.
    for window in windows {
        let resumed = records
            .iter()
            .filter(|record| record.outcome == Outcome::Done)
            .filter_map(|record| record.written)
            .filter(|written| *written >= window.end_us)
            .min();
        if resumed.is_none() {
            findings.notes.push(format!(
                "no progress after the {} fault ({})",
                window.fault.name(),
                after_the_fault(records, window.end_us)
            ));
        }
        findings.recovery = match (findings.recovery, resumed) {
            (Some(longest), Some(at)) => {
                Some(longest.max(Duration::from_micros(at.saturating_sub(window.end_us))))
            }
            _ => None,
        };
    }
    findings
}

/// What the operations that ended after `end_us` came to, for a run that made no progress
/// then: each outcome's count, and the first error seen.
fn after_the_fault(records: &[Record], end_us: u64) -> String {
    let late: Vec<&Record> = records
        .iter()
        .filter(|record| record.end >= end_us)
        .collect();
    let mut counts: Vec<(&str, usize)> = Vec::new();
    for record in &late {
        match counts
            .iter_mut()
            .find(|(name, _)| *name == record.outcome.name())
        {
            Some((_, count)) => *count += 1,
            None => counts.push((record.outcome.name(), 1)),
        }
    }
    let mut said = if counts.is_empty() {
        "no operation ended after it".to_owned()
    } else {
        let counts: Vec<String> = counts
            .iter()
            .map(|(name, count)| format!("{count} {name}"))
            .collect();
        format!("operations ended after it: {}", counts.join(", "))
    };
    if let Some(error) = late
        .iter()
        .find_map(|record| record.error.as_ref().or(record.release_error.as_ref()))
    {
        said.push_str(&format!("; first error: {error}"));
    }
    said
}

fn count(records: &[Record], outcome: Outcome) -> usize {
    records
        .iter()
        .filter(|record| record.outcome == outcome)
        .count()
}

/// Whether `record`'s process was stopped by a fault while the record's operation ran.
fn paused_during(record: &Record, windows: &[FaultWindow]) -> bool {
    windows.iter().any(|window| {
        window.paused_pid == Some(record.pid)
            && record.start <= window.end_us
            && record.end >= window.start_us
    })
}

/// Critical sections that overlapped another one: sorted by start, each is compared with the
/// one reaching furthest among those before it.
fn overlaps(records: &[Record], allowed: usize) -> usize {
    let mut sections: Vec<(u64, u64, usize)> = records
        .iter()
        .enumerate()
        .filter_map(|(index, r)| Some((r.acquired?, r.written?, index)))
        .collect();
    sections.sort_unstable();
    let mut overlapping = vec![false; records.len()];
    // The sections under way, by end: a section that begins while `allowed` of them still run
    // is one too many, and so are they.
    let mut running: Vec<(u64, usize)> = Vec::new();
    for (start, end, index) in sections {
        running.retain(|(reach, _)| *reach > start);
        if running.len() >= allowed {
            overlapping[index] = true;
            for (_, other) in &running {
                overlapping[*other] = true;
            }
        }
        running.push((end, index));
    }
    overlapping.into_iter().filter(|o| *o).count()
}

/// Holds whose token was not above that of every hold acquired before their lock call
/// started. Only that order is the store's: a process paused (or slow) between the store's
/// grant and its lock call returning records its acquire late, after holds the store granted
/// later with higher tokens.
fn token_regressions(records: &[Record]) -> usize {
    let mut acquired: Vec<(u64, u64)> = records
        .iter()
        .filter_map(|record| Some((record.acquired?, record.token?)))
        .collect();
    acquired.sort_unstable();
    let mut started: Vec<(u64, u64)> = records
        .iter()
        .filter(|record| record.acquired.is_some())
        .filter_map(|record| Some((record.start, record.token?)))
        .collect();
    started.sort_unstable();
    let (mut before, mut highest, mut regressions) = (0, None, 0);
    for (start, token) in started {
        while before < acquired.len() && acquired[before].0 < start {
            highest = highest.max(Some(acquired[before].1));
            before += 1;
        }
        if highest.is_some_and(|top| token <= top) {
            regressions += 1;
        }
    }
    regressions
}

/// Accepted fenced accesses whose token was below the highest the register had accepted
/// before, or equal to it from another hold.
fn stale_accepted(log: &[LogEntry]) -> usize {
    let mut highest: Option<(u64, &str)> = None;
    let mut stale = 0;
    for entry in log.iter().filter(|entry| entry.accepted) {
        let Some(token) = entry.token else { continue };
        match highest {
            Some((top, _)) if token < top => stale += 1,
            Some((top, hold)) if token == top && hold != entry.hold => stale += 1,
            _ => highest = Some((token, &entry.hold)),
        }
    }
    stale
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(pid: u32, acquired: u64, written: u64) -> Record {
        Record {
            hold: format!("{pid}:0:{acquired}"),
            pid,
            start: acquired,
            acquired: Some(acquired),
            written: Some(written),
            end: written + 1,
            token: None,
            outcome: Outcome::Done,
            release_error: None,
            error: None,
            longest_call_us: 10,
        }
    }

    fn entry(hold: &str, token: u64, accepted: bool) -> LogEntry {
        LogEntry {
            write: true,
            hold: hold.into(),
            token: Some(token),
            accepted,
            lost_updates: 0,
        }
    }

    #[test]
    fn sections_that_share_time_are_overlaps_and_those_that_touch_are_not() {
        let records = [record(1, 0, 10), record(2, 10, 20), record(3, 15, 30)];
        assert_eq!(overlaps(&records, 1), 2);
        let long = [record(1, 0, 100), record(2, 10, 20), record(3, 30, 40)];
        assert_eq!(
            overlaps(&long, 1),
            3,
            "both short ones overlap the long one"
        );
    }

    #[test]
    fn with_two_permits_only_a_third_section_at_once_is_an_overlap() {
        let two = [record(1, 0, 100), record(2, 10, 20), record(3, 30, 40)];
        assert_eq!(overlaps(&two, 2), 0, "never more than two at once");
        let three = [record(1, 0, 100), record(2, 10, 50), record(3, 30, 40)];
        assert_eq!(overlaps(&three, 2), 3, "three at once from 30 to 40");
    }

    #[test]
    fn a_lower_token_or_a_shared_one_accepted_is_stale() {
        let clean = [
            entry("a", 1, true),
            entry("a", 1, true),
            entry("b", 2, true),
        ];
        assert_eq!(stale_accepted(&clean), 0);
        let refused_only = [entry("b", 2, true), entry("a", 1, false)];
        assert_eq!(stale_accepted(&refused_only), 0);
        let stale = [
            entry("b", 2, true),
            entry("a", 1, true),
            entry("c", 2, true),
        ];
        assert_eq!(stale_accepted(&stale), 2);
    }

    #[test]
    fn a_token_not_above_the_earlier_ones_is_a_regression() {
        let mut records = [record(1, 0, 10), record(2, 20, 30), record(3, 40, 50)];
        for (record, token) in records.iter_mut().zip([5, 9, 7]) {
            record.token = Some(token);
        }
        assert_eq!(token_regressions(&records), 1);
        records[2].token = Some(10);
        assert_eq!(token_regressions(&records), 0);
    }

    #[test]
    fn an_acquire_that_returned_late_is_judged_from_when_its_call_started() {
        // Process 1's lock call started first and returned last (paused meanwhile): its
        // lower token is no regression; a call started after both returned must be above both.
        let mut records = [record(1, 0, 70), record(2, 20, 30), record(3, 80, 90)];
        records[0].acquired = Some(60);
        for (record, token) in records.iter_mut().zip([5, 9, 10]) {
            record.token = Some(token);
        }
        assert_eq!(token_regressions(&records), 0);
        records[2].token = Some(6);
        assert_eq!(token_regressions(&records), 1);
    }

    #[test]
    fn recovery_is_the_wait_for_the_first_write_after_the_fault() {
        let records = [record(1, 0, 10), record(2, 500, 700), record(2, 800, 900)];
        let window = FaultWindow {
            fault: crate::options::FaultKind::ServerPause,
            start_us: 100,
            end_us: 400,
            paused_pid: None,
            note: None,
        };
        let findings = check(
            &records,
            &[],
            std::slice::from_ref(&window),
            Ending::default(),
            Mode::Plain,
            Duration::from_secs(1),
        );
        assert_eq!(findings.recovery, Some(Duration::from_micros(300)));
        let never = check(
            &records[..1],
            &[],
            &[window],
            Ending::default(),
            Mode::Plain,
            Duration::from_secs(1),
        );
        assert_eq!(never.recovery, None);
    }
}
