//! Sharing locks with Redisson: a stand-in Redisson client runs Redisson's lock and unlock
//! scripts (3.24+, with the unlock latch) with its own owner id against the same lock names.

#![cfg(feature = "redis")]

mod support;

use std::time::{Duration, Instant};

use dlock::LockClient;
use support::redis_server::{spawn_waiter, RedisServer};

/// Redisson's `RedissonLock.tryLockInnerAsync` (KEYS: lock; ARGV: lease ms, owner).
const REDISSON_LOCK: &str = "
if ((redis.call('exists', KEYS[1]) == 0) or (redis.call('hexists', KEYS[1], ARGV[2]) == 1)) then
    redis.call('hincrby', KEYS[1], ARGV[2], 1);
    redis.call('pexpire', KEYS[1], ARGV[1]);
    return nil;
end;
return redis.call('pttl', KEYS[1]);";

/// Redisson's `RedissonLock.unlockInnerAsync` (KEYS: lock, channel, latch; ARGV: unlock
/// message, lease ms, owner, publish command, latch ms).
const REDISSON_UNLOCK: &str = "
local val = redis.call('get', KEYS[3]);
if val ~= false then
    return tonumber(val);
end;
if (redis.call('hexists', KEYS[1], ARGV[3]) == 0) then
    return nil;
end;
local counter = redis.call('hincrby', KEYS[1], ARGV[3], -1);
if (counter > 0) then
    redis.call('pexpire', KEYS[1], ARGV[2]);
    redis.call('set', KEYS[3], 0, 'px', ARGV[5]);
    return 0;
else
    redis.call('del', KEYS[1]);
    redis.call(ARGV[4], KEYS[2], ARGV[1]);
    redis.call('set', KEYS[3], 1, 'px', ARGV[5]);
    return 1;
end;";

/// A minimal Redisson `RLock` on a plain connection.
struct Redisson {
    con: redis::Connection,
    owner: String,
}

impl Redisson {
    fn new(server: &RedisServer) -> Self {
        Redisson {
            con: server.admin(),
            owner: format!("{}:1", uuid::Uuid::new_v4()),
        }
    }

    /// `None` when acquired, else the holder's PTTL.
    fn try_lock(&mut self, name: &str, lease: Duration) -> Option<i64> {
        redis::cmd("EVAL")
            .arg(REDISSON_LOCK)
            .arg(1)
            .arg(name)
            .arg(lease.as_millis() as u64)
            .arg(&self.owner)
            .query(&mut self.con)
            .expect("Redisson lock script")
    }

    fn unlock(&mut self, name: &str) -> Option<i64> {
        let channel = format!("redisson_lock__channel:{{{name}}}");
        let latch = format!("redisson_unlock_latch:{{{name}}}:{}", uuid::Uuid::new_v4());
        redis::cmd("EVAL")
            .arg(REDISSON_UNLOCK)
            .arg(3)
            .arg(name)
            .arg(&channel)
            .arg(&latch)
            .arg(0)
            .arg(30_000)
            .arg(&self.owner)
            .arg("publish")
            .arg(9_000)
            .query(&mut self.con)
            .expect("Redisson unlock script")
    }
}

#[test]
fn a_redisson_holder_excludes_dlock_and_the_other_way_round() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let mut redisson = Redisson::new(&server);
    let lock = client.lock("shared:orders");

    assert_eq!(
        redisson.try_lock("shared:orders", Duration::from_secs(30)),
        None
    );
    assert!(
        lock.try_lock().expect("try_lock").is_none(),
        "Redisson holds it"
    );
    let remaining = lock.remaining_lease().expect("remaining").expect("a lease");
    assert!(
        remaining > Duration::from_secs(20),
        "dlock sees Redisson's lease: {remaining:?}"
    );
    assert_eq!(redisson.unlock("shared:orders"), Some(1));

    let guard = lock.lock().expect("free again");
    let pttl = redisson
        .try_lock("shared:orders", Duration::from_secs(30))
        .expect("dlock holds it");
    assert!(pttl > 0, "Redisson gets dlock's remaining lease: {pttl}");
    assert_eq!(
        redisson.unlock("shared:orders"),
        None,
        "Redisson cannot release dlock's hold"
    );
    guard.unlock().expect("unlock");
    assert_eq!(
        redisson.try_lock("shared:orders", Duration::from_secs(30)),
        None
    );
}

#[test]
fn a_redisson_unlock_wakes_a_dlock_waiter() {
    let server = RedisServer::start();
    let mut redisson = Redisson::new(&server);
    // Redisson holds it for a long lease: only its release message can let the waiter in soon.
    let lease = Duration::from_secs(60);
    assert_eq!(redisson.try_lock("shared:wake", lease), None);

    let (waiter, rx) = spawn_waiter(server.backend(), "shared:wake");
    server.await_subscriber("redisson_lock__channel:{shared:wake}");
    let released = Instant::now();
    assert_eq!(redisson.unlock("shared:wake"), Some(1));
    let acquired = rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the waiter was woken by the release message");
    waiter.join().expect("waiter");
    assert!(acquired >= released);
}

#[test]
fn a_dlock_release_reaches_a_redisson_subscriber() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let mut sub_con = server.admin();
    let mut pubsub = sub_con.as_pubsub();
    pubsub
        .subscribe("redisson_lock__channel:{shared:announce}")
        .expect("subscribe");

    let lock = client.lock("shared:announce");
    lock.lock().expect("lock").unlock().expect("unlock");
    let message = pubsub.get_message().expect("release message");
    assert_eq!(message.get_payload::<String>().expect("payload"), "0");

    lock.lock().expect("lock").leak();
    assert!(lock.force_unlock().expect("force unlock"));
    let message = pubsub.get_message().expect("force-unlock message");
    assert_eq!(message.get_payload::<String>().expect("payload"), "0");
}
