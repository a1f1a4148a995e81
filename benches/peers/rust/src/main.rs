//! Peer driver for the dlock benchmark: the `rslock` crate (async, tokio), default settings.
//!
//! ```text
//! rslock-peer --url redis://127.0.0.1:PORT --scenario pair --iterations N
//! rslock-peer --url redis://127.0.0.1:PORT --scenario handoff --workers W --duration-ms D --hold-ms 1
//! ```
//!
//! Prints exactly one JSON line on stdout; logs go to stderr. See ../README.md.

use std::io::{Read, Write};
use std::process::exit;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rslock::{LockError, LockManager};
use serde_json::json;
use tokio::sync::watch;

const WARMUP: usize = 100;
/// TTL passed to `lock()` (rslock has no default TTL; 10 s like the redlock driver).
const TTL: Duration = Duration::from_millis(10_000);
/// A worker still busy this long after the deadline is abandoned.
const ABANDON_AFTER: Duration = Duration::from_secs(10);

macro_rules! log {
    ($($t:tt)*) => { eprintln!("rslock-peer: {}", format!($($t)*)) };
}

struct Args {
    url: String,
    scenario: String,
    iterations: usize,
    workers: usize,
    duration_ms: u64,
    hold_ms: f64,
}

fn usage_exit(msg: &str) -> ! {
    log!("{msg}");
    eprintln!(
        "usage: rslock-peer --url redis://HOST:PORT --scenario pair|handoff \
         [--iterations N] [--workers W --duration-ms D --hold-ms H] [--lib rslock]"
    );
    exit(2)
}

fn num<T: std::str::FromStr>(k: &str, v: &str) -> T {
    v.parse()
        .unwrap_or_else(|_| usage_exit(&format!("bad value for {k}: {v}")))
}

fn parse_args() -> Args {
    let mut a = Args {
        url: String::new(),
        scenario: String::new(),
        iterations: 1000,
        workers: 2,
        duration_ms: 3000,
        hold_ms: 1.0,
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        if k == "-h" || k == "--help" {
            usage_exit("help");
        }
        let v = it
            .next()
            .unwrap_or_else(|| usage_exit(&format!("missing value for {k}")));
        match k.as_str() {
            "--lib" if v == "rslock" => {}
            "--lib" => usage_exit(&format!("unsupported --lib {v} (only rslock)")),
            "--url" => a.url = v.clone(),
            "--scenario" => a.scenario = v.clone(),
            "--iterations" => a.iterations = num(&k, &v),
            "--workers" => a.workers = num(&k, &v),
            "--duration-ms" => a.duration_ms = num(&k, &v),
            "--hold-ms" => a.hold_ms = num(&k, &v),
            _ => usage_exit(&format!("unknown argument {k}")),
        }
    }
    if a.url.is_empty() {
        usage_exit("--url is required");
    }
    if a.scenario != "pair" && a.scenario != "handoff" {
        usage_exit("--scenario must be pair or handoff");
    }
    if a.iterations == 0 || a.workers == 0 || a.duration_ms == 0 || !(a.hold_ms >= 0.0) {
        usage_exit("numeric arguments must be positive");
    }
    a
}

fn library() -> String {
    format!("rslock {}", env!("RSLOCK_VERSION"))
}

fn lock_name() -> String {
    let mut b = [0u8; 6];
    let ok = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok();
    let suffix: String = if ok {
        b.iter().map(|x| format!("{x:02x}")).collect()
    } else {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        format!("{t:x}")
    };
    format!("dlock-bench:rslock:{}:{}", std::process::id(), suffix)
}

fn us(d: Duration) -> f64 {
    d.as_nanos() as f64 / 1000.0
}

/// One `LockManager` (one multiplexed connection per server, rslock defaults: 3 tries, 0–200 ms
/// random delay). `url` may list several servers, comma-separated.
fn manager(url: &str) -> LockManager {
    LockManager::new(url.split(',').map(str::to_string).collect::<Vec<_>>())
}

/// Fail fast (exit 1) when the server cannot be reached. rslock reports a connection failure as
/// `Unavailable`, so take and drop an uncontended probe lock that nobody else uses.
async fn check_reachable(rl: &LockManager, name: &str) {
    let probe = format!("{name}:probe");
    match rl.lock(probe.as_bytes(), TTL).await {
        Ok(l) => rl.unlock(&l).await,
        Err(e) => {
            log!("cannot reach Redis (uncontended probe lock failed: {e:?})");
            exit(1);
        }
    }
}

