//! `dlock top` and `dlock watch` as a person uses them: `top` in a real pseudo-terminal, its
//! screen read while a named client's holds come and go, on Redis, PostgreSQL and etcd.

use crate::support;

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dlocks::LockClient;
use portable_pty::{native_pty_system, CommandBuilder, PtySize};
use support::etcd_server::EtcdCluster;
use support::postgres_server::PostgresServer;
use support::redis_server::RedisServer;

/// `dlock top` running in a pseudo-terminal of 30 rows of 140 columns, its screen kept up to
/// date from its output.
struct Top {
    child: Box<dyn portable_pty::Child + Send + Sync>,
    writer: Box<dyn Write + Send>,
    screen: Arc<Mutex<vt100::Parser>>,
}

impl Top {
    fn start(backend_url: &str, pattern: &str) -> Top {
        let pty = native_pty_system()
            .openpty(PtySize {
                rows: 30,
                cols: 140,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("a pseudo-terminal");
        let mut command = CommandBuilder::new(env!("CARGO_BIN_EXE_dlock"));
        command.args(["--backend", backend_url, "top", pattern]);
        command.env("TERM", "xterm-256color");
        let child = pty.slave.spawn_command(command).expect("dlock top starts");
        drop(pty.slave);
        let mut reader = pty
            .master
            .try_clone_reader()
            .expect("the terminal's output");
        let writer = pty.master.take_writer().expect("the terminal's input");
        let screen = Arc::new(Mutex::new(vt100::Parser::new(30, 140, 0)));
        let parser = screen.clone();
        // Reads until the terminal closes (the child exits and the master is dropped).
        std::thread::spawn(move || {
            let _master = pty.master;
            let mut buffer = [0u8; 4096];
            while let Ok(read) = reader.read(&mut buffer) {
                if read == 0 {
                    break;
                }
                parser
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
                    .process(&buffer[..read]);
            }
        });
        Top {
            child,
            writer,
            screen,
        }
    }

    fn contents(&self) -> String {
        self.screen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .screen()
            .contents()
    }

    /// Waits (at most `bound`) until the screen satisfies `shown`; how long that took.
    fn wait_for(&self, what: &str, bound: Duration, shown: impl Fn(&str) -> bool) -> Duration {
        let start = Instant::now();
        loop {
            let contents = self.contents();
            if shown(&contents) {
                return start.elapsed();
            }
            assert!(
                start.elapsed() < bound,
                "the screen never showed {what} within {bound:?}:\n{contents}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn press(&mut self, keys: &str) {
        self.writer.write_all(keys.as_bytes()).expect("keys typed");
        self.writer.flush().expect("keys sent");
    }

    /// Presses `q` and waits for `dlock top` to exit; its exit code.
    fn quit(mut self) -> u32 {
        self.press("q");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().expect("the child's status") {
                return status.exit_code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("dlock top did not quit on q:\n{}", self.contents());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Top {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// What `top` must show on any backend: a named client's lock within two refreshes, with its
/// holder (`holder`: what the HOLDER column shows of it) and kind, gone again once released; a
/// filter that hides it; `q` ends it.
/// `top` on any backend: a plain lock and a fenced lock (`fenced` where the store tells it
/// apart; on etcd every hold has a token and shows as a `lock`).
fn top_shows_holds_come_and_go(backend_url: &str, client: LockClient, holder: &str) {
    let mut top = Top::start(backend_url, "top-*");
    top.wait_for("the header", Duration::from_secs(10), |screen| {
        screen.contains("NAME") && screen.contains("HOLDER")
    });
    let guard = client.lock("top-orders").lock().expect("lock");
    let shown = top.wait_for(
        "the lock and its holder",
        Duration::from_secs(10),
        |screen| {
            screen.lines().any(|line| {
                line.contains("top-orders") && line.contains(holder) && line.contains("lock")
            })
        },
    );
    println!("dlock top showed the hold {shown:?} after it was taken");

    // A fenced hold's token is shown whole (PostgreSQL's are 16 digits).
    let fenced = client
        .fenced_lock("top-ledger")
        .lock()
        .expect("fenced lock");
    let token = format!("token {}", fenced.token());
    top.wait_for(
        "the fenced kind and the whole token",
        Duration::from_secs(10),
        |screen| {
            screen.lines().any(|line| {
                line.contains("top-ledger")
                    && (line.contains("fenced") || line.contains("lock"))
                    && line.contains(&token)
            })
        },
    );
    drop(fenced);

    // A filter that does not match hides it; an empty one shows it again.
    top.press("/nothing-like-it\r");
    top.wait_for("the filtered view", Duration::from_secs(10), |screen| {
        screen.contains("filter \"nothing-like-it\"") && !screen.contains("top-orders")
    });
    top.press("/\r");
    top.wait_for("the lock again", Duration::from_secs(10), |screen| {
        screen.contains("top-orders")
    });
    top.press("s");
    top.wait_for("another sort", Duration::from_secs(10), |screen| {
        screen.contains("sorted by age")
    });

    drop(guard);
    let gone = top.wait_for("the lock gone", Duration::from_secs(10), |screen| {
        !screen.contains("top-orders")
    });
    println!("dlock top showed the release {gone:?} after it");
    assert_eq!(top.quit(), 0);
}

#[test]
fn top_shows_a_named_clients_hold_and_its_release_on_redis() {
    let server = RedisServer::start();
    let client = LockClient::builder(server.backend())
        .name("billing-worker")
        .build()
        .expect("client");
    top_shows_holds_come_and_go(&server.url(), client, "billing-worker@");
}

#[test]
fn top_shows_a_named_clients_hold_and_its_release_on_postgres() {
    let server = PostgresServer::start();
    let client = LockClient::builder(server.backend())
        .name("billing-worker")
        .build()
        .expect("client");
    top_shows_holds_come_and_go(&server.url(), client, "billing-worker@");
}

#[test]
fn top_shows_a_named_clients_hold_and_its_release_on_etcd() {
    let cluster = EtcdCluster::single();
    let client = LockClient::builder(cluster.backend())
        .name("billing-worker")
        .build()
        .expect("client");
    top_shows_holds_come_and_go(&etcd_url(&cluster), client, "billing-worker@");
}

/// The CLI's URL of a test member (`etcd://host:port`).
fn etcd_url(cluster: &EtcdCluster) -> String {
    cluster.members()[0].url().replacen("http://", "etcd://", 1)
}

/// What `watch` prints on any backend: the name free, taken, released, taken again and its
/// lease run out, a JSON line each; where the store counts the clients waiting (Redis), a
/// hand-over between two threads of one process too.
fn watch_prints_a_line_per_change(backend_url: &str, client: LockClient, counts_waiters: bool) {
    let count = if counts_waiters { "8" } else { "5" };
    let mut watching = std::process::Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args([
            "--backend",
            backend_url,
            "watch",
            "watched",
            "--json",
            "--count",
            count,
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("dlock watch");
    let stdout = watching.stdout.take().expect("its output");
    let (lines, received) = std::sync::mpsc::channel::<serde_json::Value>();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stdout)).map_while(Result::ok) {
            let _ = lines.send(serde_json::from_str(&line).expect("a JSON line"));
        }
    });
    let next = || {
        received
            .recv_timeout(Duration::from_secs(10))
            .expect("dlock watch printed the change")
    };
    assert_eq!(next()["event"], "free");
    let guard = client.lock("watched").lock().expect("lock");
    let taken = next();
    assert_eq!(taken["event"], "taken", "{taken}");
    assert_eq!(taken["kind"], "lock");
    drop(guard);
    let released = next();
    assert_eq!(released["event"], "released", "{released}");
    // A hold given up without a release (its holder gone): its lease runs out.
    client
        .lock("watched")
        .lock_with_lease(Duration::from_millis(600))
        .expect("lock")
        .leak();
    assert_eq!(next()["event"], "taken");
    let expired = next();
    assert_eq!(expired["event"], "expired", "{expired}");
    if counts_waiters {
        // One thread hands the lock to another of the same process: same client, another hold.
        let lock = client.lock("watched");
        let guard = lock.lock().expect("lock");
        let taken = next();
        assert_eq!(taken["event"], "taken", "{taken}");
        let (release, released) = std::sync::mpsc::channel::<()>();
        let waiter = std::thread::spawn(move || {
            let guard = lock.lock().expect("the waiting thread's lock");
            let _ = released.recv();
            guard.unlock().expect("unlock");
        });
        let queue = next();
        assert_eq!(queue["event"], "queue", "{queue}");
        drop(guard);
        let handed = next();
        assert_eq!(handed["event"], "handed over", "{handed}");
        assert_ne!(handed["holds"], taken["holds"], "{handed}");
        assert_eq!(
            handed["holder"], taken["holder"],
            "the same process: {handed}"
        );
        release.send(()).expect("the waiting thread");
        waiter.join().expect("the waiting thread");
    }
    let status = watching.wait().expect("dlock watch ends after its lines");
    assert!(status.success(), "{status:?}");
}

#[test]
fn watch_prints_a_line_per_change_of_one_name() {
    let server = RedisServer::start();
    let client = LockClient::builder(server.backend())
        .name("billing-worker")
        .build()
        .expect("client");
    watch_prints_a_line_per_change(&server.url(), client, true);
}

#[test]
fn watch_prints_a_line_per_change_of_one_name_on_postgres() {
    let server = PostgresServer::start();
    let client = LockClient::builder(server.backend())
        .name("billing-worker")
        .build()
        .expect("client");
    watch_prints_a_line_per_change(&server.url(), client, false);
}

#[test]
fn watch_prints_a_line_per_change_of_one_name_on_etcd() {
    let cluster = EtcdCluster::single();
    watch_prints_a_line_per_change(
        &etcd_url(&cluster),
        LockClient::new(cluster.backend()),
        false,
    );
}
