//! A client's record in the store: who it is (name, host, pid) and which holds it has since
//! when, so inspection can answer "who holds this lock, and since when?".
//!
//! One thread per client, started with its first hold on a store that keeps records, publishes
//! the record then, again within [`MIN_INTERVAL`] of each new hold, and every third of its time
//! to live while the client lives. It runs on real time apart from the lock calls: a hold never
//! waits for it, and a store that does not answer it only leaves the record older.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::contract::backend::DistributedLock;
use crate::contract::client_record::{ClientRecord, HeldSince};
use crate::engine::hold::Hold;
use crate::time::signal::Signal;

/// The least time between two publications of a record: a client taking many short holds
/// writes its record at most this often.
pub(crate) const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// A client's presence in the store.
pub(crate) struct Presence {
    shared: Arc<Shared>,
    /// The publishing thread, once started (detached when the client goes).
    thread: Mutex<Option<JoinHandle<()>>>,
}

struct Shared {
    backend: Arc<dyn DistributedLock>,
    record: ClientRecord,
    ttl: Duration,
    /// Whether the record is kept at all (the program's choice and the store's).
    enabled: bool,
    /// Holds taken since the last publication, and those it named (released or lost ones
    /// are dropped at the next one).
    holds: Mutex<Vec<Weak<Hold>>>,
    /// Notified at the first new hold after a publication (the one that moves the next
    /// publication earlier; later ones would only wake the thread for nothing) and at
    /// shutdown.
    signal: Signal,
    /// Whether a hold was added since the last publication began, and the thread told.
    told: AtomicBool,
    shutdown: AtomicBool,
}

impl Presence {
    /// The presence of `record` on `backend`, refreshed so that it lasts `ttl` past the
    /// client's last refresh; none at all unless `wanted` and the store keeps records.
    pub(crate) fn new(
        backend: Arc<dyn DistributedLock>,
        record: ClientRecord,
        ttl: Duration,
        wanted: bool,
    ) -> Self {
        let enabled = wanted && backend.keeps_client_records();
        Presence {
            shared: Arc::new(Shared {
                backend,
                record,
                ttl,
                enabled,
                holds: Mutex::new(Vec::new()),
                signal: Signal::new(),
                told: AtomicBool::new(false),
                shutdown: AtomicBool::new(false),
            }),
            thread: Mutex::new(None),
        }
    }

    /// The record published.
    pub(crate) fn record(&self) -> &ClientRecord {
        &self.shared.record
    }

    /// Names `hold` in the record from its next publication (within [`MIN_INTERVAL`]).
    pub(crate) fn add(&self, hold: &Arc<Hold>) {
        if !self.shared.enabled {
            return;
        }
        self.shared.holds.lock().push(Arc::downgrade(hold));
        let mut thread = self.thread.lock();
        if thread.is_none() {
            let shared = self.shared.clone();
            // A record that cannot be published is no reason to refuse a hold: the holder
            // is then shown by its hold id alone.
            match std::thread::Builder::new()
                .name("dlock-presence".into())
                .spawn(move || shared.run())
            {
                Ok(handle) => *thread = Some(handle),
                Err(error) => {
                    tracing::warn!(%error, "dlock: no thread to publish the client's record");
                    return;
                }
            }
        }
        drop(thread);
        if !self.shared.told.swap(true, Ordering::AcqRel) {
            self.shared.signal.notify();
        }
    }
}

impl Drop for Presence {
    /// Tells the thread to end, without waiting for it: it may be in a call to a store that
    /// does not answer, and dropping a client must not wait for that. The record then runs
    /// out on its own.
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        self.shared.signal.notify();
    }
}

impl Shared {
    fn run(&self) {
        let refresh = self.ttl / 3;
        let mut published: Option<Instant> = None;
        let mut seen = self.signal.generation();
        let mut changed = true;
        loop {
            if self.shutdown.load(Ordering::Acquire) {
                return;
            }
            let now = Instant::now();
            let due = match published {
                None => now,
                Some(at) if changed => at + MIN_INTERVAL,
                Some(at) => at + refresh,
            };
            if now >= due {
                seen = self.signal.generation();
                changed = false;
                self.publish();
                published = Some(Instant::now());
                continue;
            }
            if self.signal.wait_until(seen, Some(due)) == crate::time::signal::Wake::Signaled {
                seen = self.signal.generation();
                changed = true;
            }
        }
    }

    /// Publishes the record with the holds that are still held.
    fn publish(&self) {
        // Before the holds are read: a hold added from here on is told again.
        self.told.store(false, Ordering::Release);
        let holds: Vec<Arc<Hold>> = {
            let mut holds = self.holds.lock();
            holds.retain(|hold| {
                hold.upgrade()
                    .is_some_and(|hold| !hold.is_released() && hold.loss_recorded().is_none())
            });
            holds.iter().filter_map(Weak::upgrade).collect()
        };
        let named: Vec<HeldSince<'_>> = holds
            .iter()
            .map(|hold| HeldSince::new(hold.target.as_ref(), &hold.owner, hold.since()))
            .collect();
        if let Err(error) = self.backend.publish_client(&self.record, &named, self.ttl) {
            tracing::debug!(%error, "dlock: the client's record was not published");
        }
    }
}
