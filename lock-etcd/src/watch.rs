//! Waiting without polling: one etcd watch per name with waiters, shared by every waiter of
//! this backend on that name, started from a revision read before it (no change in between
//! is missed) and resumed from the last revision seen when its connection breaks.
//!
//! Which change of the name's keys wakes a waiter depends on what it waits for ([`Wake`]): an
//! exclusive lock's waiter, a deletion (a release, an expiry: a new key never frees a lock)
//! that leaves no key under the name; a reader, a deletion of a writer's hold or mark; a fair
//! waiter, a deletion that makes its place the first key under the name or the one behind it
//! (each watches the whole name, its own key included: a waiter whose key vanished, its lease
//! gone, is woken too, etcd#19597); a synchronizer's or an election's, any change (permits
//! added, a count, a new leader). A compacted revision is read again from the store, and every
//! waiter woken to look.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dlock_core::backend::{HeardCounts, ReleaseSubscription, Signal};
use dlock_core::LockError;
use parking_lot::{Condvar, Mutex};
use serde_json::{json, Value};

use crate::http::{Closer, Connection};
use crate::transport::{failure, Transport};
use crate::wire::{b64, int, prefix_end, range, txn, Json, Kv, Span, TxnAnswer};

pub(crate) struct Watches {
    transport: Arc<Transport>,
    streams: Mutex<HashMap<Vec<u8>, Arc<Stream>>>,
    /// The deletions the streams saw (and each time one woke every waiter, or stopped), by
    /// prefix: see [`Watches::heard`].
    heard: Arc<HeardCounts>,
}

/// How long a name's watch stays open once nobody waits on it: a waiter that comes within it
/// (the next contended acquire, as a rule) finds it in place, instead of a read, a new watch
/// and a thread of its own.
const LINGER: Duration = Duration::from_secs(1);

struct Stream {
    prefix: Vec<u8>,
    /// The backend's counts of deletions seen.
    heard: Arc<HeardCounts>,
    state: Mutex<StreamState>,
    ready: Condvar,
    stopped: AtomicBool,
    closer: Mutex<Option<Closer>>,
}

#[derive(Default)]
struct StreamState {
    /// Subscribers: id → (what wakes it, its signal).
    subscribers: HashMap<u64, (Wake, Arc<Signal>)>,
    /// The name's keys, as last seen: each one's create and mod revisions.
    keys: HashMap<Vec<u8>, KeyRevisions>,
    /// The revision the keys were last read at: the events up to it are in the read, and
    /// are not applied again (one applied after a later state was read would unmake it).
    read_at: i64,
    /// Watching since this revision (0: not yet).
    watching: i64,
    /// Tries to start watching that failed while not watching yet.
    failed_starts: u64,
    /// A subscriber stopped waiting for the watch before it was in place: every subscriber is
    /// woken when it is, to look at the store again.
    early: bool,
    /// Since when nobody has listened ([`LINGER`]); `None` while someone does.
    idle_since: Option<Instant>,
}

/// Which changes of a name's keys wake a waiter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Any change: a synchronizer's waiter (permits added, a count moved) or an election's
    /// observer (a new leader).
    Change,
    /// A deletion: a reader's wait for the writers' marks, which a writer that went in or
    /// gave up (or died) lets go. The marks that come while it waits do not wake it.
    Deletion,
    /// A deletion of a key under this prefix: a reader's wait for the writers' holds (the
    /// name's `rw/w/`), which a release or an expiry lets go. Other readers, which never
    /// refuse it, do not wake it as they come and go, nor do the holds that come.
    DeletionUnder(Vec<u8>),
    /// A deletion that leaves no key under the name: an exclusive lock's waiter (plain,
    /// fenced, write), which every key under the name refuses. The readers that leave one by
    /// one do not wake a writer until the last has gone.
    Vacancy,
    /// Its turn: a fair waiter, whose place is this key (and the second key under it).
    Turn(Vec<u8>),
}

static NEXT_SUBSCRIBER: AtomicU64 = AtomicU64::new(1);

/// A key's create and mod revisions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KeyRevisions {
    pub(crate) created: i64,
    pub(crate) modified: i64,
}

impl Watches {
    pub(crate) fn new(transport: Arc<Transport>) -> Self {
        Watches {
            transport,
            streams: Mutex::new(HashMap::new()),
            heard: Arc::new(HeardCounts::new()),
        }
    }

    /// Listens to the keys under `prefix`, woken by the changes `wake` says. Returns once the
    /// watch is in place, or, if it is slow to start, with the subscriber woken once it is.
    pub(crate) fn subscribe(
        self: &Arc<Self>,
        prefix: Vec<u8>,
        wake: Wake,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        Ok(Box::new(self.join(
            prefix,
            wake,
            Arc::new(Signal::new()),
        )?))
    }

