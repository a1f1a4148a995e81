//! The synchronizers: a permit's acquire + release against a lock pair and PING, and how fast
//! a permit or a leadership passes from one holder to a waiting one.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use dlocks::LockClient;

use crate::redis_scenarios::plain_connection;
use crate::stats::{interleaved, time_each, Alternated, Ratio, Summary};

/// On one server: PING, a lock pair and a permit pair (acquire + release of a permit of a
/// semaphore with permits to spare), sampled alternately.
pub fn permit_pair(client: &LockClient, url: &str, iterations: usize) -> Alternated {
    let id = uuid::Uuid::new_v4();
    let lock = client.lock(format!("bench:lock:{id}"));
    let semaphore = client.semaphore(format!("bench:semaphore:{id}"));
    semaphore.try_set_permits(4).expect("set permits");
    let mut con = plain_connection(url);
    let mut ping = || {
        let _: String = redis::cmd("PING").query(&mut con).expect("PING");
    };
    let mut lock_pair = || lock.lock().expect("lock").unlock().expect("unlock");
    let mut permit_pair = || {
        semaphore
            .acquire()
            .expect("permit")
            .release()
            .expect("release")
    };
    interleaved(
        200,
        iterations,
        &mut [&mut ping, &mut lock_pair, &mut permit_pair],
    )
}

/// A forced hand-off (see [`forced_handoff`]) in round trips: `blocks` blocks of `rounds`
/// hand-offs, each followed by a block of PINGs on a plain connection, so that each ratio
/// sees one placement of the client and server on the CPUs. The hand-off's p50 is the median
/// of its blocks' p50s and its p99 the highest block p99; the PING p50 the median of its
/// blocks'; the ratio, the median of per-block ratios with their range.
pub fn forced_handoff_in_rtts<G>(
    url: &str,
    blocks: usize,
    rounds: usize,
    take: [&(dyn Fn() -> G + Sync); 2],
    give: &(dyn Fn(G) + Sync),
) -> (Summary, f64, Ratio) {
    let mut con = plain_connection(url);
    let (mut handoffs, mut pings) = (Vec::new(), Vec::new());
    for _ in 0..blocks {
        handoffs.push(forced_handoff(rounds, take, give));
        pings.push(time_each(50, rounds * 4, || {
            let _: String = redis::cmd("PING").query(&mut con).expect("PING");
        }));
    }
    let median = |values: Vec<f64>| Ratio::of(values).median;
    let summary = Summary {
        p50_us: median(handoffs.iter().map(|h| h.p50_us).collect()),
        p99_us: handoffs.iter().map(|h| h.p99_us).fold(0.0, f64::max),
    };
    let ping = median(pings.iter().map(|p| p.p50_us).collect());
    let ratio = Ratio::of(
        handoffs
            .iter()
            .zip(&pings)
            .map(|(handoff, ping)| handoff.p50_us / ping.p50_us)
            .collect(),
    );
    (summary, ping, ratio)
}

/// Forced hand-off between two threads, each with its own `take` (blocking until it holds)
/// and `give` (releasing): a holder holds 1 ms, notes the instant it releases, releases, and
/// takes again only once the other one has it. The latency is from the release's start to
/// the other thread's take returning.
pub fn forced_handoff<G>(
    rounds: usize,
    take: [&(dyn Fn() -> G + Sync); 2],
    give: &(dyn Fn(G) + Sync),
) -> Summary {
    let (release_to_second, releases_of_first) = mpsc::channel::<Instant>();
    let (release_to_first, releases_of_second) = mpsc::channel::<Instant>();
    let (ack_to_second, acks_of_first) = mpsc::channel::<()>();
    let (ack_to_first, acks_of_second) = mpsc::channel::<()>();
    // The second one starts once the first holds.
    let (first_holds, second_may_start) = mpsc::channel::<()>();
    let latencies = thread::scope(|s| {
        let side = |me: usize,
                    releases_in: mpsc::Receiver<Instant>,
                    releases_out: mpsc::Sender<Instant>,
                    acks_in: mpsc::Receiver<()>,
                    acks_out: mpsc::Sender<()>,
                    start: Start| {
            let take = take[me];
            move || {
                let mut latencies = Vec::with_capacity(rounds);
                let mut held = match start {
                    Start::Holding(told) => {
                        let guard = take();
                        let _ = told.send(());
                        Some(guard)
                    }
                    Start::Waiting(told) => {
                        if told.recv().is_err() {
                            return latencies;
                        }
                        None
                    }
                };
                for round in 0..rounds * 2 {
                    if round % 2 == me {
                        let Some(guard) = held.take() else { break };
                        thread::sleep(Duration::from_millis(1));
                        // Sent before the release: the instant is the release's start.
                        if releases_out.send(Instant::now()).is_err() {
                            give(guard);
                            break;
                        }
                        give(guard);
                        // Not before the other one has it: a forced hand-off.
                        if acks_in.recv().is_err() {
                            break;
                        }
                    } else {
                        let guard = take();
                        let taken = Instant::now();
                        let Ok(released) = releases_in.recv() else {
                            give(guard);
                            break;
                        };
                        latencies.push(taken.saturating_duration_since(released));
                        held = Some(guard);
                        if acks_out.send(()).is_err() {
                            break;
                        }
                    }
                }
                if let Some(guard) = held {
                    give(guard);
                }
                latencies
            }
        };
        let first = s.spawn(side(
            0,
            releases_of_second,
            release_to_second,
            acks_of_second,
            ack_to_second,
            Start::Holding(first_holds),
        ));
        let second = s.spawn(side(
            1,
            releases_of_first,
            release_to_first,
            acks_of_first,
            ack_to_first,
            Start::Waiting(second_may_start),
        ));
        let mut all = first.join().unwrap_or_default();
        all.extend(second.join().unwrap_or_default());
        all
    });
    Summary::of(&latencies)
}

/// How a side of [`forced_handoff`] starts: taking the first hold and saying so, or waiting
/// to be told the other one holds.
enum Start {
    Holding(mpsc::Sender<()>),
    Waiting(mpsc::Receiver<()>),
}
