//! Starts and stops real PostgreSQL servers for tests.
//!
//! Each [`PostgresServer`] is a `postgres` of its own on a free loopback port, in a temporary
//! directory, copied from a template cluster that `initdb` made once per machine (a directory
//! made aside and renamed into place, so concurrent test processes never see half of one). The
//! server refuses to run as root, so when the tests run as root it runs as the `postgres` OS
//! user (`setpriv`). The whole server (the postmaster and every process it started, each in a
//! session of its own) can be killed, paused (`SIGSTOP`) and resumed, each process by its own
//! pid; every one is stopped when the server is dropped, also when the test panics.

mod fenced_data;
mod rows_held;
mod scratch;
mod server_env;

pub use rows_held::RowsHeld;

pub use crate::ports::free_port;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use dlocks::backend::DistributedLock;
use dlocks::postgres::{PostgresBackend, PostgresBackendBuilder};

use super::env::TestEnv;
use crate::fake_clock::FakeClock;
use crate::network::Node;
use crate::signals::{is_running, signal, stop};

/// The start of PostgreSQL's cancel request (its length, 16, and its code, 80877102): what a
/// client sends, on a connection of its own, to stop the statement a session runs.
pub const CANCEL_REQUEST: [u8; 8] = [0, 0, 0, 16, 0x04, 0xd2, 0x16, 0x2e];

/// How long a server may take to accept connections after it was started.
const STARTUP_LIMIT: Duration = Duration::from_secs(20);

/// The server's OS user when the tests run as root.
const SERVER_USER: &str = "postgres";

/// Options for a server.
#[derive(Clone, Default)]
pub struct ServerOptions {
    /// `-c name=value` settings, after the harness's own.
    pub settings: Vec<(String, String)>,
    /// Whether commits are flushed to disk (`fsync`); off by default (a killed process loses
    /// nothing written, only a machine crash would).
    pub fsync: bool,
    /// Run on a wall clock of its own that the test can step ([`PostgresServer::jump_clock`]).
    pub fake_clock: bool,
}

/// A `postgres` process owned by a test.
pub struct PostgresServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
    options: ServerOptions,
    /// The network node it runs in, listening on the node's address; else on loopback.
    node: Option<Node>,
    /// Its wall clock, when started with `fake_clock`.
    clock: Option<FakeClock>,
}

/// The port a server in a network node listens on: the node's ports are its own.
const NODE_PORT: u16 = 5432;

/// Where the PostgreSQL programs are: `pg_config --bindir`, else the newest
/// `/usr/lib/postgresql/<version>/bin` (Debian does not put `initdb` on the PATH).
pub fn bindir() -> &'static Path {
    static BINDIR: OnceLock<PathBuf> = OnceLock::new();
    BINDIR.get_or_init(|| {
        let from_pg_config = Command::new("pg_config")
            .arg("--bindir")
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
            .filter(|dir| dir.join("initdb").exists() && dir.join("postgres").exists());
        if let Some(dir) = from_pg_config {
            return dir;
        }
        let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let version = entry.file_name().to_string_lossy().parse().ok()?;
                let bin = entry.path().join("bin");
                bin.join("initdb").exists().then_some((version, bin))
            })
            .collect();
        versions.sort();
        versions.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
            panic!(
                "PostgreSQL is not installed (install the Debian package `postgresql`; \
                 scripts/test-all.sh does): the PostgreSQL tests need initdb and postgres"
            )
        })
    })
}

/// Whether this process runs as root (the server must then run as another user).
fn running_as_root() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| {
        Command::new("id")
            .arg("-u")
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
            .unwrap_or(false)
    })
}

/// A command running `program` as the server's user.
fn as_server_user(program: &Path) -> Command {
    as_server_user_in(None, program)
}

