//! What the client reports through the [`metrics`] facade: how long acquires wait, how long
//! holds last, leases lost, renewals, and each store step. The library installs no recorder;
//! without one every report is a call into the facade's no-op recorder.
//!
//! Lock names are not labels unless the program maps them to one
//! ([`LockClientBuilder::metric_name`](crate::LockClientBuilder::metric_name)): a label per
//! name would make a series per lock.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics::Label;

use crate::contract::error::LockError;
use crate::contract::kind::LockKind;
use crate::contract::loss::LossReason;

/// From an acquire's call to its answer (reentrant acquires are not counted); labels `kind`
/// and `outcome` (`acquired`, `timed_out`, `refused`, `error`).
pub const ACQUIRE_SECONDS: &str = "dlock_acquire_seconds";
/// From a hold's acquire to its release or loss; label `kind`.
pub const HOLD_SECONDS: &str = "dlock_hold_seconds";
/// Leases lost while held; labels `kind` and `reason`.
pub const LEASE_LOST_TOTAL: &str = "dlock_lease_lost_total";
/// One watchdog renewal call (a batch of holds); label `backend`.
pub const RENEWAL_SECONDS: &str = "dlock_renewal_seconds";
/// Renewal calls that failed; label `backend`.
pub const RENEWAL_FAILURES_TOTAL: &str = "dlock_renewal_failures_total";
/// Holds the client has now; label `kind`.
pub const HOLDS: &str = "dlock_holds";
/// Threads of the client waiting for a lock now; label `kind`.
pub const WAITING: &str = "dlock_waiting";
/// Each store step; labels `backend` and `step`.
pub const BACKEND_CALL_SECONDS: &str = "dlock_backend_call_seconds";

/// Gives the recorder installed now each metric's unit and meaning (the `# HELP` of a
/// Prometheus scrape). Called by every client as it is built.
pub(crate) fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_histogram!(
        ACQUIRE_SECONDS,
        Unit::Seconds,
        "From an acquire's call to its answer (re-entries not counted)"
    );
    describe_histogram!(
        HOLD_SECONDS,
        Unit::Seconds,
        "From a hold's acquire to its release or loss"
    );
    describe_counter!(LEASE_LOST_TOTAL, "Leases lost while held");
    describe_histogram!(
        RENEWAL_SECONDS,
        Unit::Seconds,
        "One watchdog renewal call, for a batch of holds"
    );
    describe_counter!(RENEWAL_FAILURES_TOTAL, "Watchdog renewal calls that failed");
    describe_gauge!(HOLDS, "Holds the client has now");
    describe_gauge!(WAITING, "Threads of the client waiting for a lock now");
    describe_histogram!(BACKEND_CALL_SECONDS, Unit::Seconds, "One store step");
}

/// Maps a lock's name to the value of the `name` label (for example its prefix).
pub(crate) type MetricName = Arc<dyn Fn(&str) -> String + Send + Sync>;

/// The labels of one lock's reports: its kind, and its name's label if the program maps names.
#[derive(Clone, Debug)]
pub(crate) struct LockLabels {
    kind: LockKind,
    name: Option<Arc<str>>,
}

impl LockLabels {
    pub(crate) fn new(kind: LockKind, name: &str, metric_name: Option<&MetricName>) -> Self {
        LockLabels {
            kind,
            name: metric_name.map(|map| Arc::from(map(name))),
        }
    }

    fn with(&self, extra: &[(&'static str, &'static str)]) -> Vec<Label> {
        let mut labels = Vec::with_capacity(2 + extra.len());
        labels.push(Label::from_static_parts("kind", kind_label(self.kind)));
        if let Some(name) = &self.name {
            labels.push(Label::new("name", name.to_string()));
        }
        labels.extend(
            extra
                .iter()
                .map(|(key, value)| Label::from_static_parts(key, value)),
        );
        labels
    }
}

