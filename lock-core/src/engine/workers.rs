//! A client's own threads for store steps that must not run where they were asked: the steps
//! of futures (an executor's threads must never block on a store) and the releases of guards
//! dropped by async code. Started as work comes, at most [`MOST`] at a time, each ending after
//! [`IDLE`] without work or once the client is gone.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::contract::error::LockError;

/// The most threads a client runs steps on at once. Each step is one round trip, bounded by
/// the backend's timeouts; more waiting futures need no more threads, since a waiting future
/// holds none.
pub(crate) const MOST: usize = 8;

/// How long a thread without work stays for the next step.
const IDLE: Duration = Duration::from_secs(5);

/// A step, or a run of steps, for a worker.
pub(crate) type Job = Box<dyn FnOnce() + Send>;

/// The threads of one client; the client owns it, and its threads end once it is dropped and
/// the jobs handed to them are done.
pub(crate) struct Workers {
    shared: Arc<Shared>,
}

/// A handle to give jobs to a client's workers.
#[derive(Clone)]
pub(crate) struct Submitter {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Notified when a job comes, or the client goes.
    work: Condvar,
}

#[derive(Default)]
struct State {
    jobs: VecDeque<Job>,
    /// Threads running, and of those, waiting for work.
    live: usize,
    idle: usize,
    closed: bool,
}

impl Workers {
    pub(crate) fn new() -> Self {
        Workers {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                work: Condvar::new(),
            }),
        }
    }

    pub(crate) fn submitter(&self) -> Submitter {
        Submitter {
            shared: self.shared.clone(),
        }
    }
}

impl Drop for Workers {
    /// Tells the threads to end once the jobs they have are done; waits for none of them.
    fn drop(&mut self) {
        self.shared.state.lock().closed = true;
        self.shared.work.notify_all();
    }
}

impl Submitter {
    /// Runs `job` on one of the client's threads, starting one if none is free (up to
    /// [`MOST`]). An error (no thread could be started, and none runs) gives the job back.
    pub(crate) fn submit(&self, job: Job) -> Result<(), (Job, LockError)> {
        let mut state = self.shared.state.lock();
        state.jobs.push_back(job);
        if state.idle >= state.jobs.len() || state.live >= MOST {
            self.shared.work.notify_one();
            return Ok(());
        }
        state.live += 1;
        let shared = self.shared.clone();
        let started = std::thread::Builder::new()
            .name("dlock-steps".into())
            .spawn(move || shared.run());
        match started {
            Ok(_) => Ok(()),
            Err(error) => {
                state.live -= 1;
                if state.live > 0 {
                    // A running thread takes it in turn.
                    return Ok(());
                }
                // No thread took anything since it was pushed: it is the last one.
                match state.jobs.pop_back() {
                    Some(job) => Err((job, LockError::thread_spawn("store steps", error))),
                    None => Ok(()),
                }
            }
        }
    }

    /// Runs `job` on the client's threads, or here if none can be started: for work that must
    /// be done (giving back a hold), late rather than never.
    pub(crate) fn run(&self, job: Job) {
        if let Err((job, error)) = self.submit(job) {
            tracing::warn!(%error, "dlock: no thread for a store step; running it in place");
            job();
        }
    }
}

impl Shared {
    fn run(&self) {
        let mut state = self.state.lock();
        loop {
            if let Some(job) = state.jobs.pop_front() {
                parking_lot::MutexGuard::unlocked(&mut state, || {
                    // A step that panics (a backend's bug) is reported by its own caller (see
                    // `Lane`); the thread lives on for the others.
                    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                });
                continue;
            }
            if state.closed {
                break;
            }
            state.idle += 1;
            let timed_out = self.work.wait_for(&mut state, IDLE).timed_out();
            state.idle -= 1;
            if timed_out && state.jobs.is_empty() {
                break;
            }
        }
        state.live -= 1;
    }
}
