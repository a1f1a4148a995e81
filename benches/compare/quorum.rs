//! RedLock over several servers and MultiLock over several names: what a step across N costs
//! against one round trip to one server.

use std::time::Duration;

use dlock::redis::{RedLockBackend, RedisBackend};
use dlock::{LockClient, MultiLock};

use crate::handoff::{self, Kind, Outcome, Plan};
use crate::redis_scenarios::plain_connection;
use crate::stats::{interleaved, Summary};
use crate::support::redis_server::RedisServer;

/// A client on a RedLock over `servers` (default node timeout).
pub fn red_lock_client(servers: &[RedisServer]) -> LockClient {
    let nodes: Vec<RedisBackend> = servers.iter().map(RedisServer::backend).collect();
    LockClient::new(RedLockBackend::new(nodes).expect("a RedLock over the bench servers"))
}

/// Uncontended pairs of `lock` sampled alternately with a `PING` on `ping_url` and a plain
/// lock pair of `single` on that server: (ping, single-server pair, pair).
pub fn pair(
    client: &LockClient,
    single: &LockClient,
    ping_url: &str,
    iterations: usize,
) -> [Summary; 3] {
    let lock = client.lock(format!("bench:quorum:{}", uuid::Uuid::new_v4()));
    compare(single, ping_url, iterations, &mut || {
        lock.lock().expect("lock").unlock().expect("unlock")
    })
}

/// `op` sampled alternately with a `PING` on `ping_url` and a plain lock pair of `single`.
fn compare(
    single: &LockClient,
    ping_url: &str,
    iterations: usize,
    op: &mut dyn FnMut(),
) -> [Summary; 3] {
    let mut con = plain_connection(ping_url);
    let plain = single.lock(format!("bench:single:{}", uuid::Uuid::new_v4()));
    let mut ping = || {
        let _: String = redis::cmd("PING").query(&mut con).expect("PING");
    };
    let mut single_pair = || plain.lock().expect("lock").unlock().expect("unlock");
    let mut found =
        interleaved(200, iterations, &mut [&mut ping, &mut single_pair, op]).into_iter();
    let mut next = || found.next().unwrap_or_default();
    [next(), next(), next()]
}

/// Forced hand-off (1 ms hold) between `workers` threads of `client`.
pub fn handoff(client: &LockClient, workers: usize, run_for: Duration) -> Outcome {
    let plan = Plan {
        workers,
        run_for,
        hold: Duration::from_millis(1),
        forced: true,
        kind: Kind::Plain,
    };
    handoff::run_threads(
        client,
        &format!("bench:quorum:{}", uuid::Uuid::new_v4()),
        plan,
    )
}

/// Uncontended pairs of a multi-lock of `members` names on `client`'s server, sampled
/// alternately with a `PING` and a plain lock pair there: (ping, single pair, multi pair).
pub fn multi_pair(
    client: &LockClient,
    ping_url: &str,
    members: usize,
    iterations: usize,
) -> [Summary; 3] {
    let prefix = uuid::Uuid::new_v4();
    let multi =
        MultiLock::new((0..members).map(|i| client.lock(format!("bench:multi:{prefix}:{i}"))));
    compare(client, ping_url, iterations, &mut || {
        multi.lock().expect("lock").unlock().expect("unlock")
    })
}