/// A kind's label value: one word, stable across releases.
pub(crate) fn kind_label(kind: LockKind) -> &'static str {
    match kind {
        LockKind::Reentrant => "reentrant",
        LockKind::Fair => "fair",
        LockKind::Read => "read",
        LockKind::Write => "write",
        LockKind::Fenced => "fenced",
        LockKind::Semaphore => "semaphore",
        LockKind::Latch => "latch",
        LockKind::Election => "election",
    }
}

fn loss_label(reason: LossReason) -> &'static str {
    match reason {
        LossReason::Expired => "expired",
        LossReason::Gone => "gone",
        LossReason::ForceUnlocked => "force_unlocked",
        LossReason::TakenOver => "taken_over",
        LossReason::Unreachable => "unreachable",
    }
}

/// Reports an acquire that asked the store, with its answer: taken (`true`), not taken within
/// its wait (`false`), or an error.
pub(crate) fn acquire_answered(
    labels: &LockLabels,
    answer: Result<bool, &LockError>,
    took: Duration,
) {
    let outcome = match answer {
        Ok(true) => "acquired",
        Ok(false) => "timed_out",
        // The store could not answer as asked.
        Err(
            LockError::Unavailable { .. }
            | LockError::Protocol { .. }
            | LockError::Resource { .. }
            | LockError::NotReplicated { .. },
        ) => "error",
        // The request itself was refused: bad input, the wrong kind, a deadlock, ...
        Err(_) => "refused",
    };
    metrics::histogram!(ACQUIRE_SECONDS, labels.with(&[("outcome", outcome)])).record(took);
}

/// A hold's lifetime in the reports: counted in [`HOLDS`] from its acquire until it is
/// released or lost, whichever comes first, and then timed in [`HOLD_SECONDS`].
#[derive(Debug)]
pub(crate) struct HoldMeter {
    labels: LockLabels,
    since: Instant,
    ended: AtomicBool,
}

impl HoldMeter {
    pub(crate) fn start(labels: LockLabels) -> Self {
        metrics::gauge!(HOLDS, labels.with(&[])).increment(1.0);
        HoldMeter {
            labels,
            since: Instant::now(),
            ended: AtomicBool::new(false),
        }
    }

    /// The hold was released.
    pub(crate) fn released(&self) {
        self.end();
    }

    /// The hold's lease was lost for `reason`.
    pub(crate) fn lost(&self, reason: LossReason) {
        if self.end() {
            metrics::counter!(
                LEASE_LOST_TOTAL,
                self.labels.with(&[("reason", loss_label(reason))])
            )
            .increment(1);
        }
    }

    /// Ends the hold's report once; whether this call did.
    fn end(&self) -> bool {
        if self.ended.swap(true, Ordering::AcqRel) {
            return false;
        }
        metrics::gauge!(HOLDS, self.labels.with(&[])).decrement(1.0);
        metrics::histogram!(HOLD_SECONDS, self.labels.with(&[])).record(self.since.elapsed());
        true
    }
}

/// One waiting thread, counted in [`WAITING`] while this lives.
pub(crate) struct Waiting<'a> {
    labels: &'a LockLabels,
}

impl<'a> Waiting<'a> {
    pub(crate) fn start(labels: &'a LockLabels) -> Self {
        metrics::gauge!(WAITING, labels.with(&[])).increment(1.0);
        Waiting { labels }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        metrics::gauge!(WAITING, self.labels.with(&[])).decrement(1.0);
    }
}

/// Reports one renewal call of the watchdog on `backend`, and whether it failed.
pub(crate) fn renewal(backend: &'static str, took: Duration, failed: bool) {
    metrics::histogram!(RENEWAL_SECONDS, "backend" => backend).record(took);
    if failed {
        metrics::counter!(RENEWAL_FAILURES_TOTAL, "backend" => backend).increment(1);
    }
}

/// Reports one store step.
pub(crate) fn backend_call(backend: &'static str, step: &'static str, took: Duration) {
    metrics::histogram!(BACKEND_CALL_SECONDS, "backend" => backend, "step" => step).record(took);
}
