//! `dlock` on PostgreSQL: the backend comes from the URL's scheme (`--backend` or
//! `DLOCK_URL`), and run, status, list and force-unlock work as on Redis; `postgres-schema`
//! prints the SQL a DBA runs.

use crate::support;

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use dlocks::LockClient;
use serde_json::Value;
use support::postgres_server::PostgresServer;
use support::{code, listed_names, stderr, stdout, Scratch};

fn dlock_on(server: &PostgresServer) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_dlock"));
    command
        .env("DLOCK_URL", server.url())
        .env_remove("REDIS_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    command
}

fn run(server: &PostgresServer, args: &[&str]) -> Output {
    dlock_on(server)
        .args(args)
        .output()
        .expect("the dlock binary runs")
}

fn json(output: &Output) -> Value {
    assert_eq!(code(output), 0, "{}", stderr(output));
    serde_json::from_str(&stdout(output)).expect("JSON on stdout")
}

#[test]
fn run_status_list_and_force_unlock_on_postgres() {
    let server = PostgresServer::start();
    let scratch = Scratch::new("pg-run");
    let file = scratch.path("counter");
    std::fs::write(&file, "0").expect("counter file");
    // Two runs over a shared file, through --backend: the lock keeps the read and write together.
    let script = format!(
        "for i in 1 2 3 4 5; do n=$(cat {0}); echo $((n + 1)) > {0}; done",
        file.display()
    );
    let runs: Vec<_> = (0..2)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_dlock"))
                .args([
                    "--backend",
                    &server.url(),
                    "run",
                    "pg-counter",
                    "--",
                    "sh",
                    "-c",
                ])
                .arg(&script)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("dlock run")
        })
        .collect();
    for child in runs {
        let output = child.wait_with_output().expect("dlock run ends");
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert_eq!(std::fs::read_to_string(&file).expect("read").trim(), "10");

    let client = LockClient::builder(server.backend())
        .client_id("reporting-7")
        .build()
        .expect("client");
    let held = client
        .lock("deploy:web")
        .lock_with_lease(Duration::from_secs(60))
        .expect("lock");
    let fair = client.fair_lock("deploy:fair").lock().expect("fair");
    let _other = client.lock("report").lock().expect("lock");
    let status = json(&run(&server, &["status", "deploy:web", "--json"]));
    assert_eq!(status["held"], true);
    assert_eq!(status["held_as"], "exclusive");
    let owner = status["holders"][0]["owner"].as_str().expect("an owner");
    assert!(owner.starts_with("reporting-7:"), "{owner}");
    let lease = status["remaining_lease_ms"].as_u64().expect("a lease");
    assert!(lease > 50_000 && lease <= 60_000, "{lease}");

    let listed = json(&run(&server, &["list", "deploy:*", "--json"]));
    let names: Vec<&str> = listed
        .as_array()
        .expect("a list")
        .iter()
        .map(|lock| lock["name"].as_str().expect("a name"))
        .collect();
    assert_eq!(names, ["deploy:fair", "deploy:web"]);

    // A run on a held lock waits, and gives up after --wait with 75.
    let output = run(
        &server,
        &["run", "deploy:web", "--wait", "200ms", "--", "true"],
    );
    assert_eq!(code(&output), 75, "{}", stderr(&output));

    let forced = json(&run(&server, &["force-unlock", "deploy:fair", "--json"]));
    assert_eq!(forced["unlocked"], true);
    assert!(!client.fair_lock("deploy:fair").is_locked().expect("status"));
    let text = stdout(&run(&server, &["force-unlock", "deploy:web"]));
    assert!(text.contains("force-unlocked"), "{text}");
    assert!(held.unlock().is_err(), "the holder finds its lock gone");
    drop(fair);
}

#[test]
fn an_unreachable_postgres_exits_69() {
    let port = support::postgres_server::free_port();
    let output = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args([
            "--backend",
            &format!("postgres://postgres@127.0.0.1:{port}/postgres"),
            "status",
            "x",
        ])
        .output()
        .expect("dlock runs");
    assert_eq!(code(&output), 69, "{}", stderr(&output));
    // What failed, and why.
    let message = stderr(&output);
    assert!(
        message.contains("PostgreSQL") && message.contains("Connection refused"),
        "{message}"
    );
}

