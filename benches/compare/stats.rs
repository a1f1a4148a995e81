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

/// How many blocks an alternated sampling is cut into for its per-block ratios.
pub const BLOCKS: usize = 10;

/// Times `iterations` rounds of the operations `ops`, one of each per round (after `warmup`
/// unrecorded rounds): all of them see the same machine state, so their ratios are not skewed
/// by the scheduler moving the client and the servers between CPUs in the middle of a run.
/// The rounds are cut into [`BLOCKS`] blocks, whose medians give the per-block ratios.
pub fn interleaved(warmup: usize, iterations: usize, ops: &mut [&mut dyn FnMut()]) -> Alternated {
    for _ in 0..warmup {
        for op in ops.iter_mut() {
            op();
        }
    }
    let mut samples: Vec<Vec<Duration>> =
        ops.iter().map(|_| Vec::with_capacity(iterations)).collect();
    for _ in 0..iterations {
        for (op, samples) in ops.iter_mut().zip(&mut samples) {
            let start = Instant::now();
            op();
            samples.push(start.elapsed());
        }
    }
    let per_block = iterations.div_ceil(BLOCKS).max(1);
    let blocks = (0..iterations.div_ceil(per_block))
        .map(|block| {
            let range = block * per_block..((block + 1) * per_block).min(iterations);
            samples
                .iter()
                .map(|s| Summary::of(&s[range.clone()]).p50_us)
                .collect()
        })
        .collect();
    Alternated {
        summaries: samples.iter().map(|s| Summary::of(s)).collect(),
        blocks,
    }
}

/// Runs `ops` in turns, `blocks` times; each call measures one block and returns its median
/// in microseconds. For things measured by another process (a peer's driver), which cannot be
/// interleaved call by call.
pub fn in_turns(blocks: usize, ops: &mut [&mut dyn FnMut() -> f64]) -> Alternated {
    let blocks: Vec<Vec<f64>> = (0..blocks)
        .map(|_| ops.iter_mut().map(|op| op()).collect())
        .collect();
    let summaries = (0..ops.len())
        .map(|op| Summary::of_us(blocks.iter().map(|block| block[op]).collect()))
        .collect();
    Alternated { summaries, blocks }
}

/// Operations sampled alternately: each one's summary over the whole run, and each block's
/// median per operation.
pub struct Alternated {
    summaries: Vec<Summary>,
    blocks: Vec<Vec<f64>>,
}

impl Alternated {
    /// The summary of operation `op` over every block.
    pub fn summary(&self, op: usize) -> Summary {
        self.summaries.get(op).copied().unwrap_or_default()
    }

    /// The summaries of the first `N` operations.
    pub fn summaries<const N: usize>(&self) -> [Summary; N] {
        std::array::from_fn(|op| self.summary(op))
    }

    /// Operation `a` against operation `b`: the median of the blocks' ratios and their range.
    pub fn ratio(&self, a: usize, b: usize) -> Ratio {
        Ratio::of(
            self.blocks
                .iter()
                .filter_map(|block| Some(block.get(a)? / block.get(b)?))
                .filter(|ratio| ratio.is_finite())
                .collect(),
        )
    }

    /// Operation `a` against the slowest of the operations `of`, block by block.
    pub fn ratio_to_slowest(&self, a: usize, of: std::ops::Range<usize>) -> Ratio {
        Ratio::of(
            self.blocks
                .iter()
                .filter_map(|block| {
                    let slowest = block.get(of.clone())?.iter().copied().fold(0.0, f64::max);
                    Some(block.get(a)? / slowest)
                })
                .filter(|ratio| ratio.is_finite())
                .collect(),
        )
    }

    /// The lowest of operation `op`'s block medians.
    pub fn low(&self, op: usize) -> f64 {
        self.block_medians(op).fold(f64::INFINITY, f64::min)
    }

    /// The highest of operation `op`'s block medians.
    pub fn high(&self, op: usize) -> f64 {
        self.block_medians(op).fold(0.0, f64::max)
    }

    /// How far operation `op`'s block medians moved: highest over lowest.
    pub fn drift(&self, op: usize) -> f64 {
        self.high(op) / self.low(op)
    }

    fn block_medians(&self, op: usize) -> impl Iterator<Item = f64> + '_ {
        self.blocks
            .iter()
            .filter_map(move |block| block.get(op).copied())
    }
}

/// A figure measured block by block (a ratio, or any value): the median block, the lowest and
/// the highest. Printed as `1.12 (1.08–1.19)`.
#[derive(Debug, Clone, Copy)]
pub struct Ratio {
    pub median: f64,
    pub low: f64,
    pub high: f64,
}

impl Ratio {
    pub fn of(mut ratios: Vec<f64>) -> Ratio {
        if ratios.is_empty() {
            return Ratio {
                median: f64::NAN,
                low: f64::NAN,
                high: f64::NAN,
            };
        }
        ratios.sort_by(f64::total_cmp);
        Ratio {
            median: ratios[ratios.len() / 2],
            low: ratios[0],
            high: ratios[ratios.len() - 1],
        }
    }

    /// The same ratio with its denominator multiplied by `by` (a pair against 2 × RTT).
    pub fn over(self, by: f64) -> Ratio {
        Ratio {
            median: self.median / by,
            low: self.low / by,
            high: self.high / by,
        }
    }
}

impl std::fmt::Display for Ratio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2} ({:.2}–{:.2})", self.median, self.low, self.high)
    }
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
