//! The client's metrics as a program with a recorder sees them: every name, with its labels,
//! after an acquire, a timeout, a refusal, a wait, a renewal failure and a loss.
//!
//! One recorder serves the whole process (a recorder is global), so each test names its own
//! locks and maps each lock name to the `name` label to read only its own series.

use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use dlocks::metrics::{
    ACQUIRE_SECONDS, BACKEND_CALL_SECONDS, HOLDS, HOLD_SECONDS, LEASE_LOST_TOTAL,
    RENEWAL_FAILURES_TOTAL, RENEWAL_SECONDS, WAITING,
};
use dlocks::testing::{Fault, FaultyBackend, MemoryBackend, Op};
use dlocks::{LeaseChange, LockClient, LockError, LossReason};
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::MetricKind;

fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this process");
        snapshotter
    })
}

/// One series as read back: its kind, name, labels (sorted) and value.
#[derive(Debug)]
struct Series {
    kind: MetricKind,
    name: String,
    labels: Vec<(String, String)>,
    value: DebugValue,
}

/// Every series recorded so far. A snapshot hands out a histogram's new samples only once,
/// so they are kept here and added up.
fn series() -> Vec<Series> {
    static SEEN: Mutex<Vec<Series>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for (key, _, _, value) in snapshotter().snapshot().into_vec() {
        let (kind, key) = key.into_parts();
        let mut labels: Vec<(String, String)> = key
            .labels()
            .map(|label| (label.key().to_owned(), label.value().to_owned()))
            .collect();
        labels.sort();
        let name = key.name().to_owned();
        let known = seen
            .iter_mut()
            .find(|series| series.kind == kind && series.name == name && series.labels == labels);
        match (known, value) {
            (Some(known), DebugValue::Histogram(new)) => {
                if let DebugValue::Histogram(values) = &mut known.value {
                    values.extend(new);
                }
            }
            (Some(known), value) => known.value = value,
            (None, value) => seen.push(Series {
                kind,
                name,
                labels,
                value,
            }),
        }
    }
    seen.iter()
        .map(|series| Series {
            kind: series.kind,
            name: series.name.clone(),
            labels: series.labels.clone(),
            value: match &series.value {
                DebugValue::Counter(value) => DebugValue::Counter(*value),
                DebugValue::Gauge(value) => DebugValue::Gauge(*value),
                DebugValue::Histogram(values) => DebugValue::Histogram(values.clone()),
            },
        })
        .collect()
}

/// The series `name` whose labels include every one of `labels`.
fn find<'a>(all: &'a [Series], name: &str, labels: &[(&str, &str)]) -> Vec<&'a Series> {
    all.iter()
        .filter(|series| {
            series.name == name
                && labels
                    .iter()
                    .all(|(key, value)| series.labels.iter().any(|(k, v)| k == key && v == value))
        })
        .collect()
}

fn one<'a>(all: &'a [Series], name: &str, labels: &[(&str, &str)]) -> &'a Series {
    let found = find(all, name, labels);
    assert_eq!(
        found.len(),
        1,
        "expected one {name} series with {labels:?}, found {found:#?}\namong {all:#?}"
    );
    found[0]
}

fn samples(series: &Series) -> usize {
    match &series.value {
        DebugValue::Histogram(values) => values.len(),
        other => panic!("{} is not a histogram: {other:?}", series.name),
    }
}

fn gauge(series: &Series) -> f64 {
    match &series.value {
        DebugValue::Gauge(value) => value.into_inner(),
        other => panic!("{} is not a gauge: {other:?}", series.name),
    }
}

fn counter(series: &Series) -> u64 {
    match &series.value {
        DebugValue::Counter(value) => *value,
        other => panic!("{} is not a counter: {other:?}", series.name),
    }
}

fn client_on(backend: impl dlocks::backend::DistributedLock) -> LockClient {
    snapshotter();
    LockClient::builder(backend)
        .metric_name(|name| name.to_owned())
        .build()
        .expect("a client")
}

