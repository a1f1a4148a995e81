//! Every Lua step of the Redis backend, loaded with `SCRIPT LOAD` on a real server and run once
//! on an empty store: each must compile and answer what its step answers for a name nobody
//! uses. The steps come from the backend's own list, which must name every `.lua` file.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use dlock_test_support::redis_server::RedisServer;
use redis::Value;

/// What a step must answer on an empty store.
enum Expect {
    Nil,
    Int(i64),
    /// An array of integers.
    Ints(&'static [i64]),
    /// A number as Redis keeps it (a bulk string).
    Count(&'static str),
    /// `{-1, token}`: taken, with a fencing token above zero.
    Token,
}

/// One run of a step: its keys and arguments (`{n}` stands for the case's lock name), and the
/// answer expected.
struct Case {
    keys: &'static [&'static str],
    args: &'static [&'static str],
    expect: Expect,
}

// The keys of a case's lock `{n}`, as the backend names them.
const LOCK: &str = "{n}";
const QUEUE: &str = "redisson_lock_queue:{n}";
const TIMEOUTS: &str = "redisson_lock_timeout:{n}";
const CHANNEL: &str = "redisson_lock__channel:{n}";
const LATCH: &str = "redisson_unlock_latch:{n}:request";
const GRANTS: &str = "dlock_fair_grant:{n}";
const MARK: &str = "dlock_kind:{n}";
const HELD: &str = "{n}:timeout";
const TOKENS: &str = "redisson_lock_token:{n}";
const READ_HOLD: &str = "{n}:hold:1:rwlock_timeout";
const ENDED: &str = "dlock_ended:{n}";
const REQUEST: &str = "dlock_request:{n}:request";
const FENCE: &str = "{n}:dlock_fence";
const WRITERS: &str = "dlock_rwlock_writers:{n}";
const READERS: &str = "dlock_rwlock_readers:{n}";
const WRITER_ORDER: &str = "dlock_rwlock_writer_order:{n}";
const LOCK_WAITERS: &str = "dlock_lock_waiters:{n}";
const LOCK_MARKS: &str = "dlock_lock_waiter_marks:{n}";

const PERMIT: &str = "00112233445566778899aabbccddeeff";
const OTHER_PERMIT: &str = "ffeeddccbbaa99887766554433221100";

