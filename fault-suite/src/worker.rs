//! A worker process: T threads each doing acquire → read the register → work → write it →
//! release, until the run's end, logging every operation.
//!
//! The worker is this same program started with [`WORKER_ENV`] holding its [`WorkerSpec`] as
//! JSON. Reply faults (slow or lost replies) are injected in the worker itself, through
//! `dlocks::testing::FaultyBackend` around its backend, during the windows its spec gives.

use std::fs::File;
use std::io::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{Duration, Instant};

use dlocks::backend::DistributedLock;
use dlocks::testing::{Fault, FaultyBackend, Op};
use dlocks::{
    FencedLockGuard, Leadership, LockClient, LockClientBuilder, LockError, LockGuard, Permit,
};
use parking_lot::Mutex;
use serde_json::{json, Value};

use crate::history::{now_us, Outcome, Record};
use crate::options::Mode;
use crate::register::{self, Access, Register};
use crate::seeded_bug::SeededBug;
use crate::service::Backend;

/// The environment variable that makes this program a worker.
pub const WORKER_ENV: &str = "DLOCK_FAULT_SUITE_WORKER";

/// The name of the lock every worker takes.
pub const LOCK_NAME: &str = "suite:lock";

/// The permits of the semaphore mode's semaphore (named [`LOCK_NAME`] too).
pub const PERMITS: u32 = 2;

/// A window of reply faults, in wall-clock µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyFaults {
    pub from_us: u64,
    pub to_us: u64,
    /// Late replies (a quarter lease) when false; lost replies (one every 100 ms) when true.
    pub lose: bool,
}

/// What a worker is told to do.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub lock_url: String,
    pub register_url: String,
    pub threads: usize,
    pub mode: Mode,
    pub lease: Duration,
    /// How long one acquire waits for the lock.
    pub wait: Duration,
    /// The longest work between the read and the write (each operation draws its own, from
    /// 1 ms up to this: short and long critical sections both meet the faults).
    pub work: Duration,
    pub response_timeout: Duration,
    pub replica_sync: bool,
    pub replica_sync_timeout: Duration,
    /// Wall-clock µs at which to stop starting operations.
    pub until_us: u64,
    /// A file the run writes a later stop into when a fault outlasted its plan (a failover
    /// slower than planned): read before each operation.
    pub until_path: String,
    pub log_path: String,
    pub reply_faults: Vec<ReplyFaults>,
    /// A defect the worker's backend runs with on purpose.
    pub seeded_bug: Option<SeededBug>,
}

impl WorkerSpec {
    /// When to stop starting operations: `until_us`, or the later stop the run wrote since.
    pub fn stop_us(&self) -> u64 {
        std::fs::read_to_string(&self.until_path)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .map_or(self.until_us, |later: u64| later.max(self.until_us))
    }

    pub fn to_json(&self) -> String {
        json!({
            "lock_url": self.lock_url,
            "register_url": self.register_url,
            "threads": self.threads,
            "mode": self.mode.name(),
            "lease_ms": self.lease.as_millis() as u64,
            "wait_ms": self.wait.as_millis() as u64,
            "work_ms": self.work.as_millis() as u64,
            "response_ms": self.response_timeout.as_millis() as u64,
            "replica_sync": self.replica_sync,
            "sync_timeout_ms": self.replica_sync_timeout.as_millis() as u64,
            "until_us": self.until_us,
            "until_path": self.until_path,
            "log_path": self.log_path,
            "seeded_bug": self.seeded_bug.map(SeededBug::name),
            "reply_faults": self.reply_faults.iter().map(|w| json!({
                "from_us": w.from_us, "to_us": w.to_us, "lose": w.lose,
            })).collect::<Vec<_>>(),
        })
        .to_string()
    }

