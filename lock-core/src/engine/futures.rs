//! The engine's entry points for futures (the `async` surface): the same acquire, wait and
//! release as the blocking API's, run by a [`TaskRunner`]. Each future owns what it needs
//! (`Send + 'static`), and does nothing until it is first polled, except a release, which is
//! asked at once: the guard it consumed must not be left held because its future was dropped.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::handle::Handle;
use super::lane::Finish;
use super::task_runner::{Step, TaskRunner};
use crate::contract::error::LockError;
use crate::engine::hold::{Hold, LeaseMode};

impl Handle {
    /// [`acquire_owned`](Self::acquire_owned), as a future.
    pub(crate) fn acquire_owned_future(
        &self,
        wait: Option<Duration>,
        mode: LeaseMode,
        value: Option<String>,
    ) -> impl Future<Output = Result<Option<Arc<Hold>>, LockError>> + Send + 'static {
        let handle = self.clone();
        // On the heap, once: the handles' futures wrap this one, and a future is moved whole
        // each time it is (into its wrapper, into the task).
        Box::pin(async move {
            let runner = TaskRunner::new(&handle.client);
            handle.acquire_owned_with(&runner, wait, mode, value).await
        })
    }

    /// [`wait_until_open`](Self::wait_until_open), as a future.
    pub(crate) fn wait_until_open_future(
        &self,
        wait: Option<Duration>,
    ) -> impl Future<Output = Result<bool, LockError>> + Send + 'static {
        let handle = self.clone();
        async move {
            let runner = TaskRunner::new(&handle.client);
            handle.wait_until_open_with(&runner, wait).await
        }
    }

    /// Releases `hold` (one level) off the calling thread; the future gives how it went. The
    /// release goes out now, and is made even if the future is dropped.
    pub(crate) fn release_future(&self, hold: Arc<Hold>) -> Step<()> {
        let handle = self.clone();
        TaskRunner::new(&self.client).ask(move || handle.release_one(&hold), drop, Finish::Always)
    }

    /// Releases `hold` (one level) without blocking the calling thread on the store: on the
    /// client's threads, or in place for a store whose steps never block. A failure is logged.
    pub(crate) fn release_detached(&self, hold: Arc<Hold>) {
        let handle = self.clone();
        let release = move || {
            if let Err(error) = handle.release_one(&hold) {
                tracing::warn!(lock = %handle.name(), kind = %handle.kind(), %error, "dlock: releasing a dropped guard failed");
            }
        };
        if self.client.backend.may_block() {
            self.client.workers.submitter().run(Box::new(release));
        } else {
            release();
        }
    }
}