#[test]
fn postgres_schema_prints_the_sql_and_the_grants() {
    let output = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["postgres-schema", "--schema", "locks", "--grant-to", "app"])
        .output()
        .expect("dlock runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let sql = stdout(&output);
    assert!(
        sql.contains("CREATE TABLE IF NOT EXISTS \"locks\".locks"),
        "{sql}"
    );
    assert!(
        sql.contains("GRANT USAGE ON SCHEMA \"locks\" TO \"app\""),
        "{sql}"
    );
    // What it prints is what a DBA runs: the lock user then connects without creating it.
    let server = PostgresServer::start();
    server.execute(&sql.replace("TO \"app\"", "TO postgres"));
    dlocks::postgres::PostgresBackend::builder(&server.url())
        .schema("locks")
        .create_schema(false)
        .build()
        .expect("the printed schema is complete");
    // --ephemeral: unlogged lease tables, for backends of Durability::Ephemeral only.
    let ephemeral = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["postgres-schema", "--schema", "cache_locks", "--ephemeral"])
        .output()
        .expect("dlock runs");
    assert_eq!(code(&ephemeral), 0, "{}", stderr(&ephemeral));
    server.execute(&stdout(&ephemeral));
    let builder = || {
        dlocks::postgres::PostgresBackend::builder(&server.url())
            .schema("cache_locks")
            .create_schema(false)
    };
    builder()
        .synchronous_commit(dlocks::postgres::Durability::Ephemeral)
        .build()
        .expect("the printed ephemeral schema is complete");
    assert!(matches!(
        builder().build(),
        Err(dlocks::LockError::Config { .. })
    ));
    let bad = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["postgres-schema", "--schema", "no spaces"])
        .output()
        .expect("dlock runs");
    assert_eq!(code(&bad), 2, "{}", stderr(&bad));
}

#[test]
fn postgres_schema_fence_prints_the_fence_for_the_datas_database() {
    let output = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["postgres-schema", "--fence", "--grant-to", "app"])
        .output()
        .expect("dlock runs");
    assert_eq!(code(&output), 0, "{}", stderr(&output));
    let sql = stdout(&output);
    assert!(sql.contains("\"public\".dlock_fence("), "{sql}");
    assert!(!sql.contains("\"dlock\".locks"), "the fence alone: {sql}");
    // What it prints is what a DBA runs: a writer then checks in its own transaction.
    let server = PostgresServer::start();
    server.execute(&sql.replace("TO \"app\"", "TO postgres"));
    let mut data = server.admin();
    let mut tx = data.transaction().expect("begin");
    dlocks::fence::postgres::check(&mut tx, "printed", 1).expect("the printed fence works");
    tx.commit().expect("commit");
    let both = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["postgres-schema", "--fence", "--ephemeral"])
        .output()
        .expect("dlock runs");
    assert_eq!(
        code(&both),
        2,
        "the fence has no lease tables to make unlogged"
    );
}

#[test]
fn status_and_list_name_the_holders_client_host_pid_and_held_for_on_postgres() {
    let server = PostgresServer::start();
    let client = LockClient::builder(server.backend())
        .name("billing-worker")
        .client_id("billing-7")
        .build()
        .expect("client");
    let _guard = client.lock("billing-report").lock().expect("lock");
    crate::inspect::assert_status_and_list_name_the_holders_client(|args| run(&server, args));
}

#[test]
fn force_unlock_frees_only_the_hold_it_names_on_postgres() {
    let server = PostgresServer::start();
    crate::inspect::assert_force_unlock_frees_only_the_hold_it_names(
        std::sync::Arc::new(server.backend()),
        |args| run(&server, args),
    );
}

#[test]
fn a_gone_clients_hold_shows_by_its_id_once_its_record_ran_out_on_postgres() {
    let server = PostgresServer::start();
    crate::inspect::assert_a_gone_clients_hold_shows_by_its_id(
        std::sync::Arc::new(server.backend()),
        |args| run(&server, args),
    );
}

#[test]
fn semaphores_latches_leaders_and_permits_on_postgres() {
    let server = PostgresServer::start();
    let client = LockClient::new(server.backend());
    let sem = client.semaphore("jobs:quota");
    assert!(sem.try_set_permits(3).expect("set"));
    let permit = sem.acquire().expect("permit");
    let latch = client.count_down_latch("jobs:warm-up");
    assert!(latch.try_set_count(2).expect("set"));
    let leading = client
        .leader_election("jobs:scheduler")
        .campaign("node-a")
        .expect("campaign");

    let status = json(&run(&server, &["status", "jobs:quota", "--json"]));
    let synchronizer = &status["synchronizer"];
    assert_eq!(synchronizer["count"], 2, "{status}");
    let permits = synchronizer["permits_held"].as_array().expect("permits");
    assert_eq!(permits.len(), 1, "{status}");
    assert_eq!(permits[0]["id"].as_str(), Some(permit.id()));
    let text = stdout(&run(&server, &["status", "jobs:quota"]));
    assert!(text.contains("semaphore: 2 available, 1 held"), "{text}");
    let text = stdout(&run(&server, &["status", "jobs:warm-up"]));
    assert!(text.contains("latch: count 2"), "{text}");
    let text = stdout(&run(&server, &["status", "jobs:scheduler"]));
    assert!(text.contains("election: led by \"node-a\""), "{text}");

    let listed = json(&run(&server, &["list", "jobs:*", "--json"]));
    let names = listed_names(&listed);
    assert_eq!(names, ["jobs:quota", "jobs:scheduler", "jobs:warm-up"]);

    let shown = json(&run(&server, &["leader", "jobs:scheduler", "--json"]));
    assert_eq!(shown["leader"], "node-a");
    assert_eq!(shown["token"].as_u64(), Some(leading.token()));
    leading.resign().expect("resign");
    let shown = json(&run(&server, &["leader", "jobs:scheduler", "--json"]));
    assert_eq!(shown["leader"], Value::Null);

    // `run --permits`: the command runs holding one of the semaphore's permits.
    let quota = ["run", "--permits", "3", "jobs:quota", "--wait", "100ms"];
    let others: Vec<_> = (0..2).map(|_| sem.acquire().expect("permit")).collect();
    let refused = run(&server, &[&quota[..], &["--", "true"]].concat());
    assert_eq!(
        code(&refused),
        75,
        "every permit is held: {}",
        stderr(&refused)
    );
    permit.release().expect("release");
    let script = "test ${#DLOCK_PERMIT_ID} -gt 0";
    let ran = run(&server, &[&quota[..], &["--", "sh", "-c", script]].concat());
    assert_eq!(code(&ran), 0, "{}", stderr(&ran));
    for other in others {
        other.release().expect("release");
    }
    assert_eq!(sem.available_permits().expect("available"), 3, "all back");
}

