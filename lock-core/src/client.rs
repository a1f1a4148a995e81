//! The entry point: a client bound to one backend, handing out lock handles.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Receiver;

use crate::contract::backend::DistributedLock;
use crate::contract::client_record::{host_name, program_name, ClientRecord};
use crate::contract::error::LockError;
use crate::contract::hand_off::HandOff;
use crate::contract::kind::LockKind;
use crate::contract::lease::ClockDrift;
use crate::contract::limits::validate_lease;
use crate::engine::client_state::{ClientState, WatchSignals};
use crate::engine::events::{LeaseCallback, LeaseEvent, LeaseEvents};
use crate::engine::metered_backend::MeteredBackend;
use crate::engine::metrics::MetricName;
use crate::engine::presence::Presence;
use crate::engine::step_aside::StepAside;
use crate::engine::wait_queue::WaitQueues;
use crate::engine::watchdog::{Watchdog, WatchdogStats};
use crate::engine::Handle;
use crate::handles::election::LeaderElection;
use crate::handles::fair_lock::FairLock;
use crate::handles::fenced_lock::FencedLock;
use crate::handles::latch::CountDownLatch;
use crate::handles::lock::Lock;
use crate::handles::read_write_lock::ReadWriteLock;
use crate::handles::semaphore::Semaphore;

/// The watchdog lease used when none is configured: 30 s, as in Redisson.
pub const DEFAULT_WATCHDOG_LEASE: Duration = Duration::from_secs(30);

/// How long a fair-lock waiter that waits without a bound keeps its place in the queue after
/// the one ahead of it: 5 minutes, Redisson's `fairLockWaitTimeout`.
pub const DEFAULT_FAIR_WAIT_TIMEOUT: Duration = Duration::from_secs(300);

/// The shortest watchdog lease accepted: renewals run every lease/3, and shorter leases would
/// leave no room for a backend round trip.
pub const MIN_WATCHDOG_LEASE: Duration = Duration::from_millis(30);

/// The longest client name accepted, in bytes.
pub const MAX_CLIENT_NAME_LEN: usize = 128;

/// The least time a client's record outlives its last refresh.
const MIN_RECORD_TTL: Duration = Duration::from_secs(3);

/// A lock client: one identity (a UUID) on one backend, with one watchdog thread.
///
/// Cheap to clone: clones share the identity, the backend and the watchdog. Application code
/// takes a `LockClient` and never names the backend type, so a test can hand it the in-memory
/// backend and production a Redis one.
///
/// # Examples
///
/// ```
/// use dlocks::{LockClient, MemoryBackend};
///
/// let client = LockClient::new(MemoryBackend::new());
/// let orders = client.lock("orders:42");
/// let guard = orders.lock()?;
/// assert!(orders.is_held_by_current_thread()?);
/// drop(guard);
/// assert!(!orders.is_locked()?);
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[derive(Clone)]
pub struct LockClient {
    inner: Arc<ClientState>,
}

impl LockClient {
    /// A client on `backend` with the default settings.
    pub fn new(backend: impl DistributedLock) -> Self {
        Self::builder(backend).build_unchecked()
    }

    /// A builder for a client on `backend`, to change its settings.
    pub fn builder(backend: impl DistributedLock) -> LockClientBuilder {
        LockClientBuilder::new(Arc::new(backend))
    }

    /// A handle on the lock called `name`. Nothing is sent to the backend until it is used;
    /// an invalid name is reported by the first call on the handle.
    ///
    /// The name is the store's key (on Redis the key itself, as Redisson lays locks out; on
    /// PostgreSQL a row's): a name already used by other data is refused with
    /// [`LockError::WrongKind`](crate::LockError::WrongKind), never overwritten.
    pub fn lock(&self, name: impl Into<String>) -> Lock {
        Lock::new(self.handle(name.into(), self.inner.lock_hand_off.plain_lock_kind()))
    }

    /// A handle on the fair lock called `name`: granted in arrival order, across every process
    /// that uses it (Redisson's `getFairLock`).
    pub fn fair_lock(&self, name: impl Into<String>) -> FairLock {
        FairLock::new(self.handle(name.into(), LockKind::Fair))
    }

    /// A handle on the fenced lock called `name` (Redisson's `getFencedLock`): the reentrant
    /// lock whose every new hold carries a strictly increasing fencing token.
    pub fn fenced_lock(&self, name: impl Into<String>) -> FencedLock {
        FencedLock::new(self.handle(name.into(), LockKind::Fenced))
    }

