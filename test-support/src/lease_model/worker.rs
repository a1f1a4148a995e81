//! The model's threads: each takes, holds and releases what a step tells it to, and says what
//! its guards believe.

use std::sync::mpsc::{self, Receiver, Sender};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use dlocks::backend::OwnerId;
use dlocks::{
    FencedLockGuard, Leadership, LockClient, LockError, LockGuard, LockKind, MultiLock,
    MultiLockGuard, Permit,
};

/// The six threads (two clients × three threads), kept across sequences.
pub(crate) struct Workers {
    pub(crate) threads: Vec<(Sender<Cmd>, Receiver<Reply>, JoinHandle<()>)>,
}

impl Workers {
    pub(crate) fn start() -> Self {
        let threads = (0..6)
            .map(|_| {
                let (cmd_tx, cmd_rx) = mpsc::channel();
                let (reply_tx, reply_rx) = mpsc::channel();
                let handle = thread::spawn(move || worker(cmd_rx, reply_tx));
                (cmd_tx, reply_rx, handle)
            })
            .collect();
        Workers { threads }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for (tx, _, handle) in self.threads.drain(..) {
            drop(tx);
            let _ = handle.join();
        }
    }
}

/// What a worker is told to do.
pub(crate) enum Cmd {
    Start(LockClient),
    /// Take `name` as a lock of `kind` (reentrant, fenced, fair, read or write).
    Take {
        name: String,
        kind: LockKind,
        lease: Option<Duration>,
        wait: Duration,
    },
    Multi {
        names: Vec<String>,
        lease: Option<Duration>,
        wait: Duration,
    },
    Permit {
        name: String,
        lease: Option<Duration>,
        wait: Duration,
    },
    Campaign {
        name: String,
        wait: Duration,
    },
    CountDown {
        name: String,
    },
    AwaitLatch {
        name: String,
        wait: Duration,
    },
    Unlock(usize),
    Report,
    Finish,
}

/// How a command went.
#[derive(Debug)]
pub(crate) enum Outcome {
    /// Taken; the token of a fenced hold or a leadership, with its hold's id.
    Taken(Option<(u64, OwnerId)>),
    NotTaken,
    /// Refused at once: the name was bad, or in use as another kind (or would deadlock).
    Refused(String),
    /// The store could not be asked, or its answer was lost: the outcome is unknown.
    Failed(String),
    Released,
    ReleaseFailed(String),
    NothingHeld,
    /// A count-down answered (`Ok`) or not (unknown).
    Counted(Result<(), String>),
    /// A latch wait: open or not.
    Opened(bool),
    Done,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Taken(Some((token, _))) => write!(f, "taken, token {token}"),
            Outcome::Taken(None) => write!(f, "taken"),
            Outcome::NotTaken => write!(f, "not taken"),
            Outcome::Refused(why) => write!(f, "refused: {why}"),
            Outcome::Failed(why) => write!(f, "error: {why}"),
            Outcome::Released => write!(f, "released"),
            Outcome::ReleaseFailed(why) => write!(f, "release error: {why}"),
            Outcome::NothingHeld => write!(f, "nothing held"),
            Outcome::Counted(Ok(())) => write!(f, "counted down"),
            Outcome::Counted(Err(why)) => write!(f, "count-down error: {why}"),
            Outcome::Opened(open) => write!(f, "{}", if *open { "open" } else { "closed" }),
            Outcome::Done => write!(f, "done"),
        }
    }
}

/// What a worker answers.
pub(crate) enum Reply {
    /// How the command went, and how many guards the worker holds now.
    Done(Outcome, usize),
    Report(Vec<Belief>),
}

/// The worker a belief is from (a writer may read: its two holds of one name are one holder's).
pub(crate) type WorkerId = usize;

/// What one guard believes, read by its own thread: the deadline first, then whether it says
/// it is lost (a renewal landing in between only moves the store's end later).
#[derive(Debug, Clone)]
pub(crate) struct Belief {
    /// Each lock the guard holds, with its kind and its hold's id on the store.
    pub(crate) holds: Vec<(String, LockKind, OwnerId)>,
    pub(crate) deadline: Instant,
    pub(crate) lost: bool,
}

/// One guard a worker holds.
enum Held {
    One(LockGuard, String, LockKind),
    Fenced(FencedLockGuard, String),
    Many(MultiLockGuard),
    Permit(Permit, String),
    Leader(Leadership, String),
}

impl Held {
    fn belief(&self) -> Belief {
        let one = |name: &str, kind, owner: &str, deadline: Instant, lost: bool| Belief {
            holds: vec![(name.to_owned(), kind, OwnerId::from_raw(owner))],
            deadline,
            lost,
        };
        match self {
            Held::One(guard, name, kind) => {
                let deadline = guard.lease_deadline();
                one(name, *kind, guard.owner(), deadline, guard.is_lost())
            }
            Held::Fenced(guard, name) => {
                let deadline = guard.lease_deadline();
                one(
                    name,
                    LockKind::Fenced,
                    guard.owner(),
                    deadline,
                    guard.is_lost(),
                )
            }
            Held::Permit(permit, name) => {
                let deadline = permit.lease_deadline();
                one(
                    name,
                    LockKind::Semaphore,
                    permit.id(),
                    deadline,
                    permit.is_lost(),
                )
            }
            Held::Leader(leadership, name) => {
                let deadline = leadership.lease_deadline();
                let lost = leadership.is_lost();
                one(name, LockKind::Election, leadership.owner(), deadline, lost)
            }
            Held::Many(guard) => {
                let deadline = guard
                    .lease_deadline()
                    .unwrap_or_else(|| panic!("a multi-lock guard without members"));
                Belief {
                    holds: guard
                        .holds()
                        .into_iter()
                        .map(|(name, kind, owner)| {
                            (name.to_owned(), kind, OwnerId::from_raw(owner))
                        })
                        .collect(),
                    deadline,
                    lost: guard.is_lost(),
                }
            }
        }
    }

