//! Where the engine's store steps run and how its waits sleep: the one acquire and wait
//! algorithm is written once, as `async` code, and run either in place by the calling thread
//! (the blocking API: every step on that thread, every wait a blocking one, so it completes in
//! a single poll) or by a future (the `async` surface: steps on the client's own threads,
//! waits on wakers, so a waiting future holds no thread).

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::contract::error::LockError;
use crate::time::clock::Timer;
use crate::time::signal::{Signal, Wake};

/// How the engine runs a store step and waits.
pub(crate) trait Runner: Sync {
    /// Runs `step` here and now, if this runner runs steps in place (`None`: it does not; ask
    /// [`step`](Runner::step)). A step run so may borrow what it needs: the common path (the
    /// blocking API, a store whose steps never block) makes no copies for another thread.
    fn in_place<T>(&self, step: impl FnOnce() -> T) -> Option<T>;

    /// Runs `step` (a store call) and gives its answer. `undo` takes an answer nobody waits
    /// for any more: the future that asked was dropped while the step ran (a hold the step
    /// made is given back there).
    fn step<T, S, U>(&self, step: S, undo: U) -> impl Future<Output = Result<T, LockError>> + Send
    where
        T: Send + 'static,
        S: FnOnce() -> Result<T, LockError> + Send + 'static,
        U: FnOnce(Result<T, LockError>) + Send + 'static;

    /// Runs `step` (a store call that ends something the caller had: a release, leaving a
    /// queue) and gives its answer; it is made even if the future that asked is dropped
    /// first, where a [`step`](Runner::step) still waiting to be sent then never is.
    fn step_to_end<T, S>(&self, step: S) -> impl Future<Output = Result<T, LockError>> + Send
    where
        T: Send + 'static,
        S: FnOnce() -> Result<T, LockError> + Send + 'static;

    /// Runs `step`, a store call nobody waits for (giving back what a waiter that left may
    /// hold), after the steps asked before it.
    fn detach(&self, step: impl FnOnce() + Send + 'static);

    /// Waits until `signal` moves past `seen` or `timer`'s instant comes.
    fn park<'a>(
        &'a self,
        timer: &'a dyn Timer,
        signal: &'a Arc<Signal>,
        seen: u64,
    ) -> impl Future<Output = Wake> + Send + 'a;

    /// Waits until `signal` moves past `seen` (a wait bounded by another thread's store call).
    fn wait<'a>(&'a self, signal: &'a Signal, seen: u64) -> impl Future<Output = ()> + Send + 'a;
}

/// The blocking API's runner: every step on the calling thread, every wait a blocking one.
pub(crate) struct InPlace;

impl Runner for InPlace {
    fn in_place<T>(&self, step: impl FnOnce() -> T) -> Option<T> {
        Some(step())
    }

    fn step<T, S, U>(&self, step: S, _undo: U) -> impl Future<Output = Result<T, LockError>> + Send
    where
        T: Send + 'static,
        S: FnOnce() -> Result<T, LockError> + Send + 'static,
        U: FnOnce(Result<T, LockError>) + Send + 'static,
    {
        // Nobody can drop the caller in between: the answer is always taken.
        std::future::ready(step())
    }

    fn step_to_end<T, S>(&self, step: S) -> impl Future<Output = Result<T, LockError>> + Send
    where
        T: Send + 'static,
        S: FnOnce() -> Result<T, LockError> + Send + 'static,
    {
        std::future::ready(step())
    }

    fn detach(&self, step: impl FnOnce() + Send + 'static) {
        step();
    }

    fn park<'a>(
        &'a self,
        timer: &'a dyn Timer,
        signal: &'a Arc<Signal>,
        seen: u64,
    ) -> impl Future<Output = Wake> + Send + 'a {
        std::future::ready(timer.wait(signal, seen))
    }

    fn wait<'a>(&'a self, signal: &'a Signal, seen: u64) -> impl Future<Output = ()> + Send + 'a {
        signal.wait_until(seen, None);
        std::future::ready(())
    }
}

/// Runs `future` to completion on the calling thread. With the [`InPlace`] runner it is ready
/// at its first poll (made with a waker that does nothing: nothing in it waits); it parks the
/// thread until woken otherwise.
pub(crate) fn block<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    if let Poll::Ready(output) = future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        return output;
    }
    let waker = thread_waker();
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

/// A waker that unparks the calling thread.
fn thread_waker() -> Waker {
    struct Unpark(std::thread::Thread);

    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }

        fn wake_by_ref(self: &Arc<Self>) {
            self.0.unpark();
        }
    }

    thread_local! {
        static WAKER: Waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    }
    WAKER
        .try_with(Waker::clone)
        .unwrap_or_else(|_| Waker::from(Arc::new(Unpark(std::thread::current()))))
}