    pub fn from_json(text: &str) -> Option<WorkerSpec> {
        let value: Value = serde_json::from_str(text).ok()?;
        let text = |key: &str| value.get(key)?.as_str().map(str::to_owned);
        let number = |key: &str| value.get(key)?.as_u64();
        let millis = |key: &str| number(key).map(Duration::from_millis);
        let reply_faults = value
            .get("reply_faults")?
            .as_array()?
            .iter()
            .filter_map(|w| {
                Some(ReplyFaults {
                    from_us: w.get("from_us")?.as_u64()?,
                    to_us: w.get("to_us")?.as_u64()?,
                    lose: w.get("lose")?.as_bool()?,
                })
            })
            .collect();
        Some(WorkerSpec {
            lock_url: text("lock_url")?,
            register_url: text("register_url")?,
            threads: usize::try_from(number("threads")?).ok()?,
            mode: Mode::parse(&text("mode")?)?,
            lease: millis("lease_ms")?,
            wait: millis("wait_ms")?,
            work: millis("work_ms")?,
            response_timeout: millis("response_ms")?,
            replica_sync: value.get("replica_sync")?.as_bool()?,
            replica_sync_timeout: millis("sync_timeout_ms")?,
            until_us: number("until_us")?,
            until_path: text("until_path")?,
            log_path: text("log_path")?,
            reply_faults,
            seeded_bug: match value.get("seeded_bug")? {
                Value::Null => None,
                named => Some(SeededBug::parse(named.as_str()?)?),
            },
        })
    }
}

/// Runs the worker described by `spec_json`; the process's exit code.
pub fn run(spec_json: &str) -> i32 {
    let Some(spec) = WorkerSpec::from_json(spec_json) else {
        eprintln!("worker: unreadable spec {spec_json:?}");
        return 2;
    };
    let log = match File::create(&spec.log_path) {
        Ok(file) => Arc::new(Mutex::new(file)),
        Err(error) => {
            eprintln!("worker: cannot write {}: {error}", spec.log_path);
            return 2;
        }
    };
    let backend = match connect(&spec) {
        Ok(backend) => backend,
        Err(error) => {
            eprintln!("worker: cannot connect to {}: {error}", spec.lock_url);
            return 2;
        }
    };
    let backend = match spec.seeded_bug {
        Some(bug) => bug.wrap(backend),
        None => backend,
    };
    let faulty = FaultyBackend::new(backend);
    let client = match LockClientBuilder::new(Arc::new(faulty.clone()))
        .watchdog_lease(spec.lease)
        .build()
    {
        Ok(client) => client,
        Err(error) => {
            eprintln!("worker: {error}");
            return 2;
        }
    };
    let spec = Arc::new(spec);
    std::thread::scope(|scope| {
        if !spec.reply_faults.is_empty() {
            let (spec, faulty) = (spec.clone(), faulty.clone());
            scope.spawn(move || inject_reply_faults(&spec, &faulty));
        }
        for thread in 0..spec.threads {
            let (spec, client, log) = (spec.clone(), client.clone(), log.clone());
            scope.spawn(move || work(&spec, &client, thread, &log));
        }
    });
    0
}