    fn release(self) -> Result<(), LockError> {
        match self {
            Held::One(guard, ..) => guard.unlock(),
            Held::Fenced(guard, _) => guard.unlock(),
            Held::Many(guard) => guard.unlock(),
            Held::Permit(permit, _) => permit.release(),
            Held::Leader(leadership, _) => leadership.resign(),
        }
    }
}

/// How an acquire went, as an outcome, keeping the guard.
fn taken<G>(
    got: Result<Option<G>, LockError>,
    held: &mut Vec<Held>,
    keep: impl FnOnce(G) -> (Held, Option<(u64, OwnerId)>),
) -> Outcome {
    match got {
        Ok(Some(guard)) => {
            let (guard, token) = keep(guard);
            held.push(guard);
            Outcome::Taken(token)
        }
        Ok(None) => Outcome::NotTaken,
        Err(error) => failed(error),
    }
}

/// An error as an outcome: refused at once, or an unknown outcome.
fn failed(error: LockError) -> Outcome {
    match error {
        LockError::InvalidArgument { .. }
        | LockError::WrongKind { .. }
        | LockError::WouldDeadlock { .. } => Outcome::Refused(error.to_string()),
        other => Outcome::Failed(other.to_string()),
    }
}

fn worker(commands: Receiver<Cmd>, replies: Sender<Reply>) {
    let mut client: Option<LockClient> = None;
    let mut held: Vec<Held> = Vec::new();
    while let Ok(cmd) = commands.recv() {
        let outcome = match cmd {
            Cmd::Start(new) => {
                client = Some(new);
                Outcome::Done
            }
            Cmd::Report => {
                let beliefs = held.iter().map(Held::belief).collect();
                if replies.send(Reply::Report(beliefs)).is_err() {
                    return;
                }
                continue;
            }
            Cmd::Unlock(pick) => {
                if held.is_empty() {
                    Outcome::NothingHeld
                } else {
                    match held.remove(pick % held.len()).release() {
                        Ok(()) => Outcome::Released,
                        Err(error) => Outcome::ReleaseFailed(error.to_string()),
                    }
                }
            }
            Cmd::Finish => {
                held.clear();
                client = None;
                Outcome::Done
            }
            cmd => match &client {
                Some(client) => act(client, cmd, &mut held),
                None => Outcome::Done,
            },
        };
        if replies.send(Reply::Done(outcome, held.len())).is_err() {
            return;
        }
    }
}

/// Takes a lock of `kind` (with a fixed `lease`, or the watchdog's) waiting up to `wait`.
macro_rules! take {
    ($handle:expr, $lease:expr, $wait:expr) => {
        match $lease {
            Some(lease) => $handle.try_lock_with_lease($wait, lease),
            None => $handle.try_lock_for($wait),
        }
    };
}

fn act(client: &LockClient, cmd: Cmd, held: &mut Vec<Held>) -> Outcome {
    match cmd {
        Cmd::Take {
            name,
            kind,
            lease,
            wait,
        } => {
            let one = |got, held: &mut Vec<Held>| {
                taken(got, held, |guard| {
                    (Held::One(guard, name.clone(), kind), None)
                })
            };
            match kind {
                LockKind::Fenced => {
                    let got = take!(client.fenced_lock(name.clone()), lease, wait);
                    taken(got, held, |guard: FencedLockGuard| {
                        let token = (guard.token(), OwnerId::from_raw(guard.owner()));
                        (Held::Fenced(guard, name.clone()), Some(token))
                    })
                }
                LockKind::Fair => one(take!(client.fair_lock(name.clone()), lease, wait), held),
                LockKind::Read => one(
                    take!(
                        client.read_write_lock(name.clone()).read_lock(),
                        lease,
                        wait
                    ),
                    held,
                ),
                LockKind::Write => one(
                    take!(
                        client.read_write_lock(name.clone()).write_lock(),
                        lease,
                        wait
                    ),
                    held,
                ),
                _ => one(take!(client.lock(name.clone()), lease, wait), held),
            }
        }
        Cmd::Multi { names, lease, wait } => {
            let multi = MultiLock::new(names.iter().map(|name| client.lock(name.clone())));
            let got = take!(multi, lease, wait);
            taken(got, held, |guard| (Held::Many(guard), None))
        }
        Cmd::Permit { name, lease, wait } => {
            let semaphore = client.semaphore(name.clone());
            let got = match lease {
                Some(lease) => semaphore.try_acquire_with_lease(wait, lease),
                None => semaphore.try_acquire_for(wait),
            };
            taken(got, held, |permit| {
                (Held::Permit(permit, name.clone()), None)
            })
        }
        Cmd::Campaign { name, wait } => {
            let got = client
                .leader_election(name.clone())
                .try_campaign_for("candidate", wait);
            taken(got, held, |leadership: Leadership| {
                let token = (leadership.token(), OwnerId::from_raw(leadership.owner()));
                (Held::Leader(leadership, name.clone()), Some(token))
            })
        }
        Cmd::CountDown { name } => match client.count_down_latch(name).count_down() {
            Ok(()) => Outcome::Counted(Ok(())),
            Err(error) => match failed(error) {
                Outcome::Failed(why) => Outcome::Counted(Err(why)),
                refused => refused,
            },
        },
        Cmd::AwaitLatch { name, wait } => match client.count_down_latch(name).wait_for(wait) {
            Ok(open) => Outcome::Opened(open),
            Err(error) => failed(error),
        },
        _ => Outcome::Done,
    }
}