async fn pair(a: &Args) -> serde_json::Value {
    let rl = manager(&a.url);
    let name = lock_name();
    check_reachable(&rl, &name).await;
    let mut samples = Vec::with_capacity(a.iterations);
    for i in 0..WARMUP + a.iterations {
        let t0 = Instant::now();
        let lock = match rl.lock(name.as_bytes(), TTL).await {
            Ok(l) => l,
            Err(e) => {
                log!("uncontended lock failed: {e:?}");
                exit(1);
            }
        };
        rl.unlock(&lock).await;
        let dt = t0.elapsed();
        if i >= WARMUP {
            samples.push(us(dt));
        }
    }
    json!({"library": library(), "scenario": "pair", "samples_us": samples})
}

#[derive(Default)]
struct State {
    inside: i64,
    violations: u64,
    failures: u64,
    errors: u64,
    last_holder: Option<usize>,
    last_rel: Option<Instant>,
    handoffs: Vec<f64>,
    max_wait: Duration,
    acquisitions: Vec<u64>,
    finished: Vec<bool>,
}

async fn handoff(a: &Args) -> serde_json::Value {
    let name = Arc::new(lock_name());
    let st = Arc::new(Mutex::new(State {
        acquisitions: vec![0; a.workers],
        finished: vec![false; a.workers],
        ..Default::default()
    }));
    // Acquisition counter; workers waiting outside watch it change.
    let (seq_tx, _) = watch::channel(0u64);
    let seq_tx = Arc::new(seq_tx);
    let hold = Duration::from_secs_f64(a.hold_ms / 1000.0);
    let managers: Vec<LockManager> = (0..a.workers).map(|_| manager(&a.url)).collect();
    for rl in &managers {
        check_reachable(rl, &name).await;
    }

    let start = Instant::now();
    let deadline = start + Duration::from_millis(a.duration_ms);
    let mut handles = Vec::new();
    for (id, rl) in managers.into_iter().enumerate() {
        let (st, name, seq_tx) = (st.clone(), name.clone(), seq_tx.clone());
        handles.push(tokio::spawn(async move {
            let mut seq_rx = seq_tx.subscribe();
            while Instant::now() < deadline {
                let t_try = Instant::now();
                let lock = loop {
                    match rl.lock(name.as_bytes(), TTL).await {
                        Ok(l) => break l,
                        // rslock gave up after its retries: count it and retry at once.
                        Err(LockError::Unavailable) => st.lock().unwrap().failures += 1,
                        Err(e) => {
                            st.lock().unwrap().errors += 1;
                            log!("worker {id}: lock error: {e:?}");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                };
                let t_acq = Instant::now();
                let my_seq;
                {
                    let mut s = st.lock().unwrap();
                    s.inside += 1;
                    if s.inside > 1 {
                        s.violations += 1;
                    }
                    s.max_wait = s.max_wait.max(t_acq - t_try);
                    if let (Some(prev), Some(rel)) = (s.last_holder, s.last_rel) {
                        if prev != id {
                            s.handoffs.push(us(t_acq.saturating_duration_since(rel)));
                        }
                    }
                    s.last_holder = Some(id);
                    s.acquisitions[id] += 1;
                    let mut n = 0;
                    seq_tx.send_modify(|v| {
                        *v += 1;
                        n = *v;
                    });
                    my_seq = n;
                }
                if !hold.is_zero() {
                    tokio::time::sleep(hold).await;
                }
                {
                    let mut s = st.lock().unwrap();
                    s.inside -= 1;
                    s.last_rel = Some(Instant::now());
                }
                rl.unlock(&lock).await;
                // Forced hand-off: wait outside until another worker has acquired.
                let _ = tokio::time::timeout_at(
                    deadline.into(),
                    seq_rx.wait_for(|v| *v > my_seq),
                )
                .await;
            }
            st.lock().unwrap().finished[id] = true;
        }));
    }
    let all = futures::future::join_all(handles);
    if tokio::time::timeout_at((deadline + ABANDON_AFTER).into(), all)
        .await
        .is_err()
    {
        log!("some worker(s) still busy {ABANDON_AFTER:?} after the deadline: abandoned");
    }
    let elapsed = start.elapsed();
    let s = st.lock().unwrap();
    let abandoned = s.finished.iter().filter(|f| !**f).count();
    json!({
        "library": library(),
        "scenario": "handoff",
        "workers": a.workers,
        "handoff_us": s.handoffs,
        "acquisitions": s.acquisitions,
        "max_wait_us": us(s.max_wait),
        "failures": s.failures,
        "errors": s.errors,
        "violations": s.violations,
        "abandoned": abandoned,
        "elapsed_s": elapsed.as_secs_f64(),
    })
}

fn main() {
    let a = parse_args();
    // Default multi-thread runtime (one worker thread per core); the workers are tokio tasks.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let out = rt.block_on(async {
        if a.scenario == "pair" {
            pair(&a).await
        } else {
            handoff(&a).await
        }
    });
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{out}");
    let _ = stdout.flush();
    // Abandoned tasks may still be parked in the runtime: leave without waiting for them.
    exit(0);
}