    /// A handle on the read-write lock called `name` (Redisson's `getReadWriteLock`): many
    /// readers, or one writer.
    pub fn read_write_lock(&self, name: impl Into<String>) -> ReadWriteLock {
        let name: String = name.into();
        ReadWriteLock::new(
            self.handle(name.clone(), LockKind::Read),
            self.handle(name, LockKind::Write),
        )
    }

    /// A handle on the semaphore called `name`, whose permits are leases (Redisson's
    /// `getPermitExpirableSemaphore`).
    pub fn semaphore(&self, name: impl Into<String>) -> Semaphore {
        Semaphore::new(self.handle(name.into(), LockKind::Semaphore))
    }

    /// A handle on the count-down latch called `name` (Redisson's `getCountDownLatch`).
    pub fn count_down_latch(&self, name: impl Into<String>) -> CountDownLatch {
        CountDownLatch::new(self.handle(name.into(), LockKind::Latch))
    }

    /// A handle on the leader election called `name`.
    pub fn leader_election(&self, name: impl Into<String>) -> LeaderElection {
        LeaderElection::new(self.handle(name.into(), LockKind::Election))
    }

    pub(crate) fn handle(&self, name: String, kind: LockKind) -> Handle {
        Handle::new(self.inner.clone(), name.into(), kind)
    }

    /// This client's UUID: the first half of the ids its holds and waiters have on the store
    /// (`<uuid>:<number>`).
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The client's name, as its record in the store gives it ([`LockClientBuilder::name`]).
    pub fn name(&self) -> &str {
        &self.inner.presence.record().name
    }

    /// The lease given to locks taken without an explicit one, renewed every third of it.
    pub fn watchdog_lease(&self) -> Duration {
        self.inner.watchdog_lease
    }

    /// How long a fair-lock waiter that waits without a bound keeps its place in the queue.
    pub fn fair_wait_timeout(&self) -> Duration {
        self.inner.fair_wait_timeout
    }

    /// How the client's plain locks pass from a holder to a waiter (see
    /// [`LockClientBuilder::lock_hand_off`]).
    pub fn lock_hand_off(&self) -> HandOff {
        self.inner.lock_hand_off
    }

    /// The clock drift allowance every lease deadline of this client keeps: the larger of the
    /// client's setting and the backend's.
    pub fn clock_drift(&self) -> ClockDrift {
        self.inner.drift
    }

    /// The watchdog's counters.
    pub fn watchdog_stats(&self) -> WatchdogStats {
        self.inner.watchdog.stats()
    }

    /// A receiver of this client's lease events from now on: leases lost (with why), renewals
    /// failing and recovering. Each call makes a new receiver that gets every event; it buffers
    /// [`LEASE_EVENT_BUFFER`](crate::LEASE_EVENT_BUFFER) events, and events that find it full are
    /// dropped (counted by [`lease_events_dropped`](LockClient::lease_events_dropped)).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use dlocks::{LeaseChange, LockClient, LossReason, ManualClock, MemoryBackend};
    ///
    /// let clock = ManualClock::new();
    /// let client = LockClient::new(MemoryBackend::with_clock(clock.clone()));
    /// let events = client.lease_events();
    /// let guard = client.lock("report").lock_with_lease(Duration::from_secs(5))?;
    /// clock.advance(Duration::from_secs(6));        // the lease runs out while held
    /// let event = events.try_recv().expect("told at once");
    /// assert_eq!(&*event.name, "report");
    /// assert!(matches!(event.change, LeaseChange::Lost { reason: LossReason::Expired }));
    /// assert!(guard.is_lost());
    /// # Ok::<(), dlocks::LockError>(())
    /// ```
    pub fn lease_events(&self) -> Receiver<LeaseEvent> {
        self.inner.events.subscribe()
    }

    /// Lease events dropped because a receiver's buffer was full.
    pub fn lease_events_dropped(&self) -> u64 {
        self.inner.events.dropped()
    }
}

impl fmt::Debug for LockClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClient")
            .field("id", &self.inner.id)
            .field("watchdog_lease", &self.inner.watchdog_lease)
            .finish_non_exhaustive()
    }
}