/// A command running `program` as the server's user, in network node `node` if given.
fn as_server_user_in(node: Option<&Node>, program: &Path) -> Command {
    if let Some(node) = node {
        let mut command = node.command(if running_as_root() { "setpriv" } else { "env" });
        if running_as_root() {
            command.args([
                format!("--reuid={SERVER_USER}"),
                format!("--regid={SERVER_USER}"),
                "--init-groups".to_owned(),
            ]);
        }
        command.arg(program);
        return command;
    }
    if running_as_root() {
        let mut command = Command::new("setpriv");
        command
            .args([
                format!("--reuid={SERVER_USER}"),
                format!("--regid={SERVER_USER}"),
                "--init-groups".to_owned(),
            ])
            .arg(program);
        command
    } else {
        Command::new(program)
    }
}

/// Hands `path` to the server's user (when running as root).
fn give_to_server_user(path: &Path) {
    if running_as_root() {
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{SERVER_USER}:{SERVER_USER}"))
            .arg(path)
            .status()
            .expect("run chown");
        assert!(status.success(), "chown {} failed", path.display());
    }
}

/// The template cluster, made by `initdb` the first time any test needs one on this machine.
fn template() -> &'static Path {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE.get_or_init(|| {
        let bindir = bindir();
        let version = bindir
            .parent()
            .and_then(|p| p.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let root = scratch::root().join(format!("dlock-pg-template-{version}-v2"));
        let data = root.join("data");
        if data.join("PG_VERSION").exists() {
            return data;
        }
        // Made aside, then renamed into place: a concurrent process either sees none or all of
        // it; the one that loses the race deletes its own.
        let aside = scratch::root().join(format!(
            "dlock-pg-template-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&aside).expect("create the template's directory");
        give_to_server_user(&aside);
        let output = as_server_user(&bindir.join("initdb"))
            .arg("-D")
            .arg(aside.join("data"))
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .args(["--locale", "C"])
            // One-megabyte WAL segments: every test's server starts from a copy of this
            // cluster, and the default 16 MB segment was two fifths of it.
            .arg("--wal-segsize=1")
            .stdin(Stdio::null())
            .output()
            .expect("run initdb");
        assert!(
            output.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        // Replication connections from loopback, for the standby tests.
        let hba = aside.join("data").join("pg_hba.conf");
        let mut rules = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
        rules.push_str("\nhost replication all 127.0.0.1/32 trust\n");
        std::fs::write(&hba, rules).expect("write pg_hba.conf");
        give_to_server_user(&aside);
        if std::fs::rename(&aside, &root).is_err() {
            let _ = std::fs::remove_dir_all(&aside);
            assert!(
                data.join("PG_VERSION").exists(),
                "no template cluster at {}",
                root.display()
            );
        }
        data
    })
}

/// Copies the cluster at `from` to `to` (both the server user's).
fn copy_cluster(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .expect("run cp");
    assert!(status.success(), "copying the template cluster failed");
}

impl PostgresServer {
    /// Starts a server with the default options.
    pub fn start() -> Self {
        Self::start_with(ServerOptions::default())
    }

    /// Starts a server with `options`. Panics (the test fails, never skips) if PostgreSQL is
    /// not installed or the server does not come up.
    pub fn start_with(options: ServerOptions) -> Self {
        let dir = Self::new_dir();
        copy_cluster(template(), &dir.join("data"));
        Self::start_in(dir, options)
    }

    /// A server that also takes TLS connections (`ssl = on`), presenting the server
    /// certificate of `certificates`; plain connections still work.
    pub fn start_with_tls(certificates: &super::test_certificates::TestCertificates) -> Self {
        use std::os::unix::fs::PermissionsExt;
        let dir = Self::new_dir();
        copy_cluster(template(), &dir.join("data"));
        let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
        std::fs::write(&cert, &certificates.server_cert_pem).expect("write server.crt");
        std::fs::write(&key, &certificates.server_key_pem).expect("write server.key");
        // The server refuses a key others can read.
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
            .expect("chmod server.key");
        give_to_server_user(&dir);
        let path = |file: &Path| file.display().to_string();
        let options = ServerOptions {
            settings: vec![
                ("ssl".into(), "on".into()),
                ("ssl_cert_file".into(), path(&cert)),
                ("ssl_key_file".into(), path(&key)),
            ],
            ..ServerOptions::default()
        };
        Self::start_in(dir, options)
    }

    /// A fresh directory for a server, the server user's.
    pub fn new_dir() -> PathBuf {
        let dir = scratch::root().join(format!(
            "dlock-pg-{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4()
        ));
        std::fs::create_dir_all(&dir).expect("create the server's temp dir");
        give_to_server_user(&dir);
        dir
    }

    /// Starts a server on the cluster in `dir/data`.
    pub fn start_in(dir: PathBuf, options: ServerOptions) -> Self {
        let mut server = PostgresServer {
            child: None,
            port: 0,
            dir,
            options,
            node: None,
            clock: None,
        };
        // A free port can be taken between choosing it and binding it: try a few.
        for _ in 0..5 {
            server.port = free_port();
            if server.spawn() {
                return server;
            }
        }
        panic!("postgres did not start after 5 attempts (see its log above)");
    }

    /// Starts a server in network node `node`, listening on the node's address, port 5432;
    /// it trusts every connection from the test's networks, replication too.
    pub fn start_on_node(node: &Node, options: ServerOptions) -> Self {
        let dir = Self::new_dir();
        copy_cluster(template(), &dir.join("data"));
        let hba = dir.join("data").join("pg_hba.conf");
        let mut rules = std::fs::read_to_string(&hba).expect("read pg_hba.conf");
        rules.push_str("host all all 10.0.0.0/8 trust\nhost replication all 10.0.0.0/8 trust\n");
        std::fs::write(&hba, rules).expect("write pg_hba.conf");
        give_to_server_user(&dir);
        Self::start_in_node(dir, options, node)
    }

    /// Starts a streaming standby of `primary` in network node `node` (see
    /// [`start_on_node`](Self::start_on_node)), and waits until the primary streams to it.
    pub fn start_standby_on_node(primary: &PostgresServer, node: &Node) -> Self {
        let streaming = primary.streaming_standbys();
        let dir = Self::base_backup_of(primary);
        let standby = Self::start_in_node(dir, ServerOptions::default(), node);
        primary.await_streaming(streaming);
        standby
    }

    fn start_in_node(dir: PathBuf, options: ServerOptions, node: &Node) -> Self {
        let mut server = PostgresServer {
            child: None,
            port: NODE_PORT,
            dir,
            options,
            node: Some(node.clone()),
            clock: None,
        };
        // The node's port is free but for a server of this test killed a moment ago.
        let deadline = Instant::now() + STARTUP_LIMIT;
        while !server.spawn() {
            assert!(
                Instant::now() < deadline,
                "postgres did not start in node {}",
                node.address()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// Starts a streaming standby of `primary` (`pg_basebackup -R`), and waits until the
    /// primary sees it streaming.
    pub fn start_standby_of(primary: &PostgresServer, options: ServerOptions) -> Self {
        Self::start_standby_on(primary, options, None)
    }

    /// As [`start_standby_of`](Self::start_standby_of), on `port` if given (a port a killed
    /// server left, so that a URL naming both hosts names the new standby too).
    pub fn start_standby_on(
        primary: &PostgresServer,
        options: ServerOptions,
        port: Option<u16>,
    ) -> Self {
        let streaming = primary.streaming_standbys();
        let dir = Self::base_backup_of(primary);
        let standby = match port {
            Some(port) => Self::start_on(dir, options, port),
            None => Self::start_in(dir, options),
        };
        primary.await_streaming(streaming);
        standby
    }

    /// A new directory holding a copy of `primary`'s cluster made to stream from it
    /// (`pg_basebackup -R`).
    fn base_backup_of(primary: &PostgresServer) -> PathBuf {
        let dir = Self::new_dir();
        let output = as_server_user(&bindir().join("pg_basebackup"))
            .args(["-h", &primary.host(), "-p", &primary.port().to_string()])
            .args([
                "-U",
                "postgres",
                "-X",
                "stream",
                "-R",
                "--no-sync",
                "-c",
                "fast",
            ])
            .arg("-D")
            .arg(dir.join("data"))
            .stdin(Stdio::null())
            .output()
            .expect("run pg_basebackup");
        assert!(
            output.status.success(),
            "pg_basebackup failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        dir
    }

    /// Waits until more than `streaming` standbys stream from this server.
    fn await_streaming(&self, streaming: usize) {
        let deadline = Instant::now() + STARTUP_LIMIT;
        while self.streaming_standbys() <= streaming {
            assert!(
                Instant::now() < deadline,
                "the standby did not start streaming"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// How many standbys stream from this server.
    pub fn streaming_standbys(&self) -> usize {
        let row = self
            .admin()
            .query_one(
                "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'",
                &[],
            )
            .expect("pg_stat_replication");
        row.get::<_, i64>(0) as usize
    }

    /// Stops (`SIGSTOP`) the processes sending this server's WAL to its standbys: they fall
    /// behind from now on, while this server goes on committing.
    pub fn pause_wal_senders(&self) {
        let rows = self
            .admin()
            .query("SELECT pid FROM pg_stat_replication", &[])
            .expect("pg_stat_replication");
        assert!(!rows.is_empty(), "no WAL sender to pause");
        for row in rows {
            signal(row.get::<_, i32>(0) as u32, "-STOP");
        }
    }

    /// Stops (`SIGSTOP`) the server's WAL writer: commits made with `synchronous_commit = off`
    /// stay unwritten from now on (only it writes them), until the server is killed or the
    /// writer resumed. Left alone, it writes them within `wal_writer_delay`, and at once when a
    /// commit fills a WAL page.
    pub fn pause_wal_writer(&self) {
        let row = self
            .admin()
            .query_one(
                "SELECT pid FROM pg_stat_activity WHERE backend_type = 'walwriter'",
                &[],
            )
            .expect("the WAL writer");
        signal(row.get::<_, i32>(0) as u32, "-STOP");
    }

    /// Makes every standby streaming from this server synchronous
    /// (`synchronous_standby_names = '*'`), and waits until one is.
    pub fn make_standbys_synchronous(&self) {
        self.execute("ALTER SYSTEM SET synchronous_standby_names = '*'");
        self.execute("SELECT pg_reload_conf()");
        let deadline = Instant::now() + STARTUP_LIMIT;
        loop {
            let row = self
                .admin()
                .query_one(
                    "SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'",
                    &[],
                )
                .expect("pg_stat_replication");
            if row.get::<_, i64>(0) > 0 {
                return;
            }
            assert!(Instant::now() < deadline, "no standby became synchronous");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Promotes this standby to a primary, and waits until it takes writes.
    pub fn promote(&self) {
        let promoted: bool = self
            .admin()
            .query_one("SELECT pg_promote(true, 20)", &[])
            .expect("pg_promote")
            .get(0);
        assert!(promoted, "the standby was not promoted in time");
    }

    /// Starts a server on the cluster in `dir/data`, on `port` (waiting, bounded, for it to be
    /// free).
    pub fn start_on(dir: PathBuf, options: ServerOptions, port: u16) -> Self {
        let mut server = PostgresServer {
            child: None,
            port,
            dir,
            options,
            node: None,
            clock: None,
        };
        let deadline = Instant::now() + STARTUP_LIMIT;
        while !server.spawn() {
            assert!(
                Instant::now() < deadline,
                "postgres did not start on port {port}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        server
    }

    /// The TCP port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's directory (its cluster is in `data`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// What the server has logged (warnings and errors, with the statements that raised
    /// them), from every start in its directory.
    pub fn log(&self) -> String {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .filter_map(|entry| entry.ok().map(|entry| entry.path()))
                    .filter(|path| {
                        path.file_name()
                            .and_then(|name| name.to_str())
                            .is_some_and(|name| {
                                name.starts_with("server-") && name.ends_with(".log")
                            })
                    })
                    .collect()
            })
            .unwrap_or_default();
        logs.sort();
        logs.iter()
            .filter_map(|path| std::fs::read_to_string(path).ok())
            .collect()
    }

    /// The postmaster's pid, if it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The address it listens on: loopback, or its network node's.
    pub fn host(&self) -> String {
        match &self.node {
            Some(node) => node.address().to_string(),
            None => "127.0.0.1".to_owned(),
        }
    }

    /// `postgres://postgres@<host>:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@{}:{}/postgres", self.host(), self.port)
    }

    /// A URL for `user` (password `password`) on database `postgres`.
    pub fn url_for(&self, user: &str, password: &str) -> String {
        format!(
            "postgres://{user}:{password}@{}:{}/postgres",
            self.host(),
            self.port
        )
    }

    /// A plain connection (not through dlock) for inspecting and changing the server.
    pub fn admin(&self) -> postgres::Client {
        admin_at(&self.url())
    }

    /// Runs `sql` as the superuser.
    pub fn execute(&self, sql: &str) {
        self.admin().batch_execute(sql).expect(sql);
    }

    /// A backend on this server with bounded test timeouts.
    pub fn backend(&self) -> PostgresBackend {
        self.backend_builder()
            .build()
            .expect("connect to the test server")
    }

    /// A builder for a backend on this server with bounded test timeouts.
    pub fn backend_builder(&self) -> PostgresBackendBuilder {
        PostgresBackend::builder(&self.url())
            .connect_timeout(Duration::from_secs(2))
            .statement_timeout(Duration::from_secs(2))
            .checkout_timeout(Duration::from_secs(3))
    }

    /// Ends every session whose `application_name` is `application` (`dlock` for pooled
    /// sessions, `dlock-listener` for the listening one) with `pg_terminate_backend`; returns
    /// how many there were.
    pub fn terminate(&self, application: &str) -> usize {
        let rows = self
            .admin()
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
                 WHERE application_name = $1 AND pid <> pg_backend_pid()",
                &[&application],
            )
            .expect("pg_terminate_backend");
        rows.len()
    }

    /// How many sessions named `application` are connected.
    pub fn sessions(&self, application: &str) -> usize {
        let row = self
            .admin()
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1",
                &[&application],
            )
            .expect("pg_stat_activity");
        row.get::<_, i64>(0) as usize
    }

    /// Waits until `count` sessions are listening (`LISTEN`ing sessions named
    /// `dlock-listener`), bounded: 10 s.
    pub fn await_listeners(&self, count: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.sessions("dlock-listener") < count {
            assert!(
                Instant::now() < deadline,
                "{count} listeners did not connect"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `count` sessions wait for a lock (a row, a table, an advisory lock),
    /// bounded: 20 s.
    pub fn await_lock_waits(&self, count: usize) {
        self.await_lock_waits_until(|waiting| waiting >= count, &format!("{count} sessions"));
    }

    /// Waits until no session waits for a lock, bounded: 20 s.
    pub fn await_no_lock_waits(&self) {
        self.await_lock_waits_until(|waiting| waiting == 0, "no session");
    }

    fn await_lock_waits_until(&self, done: impl Fn(usize) -> bool, what: &str) {
        let mut admin = self.admin();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let waiting: i64 = admin
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
                    &[],
                )
                .expect("pg_stat_activity")
                .get(0);
            if done(waiting as usize) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "waited 20 s for {what} to wait for a lock ({waiting} do)"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Steps its wall clock forward by `by` (`clock_timestamp()` with it); for a server
    /// started with `fake_clock`.
    pub fn jump_clock(&self, by: Duration) -> Result<(), String> {
        self.clock
            .as_ref()
            .ok_or("this server runs on the real clock")?
            .jump(by)
    }

    /// Kills every process of the server at once (`SIGKILL`): nothing answered, what was not
    /// written to the WAL is lost, the rest is recovered at the next start.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let children = children_of(child.id());
            signal(child.id(), "-KILL");
            for pid in &children {
                signal(*pid, "-KILL");
            }
            let _ = child.wait();
            // The sessions must be gone before a new postmaster can start on the same data.
            let deadline = Instant::now() + STARTUP_LIMIT;
            while children.iter().any(|pid| is_running(*pid)) {
                assert!(
                    Instant::now() < deadline,
                    "the server's processes did not end"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }

    /// Shuts the server down cleanly (fast shutdown: sessions ended, everything flushed).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            signal(child.id(), "-INT");
            let deadline = Instant::now() + STARTUP_LIMIT;
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if Instant::now() > deadline {
                    self.child = Some(child);
                    self.kill();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Stops every process of the server (`SIGSTOP`): connections stay open, nothing is
    /// answered.
    pub fn pause(&self) {
        let postmaster = self.pid().expect("the server is running");
        // The postmaster first, and only once it has stopped (a signal is delivered when the
        // process next runs, so a session it was starting could still appear): then it starts
        // no process meanwhile, and its children are all there to be stopped.
        stop(postmaster);
        for pid in children_of(postmaster) {
            stop(pid);
        }
    }

    /// Lets a paused server go on (`SIGCONT`).
    pub fn resume(&self) {
        let postmaster = self.pid().expect("the server is running");
        for pid in children_of(postmaster) {
            signal(pid, "-CONT");
        }
        signal(postmaster, "-CONT");
    }

    /// Kills the server if it runs, then starts it again on the same port and data (after a
    /// kill, PostgreSQL recovers from its WAL).
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + STARTUP_LIMIT;
        while !self.spawn() {
            assert!(
                Instant::now() < deadline,
                "postgres did not restart on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Starts the postmaster and waits until it accepts connections; false if it exited (port
    /// taken).
    fn spawn(&mut self) -> bool {
        let data = self.dir.join("data");
        let log = std::fs::File::create(self.dir.join(format!("server-{}.log", self.port)))
            .expect("create the server log");
        give_to_server_user(&self.dir.join(format!("server-{}.log", self.port)));
        let mut command = if self.options.fake_clock {
            let dir = &self.dir;
            let clock = self.clock.get_or_insert_with(|| FakeClock::in_dir(dir));
            let mut command = as_server_user_in(self.node.as_ref(), Path::new("env"));
            command
                .args(clock.env_args())
                .arg(bindir().join("postgres"));
            command
        } else {
            as_server_user_in(self.node.as_ref(), &bindir().join("postgres"))
        };
        command
            .arg("-D")
            .arg(&data)
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(&self.dir)
            .args(["-c", &format!("listen_addresses={}", self.host())])
            .args(["-c", &format!("fsync={}", on_off(self.options.fsync))])
            .args(["-c", "full_page_writes=off", "-c", "shared_buffers=16MB"])
            .args(["-c", "max_connections=100", "-c", "max_wal_senders=4"])
            .args(["-c", "wal_level=replica", "-c", "logging_collector=off"])
            // Dynamic shared memory in files of the data directory, which goes with it: a
            // server killed by a test leaves POSIX segments in /dev/shm behind (a run left
            // about 2 GB of them).
            .args(["-c", "dynamic_shared_memory_type=mmap"])
            .args([
                "-c",
                "log_min_messages=warning",
                "-c",
                "deadlock_timeout=100ms",
            ]);
        for (name, value) in &self.options.settings {
            command.args(["-c", &format!("{name}={value}")]);
        }
        command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let child = match command.spawn() {
            Ok(child) => child,
            Err(error) => panic!("could not start postgres: {error}"),
        };
        self.child = Some(child);
        let deadline = Instant::now() + STARTUP_LIMIT;
        loop {
            if let Some(child) = &mut self.child {
                if let Ok(Some(status)) = child.try_wait() {
                    let log =
                        std::fs::read_to_string(self.dir.join(format!("server-{}.log", self.port)))
                            .unwrap_or_default();
                    eprintln!(
                        "postgres on port {} exited at start: {status}\n{log}",
                        self.port
                    );
                    self.child = None;
                    return false;
                }
            }
            if self.answers() {
                return true;
            }
            assert!(
                Instant::now() < deadline,
                "postgres on port {} did not answer",
                self.port
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether this server answers on its port. Another test's server that took the port
    /// first would answer too, until its own test stops it: only the server whose data
    /// directory is ours counts.
    fn answers(&self) -> bool {
        let Ok(mut config) = self.url().parse::<postgres::Config>() else {
            return false;
        };
        config.connect_timeout(Duration::from_millis(500));
        let Ok(mut client) = config.connect(postgres::NoTls) else {
            return false;
        };
        let Ok(row) = client.query_one("SELECT current_setting('data_directory')", &[]) else {
            return false;
        };
        let Ok(serving) = row.try_get::<_, String>(0) else {
            return false;
        };
        let ours = self.dir.join("data");
        let same = |a: &Path, b: &Path| match (a.canonicalize(), b.canonicalize()) {
            (Ok(a), Ok(b)) => a == b,
            _ => a == b,
        };
        // Another server's answer: ours cannot bind the port and exits, and the start is
        // tried again on another port.
        same(Path::new(&serving), &ours)
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        if self.child.is_some() {
            // A paused server is killed all the same.
            self.kill();
        }
        remove_shared_memory(&self.dir.join("data"));
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Removes the System V shared memory segment of the stopped server whose data directory is
/// `data`. A postmaster removes it when it shuts down, and one starting on the same data
/// reuses it, but a killed one whose data goes leaves it behind for good: a few thousand
/// of them (one per test server) exhaust the kernel's segments, and no server starts any more.
fn remove_shared_memory(data: &Path) {
    // postmaster.pid's seventh line: the segment's key and id (gone after a clean shutdown).
    let Ok(lock_file) = std::fs::read_to_string(data.join("postmaster.pid")) else {
        return;
    };
    if let Some(id) = lock_file
        .lines()
        .nth(6)
        .and_then(|line| line.split_whitespace().nth(1))
        .filter(|id| id.chars().all(|c| c.is_ascii_digit()))
    {
        let _ = Command::new("ipcrm")
            .args(["-m", id])
            .stderr(Stdio::null())
            .status();
    }
}

fn on_off(on: bool) -> &'static str {
    if on {
        "on"
    } else {
        "off"
    }
}

/// The processes whose parent is `parent` (a postmaster's sessions and workers), from /proc.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid ...`: the command may hold spaces, so read after the `)`.
            let after = &stat[stat.rfind(')')? + 1..];
            let ppid: u32 = after.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}

/// The conformance suite's environment on a real server of its own.
pub struct PostgresEnv {
    pub server: PostgresServer,
    pub backend: PostgresBackend,
}

impl PostgresEnv {
    /// Starts a server and connects a backend.
    pub fn start() -> Self {
        let server = PostgresServer::start();
        let backend = server.backend();
        PostgresEnv { server, backend }
    }
}

impl TestEnv for PostgresEnv {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn unit(&self) -> Duration {
        // Leases of a few units must survive a loaded 2-core VM running tests in parallel.
        Duration::from_millis(200)
    }

    fn backend(&self) -> Arc<dyn DistributedLock> {
        Arc::new(self.backend.clone())
    }
}

/// A superuser's connection of the harness's own to the server at `url` (as
/// [`PostgresServer::url`] makes it).
fn admin_at(url: &str) -> postgres::Client {
    let mut config: postgres::Config = url.parse().expect("admin URL");
    config.connect_timeout(Duration::from_secs(5));
    config.application_name("dlock-test-admin");
    config.connect(postgres::NoTls).expect("admin connection")
}
