//! dlock and etcd's own lock and election (`etcdctl lock`, `etcdctl elect`, Go's
//! `concurrency.Mutex` / `Election`) share one layout: each excludes the other, both ways,
//! queued locks and `etcdctl lock` wait in one queue, and both see one leader.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use dlock_test_support::conformance::unique;
use dlock_test_support::etcd_server::EtcdCluster;
use dlocks::{HandOff, LockClient};

/// How long something another process does may take on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(20);

/// An `etcdctl` process and the lines it prints.
struct Etcdctl {
    child: Child,
    lines: Receiver<String>,
}

impl Etcdctl {
    fn spawn(cluster: &EtcdCluster, args: &[&str]) -> Etcdctl {
        let mut child = cluster
            .etcdctl()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run etcdctl (Debian's etcd-client)");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Etcdctl { child, lines }
    }

    /// The next line it prints, within `wait`.
    fn line(&self, wait: Duration) -> Option<String> {
        self.lines.recv_timeout(wait).ok()
    }

    /// Waits until it prints `text` (bounded).
    fn expect(&self, text: &str) {
        loop {
            let line = self
                .line(PATIENCE)
                .unwrap_or_else(|| panic!("etcdctl did not print {text:?}"));
            if line.contains(text) {
                return;
            }
        }
    }

    /// `etcdctl lock` on the lock prefix `prefix`, holding it until the returned file is
    /// written (bounded): it has printed `held` once it holds.
    fn hold(cluster: &EtcdCluster, prefix: &str) -> (Etcdctl, std::path::PathBuf) {
        let release = std::env::temp_dir().join(format!("dlock-release-{}", uuid::Uuid::new_v4()));
        let script = format!(
            "echo held; for i in $(seq 400); do [ -e '{}' ] && break; sleep 0.05; done",
            release.display()
        );
        let etcdctl = Etcdctl::spawn(
            cluster,
            &[
                "lock",
                prefix.trim_end_matches('/'),
                "--",
                "sh",
                "-c",
                &script,
            ],
        );
        etcdctl.expect("held");
        (etcdctl, release)
    }

    /// Waits until it exits by itself (bounded): a process killed leaves its key until its
    /// session's lease runs out.
    fn finish(&mut self) {
        let deadline = Instant::now() + PATIENCE;
        while self.child.try_wait().expect("etcdctl's status").is_none() {
            assert!(Instant::now() < deadline, "etcdctl did not exit");
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Interrupts it, as Ctrl-C does (it resigns, or releases, and exits).
    fn interrupt(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
    }
}

impl Drop for Etcdctl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn client(cluster: &EtcdCluster) -> LockClient {
    LockClient::builder(cluster.backend())
        .watchdog_lease(Duration::from_secs(6))
        .build()
        .expect("client")
}

#[test]
fn etcdctl_lock_excludes_dlock_and_dlock_takes_it_when_released() {
    let cluster = EtcdCluster::single();
    let client = client(&cluster);
    let name = unique("etcdctl-holds");
    let lock = client.lock(name.clone());
    let prefix = cluster.backend().key_prefix(&name);
    // etcdctl runs the command while it holds the lock: until a file appears (bounded).
    let (_etcdctl, release) = Etcdctl::hold(&cluster, &prefix);
    assert!(lock.try_lock().expect("try").is_none(), "etcdctl holds it");
    thread::scope(|s| {
        let waiter = s.spawn(|| {
            lock.try_lock_for(PATIENCE)
                .expect("wait")
                .map(|guard| guard.unlock().is_ok())
        });
        thread::sleep(Duration::from_millis(500));
        assert!(!waiter.is_finished(), "dlock waits while etcdctl holds");
        // The command ends, etcdctl releases: the waiter is woken by the deletion.
        std::fs::write(&release, b"").expect("let etcdctl's command end");
        assert_eq!(waiter.join().expect("waiter"), Some(true));
    });
    let _ = std::fs::remove_file(&release);
}

#[test]
fn dlock_excludes_etcdctl_lock_until_it_releases() {
    let cluster = EtcdCluster::single();
    let client = client(&cluster);
    let name = unique("dlock-holds");
    let guard = client.lock(name.clone()).lock().expect("lock");
    etcdctl_waits_for(&cluster, guard, &name);
}

/// `etcdctl lock` on `name` waits while `guard` holds it, and gets it once it is let go.
fn etcdctl_waits_for(cluster: &EtcdCluster, guard: dlocks::LockGuard, name: &str) {
    let prefix = cluster.backend().key_prefix(name);
    let etcdctl = Etcdctl::spawn(
        cluster,
        &[
            "lock",
            prefix.trim_end_matches('/'),
            "echo",
            "etcdctl-got-it",
        ],
    );
    assert_eq!(
        etcdctl.line(Duration::from_secs(2)),
        None,
        "etcdctl waits while dlock holds"
    );
    guard.unlock().expect("unlock");
    etcdctl.expect("etcdctl-got-it");
}

#[test]
fn queued_plain_locks_and_etcdctl_lock_are_served_in_arrival_order() {
    let cluster = EtcdCluster::single();
    let queued = || {
        LockClient::builder(cluster.backend())
            .watchdog_lease(Duration::from_secs(6))
            .lock_hand_off(HandOff::Queue)
            .build()
            .expect("client")
    };
    let (holder, early, late) = (queued(), queued(), queued());
    let name = unique("queued-etcdctl");
    let prefix = cluster.backend().key_prefix(&name);
    // What `dlock status` shows: the contenders queued behind the holder.
    let await_queued = |count: u64| crate::await_queued(&cluster, &name, count);
    // Each holder writes its name here while it holds the lock: the file is the order of the
    // holds, whoever reads it when.
    let served = std::env::temp_dir().join(format!("dlock-served-{}", uuid::Uuid::new_v4()));
    let serve = |who: &str| {
        use std::io::Write;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&served)
            .expect("open the order file");
        writeln!(file, "{who}").expect("write the order file");
    };
    let take_turn = |client: &LockClient, who: &str| {
        let guard = client
            .lock(name.clone())
            .try_lock_for(PATIENCE)
            .expect("wait")
            .expect("served within the patience");
        serve(who);
        guard.unlock().expect("unlock");
    };

    let guard = holder.lock(name.clone()).lock().expect("lock");
    thread::scope(|s| {
        // A dlock waiter, then `etcdctl lock`, then another dlock waiter: each queues behind
        // the ones before it.
        s.spawn(|| take_turn(&early, "dlock, first"));
        await_queued(1);
        let command = format!("echo etcdctl >> '{}'", served.display());
        let mut etcdctl = Etcdctl::spawn(
            &cluster,
            &[
                "lock",
                prefix.trim_end_matches('/'),
                "--",
                "sh",
                "-c",
                &command,
            ],
        );
        await_queued(2);
        s.spawn(|| take_turn(&late, "dlock, last"));
        await_queued(3);
        guard.unlock().expect("unlock");
        // Its command ends once it held the lock, and it releases it to the next in the queue.
        etcdctl.finish();
    });
    let order = std::fs::read_to_string(&served).expect("the order file");
    let _ = std::fs::remove_file(&served);
    assert_eq!(
        order.lines().collect::<Vec<_>>(),
        ["dlock, first", "etcdctl", "dlock, last"]
    );
}

#[test]
fn etcdctl_elect_and_dlock_see_one_leader() {
    let cluster = EtcdCluster::single();
    let client = client(&cluster);
    let name = unique("elect");
    let election = client.leader_election(name.clone());
    let prefix = cluster.backend().key_prefix(&name);
    let key = prefix.trim_end_matches('/');
    // etcdctl leads: dlock sees its proposal, and cannot lead.
    let mut go_node = Etcdctl::spawn(&cluster, &["elect", key, "go-node"]);
    go_node.expect("go-node");
    assert_eq!(
        election.leader().expect("leader").as_deref(),
        Some("go-node")
    );
    assert!(election
        .try_campaign_for("rust-node", Duration::ZERO)
        .expect("campaign")
        .is_none());
    // etcdctl resigns (Ctrl-C): dlock's waiting candidate leads.
    thread::scope(|s| {
        let campaign = s.spawn(|| election.try_campaign_for("rust-node", PATIENCE));
        thread::sleep(Duration::from_millis(300));
        go_node.interrupt();
        let leading = campaign
            .join()
            .expect("campaign")
            .expect("campaign")
            .expect("leads once etcdctl resigned");
        assert_eq!(
            election.leader().expect("leader").as_deref(),
            Some("rust-node")
        );
        // An observer and a candidate of etcd's own see dlock's leader.
        let observer = Etcdctl::spawn(&cluster, &["elect", "-l", key]);
        observer.expect("rust-node");
        let rival = Etcdctl::spawn(&cluster, &["elect", key, "late-go-node"]);
        assert_eq!(
            rival.line(Duration::from_secs(2)),
            None,
            "etcd's candidate waits while dlock leads"
        );
        leading.resign().expect("resign");
        rival.expect("late-go-node");
        observer.expect("late-go-node");
    });
}
