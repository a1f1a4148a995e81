//! The lease rule and exclusion, checked after every step of random operation sequences on the
//! in-process backend: two clients of three threads each take every kind of lock, permits,
//! leaderships and multi-locks on the same names, re-enter, release and count a latch down, on
//! fixed and watchdog leases, while faults (failed calls, lost replies, slow requests and
//! replies, steps held back and delivered late or in reverse, steps sent twice, messages held
//! back, one node failing alone) are injected and time moves. See `support::lease_model`;
//! `DLOCK_MODEL_SEED=<seed>` replays one sequence, `DLOCK_MODEL_SEQUENCES=<n>` runs more.

use dlock_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use dlocks::testing::{FaultyBackend, ManualClock, MemoryBackend};
use support::lease_model::{self, Model, Store};

#[test]
fn ten_thousand_random_sequences_keep_the_lease_rule() {
    let secs = Duration::from_secs_f64;
    let model = Model {
        watchdog: secs(3.0),
        short_lease: secs(1.0),
        long_lease: secs(10.0),
        wait: secs(2.0),
        advances: vec![secs(0.0), secs(0.2), secs(1.0), secs(2.5), secs(5.0)],
        delays: vec![secs(0.2), secs(1.0), secs(3.5)],
        steps: 24,
        // A sequence mostly waits for its threads to hand work to one another: sixteen at a
        // time keep two CPUs busy switching between runnable threads (eight left them idle
        // between hand-offs, and used a fifth more CPU for the same sequences).
        parallel: 16,
        loss_slack: Duration::ZERO,
        hold_back: &[],
    };
    let seeds = lease_model::seeds(10_000);
    lease_model::run(
        &model,
        &seeds,
        &|_| {
            let clock = ManualClock::new();
            let memory = MemoryBackend::with_clock(clock.clone());
            Store {
                faulty: FaultyBackend::with_manual_clock(memory.clone(), clock.clone()),
                raw: Arc::new(memory),
                clock: Some(clock),
                prefix: "model".to_owned(),
                proxy: None,
            }
        },
        None,
    );
}

/// The in-process backend held to the protocol model answer by answer (see
/// `support::differential`), its faults played by `FaultyBackend`, on a manual clock.
#[test]
fn the_in_process_backend_answers_as_the_protocol_model() {
    support::differential::run(
        &support::differential::FaultyTarget::in_process("memory"),
        support::differential::Bounds {
            sequences: 400,
            steps: 60,
        },
    );
}
