//! One name's watch stream: its thread follows the changes of the name's keys (resumed from
//! the last revision seen when its connection breaks, read again when that revision is gone),
//! keeps the keys as they are, and wakes the subscribers a change concerns.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dlock_core::backend::{HeardCounts, Signal};
use dlock_core::LockError;
use parking_lot::{Condvar, Mutex};
use serde_json::{json, Value};

use super::chunks::{is_timeout, Chunks};
use super::{KeyRevisions, Wake, LINGER};
use crate::http::{Closer, Connection};
use crate::transport::{failure, Transport};
use crate::wire::{b64, int, prefix_end, range, txn, Json, Kv, Span, TxnAnswer};

pub(super) struct Stream {
    pub(super) prefix: Vec<u8>,
    /// The backend's counts of deletions seen.
    pub(super) heard: Arc<HeardCounts>,
    pub(super) state: Mutex<StreamState>,
    pub(super) ready: Condvar,
    pub(super) stopped: AtomicBool,
    pub(super) closer: Mutex<Option<Closer>>,
}

#[derive(Default)]
pub(super) struct StreamState {
    /// Subscribers: id → (what wakes it, its signal).
    pub(super) subscribers: HashMap<u64, (Wake, Arc<Signal>)>,
    /// The name's keys, as last seen: each one's create and mod revisions.
    pub(super) keys: HashMap<Vec<u8>, KeyRevisions>,
    /// The revision the keys were last read at: the events up to it are in the read, and
    /// are not applied again (one applied after a later state was read would unmake it).
    pub(super) read_at: i64,
    /// Watching since this revision (0: not yet).
    pub(super) watching: i64,
    /// The newest revision the keys are as of: the read's, or the last change applied.
    pub(super) applied: i64,
    /// The revision of the last deletion applied.
    pub(super) last_gone: i64,
    /// Tries to start watching that failed while not watching yet.
    pub(super) failed_starts: u64,
    /// A subscriber stopped waiting for the watch before it was in place: every subscriber is
    /// woken when it is, to look at the store again.
    pub(super) early: bool,
    /// Since when nobody has listened ([`LINGER`]); `None` while someone does.
    pub(super) idle_since: Option<Instant>,
    /// Until when the watch may be behind the store (see [`BEHIND_AT_MOST`]): `None` once it
    /// is known in step.
    pub(super) behind_until: Option<Instant>,
}

/// How long etcd may hold back the events of a watch that started behind the store. A watch
/// whose start revision a write overtook while it was being made (the read of the keys that
/// follows its creation is newer than the revision etcd started it after, or a resumed watch
/// has changes to catch up on) is out of step: etcd sends its events only at its next sync
/// round of such watches, every 100 ms, and nothing before. Until that watch's first message,
/// or for this long, its stream is not trusted to tell what changed ([`Stream::in_step`]), and
/// its waiters look at the store every [`LOOK_EVERY`] meanwhile: a release then reaches a
/// waiter within 10 ms, not 100.
const BEHIND_AT_MOST: Duration = Duration::from_millis(100);

/// How often the waiters of a stream that may be behind look at the store.
const LOOK_EVERY: Duration = Duration::from_millis(10);

impl Stream {
    /// Whether its keys (`state`, locked) are in step with the store: the watch in place and
    /// not behind ([`BEHIND_AT_MOST`]), nobody told to look again since it came, and the
    /// stream not stopped.
    pub(super) fn in_step(&self, state: &StreamState) -> bool {
        state.watching != 0
            && state.behind_until.is_none()
            && !state.early
            && !self.stopped.load(Ordering::Acquire)
    }

    /// Whether nobody has listened to it for [`LINGER`] at `now`.
    pub(super) fn is_idle_past(&self, now: Instant) -> bool {
        self.state
            .lock()
            .idle_since
            .is_some_and(|since| now.saturating_duration_since(since) >= LINGER)
    }

