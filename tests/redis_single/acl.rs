//! Credentials and ACLs: refused logins and missing rights are clear errors; a user limited to
//! a key pattern (with the rights docs/redis.md lists) works within it.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use std::time::Duration;

use dlocks::redis::RedisBackend;
use dlocks::{LockClient, LockError};
use support::redis_server::RedisServer;

/// The rule docs/redis.md gives for a lock user limited to keys under `app:`.
fn create_lock_user(server: &RedisServer, user: &str, password: &str, pattern: &str) {
    let mut admin = server.admin();
    let key_rule = format!("~{pattern}");
    // The channel is passed to the scripts as a key too (as Redisson does), so it needs a key
    // rule as well as a channel rule.
    let channel_key_rule = format!("~redisson_lock__channel:{{{pattern}}}");
    let latch_rule = format!("~redisson_unlock_latch:{{{pattern}}}*");
    // The plain lock's acquire looks for a fair lock's queue of the same name, and its waiters.
    let queue_rule = format!("~redisson_lock_queue:{{{pattern}}}");
    let timeouts_rule = format!("~redisson_lock_timeout:{{{pattern}}}");
    // Every acquire reads the force-unlocked holds of the name.
    let ended_rule = format!("~dlock_ended:{{{pattern}}}");
    // A waiter that will wait marks itself, in turn with the others.
    let waiters_rule = format!("~dlock_lock_waiters:{{{pattern}}}");
    let marks_rule = format!("~dlock_lock_waiter_marks:{{{pattern}}}");
    let channel_rule = format!("&redisson_lock__channel:{{{pattern}}}");
    let control_rule = "&dlock:control:*".to_string();
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg(user)
        .arg("reset")
        .arg("on")
        .arg(format!(">{password}"))
        .arg(key_rule)
        .arg(channel_key_rule)
        .arg(latch_rule)
        .arg(queue_rule)
        .arg(timeouts_rule)
        .arg(ended_rule)
        .arg(waiters_rule)
        .arg(marks_rule)
        .arg(channel_rule)
        .arg(control_rule)
        .arg("+@connection")
        .arg("+evalsha")
        .arg("+script|load")
        .arg("+publish")
        .arg("+subscribe")
        .arg("+unsubscribe")
        .arg("+exists")
        .arg("+hexists")
        .arg("+hincrby")
        .arg("+hset")
        .arg("+hget")
        .arg("+type")
        .arg("+zrange")
        .arg("+zscore")
        .arg("+zadd")
        .arg("+zrem")
        .arg("+zrangebyscore")
        .arg("+zremrangebyscore")
        .arg("+time")
        .arg("+pexpire")
        .arg("+pexpireat")
        .arg("+pttl")
        .arg("+del")
        .arg("+get")
        .arg("+set")
        .arg("+role")
        .arg("+wait")
        .query(&mut admin)
        .expect("ACL SETUSER");
}

#[test]
fn a_wrong_password_is_a_configuration_error_naming_the_user() {
    let server = RedisServer::start();
    create_lock_user(&server, "locker", "right", "app:*");
    let error = RedisBackend::connect(&server.url_for("locker", "wrong")).expect_err("refused");
    assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("credentials") && message.contains("locker"),
        "{message}"
    );
    assert!(
        !message.contains("wrong@"),
        "the password is not shown: {message}"
    );
}

#[test]
fn an_unknown_user_is_a_configuration_error() {
    let server = RedisServer::start();
    let error = RedisBackend::connect(&server.url_for("nobody", "x")).expect_err("refused");
    assert!(matches!(error, LockError::Config { .. }), "{error:?}");
    assert!(error.to_string().contains("nobody"), "{error}");
}

#[test]
fn a_missing_password_is_a_configuration_error() {
    let server =
        support::redis_server::RedisServer::start_with(support::redis_server::ServerOptions {
            password: Some("s3cret".into()),
            ..Default::default()
        });
    let url = format!("redis://127.0.0.1:{}/", server.port());
    let error = RedisBackend::connect(&url).expect_err("needs a password");
    assert!(
        matches!(error, LockError::Config { .. } | LockError::Protocol { .. }),
        "{error:?}"
    );
    // With the password it works.
    let client = LockClient::new(RedisBackend::connect(&server.url()).expect("connect"));
    client
        .lock("pw")
        .lock()
        .expect("lock")
        .unlock()
        .expect("unlock");
}

