//! The lease rule and exclusion, checked after every step of random operation sequences (see
//! `dlock_test_support::lease_model`) on one etcd member: real time, leases of whole seconds
//! and less, faults injected by `FaultyBackend` (real delays, failed calls, lost replies, steps
//! held back and sent twice). `DLOCK_MODEL_SEED=<seed>` replays one sequence,
//! `DLOCK_MODEL_SEQUENCES=<n>` runs more.

use std::sync::Arc;
use std::time::Duration;

use dlock_test_support::etcd_server::EtcdCluster;
use dlock_test_support::lease_model::{self, Model, Store};
use dlocks::testing::FaultyBackend;

fn model() -> Model {
    let ms = Duration::from_millis;
    Model {
        watchdog: ms(3000),
        short_lease: ms(1000),
        long_lease: ms(6000),
        wait: ms(1500),
        advances: vec![ms(0), ms(0), ms(250), ms(1200), ms(3500)],
        delays: vec![ms(100), ms(750), ms(3500)],
        steps: 10,
        parallel: 4,
        // A loaded machine may keep the watchdog off the CPU for a while.
        loss_slack: Duration::from_secs(1),
        hold_back: &[""],
    }
}

#[test]
fn random_sequences_on_etcd_keep_the_lease_rule() {
    let cluster = EtcdCluster::single();
    // The checks read the store through the same backend the clients use (a clone shares
    // what the backend knows of its holds), as a user's status call would.
    let backend = cluster.backend();
    lease_model::run(
        &model(),
        &lease_model::seeds(24),
        &|seed| Store {
            faulty: FaultyBackend::new(backend.clone()),
            raw: Arc::new(backend.clone()),
            clock: None,
            prefix: format!("model:{seed}"),
            proxy: None,
        },
        None,
    );
}
