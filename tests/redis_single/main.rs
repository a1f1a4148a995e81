//! dlock on real `redis-server` processes, one (or two) per test: the suites every backend runs
//! through its harness (`RedisServer`), and what is Redis's own: the raw layout, every Lua step,
//! pub/sub, latches, events, ACLs, TLS, Redisson compatibility, and families of OS processes.

mod acl;
mod events;
mod family_processes;
mod fenced;
mod fenced_writes;
mod handoff;
mod layout;
mod pubsub;
mod redisson_compat;
mod release_records;
mod script_reload;
mod scripts;
mod tls;
mod turns;
mod watchdog;

use dlock_test_support::redis_server::RedisServer;

/// The conformance suite: every lock kind and every synchronizer.
mod conformance {
    dlock_test_support::conformance_suite!(server super::RedisServer);
}

/// The async surface.
#[cfg(feature = "async")]
mod async_surface {
    dlock_test_support::async_suite!(server super::RedisServer);
}

/// The lease model and the differential test, through a faulty network.
mod lease_model {
    dlock_test_support::lease_model_suite!(super::RedisServer);
}

dlock_test_support::server_suite!(RedisServer);
dlock_test_support::forged_grants_suite!(RedisServer);
dlock_test_support::fenced_writes_suite!(RedisServer);

/// How many scripts (`EVALSHA`) the server has run, from its `INFO commandstats`.
fn evalsha_calls(admin: &mut redis::Connection) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(admin)
        .expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().expect("a number"))
}