#[test]
fn an_acquire_its_hold_and_its_steps_are_reported_and_a_reentry_is_not() -> Result<(), LockError> {
    let client = client_on(MemoryBackend::new());
    let lock = client.lock("metrics-hold");
    let guard = lock.lock()?;
    let reentered = lock.lock()?;
    {
        let all = series();
        let holds = one(
            &all,
            HOLDS,
            &[("kind", "reentrant"), ("name", "metrics-hold")],
        );
        assert_eq!(gauge(holds), 1.0);
    }
    drop(reentered);
    drop(guard);

    let all = series();
    let acquired = one(
        &all,
        ACQUIRE_SECONDS,
        &[
            ("kind", "reentrant"),
            ("name", "metrics-hold"),
            ("outcome", "acquired"),
        ],
    );
    assert_eq!(acquired.kind, MetricKind::Histogram);
    assert_eq!(acquired.labels.len(), 3, "{acquired:?}");
    assert_eq!(samples(acquired), 1, "the re-entry is not an acquire");
    let held = one(
        &all,
        HOLD_SECONDS,
        &[("kind", "reentrant"), ("name", "metrics-hold")],
    );
    assert_eq!(samples(held), 1);
    let holds = one(
        &all,
        HOLDS,
        &[("kind", "reentrant"), ("name", "metrics-hold")],
    );
    assert_eq!(gauge(holds), 0.0);
    for step in ["acquire", "release"] {
        let calls = one(
            &all,
            BACKEND_CALL_SECONDS,
            &[("backend", "memory"), ("step", step)],
        );
        assert_eq!(calls.labels.len(), 2, "{calls:?}");
    }
    Ok(())
}

#[test]
fn a_timed_out_acquire_a_refused_one_and_a_waiting_thread_are_reported() -> Result<(), LockError> {
    let backend = MemoryBackend::new();
    let holder = client_on(backend.clone());
    let waiter = client_on(backend);
    let guard = holder.lock("metrics-wait").lock()?;

    assert!(waiter
        .lock("metrics-wait")
        .try_lock_for(Duration::from_millis(20))?
        .is_none());
    let all = series();
    let timed_out = one(
        &all,
        ACQUIRE_SECONDS,
        &[("name", "metrics-wait"), ("outcome", "timed_out")],
    );
    assert_eq!(samples(timed_out), 1);

    // A thread waiting without a bound is counted while it waits.
    let waiting = thread::spawn({
        let waiter = waiter.clone();
        move || waiter.lock("metrics-wait").lock().map(drop)
    });
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let all = series();
        let now = find(
            &all,
            WAITING,
            &[("kind", "reentrant"), ("name", "metrics-wait")],
        );
        if now.first().is_some_and(|series| gauge(series) == 1.0) {
            break;
        }
        assert!(
            Instant::now() < until,
            "the waiting thread was never counted: {now:?}"
        );
        thread::yield_now();
    }
    drop(guard);
    waiting.join().expect("the waiting thread")?;
    let all = series();
    let waiting = one(
        &all,
        WAITING,
        &[("kind", "reentrant"), ("name", "metrics-wait")],
    );
    assert_eq!(gauge(waiting), 0.0);

    // The same thread cannot use one name as two kinds: refused.
    let held = holder.lock("metrics-kind").lock()?;
    let refused = holder.fair_lock("metrics-kind").try_lock();
    assert!(
        matches!(refused, Err(LockError::WrongKind { .. })),
        "{refused:?}"
    );
    drop(held);
    let all = series();
    let refused = one(
        &all,
        ACQUIRE_SECONDS,
        &[
            ("kind", "fair"),
            ("name", "metrics-kind"),
            ("outcome", "refused"),
        ],
    );
    assert_eq!(samples(refused), 1);
    Ok(())
}

#[test]
fn a_failing_renewal_and_the_loss_it_leads_to_are_reported() -> Result<(), LockError> {
    let backend = FaultyBackend::new(MemoryBackend::new());
    backend.inject(Fault::fail(Op::Renew));
    snapshotter();
    let client = LockClient::builder(backend)
        .metric_name(|name| name.to_owned())
        .watchdog_lease(Duration::from_millis(90))
        .build()?;
    let events = client.lease_events();
    let guard = client.lock("metrics-lost").lock()?;
    let lost = loop {
        let event = events
            .recv_timeout(Duration::from_secs(10))
            .expect("the loss is reported");
        if let LeaseChange::Lost { reason } = event.change {
            break reason;
        }
    };
    assert_eq!(lost, LossReason::Unreachable);
    assert!(guard.is_lost());
    assert!(guard.unlock().is_err());

    let all = series();
    let lost = one(
        &all,
        LEASE_LOST_TOTAL,
        &[
            ("kind", "reentrant"),
            ("name", "metrics-lost"),
            ("reason", "unreachable"),
        ],
    );
    assert_eq!(counter(lost), 1);
    let holds = one(
        &all,
        HOLDS,
        &[("kind", "reentrant"), ("name", "metrics-lost")],
    );
    assert_eq!(
        gauge(holds),
        0.0,
        "a lost hold is no longer counted, and only once"
    );
    let held = one(&all, HOLD_SECONDS, &[("name", "metrics-lost")]);
    assert_eq!(samples(held), 1);
    let failures = one(&all, RENEWAL_FAILURES_TOTAL, &[("backend", "memory")]);
    assert!(counter(failures) >= 1);
    let renewals = one(&all, RENEWAL_SECONDS, &[("backend", "memory")]);
    assert!(samples(renewals) >= 1);
    Ok(())
}
