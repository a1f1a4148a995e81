//! Percentiles of latency samples.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Median and 99th percentile of a set of samples, in microseconds.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub p50_us: f64,
    pub p99_us: f64,
}

impl Summary {
    pub fn of_us(mut samples: Vec<f64>) -> Summary {
        if samples.is_empty() {
            return Summary::default();
        }
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
        Summary {
            p50_us: at(0.50),
            p99_us: at(0.99),
        }
    }

    pub fn of(samples: &[Duration]) -> Summary {
        Summary::of_us(samples.iter().map(|d| d.as_secs_f64() * 1e6).collect())
    }
}

/// Times `iterations` runs of `f` (after `warmup` unrecorded ones).
pub fn time_each(warmup: usize, iterations: usize, mut f: impl FnMut()) -> Summary {
    for _ in 0..warmup {
        f();
    }
    let mut samples = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let start = std::time::Instant::now();
        f();
        samples.push(start.elapsed());
    }
    Summary::of(&samples)
}

/// Times `iterations` rounds of the operations `ops`, one of each per round (after `warmup`
/// unrecorded rounds): all of them see the same machine state, so their ratios are not skewed
/// by the scheduler moving the client and the servers between CPUs in the middle of a run.
pub fn interleaved(warmup: usize, iterations: usize, ops: &mut [&mut dyn FnMut()]) -> Vec<Summary> {
    for _ in 0..warmup {
        for op in ops.iter_mut() {
            op();
        }
    }
    let mut samples: Vec<Vec<std::time::Duration>> =
        ops.iter().map(|_| Vec::with_capacity(iterations)).collect();
    for _ in 0..iterations {
        for (op, samples) in ops.iter_mut().zip(&mut samples) {
            let start = std::time::Instant::now();
            op();
            samples.push(start.elapsed());
        }
    }
    samples.iter().map(|s| Summary::of(s)).collect()
}

/// Microseconds, printed with a sensible precision.
pub fn us(value: f64) -> String {
    if value >= 10_000.0 {
        format!("{:.1} ms", value / 1000.0)
    } else if value >= 100.0 {
        format!("{value:.0} µs")
    } else {
        format!("{value:.1} µs")
    }
}

/// Runs `make(i)()` in a loop on `threads` threads for `run_for`; operations per second.
pub fn ops_per_second<F, Op>(threads: usize, run_for: Duration, make: F) -> f64
where
    F: Fn(usize) -> Op + Sync,
    Op: FnMut(),
{
    let stop = AtomicBool::new(false);
    let done = AtomicU64::new(0);
    let started = Instant::now();
    thread::scope(|s| {
        for i in 0..threads {
            let (stop, done, make) = (&stop, &done, &make);
            s.spawn(move || {
                let mut op = make(i);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    op();
                    n += 1;
                }
                done.fetch_add(n, Ordering::Relaxed);
            });
        }
        thread::sleep(run_for);
        stop.store(true, Ordering::Relaxed);
    });
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}
