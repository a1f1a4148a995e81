//! What a crash or a failover keeps, by the lock step's `synchronous_commit`: with
//! `remote_apply` and a synchronous standby, every acknowledged hold is on the standby when it
//! takes over, and its holder keeps it; with `local` and an asynchronous standby that fell
//! behind, or with `off` and a crash, recent grants are lost.

#![cfg(feature = "postgres")]

use dlock_test_support as support;

use std::sync::Arc;
use std::time::Duration;

use dlocks::postgres::{Durability, PostgresBackend};
use dlocks::{LockClient, LockClientBuilder};
use support::postgres_server::{PostgresServer, ServerOptions};

/// A URL naming both servers: the client connects to whichever takes writes, as libpq does.
fn both(primary: &PostgresServer, standby: &PostgresServer) -> String {
    format!(
        "postgres://postgres@127.0.0.1:{},127.0.0.1:{}/postgres?target_session_attrs=read-write",
        primary.port(),
        standby.port()
    )
}

fn client(url: &str, durability: Durability) -> LockClient {
    let backend = PostgresBackend::builder(url)
        .synchronous_commit(durability)
        .connect_timeout(Duration::from_secs(1))
        .statement_timeout(Duration::from_secs(2))
        .checkout_timeout(Duration::from_secs(5))
        .build()
        .expect("backend");
    LockClientBuilder::new(Arc::new(backend))
        .watchdog_lease(Duration::from_secs(20))
        .build()
        .expect("client")
}

#[test]
fn with_remote_apply_every_acknowledged_hold_is_on_the_promoted_standby() {
    let mut primary = PostgresServer::start();
    primary.backend(); // the schema, before the standby copies the cluster
    let standby = PostgresServer::start_standby_of(&primary, ServerOptions::default());
    primary.make_standbys_synchronous();
    let url = both(&primary, &standby);
    let holder = client(&url, Durability::RemoteApply);
    let names: Vec<String> = (0..5).map(|i| format!("failover:{i}")).collect();
    let guards: Vec<_> = names
        .iter()
        .map(|name| {
            holder
                .lock(name.clone())
                .lock()
                .expect("acknowledged by the standby")
        })
        .collect();
    let fenced = holder
        .fenced_lock("failover:fenced")
        .lock()
        .expect("fenced");
    let token = fenced.token();

    primary.kill();
    standby.promote();

    let other = client(&url, Durability::RemoteApply);
    for name in &names {
        assert!(
            other
                .lock(name.clone())
                .try_lock()
                .expect("try on the new primary")
                .is_none(),
            "{name} is still held after the failover"
        );
        assert!(holder
            .lock(name.clone())
            .is_held_by_current_thread()
            .expect("status"));
    }
    for guard in guards {
        assert!(!guard.is_lost(), "the holder keeps its lock");
        guard.unlock().expect("unlock on the new primary");
    }
    fenced.unlock().expect("unlock");
    let next = other
        .fenced_lock("failover:fenced")
        .lock()
        .expect("fenced again");
    assert!(
        next.token() > token,
        "tokens keep increasing across the failover"
    );
    next.unlock().expect("unlock");
}

#[test]
fn with_local_an_asynchronous_standby_that_fell_behind_loses_recent_grants() {
    let mut primary = PostgresServer::start();
    primary.backend();
    let standby = PostgresServer::start_standby_of(&primary, ServerOptions::default());
    let url = both(&primary, &standby);
    let holder = client(&url, Durability::Local);
    let before = holder.lock("async:before").lock().expect("lock");
    // The standby catches up with the first hold, then stops receiving.
    let caught_up: i64 = standby
        .admin()
        .query_one("SELECT count(*) FROM dlock.locks", &[])
        .map(|row| row.get(0))
        .unwrap_or(0);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut seen = caught_up;
    while seen < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the standby never caught up"
        );
        std::thread::sleep(Duration::from_millis(20));
        seen = standby
            .admin()
            .query_one("SELECT count(*) FROM dlock.locks", &[])
            .map(|row| row.get(0))
            .unwrap_or(0);
    }
    primary.pause_wal_senders();
    let after = holder
        .lock("async:after")
        .lock()
        .expect("durable on the primary only");

    primary.kill();
    standby.promote();

    let other = client(&url, Durability::Local);
    assert!(
        other
            .lock("async:before")
            .try_lock()
            .expect("try")
            .is_none(),
        "the hold the standby had received is kept"
    );
    let taken = other
        .lock("async:after")
        .try_lock()
        .expect("try")
        .expect("the grant the standby never received is lost: a second owner gets it");
    taken.unlock().expect("unlock");
    drop(after);
    before.unlock().expect("unlock");
}

#[test]
fn with_off_a_crash_loses_the_grants_not_yet_written() {
    let mut server = PostgresServer::start();
    let holder = client(&server.url(), Durability::Off);
    // Asynchronous commits are written by the WAL writer alone (within its delay, and at once
    // when one fills a WAL page): the crash below comes while it is stopped.
    server.pause_wal_writer();
    let guards: Vec<_> = (0..5)
        .map(|i| holder.lock(format!("off:{i}")).lock().expect("lock"))
        .collect();
    server.kill();
    server.restart();
    let other = client(&server.url(), Durability::Off);
    let lost = (0..5)
        .filter(|i| {
            other
                .lock(format!("off:{i}"))
                .try_lock()
                .expect("try")
                .is_some_and(|guard| guard.unlock().is_ok())
        })
        .count();
    assert!(
        lost > 0,
        "with synchronous_commit = off, a crash loses recent grants"
    );
    drop(guards);
}