    /// Listens to the keys under each of `prefixes`, with one signal, woken as each one's
    /// [`Wake`] says: a reader's wait, for its name's writers' holds and for the marks of the
    /// writers it waits behind (a writer that went in or gave up).
    pub(crate) fn subscribe_all(
        self: &Arc<Self>,
        prefixes: Vec<(Vec<u8>, Wake)>,
    ) -> Result<Box<dyn ReleaseSubscription>, LockError> {
        let signal = Arc::new(Signal::new());
        let parts = prefixes
            .into_iter()
            .map(|(prefix, wake)| self.join(prefix, wake, signal.clone()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Box::new(Joined {
            signal,
            _parts: parts,
        }))
    }

    /// Adds `signal` to the subscribers of the stream of `prefix` (started if there is none).
    fn join(
        self: &Arc<Self>,
        prefix: Vec<u8>,
        wake: Wake,
        signal: Arc<Signal>,
    ) -> Result<WatchSubscription, LockError> {
        let id = NEXT_SUBSCRIBER.fetch_add(1, Ordering::Relaxed);
        let (stream, started) = {
            let mut streams = self.streams.lock();
            close_idle(&mut streams, Instant::now());
            // A stream's thread closes it under its state's lock: one found open here stays
            // open for the subscriber it takes.
            let open = streams.get(&prefix).filter(|stream| {
                let mut state = stream.state.lock();
                if stream.stopped.load(Ordering::Acquire) {
                    return false;
                }
                state.subscribers.insert(id, (wake.clone(), signal.clone()));
                state.idle_since = None;
                true
            });
            match open {
                Some(stream) => (stream.clone(), false),
                _ => {
                    let stream = Arc::new(Stream {
                        heard: self.heard.clone(),
                        prefix: prefix.clone(),
                        state: Mutex::new(StreamState::default()),
                        ready: Condvar::new(),
                        stopped: AtomicBool::new(false),
                        closer: Mutex::new(None),
                    });
                    stream
                        .state
                        .lock()
                        .subscribers
                        .insert(id, (wake.clone(), signal.clone()));
                    streams.insert(prefix, stream.clone());
                    (stream, true)
                }
            }
        };
        let subscription = WatchSubscription {
            watches: self.clone(),
            stream: stream.clone(),
            id,
            signal,
        };
        if started {
            let transport = self.transport.clone();
            let running = stream.clone();
            thread::Builder::new()
                .name("dlock-etcd-watch".into())
                .spawn(move || running.run(&transport))
                .map_err(|error| LockError::thread_spawn("an etcd watch", error))?;
        }
        // Wait until the watch is in place, for two request timeouts at most or until a try to
        // start it failed. A busy member may take longer, and the watch keeps trying: the
        // subscriber is then woken once it is in place (and after each try that failed), and
        // looks at the store again, so no release is missed; a waiter does not give up its wait
        // for a watch that is slow to start, as it does not for a retry that is not answered.
        let deadline = Instant::now() + self.transport.timeout * 2;
        let mut state = stream.state.lock();
        let failed_before = state.failed_starts;
        while state.watching == 0 && state.failed_starts == failed_before {
            if stream.ready.wait_until(&mut state, deadline).timed_out() {
                break;
            }
        }
        if state.watching == 0 {
            state.early = true;
        }
        Ok(subscription)
    }

    /// Takes subscriber `id` off `stream`; the last to leave lets the stream linger
    /// ([`LINGER`]), and streams idle for longer are closed.
    fn leave(&self, stream: &Arc<Stream>, id: u64) {
        let mut streams = self.streams.lock();
        let now = Instant::now();
        {
            let mut state = stream.state.lock();
            state.subscribers.remove(&id);
            if state.subscribers.is_empty() {
                state.idle_since = Some(now);
            }
        }
        close_idle(&mut streams, now);
    }

    /// Whether the name whose keys are under `prefix` has had a waiter of this backend within
    /// the last [`LINGER`] (its stream is open): the name is contended.
    pub(crate) fn watched(&self, prefix: &[u8]) -> bool {
        self.streams.lock().get(prefix).is_some_and(|stream| {
            !stream.is_idle_past(Instant::now()) && !stream.stopped.load(Ordering::Acquire)
        })
    }

    /// How many deletions the streams of the prefixes `prefixes` makes have seen, if each is
    /// open and in place: see [`DistributedLock::releases_heard`]. Only for waiters woken by a
    /// deletion alone (not [`Wake::Change`]). A stream counts a deletion under its state's
    /// lock, which subscribers join under, before it wakes them, and counts once more when it
    /// stops or wakes everyone (it may have missed changes).
    ///
    /// [`DistributedLock::releases_heard`]: dlock_core::backend::DistributedLock::releases_heard
    pub(crate) fn heard(&self, prefixes: impl FnOnce() -> Vec<Vec<u8>>) -> Option<u64> {
        let streams = self.streams.lock();
        if streams.is_empty() {
            return None;
        }
        let mut heard = 0u64;
        for prefix in prefixes() {
            let stream = streams.get(&prefix)?;
            let state = stream.state.lock();
            if state.watching == 0 || stream.stopped.load(Ordering::Acquire) {
                return None;
            }
            heard = heard.wrapping_add(self.heard.count(&prefix));
        }
        Some(heard)
    }

    /// The first key under `prefix` (by create revision) and its revisions, as the name's
    /// stream last saw them, if the stream is open and in place. What a stream saw is exact as
    /// of the last change it applied, and a key created later is never older: a key first then
    /// stays first for as long as it is there, unchanged.
    pub(crate) fn head(&self, prefix: &[u8]) -> Option<(Vec<u8>, KeyRevisions)> {
        let streams = self.streams.lock();
        let stream = streams.get(prefix)?;
        let state = stream.state.lock();
        if state.watching == 0 || state.early || stream.stopped.load(Ordering::Acquire) {
            return None;
        }
        state
            .keys
            .iter()
            .min_by_key(|(_, revisions)| revisions.created)
            .map(|(key, revisions)| (key.clone(), *revisions))
    }

    /// How many watch streams are open: one per name with waiters (or observers) in this
    /// process, and those of names waited on within the last [`LINGER`].
    pub(crate) fn streams(&self) -> usize {
        let mut streams = self.streams.lock();
        close_idle(&mut streams, Instant::now());
        streams.len()
    }
}

impl Drop for Watches {
    /// Closes every stream: the lingering ones have no subscription to close them.
    fn drop(&mut self) {
        for stream in self.streams.get_mut().values() {
            stream.stop();
        }
    }
}

/// Closes and forgets the streams nobody has listened to for [`LINGER`] (and those whose
/// thread closed them).
fn close_idle(streams: &mut HashMap<Vec<u8>, Arc<Stream>>, now: Instant) {
    streams.retain(|_, stream| {
        let idle = stream.is_idle_past(now);
        if idle {
            stream.stop();
        }
        !idle && !stream.stopped.load(Ordering::Acquire)
    });
}

impl Stream {
    /// Whether nobody has listened to it for [`LINGER`] at `now`.
    fn is_idle_past(&self, now: Instant) -> bool {
        self.state
            .lock()
            .idle_since
            .is_some_and(|since| now.saturating_duration_since(since) >= LINGER)
    }

