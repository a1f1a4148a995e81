//! Scripts run by EVALSHA are loaded again, transparently, when the server has lost them.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use dlocks::LockClient;
use support::redis_server::RedisServer;

#[test]
fn every_operation_survives_a_script_flush() {
    let server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let lock = client.lock("reload:flush");
    lock.lock().expect("lock").unlock().expect("unlock");

    let mut admin = server.admin();
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut admin)
        .expect("SCRIPT FLUSH");
    let guard = lock.lock().expect("acquire after the flush");
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut admin)
        .expect("SCRIPT FLUSH");
    assert!(lock.is_locked().expect("status after the flush"));
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut admin)
        .expect("SCRIPT FLUSH");
    guard.unlock().expect("release after the flush");
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut admin)
        .expect("SCRIPT FLUSH");
    let _held = lock.lock().expect("lock");
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query(&mut admin)
        .expect("SCRIPT FLUSH");
    assert!(lock.force_unlock().expect("force unlock after the flush"));
}

#[test]
fn locks_work_after_the_server_restarts_empty() {
    let mut server = RedisServer::start();
    let client = LockClient::new(server.backend());
    let lock = client.lock("reload:restart");
    lock.lock().expect("lock").unlock().expect("unlock");

    server.restart();
    // The pooled connections died with the old process: the first call finds its connection
    // closed and retries on a new one, where the scripts are loaded again.
    let guard = lock.lock().expect("lock after the restart");
    assert!(lock.is_locked().expect("status"));
    guard.unlock().expect("unlock after the restart");
}
