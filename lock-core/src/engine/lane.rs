//! One future's store steps, in order, on its client's threads: each step runs after the one
//! before it, and so does what the future leaves to be done when it is dropped (giving back a
//! hold, leaving a queue), so that cleanup never overtakes a step still on its way to the store.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

use crate::contract::error::LockError;
use crate::engine::workers::{Job, Submitter};

/// The steps of one future, run one at a time on the client's threads. Only that future
/// pushes to it, from its polls and its drop, which never overlap.
pub(crate) struct Lane {
    workers: Submitter,
    jobs: Mutex<Jobs>,
}

#[derive(Default)]
struct Jobs {
    waiting: VecDeque<Job>,
    /// A thread is running this lane's jobs.
    running: bool,
}

impl Lane {
    pub(crate) fn new(workers: Submitter) -> Arc<Lane> {
        Arc::new(Lane {
            workers,
            jobs: Mutex::new(Jobs::default()),
        })
    }

    /// Runs `job` after the lane's earlier jobs. An error (no thread could be started) gives
    /// it back, not run.
    fn push(self: &Arc<Self>, job: Job) -> Result<(), (Job, LockError)> {
        {
            let mut jobs = self.jobs.lock();
            jobs.waiting.push_back(job);
            if jobs.running {
                return Ok(());
            }
            jobs.running = true;
        }
        let lane = self.clone();
        match self.workers.submit(Box::new(move || lane.drain())) {
            Ok(()) => Ok(()),
            Err((_, error)) => {
                let mut jobs = self.jobs.lock();
                jobs.running = false;
                match jobs.waiting.pop_back() {
                    Some(job) => Err((job, error)),
                    None => Ok(()),
                }
            }
        }
    }

    /// Runs `job` after the lane's earlier jobs; here, if no thread can be started: work that
    /// must be done late rather than never.
    pub(crate) fn push_or_run(self: &Arc<Self>, job: Job) {
        if let Err((job, error)) = self.push(job) {
            tracing::warn!(%error, "dlock: no thread for a store step; running it in place");
            job();
        }
    }

    /// Runs the lane's jobs until none is left.
    fn drain(&self) {
        loop {
            let job = {
                let mut jobs = self.jobs.lock();
                match jobs.waiting.pop_front() {
                    Some(job) => job,
                    None => {
                        jobs.running = false;
                        return;
                    }
                }
            };
            // A job that panics (a backend's bug) must not leave the lane marked running, with
            // its later jobs never run.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
        }
    }

    /// Runs `step` on the lane; the future gives its answer. If the future is dropped first,
    /// `undo` gets the answer instead, on the lane; a step still waiting on the lane then is
    /// never sent, unless it is one to [`Finish`] (a release, leaving a queue).
    pub(crate) fn step<T, S, U>(self: &Arc<Self>, step: S, undo: U, finish: Finish) -> Queued<T>
    where
        T: Send + 'static,
        S: FnOnce() -> Result<T, LockError> + Send + 'static,
        U: FnOnce(Result<T, LockError>) + Send + 'static,
    {
        let slot = Arc::new(Mutex::new(Slot {
            answer: None,
            waker: None,
            undo: Some(Box::new(undo)),
            state: SlotState::Asked,
        }));
        let answered = slot.clone();
        let job: Job = Box::new(move || {
            {
                let mut slot = answered.lock();
                if slot.state == SlotState::Abandoned && finish == Finish::IfAsked {
                    // Its caller gave up before it was sent: never sent, nothing to undo.
                    slot.undo = None;
                    return;
                }
            }
            let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(step))
                .unwrap_or_else(|_| Err(LockError::protocol("the backend panicked in a step")));
            let mut slot = answered.lock();
            if slot.state == SlotState::Abandoned {
                let undo = slot.undo.take();
                drop(slot);
                if let Some(undo) = undo {
                    undo(answer);
                }
                return;
            }
            slot.answer = Some(answer);
            let waker = slot.waker.take();
            drop(slot);
            if let Some(waker) = waker {
                waker.wake();
            }
        });
        match self.push(job) {
            Ok(()) => Queued {
                slot,
                lane: self.clone(),
            },
            Err((_, error)) => {
                // Never run: nothing to undo.
                let mut answered = slot.lock();
                answered.answer = Some(Err(error));
                answered.undo = None;
                drop(answered);
                Queued {
                    slot,
                    lane: self.clone(),
                }
            }
        }
    }
}

/// Whether a step is made once the future that asked for it is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Finish {
    /// Only while someone waits for it: a step whose caller gave up before it was sent is
    /// never sent (it would take a lock, a permit or a queue place for nobody).
    IfAsked,
    /// Always: a step that ends something its caller had (a release, leaving a queue).
    Always,
}

type Undo<T> = Box<dyn FnOnce(Result<T, LockError>) + Send>;

/// A step's answer, between the thread that runs it and the future that waits for it.
struct Slot<T> {
    answer: Option<Result<T, LockError>>,
    waker: Option<Waker>,
    undo: Option<Undo<T>>,
    state: SlotState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotState {
    /// The future waits for the answer (or has not looked yet).
    Asked,
    /// The future took the answer.
    Taken,
    /// The future was dropped before it took the answer.
    Abandoned,
}

/// A step on a [`Lane`]: ready with the step's answer.
pub(crate) struct Queued<T: Send + 'static> {
    slot: Arc<Mutex<Slot<T>>>,
    lane: Arc<Lane>,
}

impl<T: Send + 'static> Future for Queued<T> {
    type Output = Result<T, LockError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut slot = self.slot.lock();
        match slot.answer.take() {
            Some(answer) => {
                slot.state = SlotState::Taken;
                slot.undo = None;
                Poll::Ready(answer)
            }
            None => {
                if !slot
                    .waker
                    .as_ref()
                    .is_some_and(|kept| kept.will_wake(cx.waker()))
                {
                    slot.waker = Some(cx.waker().clone());
                }
                Poll::Pending
            }
        }
    }
}

impl<T: Send + 'static> Drop for Queued<T> {
    fn drop(&mut self) {
        let mut slot = self.slot.lock();
        if slot.state != SlotState::Asked {
            return;
        }
        slot.state = SlotState::Abandoned;
        slot.waker = None;
        // Answered but not taken: undone on the lane (a store step, never on the caller's
        // thread). On its way: the step undoes it when it ends. Still queued: never sent.
        let Some(answer) = slot.answer.take() else {
            return;
        };
        let undo = slot.undo.take();
        drop(slot);
        if let Some(undo) = undo {
            self.lane.push_or_run(Box::new(move || undo(answer)));
        }
    }
}