/// The run of each step on an empty store; a step missing here fails the test.
fn case(step: &str) -> Option<Case> {
    use Expect::*;
    let case = |keys, args, expect| Some(Case { keys, args, expect });
    match step {
        // A client's record is written whole: 1.
        "client_record/publish" => case(
            &["dlock_client:{n}"],
            &[
                "3000",
                "name",
                "worker",
                "host",
                "h",
                "pid",
                "1",
                "hold:c:1",
                "1700000000000",
            ],
            Int(1),
        ),
        // An acquire of a free name is granted (nil).
        "reentrant/acquire" => case(
            &[LOCK, QUEUE, TIMEOUTS, ENDED, LOCK_WAITERS, LOCK_MARKS],
            &["30000", "hold:1", "0", "waiter:1", "2000", "1"],
            Nil,
        ),
        "reentrant/fenced_acquire" => case(
            &[
                LOCK,
                QUEUE,
                TIMEOUTS,
                TOKENS,
                ENDED,
                LOCK_WAITERS,
                LOCK_MARKS,
            ],
            &["30000", "hold:1", "0", "waiter:1", "2000", "1"],
            Token,
        ),
        // A release of an unknown hold answers nil: not held.
        "reentrant/release" => case(&[LOCK, CHANNEL, LATCH], &["0", "hold:1", "1000", "0"], Nil),
        // Taking back an acquire of an unknown hold answers nil: nothing to take back.
        "reentrant/undo_acquire" => case(&[LOCK, CHANNEL], &["0", "hold:1"], Nil),
        "reentrant/hand_over" => case(
            &[LOCK, LATCH, LOCK_WAITERS, LOCK_MARKS, CHANNEL],
            &["hold:1", "1000", "hold:2", "30000", "waiter:2", "0"],
            Nil,
        ),
        // A waiter that gives up unmarked: 0.
        "reentrant/cancel" => case(
            &[LOCK_WAITERS, LOCK_MARKS, LOCK, CHANNEL],
            &["waiter:1", "0"],
            Int(0),
        ),
        // A renewal of a lock that is gone: 0 for it.
        "reentrant/renew" => case(&[LOCK], &["30000", "hold:1"], Ints(&[0])),
        // A free lock: not HELD, not this hold's, no key (-2).
        "reentrant/status" => case(&[LOCK, TIMEOUTS], &["hold:1", "lock"], Ints(&[0, 0, -2])),
        "reentrant/force_unlock" => case(
            &[LOCK, CHANNEL, TIMEOUTS, ENDED],
            &["0", "lock", "600000"],
            Int(0),
        ),
        "fair/acquire" => case(
            &[LOCK, QUEUE, TIMEOUTS, GRANTS, ENDED],
            &["30000", "waiter:1", "5000", "1", "0", "hold:1", "0"],
            Nil,
        ),
        "fair/release" => case(
            &[LOCK, QUEUE, TIMEOUTS, CHANNEL, GRANTS, LATCH],
            &["0", "hold:1", "1000"],
            Nil,
        ),
        // A waiter that was never queued gives up nothing.
        "fair/cancel" => case(
            &[QUEUE, TIMEOUTS, LOCK, CHANNEL, GRANTS],
            &["waiter:1", "5000", "0"],
            Int(0),
        ),
        "fair/force_unlock" => case(
            &[LOCK, QUEUE, TIMEOUTS, CHANNEL, GRANTS, ENDED],
            &["0", "600000"],
            Int(0),
        ),
        "fair/renew" => case(&[LOCK, QUEUE, TIMEOUTS], &["30000", "hold:1"], Ints(&[0])),
        "read_write/read_acquire" => case(
            &[LOCK, READ_HOLD, TIMEOUTS, ENDED, WRITERS, READERS],
            &["30000", "hold:1", "", "0", "waiter:1", "2000", "1"],
            Nil,
        ),
        "read_write/read_release" => case(
            &[LOCK, CHANNEL, READ_HOLD, "{n}", LATCH],
            &["0", "hold:1", "1000"],
            Nil,
        ),
        "read_write/read_renew" => case(&[LOCK, READ_HOLD], &["30000", "hold:1"], Ints(&[0])),
        "read_write/read_status" => {
            case(&[LOCK, TIMEOUTS, READ_HOLD], &["hold:1"], Ints(&[0, 0, -2]))
        }
        // A resource nobody wrote takes any token.
        "fence/set" => case(&[LOCK, FENCE], &["value", "5"], Ints(&[1])),
        "fence/delete" => case(&[LOCK, FENCE], &["5"], Ints(&[1, 0])),
        "fence/hset" => case(&[LOCK, FENCE], &["field", "value", "5"], Ints(&[1, 1])),
        "read_write/read_force_unlock" => {
            case(&[LOCK, CHANNEL, TIMEOUTS, ENDED], &["0", "600000"], Int(0))
        }
        "read_write/write_acquire" => case(
            &[LOCK, TIMEOUTS, ENDED, WRITERS, READERS, WRITER_ORDER],
            &["30000", "hold:1:write", "0", "waiter:1", "2000", "1"],
            Nil,
        ),
        "read_write/cancel" => case(
            &[WRITERS, LOCK, CHANNEL, WRITER_ORDER],
            &["waiter:1", "1"],
            Int(0),
        ),
        "read_write/write_release" => {
            case(&[LOCK, CHANNEL, LATCH], &["1", "hold:1:write", "1000"], Nil)
        }
        "read_write/write_status" => case(&[LOCK, TIMEOUTS], &["hold:1:write"], Ints(&[0, 0, -2])),
        "read_write/write_force_unlock" => {
            case(&[LOCK, CHANNEL, TIMEOUTS, ENDED], &["1", "600000"], Int(0))
        }
        // No permits were ever set: none to take, and no lease to wait for (-1).
        "synchronizers/semaphore_acquire" => case(
            &[LOCK, TIMEOUTS, MARK, HELD, CHANNEL],
            &["30000", PERMIT, "0"],
            Int(-1),
        ),
        "synchronizers/semaphore_release" => case(
            &[LOCK, TIMEOUTS, MARK, HELD, CHANNEL, LATCH],
            &[PERMIT, "1000"],
            Nil,
        ),
        "synchronizers/semaphore_hand_over" => case(
            &[LOCK, TIMEOUTS, MARK, HELD, CHANNEL, LATCH],
            &[PERMIT, "1000", OTHER_PERMIT, "30000"],
            Nil,
        ),
        "synchronizers/semaphore_renew" => case(&[HELD], &["30000", PERMIT], Ints(&[0])),
        "synchronizers/semaphore_status" => {
            case(&[LOCK, TIMEOUTS, MARK, HELD], &[PERMIT], Ints(&[0, 0, -2]))
        }
        // Permits never set are set: 1.
        "synchronizers/semaphore_try_set" => case(
            &[LOCK, TIMEOUTS, MARK, CHANNEL, REQUEST],
            &["3", "1000"],
            Int(1),
        ),
        "synchronizers/semaphore_add" => {
            case(&[LOCK, TIMEOUTS, MARK, HELD, CHANNEL], &["2"], Count("2"))
        }
        "synchronizers/semaphore_available" => {
            case(&[LOCK, TIMEOUTS, MARK, HELD, CHANNEL], &[], Count("0"))
        }
        // A latch with no count is open (nil: taken).
        "synchronizers/latch_open" => case(&[LOCK, TIMEOUTS, MARK], &[], Nil),
        "synchronizers/latch_try_set" => case(
            &[LOCK, TIMEOUTS, MARK, CHANNEL, REQUEST],
            &["2", "1000"],
            Int(1),
        ),
        "synchronizers/latch_count_down" => case(&[LOCK, TIMEOUTS, MARK, CHANNEL], &[], Count("0")),
        "synchronizers/latch_count" => case(&[LOCK, TIMEOUTS, MARK], &[], Count("0")),
        // Nobody leads: this candidate does, with a token.
        "synchronizers/election_campaign" => case(
            &[
                LOCK,
                "dlock_election_token:{n}",
                "dlock_election_channel:{n}",
                TIMEOUTS,
                ENDED,
            ],
            &["30000", "hold:1", "candidate:1", "0"],
            Token,
        ),
        "synchronizers/election_leader" => {
            case(&[LOCK, "dlock_election_token:{n}", TIMEOUTS], &[], Nil)
        }
        _ => None,
    }
}

