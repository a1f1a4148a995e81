//! The protocol explored exhaustively within each run's bounds: every rule holds after every
//! step of every sequence. Prints the worlds visited.

use dlock_protocol_model::{explore, runs};

#[test]
fn every_rule_holds_after_every_step_of_every_sequence_within_bounds() {
    let mut total = 0;
    let depth: Option<usize> = std::env::var("DLOCK_MODEL_DEPTH")
        .ok()
        .and_then(|depth| depth.parse().ok());
    for mut config in runs::all() {
        if let Some(depth) = depth {
            config.depth = depth;
        }
        let started = std::time::Instant::now();
        let report = explore(&config);
        println!(
            "{}: {} threads, {} names, depth {}: {} distinct states, {} transitions, {:?}",
            report.title,
            config.threads.len(),
            config.names.len(),
            report.depth,
            report.states,
            report.transitions,
            started.elapsed()
        );
        total += report.states;
        if let Some(counterexample) = report.counterexample {
            panic!("{}: {counterexample}", report.title);
        }
    }
    println!("{total} distinct states in all");
}
