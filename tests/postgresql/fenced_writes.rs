//! The fence in a PostgreSQL data database, as a writer uses it: checked inside the writer's
//! own transaction (two writers take turns on the fence row), callable as plain SQL, installed
//! once by whoever may create, and all a writer role needs granted by `grant_sql`.

use std::sync::mpsc;
use std::thread;

use dlock_test_support::postgres_server::PostgresServer;
use dlocks::fence::postgres as fence;
use dlocks::LockError;

/// A writer checking while another's transaction holds the fence row waits for it: after a
/// commit of a newer token it is refused; after a rollback it goes on.
#[test]
fn two_writers_checking_at_once_take_turns_on_the_fence_row() {
    let server = PostgresServer::start();
    let mut admin = server.admin();
    fence::install(&mut admin).expect("install");
    for (first_commits, expect_stale) in [(true, true), (false, false)] {
        let resource = format!("turns:{first_commits}");
        let mut first = server.admin();
        let mut tx = first.transaction().expect("begin");
        fence::check(&mut tx, &resource, 10).expect("the first writer");
        let (done_tx, done) = mpsc::channel();
        let mut client = server.admin();
        let second_resource = resource.clone();
        let second = thread::spawn(move || {
            let mut tx = client.transaction().expect("begin");
            let checked = fence::check(&mut tx, &second_resource, 5);
            done_tx.send(()).expect("send");
            checked
        });
        server.await_lock_waits(1);
        assert!(done.try_recv().is_err(), "the second writer waits");
        if first_commits {
            tx.commit().expect("commit");
        } else {
            tx.rollback().expect("rollback");
        }
        let checked = second.join().expect("second writer");
        if expect_stale {
            assert!(
                matches!(
                    checked,
                    Err(LockError::StaleToken {
                        token: 5,
                        newest: 10,
                        ..
                    })
                ),
                "{checked:?}"
            );
        } else {
            checked.expect("nothing newer committed: the older token writes");
        }
    }
}

/// Any driver calls the function: it answers the token, and a stale one raises SQLSTATE DL101
/// with the newest token as its DETAIL. Installing again changes nothing.
#[test]
fn plain_sql_callers_get_the_same_check() {
    let server = PostgresServer::start();
    let mut admin = server.admin();
    fence::install(&mut admin).expect("install");
    fence::install(&mut admin).expect("install again");
    let token: i64 = admin
        .query_one("SELECT dlock_fence('plain', 7)", &[])
        .expect("a first write")
        .get(0);
    assert_eq!(token, 7);
    let error = admin
        .query_one("SELECT dlock_fence('plain', 6)", &[])
        .expect_err("stale");
    let db = error.as_db_error().expect("a server error");
    assert_eq!(db.code().code(), fence::STALE_TOKEN);
    assert_eq!(db.detail(), Some("7"));
    assert!(db.message().contains("'plain'"), "{}", db.message());
}

/// A writer role with only the fence's grants checks and writes; with none, the check is a
/// protocol error naming what was refused, never a silent pass.
#[test]
fn a_writer_role_needs_only_the_fences_grants() {
    let server = PostgresServer::start();
    let mut admin = server.admin();
    fence::install(&mut admin).expect("install");
    admin
        .batch_execute(
            "CREATE ROLE writer LOGIN PASSWORD 'w'; CREATE ROLE stranger LOGIN PASSWORD 's';",
        )
        .expect("roles");
    admin
        .batch_execute(&fence::grant_sql("public", "writer").expect("grants"))
        .expect("grant");
    // PostgreSQL 15 and later no longer let every role create in `public`: the test grants
    // nothing else either way.
    let mut writer =
        postgres::Client::connect(&server.url_for("writer", "w"), postgres::NoTls).expect("writer");
    let mut tx = writer.transaction().expect("begin");
    fence::check(&mut tx, "granted", 3).expect("the writer's check");
    tx.commit().expect("commit");

    let mut stranger = postgres::Client::connect(&server.url_for("stranger", "s"), postgres::NoTls)
        .expect("stranger");
    admin
        .batch_execute("REVOKE EXECUTE ON FUNCTION public.dlock_fence(text, bigint) FROM PUBLIC")
        .expect("revoke");
    let mut tx = stranger.transaction().expect("begin");
    let refused = fence::check(&mut tx, "granted", 4).expect_err("no right to call it");
    assert!(
        matches!(refused, LockError::Protocol { .. })
            && refused.to_string().contains("dlock_fence"),
        "{refused}"
    );
}

/// A token PostgreSQL's bigint cannot hold is a bad argument, sent nowhere.
#[test]
fn a_token_past_bigint_is_a_bad_argument() {
    let server = PostgresServer::start();
    let mut admin = server.admin();
    fence::install(&mut admin).expect("install");
    let mut tx = admin.transaction().expect("begin");
    let error = fence::check(&mut tx, "big", u64::MAX).expect_err("refused");
    assert!(error.is_invalid_argument(), "{error}");
}