/// Settings for a [`LockClient`].
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use dlocks::{LockClient, MemoryBackend};
///
/// let client = LockClient::builder(MemoryBackend::new())
///     .watchdog_lease(Duration::from_secs(10))
///     .on_lease_event(|event| eprintln!("lock {}: {:?}", event.name, event.change))
///     .build()?;
/// assert_eq!(client.watchdog_lease(), Duration::from_secs(10));
/// # Ok::<(), dlocks::LockError>(())
/// ```
#[must_use = "a builder does nothing until `build` is called"]
pub struct LockClientBuilder {
    backend: Arc<dyn DistributedLock>,
    watchdog_lease: Duration,
    fair_wait_timeout: Duration,
    hand_off: HandOff,
    drift: ClockDrift,
    id: Option<String>,
    name: Option<String>,
    record: bool,
    callback: Option<LeaseCallback>,
    metric_name: Option<MetricName>,
}

impl LockClientBuilder {
    /// A builder for a client on an already shared backend.
    pub fn new(backend: Arc<dyn DistributedLock>) -> Self {
        LockClientBuilder {
            backend,
            watchdog_lease: DEFAULT_WATCHDOG_LEASE,
            fair_wait_timeout: DEFAULT_FAIR_WAIT_TIMEOUT,
            hand_off: HandOff::default(),
            drift: ClockDrift::DEFAULT,
            id: None,
            name: None,
            record: true,
            callback: None,
            metric_name: None,
        }
    }

    /// The lease of locks taken without an explicit one (default 30 s). The watchdog renews
    /// them every third of it; a holder that dies is replaced at most this long after.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// How long a fair-lock waiter that waits without a bound (`lock()`) keeps its place in the
    /// queue after the waiter ahead of it got the lock or left (default 5 minutes, Redisson's
    /// `fairLockWaitTimeout`). A waiter that waits with a bound keeps it for its own wait.
    ///
    /// The trade-off: a waiter that stops coming back holds up the queue for up to this long
    /// before it is dropped, so shorter is better for liveness (a dlock waiter whose process
    /// died costs less: a grant lease of at most 2 s on Redis and PostgreSQL, the few seconds
    /// of a lease its process kept alive on etcd; a Redisson waiter costs this); but a live
    /// waiter that is still waiting this long after the one ahead of it moved is taken for
    /// dead too, and goes to the back of the queue when it next tries, so it must be longer
    /// than the longest time a waiter is expected to wait behind one holder.
    pub fn fair_wait_timeout(mut self, timeout: Duration) -> Self {
        self.fair_wait_timeout = timeout;
        self
    }

    /// How the client's plain locks ([`LockClient::lock`]) pass from a holder to a waiter
    /// (default [`HandOff::Race`], Redisson's `RLock`): with [`HandOff::Queue`] they queue on the
    /// store, as [`FairLock`]s, and each release grants the lock to the longest waiter of any
    /// process. Every client of a name must be built with the same choice. Fenced locks keep
    /// the race. A backend without the fair lock (a RedLock) refuses the queue: `build` fails
    /// with [`LockError::InvalidArgument`].
    pub fn lock_hand_off(mut self, hand_off: HandOff) -> Self {
        self.hand_off = hand_off;
        self
    }

    /// How much faster the store's clock may run than this machine's during a lease (default
    /// and least: 1 % + 2 ms, [`ClockDrift::DEFAULT`]). Every local lease deadline is kept this
    /// far before the store's expiry, so a guard never believes in a lease the store has already
    /// ended. The backend may ask for more ([`DistributedLock::clock_drift`]); the larger is
    /// used.
    pub fn clock_drift(mut self, drift: ClockDrift) -> Self {
        self.drift = drift;
        self
    }

    /// Uses `id` instead of a fresh UUID as the client identity (hold ids are `<id>:<number>`).
    /// Two live clients must never share an id.
    pub fn client_id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// The client's name in the store's client records (default: the program's name), shown
    /// with its host and pid as the holder of its locks by inspection (`dlock status`,
    /// `dlock list`, `dlock top`): `billing-worker@host-7 4242` says more than a UUID.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Whether the client keeps its record in the store (default: yes, on stores that keep
    /// records): without it, inspection shows its holds by their hold ids alone, and the
    /// client writes nothing to the store but its locks.
    pub fn client_record(mut self, keep: bool) -> Self {
        self.record = keep;
        self
    }

    /// Calls `callback` with every lease event of the client (see
    /// [`LockClient::lease_events`]), on the thread that finds it: the watchdog's, or a caller's.
    /// Keep it short and do not take dlock locks in it; a panic in it is caught and logged.
    pub fn on_lease_event(
        mut self,
        callback: impl Fn(&LeaseEvent) + Send + Sync + 'static,
    ) -> Self {
        self.callback = Some(Arc::new(callback));
        self
    }