/// The reading commands (and force-unlock) open a database without dlock's schema without
/// creating it, and say what makes it; `--schema` (or `DLOCK_PG_SCHEMA`) names the deployment's
/// schema, logged or ephemeral, for every command.
#[test]
fn reading_commands_create_no_schema_and_schema_names_the_deployment() {
    let server = PostgresServer::start();
    let schemas = || -> Vec<String> {
        server
            .admin()
            .query(
                "SELECT nspname::text FROM pg_namespace WHERE nspname IN ('dlock', 'app_locks') \
                 ORDER BY 1",
                &[],
            )
            .expect("schemas")
            .iter()
            .map(|row| row.get(0))
            .collect()
    };
    let reading: [&[&str]; 6] = [
        &["status", "deploy"],
        &["status", "deploy", "--json"],
        &["list"],
        &["leader", "deploy"],
        &["watch", "deploy", "--count", "1"],
        &["force-unlock", "deploy"],
    ];
    for args in reading {
        let output = run(&server, args);
        assert_eq!(code(&output), 2, "{args:?}: {}", stderr(&output));
        let message = stderr(&output);
        assert!(
            message.contains("dlock postgres-schema") && message.contains("create_schema(true)"),
            "{args:?} says what makes the schema: {message}"
        );
    }
    assert!(schemas().is_empty(), "nothing was created: {:?}", schemas());

    // A command run under the lock reads it through the same --schema.
    let output = run(
        &server,
        &[
            "--schema",
            "app_locks",
            "run",
            "deploy",
            "--",
            env!("CARGO_BIN_EXE_dlock"),
            "--schema",
            "app_locks",
            "status",
            "deploy",
            "--json",
        ],
    );
    let status = json(&output);
    assert_eq!(status["held"], true, "{status}");
    assert_eq!(schemas(), ["app_locks"], "run made the schema it was named");
    let free = dlock_on(&server)
        .env("DLOCK_PG_SCHEMA", "app_locks")
        .args(["status", "deploy", "--json"])
        .output()
        .expect("dlock runs");
    assert_eq!(json(&free)["held"], false);

    // An ephemeral deployment: the schema says so, nobody has to.
    let sql = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(["--schema", "cache_locks", "postgres-schema", "--ephemeral"])
        .output()
        .expect("dlock runs");
    server.execute(&stdout(&sql));
    let ephemeral = dlocks::postgres::PostgresBackend::builder(&server.url())
        .schema("cache_locks")
        .synchronous_commit(dlocks::postgres::Durability::Ephemeral)
        .build()
        .expect("ephemeral backend");
    let client = LockClient::new(ephemeral);
    let guard = client.lock("refill").lock().expect("lock");
    let status = json(&run(
        &server,
        &["--schema", "cache_locks", "status", "refill", "--json"],
    ));
    assert_eq!(status["held"], true, "{status}");
    let output = run(
        &server,
        &[
            "--schema",
            "cache_locks",
            "run",
            "refill",
            "--wait",
            "0",
            "--",
            "true",
        ],
    );
    assert_eq!(code(&output), 75, "{}", stderr(&output));
    drop(guard);

    // --schema names a PostgreSQL schema: on Redis it is a usage error.
    let output = Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args([
            "--backend",
            "redis://127.0.0.1:1",
            "--schema",
            "x",
            "status",
            "x",
        ])
        .output()
        .expect("dlock runs");
    assert_eq!(code(&output), 2, "{}", stderr(&output));
}