    /// Closes the stream if nobody has listened to it for [`LINGER`] (its entry goes at the
    /// next subscription or departure); whether it did. Under the state's lock, so that no
    /// subscriber joins a stream on its way out.
    fn close_if_idle(&self) -> bool {
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

    fn stop(&self) {
        self.stopped.store(true, Ordering::Release);
        self.count_heard();
        if let Some(closer) = self.closer.lock().take() {
            closer.close();
        }
    }

    fn run(self: Arc<Self>, transport: &Transport) {
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
    /// A fresh watch has no start revision: etcd makes it in sync with the store at once. One
    /// that starts from a past revision (the keys read first, then watched from the revision
    /// after) is out of sync whenever the name changed in between, and etcd delivers such a
    /// watch's events only on its next sync round, up to 100 ms later: under contention most
    /// waits would pay it.
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
                // again, in order, to the same end).
                let start = match resume_at {
                    0 => {
                        let read = self.read_keys(transport)?;
                        seen = seen.max(read);
                        read + 1
                    }
                    resumed => resumed,
                };
                let mut state = self.state.lock();
                state.watching = start;
                self.ready.notify_all();
                if std::mem::take(&mut state.early) {
                    self.count_heard();
                    for (_, signal) in state.subscribers.values() {
                        signal.notify();
                    }
                }
                continue;
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
        Ok(answer.revision)
    }

    /// Applies one message's events (a transaction's changes arrive together), and wakes the
    /// subscribers they concern ([`Wake`]): a fair waiter when its own place went, or when a
    /// key went and its place is now the first key under the name (its turn) or the one
    /// behind it.
    fn apply(&self, events: Vec<(bool, Kv)>) {
        let state = &mut *self.state.lock();
        let mut gone = Vec::new();
        // The oldest key that went: the turns of the waiters after it moved.
        let mut moved_after = i64::MAX;
        // Changes the last read of the keys already holds (a fresh watch starts before it).
        let read_at = state.read_at;
        for (deleted, kv) in events
            .into_iter()
            .filter(|(_, kv)| kv.mod_revision > read_at)
        {
            if deleted {
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
        let mut queue: Vec<(i64, &Vec<u8>)> = state
            .keys
            .iter()
            .filter(|(_, revisions)| revisions.created > moved_after)
            .map(|(key, revisions)| (revisions.created, key))
            .collect();
        queue.sort();
        // Woken by its turn: a place that is first or second under the name now, and was
        // behind a key that went.
        let older = state
            .keys
            .values()
            .filter(|revisions| revisions.created < moved_after)
            .count();
        if !gone.is_empty() {
            self.count_heard();
        }
        let turn: Vec<&Vec<u8>> = queue
            .iter()
            .take(2usize.saturating_sub(older))
            .map(|(_, key)| *key)
            .collect();
        for (wake, signal) in state.subscribers.values() {
            let woken = match wake {
                Wake::Change => true,
                Wake::Deletion => !gone.is_empty(),
                Wake::DeletionUnder(under) => gone.iter().any(|key| key.starts_with(under)),
                Wake::Vacancy => !gone.is_empty() && state.keys.is_empty(),
                Wake::Turn(own) => {
                    gone.iter().any(|key| is_own(own, key))
                        || turn.iter().any(|key| is_own(own, key))
                }
            };
            if woken {
                signal.notify();
            }
        }
    }

    fn wake_all(&self) {
        let state = self.state.lock();
        self.count_heard();
        for (_, signal) in state.subscribers.values() {
            signal.notify();
        }
    }

    /// Counts a deletion seen (or a change that may have been missed).
    fn count_heard(&self) {
        self.heard.heard(&self.prefix);
    }
}

/// Whether `key` is one of a fair waiter's keys, its place `own` or the second key under it
/// (`NameKeys::places`).
fn is_own(own: &[u8], key: &[u8]) -> bool {
    key.strip_prefix(own)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(b"/"))
}

/// The messages of a chunked body, as its bytes arrive: each chunk's data, newline-ended
/// JSON messages.
#[derive(Default)]
struct Chunks {
    raw: Vec<u8>,
    body: Vec<u8>,
    ended: bool,
}

impl Chunks {
    /// The next whole message; an empty one once the body ended; `None` until more bytes
    /// arrive.
    fn next_message(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(at) = self.body.iter().position(|b| *b == b'\n') {
                let message: Vec<u8> = self.body.drain(..=at).collect();
                if message.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Some(message);
            }
            if self.ended {
                return Some(Vec::new());
            }
            // One chunk: `<hex size>[;ext]\r\n<data>\r\n`.
            let line_end = self.raw.windows(2).position(|w| w == b"\r\n")?;
            let size = std::str::from_utf8(&self.raw[..line_end])
                .ok()
                .and_then(|line| usize::from_str_radix(line.split(';').next()?.trim(), 16).ok());
            let Some(size) = size else {
                self.ended = true;
                continue;
            };
            let start = line_end + 2;
            if self.raw.len() < start + size + 2 {
                return None;
            }
            self.body.extend_from_slice(&self.raw[start..start + size]);
            self.raw.drain(..start + size + 2);
            if size == 0 {
                self.ended = true;
            }
        }
    }
}

fn is_timeout(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

enum Resume {
    /// Watch again from this revision.
    From(i64),
    /// Silent for a while: watch again from this revision, on a new connection.
    Renewed(i64),
    /// Read the keys again and watch from there.
    Fresh(String),
}

struct WatchSubscription {
    watches: Arc<Watches>,
    stream: Arc<Stream>,
    id: u64,
    signal: Arc<Signal>,
}

impl ReleaseSubscription for WatchSubscription {
    fn signal(&self) -> &Arc<Signal> {
        &self.signal
    }
}

impl Drop for WatchSubscription {
    fn drop(&mut self) {
        self.watches.leave(&self.stream, self.id);
    }
}

/// Subscriptions to several streams sharing one signal; each leaves its stream when dropped.
struct Joined {
    signal: Arc<Signal>,
    _parts: Vec<WatchSubscription>,
}

impl ReleaseSubscription for Joined {
    fn signal(&self) -> &Arc<Signal> {
        &self.signal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_come_whole_across_chunks() {
        let mut chunks = Chunks::default();
        chunks.raw.extend_from_slice(b"5\r\n{\"a\":");
        assert_eq!(chunks.next_message(), None);
        chunks.raw.extend_from_slice(b"\r\n3\r\n1}\n\r\n");
        assert_eq!(chunks.next_message().as_deref(), Some(&b"{\"a\":1}\n"[..]));
        assert_eq!(chunks.next_message(), None);
        chunks.raw.extend_from_slice(b"0\r\n\r\n");
        assert_eq!(chunks.next_message().as_deref(), Some(&b""[..]));
    }
}