    /// Closes the stream if nobody has listened to it for [`LINGER`] (its entry goes at the
    /// next subscription or departure); whether it did. Under the state's lock, so that no
    /// subscriber joins a stream on its way out.
    pub(super) fn close_if_idle(&self) -> bool {
        {
            let state = self.state.lock();
            let idle = state
                .idle_since
                .is_some_and(|since| since.elapsed() >= LINGER);
            if !idle {
                return false;
            }
            self.stopped.store(true, Ordering::Release);
        }
        self.stop();
        true
    }

    pub(super) fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.count_heard();
        if let Some(closer) = self.closer.lock().take() {
            closer.close();
        }
    }

    pub(super) fn run(self: Arc<Self>, transport: &Transport) {
        let mut pause = Duration::from_millis(50);
        let mut resume_at = 0;
        while !self.stopped.load(Ordering::Acquire) {
            match self.watch(transport, resume_at) {
                Ok(()) => {}
                Err(Resume::Renewed(revision)) => {
                    if self.close_if_idle() {
                        break;
                    }
                    // A silent watch made again: it misses nothing, and wakes nobody.
                    resume_at = revision;
                    pause = Duration::from_millis(50);
                    continue;
                }
                Err(Resume::From(revision)) => resume_at = revision,
                Err(Resume::Fresh(reason)) => {
                    resume_at = 0;
                    let mut state = self.state.lock();
                    if state.watching == 0 {
                        tracing::debug!(%reason, "dlock: an etcd watch could not start; trying again");
                        state.failed_starts += 1;
                        self.ready.notify_all();
                    }
                }
            }
            if self.stopped.load(Ordering::Acquire) || self.close_if_idle() {
                break;
            }
            // Every waiter looks again: something may have changed while nobody watched.
            self.wake_all();
            thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// One watch connection: follows the changes until the connection ends, from `resume_at`;
    /// or (0) starting afresh, from now, reading the keys once the watch is in place.
    ///
    /// A fresh watch has no start revision: etcd makes it in sync with the store, as a rule. One
    /// that starts from a past revision (the keys read first, then watched from the revision
    /// after) is out of sync whenever the name changed in between, and etcd delivers such a
    /// watch's events only on its next sync round, up to 100 ms later: under contention most
    /// waits would pay it. (etcd gives a fresh watch the revision after the last its stream
    /// saw, so one made while a write lands is out of sync too, now and then: see
    /// `TurnSeen::Unsure`.)
    fn watch(&self, transport: &Transport, resume_at: i64) -> Result<(), Resume> {
        let mut create = json!({
            "key": b64(&self.prefix),
            "range_end": b64(&prefix_end(&self.prefix)),
        });
        if resume_at > 0 {
            create["start_revision"] = json!(resume_at.to_string());
        }
        let request = json!({ "create_request": create });
        let mut connection: Connection = transport
            .open_stream("/v3/watch", &Json::from(request))
            .map_err(|e| Resume::Fresh(e.to_string()))?;
        if let Ok(closer) = connection.closer() {
            *self.closer.lock() = Some(closer);
        }
        if self.stopped.load(Ordering::Acquire) {
            return Ok(());
        }
        let idle = transport.timeout * 2;
        let _ = connection.read_timeout(idle);
        let mut chunks = Chunks::default();
        let mut seen = resume_at - 1;
        loop {
            let message = match chunks.next_message() {
                Some(message) => message,
                None => match connection.read_some(&mut chunks.raw) {
                    Ok(0) => return Err(Resume::From(seen + 1)),
                    Ok(_) => continue,
                    Err(error) if is_timeout(&error) && self.looks_while_behind() => {
                        let _ = connection.read_timeout(self.read_timeout(idle));
                        continue;
                    }
                    Err(error) if is_timeout(&error) => {
                        // Silent for a while: nothing changed, or the connection was dropped
                        // on the way without a word (a load balancer's or a NAT's idle
                        // timeout), which a member answering on another connection would not
                        // tell. The watch is made again from the last revision it saw (no
                        // change is missed), on another member if this one does not answer
                        // (paused, cut off).
                        if self.stopped.load(Ordering::Acquire) {
                            return Ok(());
                        }
                        if !transport.answers(&connection.endpoint) {
                            transport.rotate();
                        }
                        return Err(Resume::Renewed(seen + 1));
                    }
                    Err(_) => return Err(Resume::From(seen + 1)),
                },
            };
            if message.is_empty() {
                return Err(Resume::From(seen + 1));
            }
            let Ok(value) = serde_json::from_slice::<Value>(&message) else {
                return Err(Resume::From(seen + 1));
            };
            if value.get("error").is_some() {
                return Err(Resume::Fresh(format!(
                    "{:?}",
                    failure(&value["error"], &connection.endpoint)
                )));
            }
            let result = &value["result"];
            if int(&result["compact_revision"]) > 0 {
                // The revision to resume from is gone: read the keys again.
                return Err(Resume::Fresh("compacted".into()));
            }
            if result["canceled"].as_bool() == Some(true) {
                return Err(Resume::Fresh(
                    result["cancel_reason"]
                        .as_str()
                        .unwrap_or("canceled")
                        .into(),
                ));
            }
            if result["created"].as_bool() == Some(true) {
                // In place: a fresh watch reads the keys now (a change after the read comes as
                // an event; one before it and after the watch began comes too, and is applied
                // again, in order, to the same end). Etcd started it after the revision its
                // answer's header gives: a newer one in the read (or a resumed watch's own
                // start at or before it) means a write may have overtaken it; so does an answer
                // without one, which cannot tell.
                let started_after = int(&result["header"]["revision"]);
                let (start, behind) = match resume_at {
                    0 => {
                        let read = self.read_keys(transport)?;
                        seen = seen.max(read);
                        (read + 1, read > started_after)
                    }
                    resumed => (resumed, started_after == 0 || resumed <= started_after),
                };
                if behind {
                    let _ = connection.read_timeout(LOOK_EVERY);
                }
                let mut state = self.state.lock();
                state.watching = start;
                state.behind_until = behind.then(|| Instant::now() + BEHIND_AT_MOST);
                self.ready.notify_all();
                if std::mem::take(&mut state.early) {
                    self.count_heard();
                    for (_, signal) in state.subscribers.values() {
                        signal.notify();
                    }
                }
                continue;
            }
            // A message after the creation: the watch is in step from now on (a watch out of
            // step is sent nothing until etcd's sync round brings it up to date).
            if self.state.lock().behind_until.take().is_some() {
                let _ = connection.read_timeout(idle);
            }
            if let Some(events) = result["events"].as_array() {
                let events: Vec<(bool, Kv)> = events
                    .iter()
                    .map(|event| {
                        let kv = Kv::parse(&event["kv"]);
                        seen = seen.max(kv.mod_revision);
                        (event["type"].as_str() == Some("DELETE"), kv)
                    })
                    .collect();
                self.apply(events);
            }
        }
    }

    /// How long a read of the watch's connection waits for a message: [`LOOK_EVERY`] while the
    /// watch may be behind, else `idle`.
    fn read_timeout(&self, idle: Duration) -> Duration {
        if self.state.lock().behind_until.is_some() {
            LOOK_EVERY
        } else {
            idle
        }
    }

    /// Called when a read of a watch that may be behind timed out: wakes every waiter to look
    /// at the store, or, once [`BEHIND_AT_MOST`] has passed (etcd's sync round has run, and
    /// nothing was held back), trusts the watch again. Whether the stream goes on reading;
    /// `false` if it was not behind (the connection was silent).
    fn looks_while_behind(&self) -> bool {
        let mut state = self.state.lock();
        let Some(until) = state.behind_until else {
            return false;
        };
        if Instant::now() >= until {
            state.behind_until = None;
        }
        // A look, not news: no change is counted as heard.
        for (_, signal) in state.subscribers.values() {
            signal.notify();
        }
        true
    }

    /// Reads the name's keys as they are now; the revision read at.
    fn read_keys(&self, transport: &Transport) -> Result<i64, Resume> {
        let span = Span::prefix(&self.prefix);
        let answer = transport
            .call(
                "/v3/kv/txn",
                &txn(Vec::new(), vec![range(&span)], Vec::new()),
                crate::transport::Resend::Safe,
            )
            .map_err(|fail| Resume::Fresh(LockError::from(fail).to_string()))?;
        let answer = TxnAnswer::from_value(answer);
        let kvs = answer.kvs(0).map_err(|e| Resume::Fresh(e.to_string()))?;
        let mut state = self.state.lock();
        state.keys = kvs
            .into_iter()
            .map(|kv| {
                let revisions = KeyRevisions {
                    created: kv.create_revision,
                    modified: kv.mod_revision,
                };
                (kv.key, revisions)
            })
            .collect();
        state.read_at = answer.revision;
        state.applied = state.applied.max(answer.revision);
        Ok(answer.revision)
    }

    /// Applies one message's events (a transaction's changes arrive together), and wakes the
    /// subscribers they concern ([`Wake`]): a fair waiter when its own place went, or when a
    /// key went and its place is now the first key under the name (its turn).
    fn apply(&self, events: Vec<(bool, Kv)>) {
        let state = &mut *self.state.lock();
        let mut gone = Vec::new();
        // The oldest key that went: the turns of the waiters after it moved.
        let mut moved_after = i64::MAX;
        // Changes the last read of the keys already holds (a fresh watch starts before it).
        let read_at = state.read_at;
        if let Some(newest) = events.iter().map(|(_, kv)| kv.mod_revision).max() {
            state.applied = state.applied.max(newest);
        }
        for (deleted, kv) in events
            .into_iter()
            .filter(|(_, kv)| kv.mod_revision > read_at)
        {
            if deleted {
                state.last_gone = state.last_gone.max(kv.mod_revision);
                if let Some(revisions) = state.keys.remove(&kv.key) {
                    moved_after = moved_after.min(revisions.created);
                }
                gone.push(kv.key);
            } else {
                let revisions = KeyRevisions {
                    created: kv.create_revision,
                    modified: kv.mod_revision,
                };
                state.keys.insert(kv.key, revisions);
            }
        }
        // Woken by its turn: a place that is first under the name now, and was behind a key
        // that went. (The place behind it has nothing to do until that one goes: as etcd's
        // `Mutex` waiters, each waits for the keys older than its own.)
        let older = state
            .keys
            .values()
            .any(|revisions| revisions.created < moved_after);
        if !gone.is_empty() {
            self.count_heard();
        }
        let turn = state
            .keys
            .iter()
            .filter(|(_, revisions)| !older && revisions.created > moved_after)
            .min_by_key(|(_, revisions)| revisions.created)
            .map(|(key, _)| key);
        for (wake, signal) in state.subscribers.values() {
            let woken = match wake {
                Wake::Change => true,
                Wake::Deletion => !gone.is_empty(),
                Wake::DeletionOfOther(own) => gone.iter().any(|key| key != own),
                Wake::Vacancy => !gone.is_empty() && state.keys.is_empty(),
                Wake::Turn(own) => {
                    gone.iter().any(|key| is_own(own, key))
                        || turn.is_some_and(|key| is_own(own, key))
                }
            };
            if woken {
                signal.notify();
            }
        }
    }

    pub(super) fn wake_all(&self) {
        let state = self.state.lock();
        self.count_heard();
        for (_, signal) in state.subscribers.values() {
            signal.notify();
        }
    }

    /// Counts a deletion seen (or a change that may have been missed).
    pub(super) fn count_heard(&self) {
        self.heard.heard(&self.prefix);
    }
}

/// Whether `key` is one of a fair waiter's keys, its place `own` or the second key under it
/// (`NameKeys::places`).
fn is_own(own: &[u8], key: &[u8]) -> bool {
    key.strip_prefix(own)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(b"/"))
}

enum Resume {
    /// Watch again from this revision.
    From(i64),
    /// Silent for a while: watch again from this revision, on a new connection.
    Renewed(i64),
    /// Read the keys again and watch from there.
    Fresh(String),
}