/// Connects to the backend of the spec's URL, retrying while the lock server is not there yet
/// (a worker started in the middle of a fault).
fn connect(spec: &WorkerSpec) -> Result<Arc<dyn DistributedLock>, LockError> {
    let deadline = Instant::now() + spec.lease * 10;
    loop {
        let result = (Backend::of_url(&spec.lock_url).connect)(spec);
        match result {
            Err(error) if error.is_unavailable() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// During each window: late replies on every step, or one lost reply every 100 ms, taking
/// turns between acquires, releases and renewals.
fn inject_reply_faults(spec: &WorkerSpec, faulty: &FaultyBackend) {
    let ops = [Op::TryAcquire, Op::Release, Op::Renew];
    for window in &spec.reply_faults {
        sleep_until(window.from_us);
        if window.lose {
            let mut turn = 0;
            while now_us() < window.to_us {
                faulty.inject(Fault::lose_reply(ops[turn % ops.len()]).times(1));
                turn += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
        } else {
            for op in ops {
                faulty.inject(Fault::delay_reply(op, spec.lease / 4));
            }
            sleep_until(window.to_us);
        }
        faulty.clear();
    }
}

fn sleep_until(at_us: u64) {
    let now = now_us();
    if at_us > now {
        std::thread::sleep(Duration::from_micros(at_us - now));
    }
}

fn work(spec: &WorkerSpec, client: &LockClient, thread: usize, log: &Mutex<File>) {
    let pid = std::process::id();
    let mut register = None;
    let mut sequence = 0u64;
    while now_us() < spec.stop_us() {
        sequence += 1;
        let hold = format!("{pid}:{thread}:{sequence}");
        let start = now_us();
        let result = catch_unwind(AssertUnwindSafe(|| {
            operation(spec, client, &mut register, &hold, pid)
        }));
        let record = match result {
            Ok(record) => record,
            Err(panic) => Record {
                hold,
                pid,
                start,
                acquired: None,
                written: None,
                end: now_us(),
                token: None,
                outcome: Outcome::Panic,
                release_error: None,
                error: Some(panic_message(&panic)),
                longest_call_us: 0,
            },
        };
        let failed = matches!(record.outcome, Outcome::Error);
        if record
            .error
            .as_deref()
            .is_some_and(|error| error.starts_with("register:"))
        {
            register = None;
        }
        let mut file = log.lock();
        let _ = writeln!(file, "{}", record.to_line());
        let _ = file.flush();
        drop(file);
        if failed {
            // A server that is down refuses at once: do not spin.
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A held lock of either mode.
enum Held {
    Plain(LockGuard),
    Fenced(FencedLockGuard),
    Permit(Permit),
    Leader(Leadership),
}

impl Held {
    fn token(&self) -> Option<u64> {
        match self {
            Held::Fenced(guard) => Some(guard.token()),
            Held::Leader(leadership) => Some(leadership.token()),
            Held::Plain(_) | Held::Permit(_) => None,
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            Held::Plain(guard) => guard.is_lost(),
            Held::Fenced(guard) => guard.is_lost(),
            Held::Permit(permit) => permit.is_lost(),
            Held::Leader(leadership) => leadership.is_lost(),
        }
    }

    fn unlock(self) -> Result<(), LockError> {
        match self {
            Held::Plain(guard) => guard.unlock(),
            Held::Fenced(guard) => guard.unlock(),
            Held::Permit(permit) => permit.release(),
            Held::Leader(leadership) => leadership.resign(),
        }
    }
}

/// Times one call of an operation, keeping the longest.
struct Calls {
    longest: Duration,
}

impl Calls {
    fn time<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let result = f();
        self.longest = self.longest.max(started.elapsed());
        result
    }
}

fn operation(
    spec: &WorkerSpec,
    client: &LockClient,
    register: &mut Option<Box<dyn Register>>,
    hold: &str,
    pid: u32,
) -> Record {
    let mut calls = Calls {
        longest: Duration::ZERO,
    };
    let mut record = Record {
        hold: hold.to_owned(),
        pid,
        start: now_us(),
        acquired: None,
        written: None,
        end: 0,
        token: None,
        outcome: Outcome::Error,
        release_error: None,
        error: None,
        longest_call_us: 0,
    };
    let finish = |mut record: Record, calls: &Calls, outcome: Outcome| {
        record.outcome = outcome;
        record.end = now_us();
        record.longest_call_us = calls.longest.as_micros() as u64;
        record
    };
    if spec.mode == Mode::Latch {
        let outcome = latch_steps(spec, client, hold, &mut calls, &mut record);
        return finish(record, &calls, outcome);
    }
    let acquired = calls.time(|| match spec.mode {
        Mode::Fenced => client
            .fenced_lock(LOCK_NAME)
            .try_lock_for(spec.wait)
            .map(|guard| guard.map(Held::Fenced)),
        Mode::Plain | Mode::Checked => client
            .lock(LOCK_NAME)
            .try_lock_for(spec.wait)
            .map(|guard| guard.map(Held::Plain)),
        Mode::Semaphore => {
            let semaphore = client.semaphore(LOCK_NAME);
            // Set again after a server restart lost it (a no-op while it is set).
            semaphore.try_set_permits(PERMITS).and_then(|_| {
                semaphore
                    .try_acquire_for(spec.wait)
                    .map(|permit| permit.map(Held::Permit))
            })
        }
        Mode::Election => client
            .leader_election(LOCK_NAME)
            .try_campaign_for(hold, spec.wait)
            .map(|leadership| leadership.map(Held::Leader)),
        Mode::Latch => unreachable!("the latch mode takes no lock"),
    });
    let held = match acquired {
        Ok(Some(held)) => held,
        Ok(None) => return finish(record, &calls, Outcome::Busy),
        Err(error) => {
            record.error = Some(error.to_string());
            return finish(record, &calls, Outcome::Error);
        }
    };
    record.acquired = Some(now_us());
    record.token = held.token();
    if !spec.mode.uses_register() {
        // No register: the section is the time the worker believed it held a permit or led,
        // up to its last look at it.
        std::thread::sleep(work_time(spec));
        let outcome = if held.is_lost() {
            Outcome::Abandoned
        } else {
            record.written = Some(now_us());
            Outcome::Done
        };
        if let Err(error) = calls.time(|| held.unlock()) {
            record.release_error = Some(error.to_string());
        }
        return finish(record, &calls, outcome);
    }
    let register = match register {
        Some(register) => register,
        None => match register::connect(&spec.register_url) {
            Ok(connected) => register.insert(connected),
            Err(error) => {
                record.error = Some(format!("register: {error}"));
                let _ = held.unlock();
                return finish(record, &calls, Outcome::Error);
            }
        },
    };
    let outcome = match calls.time(|| register.read(hold, record.token, pid)) {
        Ok(Access::Accepted { value, .. }) => {
            std::thread::sleep(work_time(spec));
            if spec.mode == Mode::Checked && held.is_lost() {
                Outcome::Abandoned
            } else {
                let written = calls.time(|| register.write(hold, record.token, value, value + 1));
                record.written = Some(now_us());
                match written {
                    Ok(Access::Accepted { .. }) => Outcome::Done,
                    Ok(Access::Refused) => Outcome::Refused,
                    Err(error) => {
                        record.error = Some(format!("register: {error}"));
                        Outcome::Error
                    }
                }
            }
        }
        Ok(Access::Refused) => Outcome::Refused,
        Err(error) => {
            record.error = Some(format!("register: {error}"));
            Outcome::Error
        }
    };
    if let Err(error) = calls.time(|| held.unlock()) {
        record.release_error = Some(error.to_string());
    }
    finish(record, &calls, outcome)
}

/// The latch mode's operation on a latch of its own: count 2, one count-down, the count read
/// (an open latch is opened early), work, the second count-down, and the wait for it to open.
fn latch_steps(
    spec: &WorkerSpec,
    client: &LockClient,
    hold: &str,
    calls: &mut Calls,
    record: &mut Record,
) -> Outcome {
    let latch = client.count_down_latch(format!("{LOCK_NAME}:latch:{hold}"));
    let mut failed = |error: String| {
        record.error = Some(error);
        Outcome::Error
    };
    match calls.time(|| latch.try_set_count(2)) {
        Ok(true) => {}
        Ok(false) => return failed("a new latch already had a count".to_owned()),
        Err(error) => return failed(error.to_string()),
    }
    record.acquired = Some(now_us());
    if let Err(error) = calls.time(|| latch.count_down()) {
        return failed(error.to_string());
    }
    match calls.time(|| latch.count()) {
        Ok(0) => return Outcome::OpenedEarly,
        Ok(1) => {}
        Ok(count) => return failed(format!("count {count} after one of two count-downs")),
        Err(error) => return failed(error.to_string()),
    }
    std::thread::sleep(work_time(spec));
    if let Err(error) = calls.time(|| latch.count_down()) {
        return failed(error.to_string());
    }
    match calls.time(|| latch.wait_for(spec.wait)) {
        Ok(true) => {
            record.written = Some(now_us());
            Outcome::Done
        }
        Ok(false) => failed("the latch did not open after both count-downs".to_owned()),
        Err(error) => failed(error.to_string()),
    }
}

/// Most critical sections are short (1 ms up to a quarter lease); one in ten lasts two to four
/// leases, so that it depends on the watchdog's renewals, as long jobs do.
fn work_time(spec: &WorkerSpec) -> Duration {
    if fastrand::u8(0..10) == 0 {
        spec.lease * 2 + (spec.lease * 2).mul_f64(fastrand::f64())
    } else {
        Duration::from_millis(fastrand::u64(1..=spec.work.as_millis().max(1) as u64))
    }
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".to_owned())
}