    /// Adds a `name` label to the client's metrics of each lock: `label(name)`, for example the
    /// name's prefix. Lock names are not labels by default: a series per lock name can be more
    /// than a metrics store keeps. (The metric names are in the crate's `metrics` docs.)
    ///
    /// # Examples
    ///
    /// ```
    /// use dlocks::testing::MemoryBackend;
    /// use dlocks::LockClient;
    ///
    /// // "orders:42" is reported under name="orders".
    /// let client = LockClient::builder(MemoryBackend::new())
    ///     .metric_name(|name| name.split(':').next().unwrap_or(name).to_owned())
    ///     .build()?;
    /// drop(client.lock("orders:42").lock()?);
    /// # Ok::<(), dlocks::LockError>(())
    /// ```
    pub fn metric_name(mut self, label: impl Fn(&str) -> String + Send + Sync + 'static) -> Self {
        self.metric_name = Some(Arc::new(label));
        self
    }

    /// The client, after checking the settings.
    pub fn build(self) -> Result<LockClient, LockError> {
        validate_lease("watchdog_lease", self.watchdog_lease)?;
        validate_lease("fair_wait_timeout", self.fair_wait_timeout)?;
        if self.watchdog_lease < MIN_WATCHDOG_LEASE {
            return Err(LockError::invalid(
                "watchdog_lease",
                format!(
                    "the watchdog lease must be at least {MIN_WATCHDOG_LEASE:?}, got {:?}",
                    self.watchdog_lease
                ),
            ));
        }
        if self.hand_off == HandOff::Queue && !self.backend.supports(LockKind::Fair) {
            return Err(LockError::invalid(
                "lock_hand_off",
                "queued plain locks are the store's fair lock, which this backend does not keep",
            ));
        }
        if let Some(id) = &self.id {
            if id.is_empty() || id.contains(':') {
                return Err(LockError::invalid(
                    "client_id",
                    format!("a client id must be non-empty and contain no ':', got {id:?}"),
                ));
            }
        }
        if let Some(name) = &self.name {
            if name.is_empty()
                || name.len() > MAX_CLIENT_NAME_LEN
                || name.chars().any(char::is_control)
            {
                return Err(LockError::invalid(
                    "name",
                    format!(
                        "a client name must be 1 to {MAX_CLIENT_NAME_LEN} bytes without control \
                         characters, got {name:?}"
                    ),
                ));
            }
        }
        Ok(self.build_unchecked())
    }

    fn build_unchecked(self) -> LockClient {
        static NEXT_KEY: AtomicU64 = AtomicU64::new(1);
        let clock = self.backend.clock();
        let id = self.id.unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let events = Arc::new(LeaseEvents::new(self.callback));
        let drift = self.drift.max(self.backend.clock_drift());
        crate::engine::metrics::describe();
        // Every step the client and its watchdog make is timed in the metrics.
        let backend: Arc<dyn DistributedLock> = Arc::new(MeteredBackend::new(self.backend));
        let record = ClientRecord::new(
            id.clone(),
            self.name.unwrap_or_else(program_name),
            host_name(),
            std::process::id(),
        );
        // The record outlives the client's last refresh by a watchdog lease (at least a few
        // seconds, so a short lease does not make it write its record many times a second).
        let presence = Presence::new(
            backend.clone(),
            record,
            self.watchdog_lease.max(MIN_RECORD_TTL),
            self.record,
        );
        LockClient {
            inner: Arc::new(ClientState {
                id,
                key: NEXT_KEY.fetch_add(1, Ordering::Relaxed),
                watchdog: Watchdog::new(
                    backend.clone(),
                    clock.clone(),
                    self.watchdog_lease,
                    events.clone(),
                ),
                backend,
                clock,
                watchdog_lease: self.watchdog_lease,
                fair_wait_timeout: self.fair_wait_timeout,
                lock_hand_off: self.hand_off,
                drift,
                wait_queues: WaitQueues::default(),
                step_aside: StepAside::default(),
                events,
                watch_signals: WatchSignals::default(),
                metric_name: self.metric_name,
                presence,
                #[cfg(feature = "async")]
                workers: crate::engine::workers::Workers::new(),
            }),
        }
    }
}

impl fmt::Debug for LockClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockClientBuilder")
            .field("watchdog_lease", &self.watchdog_lease)
            .field("fair_wait_timeout", &self.fair_wait_timeout)
            .field("clock_drift", &self.drift)
            .field("id", &self.id)
            .field("name", &self.name)
            .field("client_record", &self.record)
            .field("on_lease_event", &self.callback.is_some())
            .field("metric_name", &self.metric_name.is_some())
            .finish_non_exhaustive()
    }
}
