//! The runner of a future (the `async` surface): store steps on the client's own threads, one
//! future's in order, or in place for a store whose steps never block; waits on wakers, woken
//! by the same signals and timers that wake a blocked thread. A waiting future holds no thread.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::contract::error::LockError;
use crate::engine::client_state::ClientState;
use crate::engine::lane::{Finish, Lane, Queued};
use crate::engine::runner::Runner;
use crate::time::clock::Timer;
use crate::time::signal::{Signal, Wake};

/// How one future runs the engine.
pub(crate) struct TaskRunner {
    /// The future's steps in order on the client's threads; `None` for a store whose steps
    /// never block (they run in place, in the future's own poll).
    lane: Option<Arc<Lane>>,
}

impl TaskRunner {
    pub(crate) fn new(client: &ClientState) -> Self {
        TaskRunner {
            lane: client
                .backend
                .may_block()
                .then(|| Lane::new(client.workers.submitter())),
        }
    }
}

impl TaskRunner {
    /// [`Runner::step`] (or, to [`Finish::Always`], [`Runner::step_to_end`]), as a future of
    /// its own that borrows nothing: the step is asked now (on the lane, or run in place),
    /// whether or not the future is ever polled.
    pub(crate) fn ask<T, S, U>(&self, step: S, undo: U, finish: Finish) -> Step<T>
    where
        T: Send + 'static,
        S: FnOnce() -> Result<T, LockError> + Send + 'static,
        U: FnOnce(Result<T, LockError>) + Send + 'static,
    {
        match &self.lane {
            Some(lane) => Step::Queued(lane.step(step, undo, finish)),
            // Answered before the future that asked can be dropped.
            None => Step::Answered(Some(step())),
        }
    }
}

impl Runner for TaskRunner {
    fn in_place<T>(&self, step: impl FnOnce() -> T) -> Option<T> {
        self.lane.is_none().then(step)
    }

    fn step<T, S, U>(&self, step: S, undo: U) -> impl Future<Output = Result<T, LockError>> + Send
    where
        T: Send + 'static,
        S: FnOnce() -> Result<T, LockError> + Send + 'static,
        U: FnOnce(Result<T, LockError>) + Send + 'static,
    {
        self.ask(step, undo, Finish::IfAsked)
    }

    fn step_to_end<T, S>(&self, step: S) -> impl Future<Output = Result<T, LockError>> + Send
    where
        T: Send + 'static,
        S: FnOnce() -> Result<T, LockError> + Send + 'static,
    {
        self.ask(step, drop, Finish::Always)
    }

    fn detach(&self, step: impl FnOnce() + Send + 'static) {
        match &self.lane {
            Some(lane) => lane.push_or_run(Box::new(step)),
            None => step(),
        }
    }

    fn park<'a>(
        &'a self,
        timer: &'a dyn Timer,
        signal: &'a Arc<Signal>,
        seen: u64,
    ) -> impl Future<Output = Wake> + Send + 'a {
        std::future::poll_fn(move |cx| timer.poll_wait(signal, seen, cx))
    }

    fn wait<'a>(&'a self, signal: &'a Signal, seen: u64) -> impl Future<Output = ()> + Send + 'a {
        std::future::poll_fn(move |cx: &mut Context<'_>| signal.poll_notified(seen, cx))
    }
}

/// A step's answer: already there, or to come from the lane.
pub(crate) enum Step<T: Send + 'static> {
    Answered(Option<Result<T, LockError>>),
    Queued(Queued<T>),
}

// Nothing in it is pinned: the answer is moved out, and `Queued` is `Unpin` (it holds `Arc`s).
impl<T: Send + 'static> Unpin for Step<T> {}

impl<T: Send + 'static> Future for Step<T> {
    type Output = Result<T, LockError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            Step::Answered(answer) => Poll::Ready(
                answer
                    .take()
                    .unwrap_or_else(|| Err(LockError::protocol("a step's answer was taken twice"))),
            ),
            Step::Queued(queued) => Pin::new(queued).poll(cx),
        }
    }
}
