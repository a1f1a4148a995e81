//! Waiting without polling: one etcd watch per name with waiters (and one of its waiters'
//! marks, for a plain or read-write lock), shared by every waiter of
//! this backend on that name, started from a revision read before it (no change in between
//! is missed) and resumed from the last revision seen when its connection breaks.
//!
//! Which change of the name's keys wakes a waiter depends on what it waits for ([`Wake`]): an
//! exclusive lock's waiter, a deletion (a release, an expiry: a new key never frees a lock)
//! that leaves no key under the name; a reader, a deletion of a writer's hold or mark; a fair
//! waiter, a deletion that makes its place the first key under the name (each watches the
//! whole name, its own key included: a waiter whose key vanished, its lease
//! gone, is woken too, etcd#19597); a synchronizer's or an election's, any change (permits
//! added, a count, a new leader). A compacted revision is read again from the store, and every
//! waiter woken to look.

mod chunks;
mod stream;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use dlock_core::backend::{HeardCounts, ReleaseSubscription, Signal};
use dlock_core::LockError;
use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::transport::Transport;
use crate::wire::Span;
use stream::{Stream, StreamState};

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

/// Which changes of a name's keys wake a waiter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Wake {
    /// Any change: a synchronizer's waiter (permits added, a count moved) or an election's
    /// observer (a new leader).
    Change,
    /// A deletion: a reader's wait for the writers' holds (which a release or an expiry lets
    /// go) and for their marks (which a writer that went in or gave up, or died, lets go).
    /// The holds and marks that come while it waits do not wake it, nor do other readers:
    /// its streams do not watch them.
    Deletion,
    /// A deletion of a key other than this one: the wait of a waiter in turn (plain, write)
    /// for the marks of its kind made before its own, which a waiter that went in or gave up
    /// (or died) lets go. Its own mark, deleted as it goes in, is no news to it.
    DeletionOfOther(Vec<u8>),
    /// A deletion that leaves no key under the name: an exclusive lock's waiter (plain,
    /// fenced, write), which every key under the name refuses. The readers that leave one by
    /// one do not wake a writer until the last has gone.
    Vacancy,
    /// Its turn: a fair waiter, whose place is this key (and the second key under it).
    Turn(Vec<u8>),
}

static NEXT_SUBSCRIBER: AtomicU64 = AtomicU64::new(1);

/// Where a fair waiter's place is, as the name's watch has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PlaceSeen {
    /// The watch has not come to the write of the place yet: every change it applied is older
    /// than that write (and was seen by the write's own read), every later one comes after it.
    NotYet,
    /// Behind a key created before it: the watch wakes its waiter when every such key is gone.
    Behind,
    /// The first key under the name.
    First,
}

/// What the try of a waiter in turn (plain, write) would meet, as the name's watches have it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TurnSeen {
    /// A refusal with nothing to write but its mark: only other clients' holds under the
    /// name (and at least one), or none and a mark created before its own.
    Refused,
    /// No key under the name and no mark before its own, created at `created`.
    First { created: i64 },
    /// No mark before its own, but the name's keys (free, or a hold) are as of a revision
    /// before the last mark went: a waiter that takes the lock deletes its mark as it writes
    /// its hold, and the name's stream may not have come to that hold yet (nor to the release
    /// of the hold it shows). etcd may deliver a stream's changes late: a watch made while the
    /// store moved on is brought up to date on etcd's next sync round, up to 100 ms later.
    Unsure,
}

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
    /// open, in place and not behind the store: see [`DistributedLock::releases_heard`]. Only for waiters woken by a
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
            // A stream that may be behind the store cannot say it heard nothing.
            if state.watching == 0
                || state.behind_until.is_some()
                || stream.stopped.load(Ordering::Acquire)
            {
                return None;
            }
            heard = heard.wrapping_add(self.heard.count(&prefix));
        }
        Some(heard)
    }

    /// Where the name's watch, in place and in step with the store, has a fair waiter's place
    /// `key` as its waiter last wrote it (at `revisions`): `None` if it cannot tell (no watch in
    /// place, or the key as it has it is not that write). What a stream saw is exact as of the
    /// last change it applied, and a key created later is never older: a place first then stays
    /// first for as long as it is there, unchanged.
    pub(crate) fn place_seen(
        &self,
        prefix: &[u8],
        key: &[u8],
        revisions: KeyRevisions,
    ) -> Option<PlaceSeen> {
        let streams = self.streams.lock();
        let state = state_in_step(&streams, prefix)?;
        if state.applied < revisions.modified {
            return Some(PlaceSeen::NotYet);
        }
        if state.keys.get(key) != Some(&revisions) {
            return None;
        }
        let behind = state
            .keys
            .values()
            .any(|other| other.created < revisions.created);
        Some(if behind {
            PlaceSeen::Behind
        } else {
            PlaceSeen::First
        })
    }

    /// Whether the streams of a read-write lock's writers' holds (`holds`, a waiting reader's
    /// watch of the name) and of its writers' marks (`marks`), each in place, show what
    /// refuses a new reader with nothing for it to write: a writer's mark, and no writer's
    /// hold. `None` if they cannot tell. Each stream is exact as of the last change it
    /// applied; a mark or a hold gone since comes as a deletion, which wakes a reader's wait
    /// and counts in [`heard`](Self::heard).
    pub(crate) fn reader_refused_seen(&self, holds: &[u8], marks: &[u8]) -> Option<bool> {
        let streams = self.streams.lock();
        if !state_in_step(&streams, holds)?.keys.is_empty() {
            return Some(false);
        }
        let marked = !state_in_step(&streams, marks)?.keys.is_empty();
        Some(marked)
    }

    /// What the streams of a plain lock's or a read-write lock's name (`prefix`, whose keys in
    /// `holds` are that family's holds) and of its waiters' marks in turn (`marks`), each in
    /// place, show of a try of the waiter whose mark is `own_mark`: see [`TurnSeen`].
    /// `None` if they cannot tell (its mark not seen yet, say). Each stream is exact as of the
    /// last change it applied; a hold or a mark gone since comes as a deletion, which wakes the
    /// waiter and counts in [`heard`](Self::heard).
    pub(crate) fn turn_try_seen(
        &self,
        prefix: &[u8],
        holds: &Span,
        own_hold: &[u8],
        marks: &[u8],
        own_mark: &[u8],
    ) -> Option<TurnSeen> {
        let streams = self.streams.lock();
        let (held, as_of) = {
            let state = state_in_step(&streams, prefix)?;
            if state
                .keys
                .keys()
                .any(|key| !holds.contains(key) || key.as_slice() == own_hold)
            {
                return None;
            }
            (!state.keys.is_empty(), state.applied)
        };
        let state = state_in_step(&streams, marks)?;
        let own = state.keys.get(own_mark)?.created;
        Some(if state.keys.values().any(|other| other.created < own) {
            TurnSeen::Refused
        } else if as_of < state.last_gone {
            TurnSeen::Unsure
        } else if held {
            TurnSeen::Refused
        } else {
            TurnSeen::First { created: own }
        })
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

/// The state of the stream of `prefix`, locked, if it is open and in step with the store.
fn state_in_step<'a>(
    streams: &'a HashMap<Vec<u8>, Arc<Stream>>,
    prefix: &[u8],
) -> Option<MutexGuard<'a, StreamState>> {
    let stream = streams.get(prefix)?;
    let state = stream.state.lock();
    stream.in_step(&state).then_some(state)
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
