//! Fenced writes to Redis as a writer makes them: each one script (the check and the write),
//! a stale token writing nothing, the fence key beside the data key, and a writer's own Lua run
//! behind the check.

use dlock_test_support::redis_server::RedisServer;
use dlocks::fence::redis::{self as fence, FencedScript};
use dlocks::LockError;
use redis::Commands;

/// Deletes and hash writes are fenced like sets: a stale token deletes nothing and writes no
/// field, and a delete keeps the fence, so an older holder cannot write the key again.
#[test]
fn deletes_and_hash_writes_keep_the_fence() {
    let server = RedisServer::start();
    let mut data = server.admin();

    assert!(fence::hset(&mut data, "profile", "name", "ada", 5).expect("a new field"));
    assert!(!fence::hset(&mut data, "profile", "name", "grace", 5).expect("the same token"));
    let stale = fence::hset(&mut data, "profile", "name", "old", 4).expect_err("stale");
    assert!(
        matches!(&stale, LockError::StaleToken { resource, token: 4, newest: 5 } if resource == "profile"),
        "{stale}"
    );
    let name: String = data.hget("profile", "name").expect("HGET");
    assert_eq!(name, "grace");

    assert!(fence::delete(&mut data, "profile", 4).is_err_and(|error| error.is_stale_token()));
    assert!(data.exists::<_, bool>("profile").expect("EXISTS"));
    assert!(fence::delete(&mut data, "profile", 6).expect("a newer holder deletes"));
    assert!(!fence::delete(&mut data, "profile", 6).expect("gone already"));
    assert!(fence::set(&mut data, "profile", "back", 5).is_err_and(|error| error.is_stale_token()));
    assert!(!data.exists::<_, bool>("profile").expect("EXISTS"));
}

/// A writer's own script runs behind the fence of its first key, sees its own KEYS and ARGV,
/// and answers its own value; with a stale token it does not run at all.
#[test]
fn a_writers_own_script_runs_behind_the_fence_of_its_first_key() {
    let server = RedisServer::start();
    let mut data = server.admin();
    let append = FencedScript::new(
        "redis.call('rpush', KEYS[1], ARGV[1]) \
         redis.call('incr', KEYS[2]) \
         return {#KEYS, #ARGV, redis.call('llen', KEYS[1])}",
    );
    let answer: (i64, i64, i64) = append
        .invoke(&mut data, &["{audit}:log", "{audit}:count"], &["paid"], 9)
        .expect("a first write");
    assert_eq!(
        answer,
        (2, 1, 1),
        "the script sees its own keys and arguments"
    );
    let stale = append
        .invoke::<redis::Value>(&mut data, &["{audit}:log", "{audit}:count"], &["late"], 8)
        .expect_err("stale");
    assert!(stale.is_stale_token(), "{stale}");
    let log: Vec<String> = data.lrange("{audit}:log", 0, -1).expect("LRANGE");
    assert_eq!(log, ["paid"]);
    let count: i64 = data.get("{audit}:count").expect("GET");
    assert_eq!(count, 1, "nothing of a refused script ran");

    let no_keys = append.invoke::<redis::Value>(&mut data, &[], &[], 9);
    assert!(no_keys.is_err_and(|error| error.is_invalid_argument()));
    let failing = FencedScript::new("return redis.call('incr', KEYS[1])");
    let _: () = data.set("{audit}:text", "words").expect("SET");
    let error = failing
        .invoke::<i64>(&mut data, &["{audit}:text"], &[], 9)
        .expect_err("the script's own error");
    assert!(matches!(error, LockError::Protocol { .. }), "{error}");
}

/// The token of a fence is compared as the number it is, past what a Lua number holds exactly.
#[test]
fn tokens_compare_as_numbers_past_two_to_the_fifty_three() {
    let server = RedisServer::start();
    let mut data = server.admin();
    let big = (1u64 << 60) + 1;
    fence::set(&mut data, "big", "a", big).expect("a big token");
    assert!(fence::set(&mut data, "big", "b", big - 1).is_err_and(|error| error.is_stale_token()));
    fence::set(&mut data, "big", "c", big + 1).expect("one more");
    assert!(fence::set(&mut data, "big", "d", 99).is_err_and(|error| error.is_stale_token()));
    let value: String = data.get("big").expect("GET");
    assert_eq!(value, "c");
}
