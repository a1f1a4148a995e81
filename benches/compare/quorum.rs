//! RedLock over several servers and MultiLock over several names: what a step across N costs
//! against one round trip to one server.

use std::time::Duration;

use dlocks::redis::{RedLockBackend, RedisBackend};
use dlocks::{LockClient, MultiLock};

use crate::handoff::{self, Kind, Outcome, Plan};
use crate::redis_scenarios::plain_connection;
use crate::stats::{interleaved, Alternated};
use crate::support::redis_server::RedisServer;

/// A client on a RedLock over `servers` (default node timeout).
pub fn red_lock_client(servers: &[RedisServer]) -> LockClient {
    let nodes: Vec<RedisBackend> = servers.iter().map(RedisServer::backend).collect();
    LockClient::new(RedLockBackend::new(nodes).expect("a RedLock over the bench servers"))
}

/// Uncontended pairs of `client`'s RedLock sampled alternately with a `PING` to the first of
/// `servers`, a raw fan-out (a trivial `EVALSHA` written to every server, then every reply
/// read, on plain connections) and a plain lock pair on each server: (ping, RedLock pair, raw
/// fan-out, then one pair per server). A RedLock step waits for every node it writes to, so
/// its floor is the slowest of the one-server pairs, which depends on where the scheduler put
/// each server, and on a machine with fewer CPUs than servers, the raw fan-out.
pub fn red_lock_pair(
    client: &LockClient,
    servers: &[RedisServer],
    iterations: usize,
) -> Alternated {
    let id = uuid::Uuid::new_v4();
    let red_lock = client.lock(format!("bench:quorum:{id}"));
    let singles: Vec<LockClient> = servers
        .iter()
        .map(|s| LockClient::new(s.backend()))
        .collect();
    let locks: Vec<dlocks::Lock> = singles
        .iter()
        .map(|single| single.lock(format!("bench:single:{id}")))
        .collect();
    let mut con = plain_connection(&servers[0].url());
    let mut ping = || {
        let _: String = redis::cmd("PING").query(&mut con).expect("PING");
    };
    let mut red_pair = || red_lock.lock().expect("lock").unlock().expect("unlock");
    let script = redis::Script::new(crate::redis_scenarios::TRIVIAL_SCRIPT);
    let mut fan_cons: Vec<redis::Connection> = servers
        .iter()
        .map(|server| {
            let mut con = plain_connection(&server.url());
            let _: i64 = script.invoke(&mut con).expect("load the trivial script");
            con
        })
        .collect();
    let packed = redis::cmd("EVALSHA")
        .arg(script.get_hash())
        .arg(0)
        .get_packed_command();
    let mut fan_out = || {
        for con in fan_cons.iter_mut() {
            con.send_packed_command(&packed).expect("send");
        }
        for con in fan_cons.iter_mut() {
            con.recv_response().expect("EVALSHA reply");
        }
    };
    let mut single_pairs: Vec<Box<dyn FnMut() + '_>> = locks
        .iter()
        .map(|lock| {
            Box::new(move || lock.lock().expect("lock").unlock().expect("unlock"))
                as Box<dyn FnMut() + '_>
        })
        .collect();
    let mut ops: Vec<&mut dyn FnMut()> = vec![&mut ping, &mut red_pair, &mut fan_out];
    for pair in single_pairs.iter_mut() {
        ops.push(pair.as_mut());
    }
    interleaved(200, iterations, &mut ops)
}

/// `op` sampled alternately with a `PING` on `ping_url` and a plain lock pair of `single`.
fn compare(
    single: &LockClient,
    ping_url: &str,
    iterations: usize,
    op: &mut dyn FnMut(),
) -> Alternated {
    let mut con = plain_connection(ping_url);
    let plain = single.lock(format!("bench:single:{}", uuid::Uuid::new_v4()));
    let mut ping = || {
        let _: String = redis::cmd("PING").query(&mut con).expect("PING");
    };
    let mut single_pair = || plain.lock().expect("lock").unlock().expect("unlock");
    interleaved(200, iterations, &mut [&mut ping, &mut single_pair, op])
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
) -> Alternated {
    let prefix = uuid::Uuid::new_v4();
    let multi =
        MultiLock::new((0..members).map(|i| client.lock(format!("bench:multi:{prefix}:{i}"))));
    compare(client, ping_url, iterations, &mut || {
        multi.lock().expect("lock").unlock().expect("unlock")
    })
}