fn check(step: &str, expect: &Expect, reply: &Value) {
    let fits = match (expect, reply) {
        (Expect::Nil, Value::Nil) => true,
        (Expect::Int(want), Value::Int(got)) => want == got,
        (Expect::Ints(want), Value::Array(items)) => {
            items.len() == want.len()
                && items
                    .iter()
                    .zip(want.iter())
                    .all(|(item, want)| matches!(item, Value::Int(got) if got == want))
        }
        (Expect::Count(want), Value::BulkString(bytes)) => bytes.as_slice() == want.as_bytes(),
        (Expect::Token, Value::Array(items)) => {
            matches!(items[..], [Value::Int(-1), Value::Int(token)] if token > 0)
        }
        _ => false,
    };
    assert!(
        fits,
        "{step} on an empty store answered {reply:?}, expected {}",
        match expect {
            Expect::Nil => "nil".to_owned(),
            Expect::Int(n) => n.to_string(),
            Expect::Ints(ns) => format!("{ns:?}"),
            Expect::Count(n) => format!("the count {n:?}"),
            Expect::Token => "{-1, token > 0}".to_owned(),
        }
    );
}

#[test]
fn every_step_loads_and_answers_its_empty_store_reply() {
    let steps = dlocks::redis::lua_steps();
    assert!(!steps.is_empty());
    let missing: Vec<&str> = steps
        .iter()
        .map(|(step, _)| *step)
        .filter(|step| case(step).is_none())
        .collect();
    assert!(missing.is_empty(), "steps with no case here: {missing:?}");

    let server = RedisServer::start();
    let mut admin = server.admin();
    for (step, source) in &steps {
        let Some(case) = case(step) else { continue };
        redis::cmd("FLUSHALL")
            .query::<()>(&mut admin)
            .expect("FLUSHALL");
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(*source)
            .query(&mut admin)
            .unwrap_or_else(|error| panic!("{step} does not load: {error}"));
        let name = format!("scripts:{step}");
        let fill = |word: &&str| word.replace("{n}", &format!("{{{name}}}"));
        let keys: Vec<String> = case
            .keys
            .iter()
            .map(|key| {
                if *key == "{n}" {
                    name.clone()
                } else {
                    fill(key)
                }
            })
            .collect();
        let args: Vec<String> = case.args.iter().map(fill).collect();
        let reply: Value = redis::cmd("EVALSHA")
            .arg(&sha)
            .arg(keys.len())
            .arg(&keys)
            .arg(&args)
            .query(&mut admin)
            .unwrap_or_else(|error| panic!("{step} failed: {error}"));
        check(step, &case.expect, &reply);
    }
}

fn lua_files(dir: &Path, root: &Path, found: &mut BTreeSet<String>) {
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            lua_files(&path, root, found);
        } else if path.extension().is_some_and(|ext| ext == "lua") {
            let relative = path.strip_prefix(root).expect("under the root");
            let name = relative.with_extension("");
            found.insert(name.to_string_lossy().replace('\\', "/"));
        }
    }
}

#[test]
fn the_list_of_steps_names_every_lua_file_and_sends_its_text() {
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../lock-redis/src");
    let scripts = src.join("scripts");
    let mut on_disk = BTreeSet::new();
    lua_files(&src, &scripts, &mut on_disk);

    let steps = dlocks::redis::lua_steps();
    let mut listed: BTreeSet<String> = steps.iter().map(|(step, _)| step.to_string()).collect();
    assert_eq!(listed.len(), steps.len(), "a step is listed twice");
    listed.extend(
        dlocks::redis::LUA_PREAMBLES
            .iter()
            .map(|name| name.to_string()),
    );
    assert_eq!(
        on_disk, listed,
        "the .lua files under lock-redis/src/scripts and the steps and preambles the backend lists"
    );

    for (step, source) in &steps {
        let file = std::fs::read_to_string(scripts.join(format!("{step}.lua"))).expect("read");
        assert!(
            source.ends_with(&file),
            "{step}: the text sent is not its file after its preambles"
        );
        let head = &source[..source.len() - file.len()];
        let preambles: Vec<String> = dlocks::redis::LUA_PREAMBLES
            .iter()
            .map(|name| std::fs::read_to_string(scripts.join(format!("{name}.lua"))).expect("read"))
            .collect();
        let mut rest = head;
        while let Some(after) = preambles
            .iter()
            .find_map(|text| rest.strip_prefix(text.as_str()))
        {
            rest = after;
        }
        assert!(
            rest.is_empty(),
            "{step}: what comes before its file is not its preambles"
        );
    }
}
