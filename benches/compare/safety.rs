//! What safety costs: a fenced lock pair against a plain one, and a pair on a master with a
//! replica (waiting for its acknowledgement) against the same pair with the wait turned off.

use dlocks::redis::RedisBackend;
use dlocks::LockClient;

use crate::redis_scenarios::plain_connection;
use crate::stats::{interleaved, Alternated};
use crate::support::redis_server::RedisServer;

/// On one master: PING, a plain pair and a fenced pair, sampled alternately.
pub fn fenced_pair(client: &LockClient, url: &str, iterations: usize) -> Alternated {
    let id = uuid::Uuid::new_v4();
    let plain = client.lock(format!("bench:plain:{id}"));
    let fenced = client.fenced_lock(format!("bench:fenced:{id}"));
    let mut con = plain_connection(url);
    let mut ping = || {
        let _: String = redis::cmd("PING").query(&mut con).expect("PING");
    };
    let mut plain_pair = || plain.lock().expect("lock").unlock().expect("unlock");
    let mut fenced_pair = || fenced.lock().expect("lock").unlock().expect("unlock");
    interleaved(
        200,
        iterations,
        &mut [&mut ping, &mut plain_pair, &mut fenced_pair],
    )
}

/// On a master with one replica: PING, a pair with replica sync off, and a pair with it on
/// (each step followed by `WAIT 1`), sampled alternately.
pub fn replicated_pair(iterations: usize) -> Alternated {
    let master = RedisServer::start();
    let _replica = RedisServer::start_replica_of(&master);
    let synced = LockClient::new(master.backend());
    let unsynced = LockClient::new(
        RedisBackend::builder(&master.url())
            .replica_sync(false)
            .build()
            .expect("backend"),
    );
    let id = uuid::Uuid::new_v4();
    let off = unsynced.lock(format!("bench:unsynced:{id}"));
    let on = synced.lock(format!("bench:synced:{id}"));
    let mut con = plain_connection(&master.url());
    let mut ping = || {
        let _: String = redis::cmd("PING").query(&mut con).expect("PING");
    };
    let mut off_pair = || off.lock().expect("lock").unlock().expect("unlock");
    let mut on_pair = || on.lock().expect("lock").unlock().expect("unlock");
    interleaved(
        200,
        iterations,
        &mut [&mut ping, &mut off_pair, &mut on_pair],
    )
}
