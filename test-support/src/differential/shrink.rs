//! The shortest failing sequence: operations are taken away, a few at a time and then one by
//! one, as long as what is left still fails (each try a new run on fresh names).

use std::time::{Duration, Instant};

use super::follow::{self, Mismatch};
use super::{Op, Target};

/// How many runs shrinking may make.
const TRIES: usize = 200;

/// How long shrinking may take: a server's sequence runs for seconds, and a test ended by its
/// time limit would report nothing.
const TIME: Duration = Duration::from_secs(60);

/// The shortest sequence found that still fails from `ops` (which failed with `failure`) the
/// same way (the same kind of step answered the same kind of wrong answer), and its failure.
pub(super) fn shortest(
    target: &dyn Target,
    ops: Vec<Op>,
    failure: Mismatch,
) -> (Vec<Op>, Mismatch) {
    let mut best = (ops, failure);
    let mut tries = 0;
    let until = Instant::now() + TIME;
    let mut chunk = (best.0.len() / 2).max(1);
    loop {
        let mut shrunk = false;
        let mut at = 0;
        while at < best.0.len() && tries < TRIES && Instant::now() < until {
            let mut candidate = best.0.clone();
            let end = (at + chunk).min(candidate.len());
            candidate.drain(at..end);
            tries += 1;
            match follow::check(target, &candidate) {
                Err(failure) if failure.shape == best.1.shape => {
                    best = (candidate, failure);
                    shrunk = true;
                }
                _ => at += chunk,
            }
        }
        if tries >= TRIES || Instant::now() >= until || (chunk == 1 && !shrunk) {
            return best;
        }
        if !shrunk {
            chunk = (chunk / 2).max(1);
        }
    }
}
