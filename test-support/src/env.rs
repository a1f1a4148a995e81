//! A backend under test, seen the same way by every conformance test.
//!
//! Time passes only through [`TestEnv::advance`]: memory runs move a `ManualClock` (no sleeping,
//! fully deterministic), real-clock runs (memory on the system clock, Redis) really wait. Durations
//! in tests are written as multiples of [`TestEnv::unit`], so each backend picks a scale its clock
//! can resolve.

use std::sync::Arc;
use std::time::Duration;

use dlocks::backend::DistributedLock;
use dlocks::testing::FaultyBackend;
use dlocks::{LockClient, LockClientBuilder, ManualClock, MemoryBackend};

/// A store that several clients (standing in for processes) share, and its time.
pub trait TestEnv: Send + Sync {
    /// The backend's name, for messages.
    fn name(&self) -> &'static str;

    /// The time scale of the tests: leases and waits are small multiples of it.
    fn unit(&self) -> Duration;

    /// The shared store.
    fn backend(&self) -> Arc<dyn DistributedLock>;

    /// The shared store behind a `FaultyBackend`, whose delays pass on the store's time (a
    /// manual clock is moved, a real one waited on).
    fn faulty(&self) -> FaultyBackend {
        FaultyBackend::new(self.backend())
    }

    /// A new client on the shared store (a new identity, like a new process), with the given
    /// watchdog lease.
    fn client_with_watchdog(&self, watchdog_lease: Duration) -> LockClient {
        LockClientBuilder::new(self.backend())
            .watchdog_lease(watchdog_lease)
            .build()
            .expect("valid test watchdog lease")
    }

    /// A new client with a watchdog lease of 60 units: a case that does not wait for a lease
    /// to end keeps its holds through the pauses of a loaded machine (a host can keep a
    /// 2-core VM off its CPUs for a few seconds, longer than a few units); one that waits for
    /// a watchdog lease to end asks for a short one with [`TestEnv::client_with_watchdog`].
    fn client(&self) -> LockClient {
        self.client_with_watchdog(self.unit() * 60)
    }

    /// Lets `by` pass: advances a manual clock (returning once the threads it woke settled),
    /// or, by default, sleeps for real.
    fn advance(&self, by: Duration) {
        std::thread::sleep(by);
    }

    /// Returns once `count` threads are blocked waiting: exactly known on a manual clock; on a
    /// real clock nobody can tell, so by default it gives them a unit to get there.
    fn await_sleepers(&self, _count: usize) {
        std::thread::sleep(self.unit());
    }

    /// Whether time is virtual, so assertions on exact instants are meaningful.
    fn is_virtual_time(&self) -> bool {
        false
    }
}

/// The memory backend on a `ManualClock`.
pub struct ManualMemory {
    pub clock: ManualClock,
    pub backend: MemoryBackend,
}

impl ManualMemory {
    pub fn new() -> Self {
        let clock = ManualClock::new();
        let backend = MemoryBackend::with_clock(clock.clone());
        ManualMemory { clock, backend }
    }
}

impl Default for ManualMemory {
    fn default() -> Self {
        Self::new()
    }
}

impl TestEnv for ManualMemory {
    fn name(&self) -> &'static str {
        "memory (manual clock)"
    }

    fn unit(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn backend(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.backend.clone())
    }

    fn faulty(&self) -> FaultyBackend {
        FaultyBackend::with_manual_clock(self.backend.clone(), self.clock.clone())
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    fn await_sleepers(&self, count: usize) {
        assert!(
            self.clock.wait_for_sleepers(count),
            "{count} threads did not start waiting (have {})",
            self.clock.sleepers()
        );
    }

    fn is_virtual_time(&self) -> bool {
        true
    }
}

/// The memory backend on the system clock.
pub struct RealMemory {
    pub backend: MemoryBackend,
}

impl RealMemory {
    pub fn new() -> Self {
        RealMemory {
            backend: MemoryBackend::new(),
        }
    }
}

impl Default for RealMemory {
    fn default() -> Self {
        Self::new()
    }
}

impl TestEnv for RealMemory {
    fn name(&self) -> &'static str {
        "memory (system clock)"
    }

    fn unit(&self) -> Duration {
        // Leases of a few units must survive a 2-core VM whose host steals CPU time.
        Duration::from_millis(120)
    }

    fn backend(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.backend.clone())
    }
}