#[test]
fn a_user_restricted_to_a_key_pattern_locks_within_it_and_gets_a_clear_error_outside() {
    let server = RedisServer::start();
    create_lock_user(&server, "locker", "pw", "app:*");
    let backend = RedisBackend::builder(&server.url_for("locker", "pw"))
        .response_timeout(Duration::from_millis(500))
        .build()
        .expect("connect as the lock user");
    let client = LockClient::new(backend.clone());

    // Everything works within the pattern, waiting (pub/sub) included.
    let lock = client.lock("app:orders");
    let guard = lock.lock().expect("lock");
    assert!(lock.is_locked().expect("status"));
    let waiter = {
        let backend = backend.clone();
        std::thread::spawn(move || {
            let client = LockClient::new(backend);
            let guard = client
                .lock("app:orders")
                .try_lock_for(Duration::from_secs(20))
                .expect("wait")
                .expect("acquired after the release");
            guard.unlock().expect("unlock");
        })
    };
    // The waiter subscribes only after finding the lock held: it is waiting now.
    server.await_subscriber("redisson_lock__channel:{app:orders}");
    guard.unlock().expect("unlock");
    waiter.join().expect("waiter");

    // Outside it the server refuses, and the error says so.
    let error = client
        .lock("billing:1")
        .lock()
        .expect_err("no rights to this key");
    assert!(matches!(error, LockError::Protocol { .. }), "{error:?}");
    let message = error.to_string();
    assert!(
        message.contains("denied permission") && message.contains("billing:1"),
        "{message}"
    );
}

#[test]
fn a_lock_user_with_the_inspection_rights_reads_and_lists_its_locks() {
    let server = RedisServer::start();
    create_lock_user(&server, "locker", "pw", "app:*");
    // What docs/redis.md adds for inspection: the token key and four read commands.
    let mut admin = server.admin();
    let () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("locker")
        .arg("~redisson_lock_token:{app:*}")
        .arg("+type")
        .arg("+hgetall")
        .arg("+llen")
        .arg("+scan")
        .query(&mut admin)
        .expect("ACL SETUSER");
    let backend = RedisBackend::builder(&server.url_for("locker", "pw"))
        .build()
        .expect("connect as the lock user");
    let client = LockClient::new(backend.clone());
    let _guard = client.lock("app:orders").lock().expect("lock");
    let info = backend.inspect("app:orders").expect("inspect");
    assert!(info.is_held());
    assert_eq!(info.holders.len(), 1);
    let listed = backend.list_locks("*", 10).expect("list");
    let names: Vec<&str> = listed.iter().map(|lock| lock.name.as_str()).collect();
    assert_eq!(names, ["app:orders"]);
}

#[test]
fn a_batch_of_releases_that_fails_gives_each_hold_the_typed_error() {
    use dlocks::backend::{AcquireRequest, DistributedLock, HoldRef, LockKind, LockRef, OwnerId};
    use dlocks::MultiLock;

    let server = RedisServer::start();
    create_lock_user(&server, "locker", "pw", "app:*");
    // The scripts are loaded by a user who may, then this one loses the right to load them.
    let admin_client = LockClient::new(server.backend());
    let both = MultiLock::new([admin_client.lock("app:a"), admin_client.lock("app:b")]);
    both.lock().expect("lock").unlock().expect("unlock");
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("locker")
        .arg("-script|load")
        .query(&mut server.admin())
        .expect("ACL SETUSER");
    let backend = RedisBackend::builder(&server.url_for("locker", "pw"))
        .response_timeout(Duration::from_secs(2))
        .build()
        .expect("connect as the lock user");

    // As a backend's caller sees it: each hold of the batch gets its own error, of the kind
    // the failure is (permission denied: `Protocol`), naming its own lock.
    let owner = OwnerId::from_raw("test:1");
    let names = ["app:a", "app:b"];
    for name in names {
        let request = AcquireRequest::new(
            LockRef::new(name, LockKind::Reentrant),
            &owner,
            Duration::from_secs(30),
        );
        assert!(backend
            .try_acquire(&request)
            .expect("acquire")
            .is_acquired());
    }
    // The server forgets its scripts: the releases find them missing and cannot load them.
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.admin())
        .expect("SCRIPT FLUSH");
    let holds: Vec<HoldRef<'_>> = names
        .iter()
        .map(|name| HoldRef {
            lock: LockRef::new(name, LockKind::Reentrant),
            owner: &owner,
        })
        .collect();
    let results = backend.release_many(&holds);
    assert_eq!(results.len(), 2);
    for (name, result) in names.iter().zip(results) {
        match result {
            Err(LockError::Protocol { lock, message, .. }) => {
                assert_eq!(lock.as_deref(), Some(*name));
                assert!(message.contains("permission"), "{message}");
            }
            other => panic!("{name}: not a Protocol error: {other:?}"),
        }
    }

    // As a user sees it: a multi-lock's unlock (one batch for its members on one client). The
    // scripts are loaded again by the user who may.
    let admin_again = LockClient::new(server.backend());
    let warm = MultiLock::new([admin_again.lock("app:c"), admin_again.lock("app:d")]);
    warm.lock().expect("lock").unlock().expect("unlock");
    let client = LockClient::new(backend);
    let guard = MultiLock::new([client.lock("app:c"), client.lock("app:d")])
        .lock()
        .expect("lock both");
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut server.admin())
        .expect("SCRIPT FLUSH");
    let error = guard.unlock().expect_err("the releases cannot run");
    assert!(
        matches!(&error, LockError::Protocol { lock: Some(_), .. }),
        "{error:?}"
    );
}
