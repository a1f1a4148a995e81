//! Semaphores and leader elections across OS processes on one server: never more holders than
//! permits, a permit of a process killed with `kill -9` back within its lease, a killed leader
//! replaced within its lease by one with a higher token.
//!
//! The other processes are the test binary run again with `DLOCK_HELPER` set: the `helper`
//! test of the module that started them calls [`helper`], which then plays the role it names.

use std::time::{Duration, Instant};

use dlocks::{LockClient, LockClientBuilder};

use super::ServerEnv;
use crate::helper_process::{helper_role, Reaped};

const PERMITS: u32 = 3;
const SEMAPHORE: &str = "procs:semaphore";
const DEAD_HOLDER: &str = "procs:semaphore-dead";
const ELECTION: &str = "procs:election";
/// The watchdog lease of the helpers that die: what their permit or leadership outlives them by.
const SHORT_LEASE: Duration = Duration::from_millis(1500);

/// The body of a module's `helper` test: nothing in a normal run; in a helper process, the
/// role it was started for (`permits`: two threads taking permits and counting the holders on
/// the server; `permit-hold` / `lead`: take a permit / the leadership and wait to be killed).
pub fn helper<E: ServerEnv>() {
    let Some((role, url)) = helper_role() else {
        return; // Run as a normal test: nothing to do.
    };
    let short = || {
        LockClientBuilder::new(E::connect_backend(&url))
            .watchdog_lease(SHORT_LEASE)
            .build()
            .expect("client")
    };
    match role.as_str() {
        "permits" => permits::<E>(&url, E::connect(&url)),
        "permit-hold" => {
            let client = short();
            let permit = client.semaphore(DEAD_HOLDER).acquire().expect("permit");
            println!("HOLDING {}", permit.id());
            std::thread::sleep(Duration::from_secs(60));
        }
        "lead" => {
            let client = short();
            let leading = client
                .leader_election(ELECTION)
                .campaign("helper")
                .expect("campaign");
            println!("LEADING {}", leading.token());
            std::thread::sleep(Duration::from_secs(60));
        }
        other => panic!("unknown helper role {other}"),
    }
}

/// Two threads, each taking a permit 25 times and counting the holders on the server while it
/// holds one; prints the most it saw, and `DONE`.
fn permits<E: ServerEnv>(url: &str, client: LockClient) {
    let most = std::thread::scope(|s| {
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let sem = client.semaphore(SEMAPHORE);
                s.spawn(move || {
                    let mut holders = E::counter(url);
                    let mut most = 0;
                    for _ in 0..25 {
                        let permit = sem.acquire().expect("permit");
                        most = most.max(holders.add(1));
                        std::thread::sleep(Duration::from_millis(1));
                        holders.add(-1);
                        assert!(!permit.is_lost());
                        permit.release().expect("release");
                    }
                    most
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|thread| thread.join().expect("thread"))
            .max()
            .unwrap_or(0)
    });
    println!("MOST {most}");
    println!("DONE");
}

/// Six processes of two threads share a semaphore of three permits: never more than three hold
/// one at once (counted on the server), and every permit is given back. `module` is the calling
/// module's `module_path!()` (whose `helper` test calls [`helper`]).
pub fn six_processes_never_hold_more_permits_than_the_semaphore_has<E: ServerEnv>(module: &str) {
    let server = E::start();
    server.prepare_counter();
    let client = server.client();
    assert!(client
        .semaphore(SEMAPHORE)
        .try_set_permits(PERMITS)
        .expect("set"));
    let mut helpers: Vec<Reaped> = (0..6)
        .map(|_| Reaped::spawn(module, "permits", &server.url()))
        .collect();
    let mut most = 0;
    for helper in &mut helpers {
        let lines = helper.lines_until(Some("DONE"));
        assert!(lines.iter().any(|line| line.ends_with("DONE")), "{lines:?}");
        for line in lines {
            // The first line the helper prints follows the test harness's own words.
            if let Some(seen) = line.split("MOST ").nth(1) {
                most = most.max(seen.parse::<u32>().expect("a count"));
            }
        }
    }
    assert!(most <= PERMITS, "{most} holders at once");
    assert!(most > 1, "the permits were shared ({most} at most)");
    assert_eq!(
        client
            .semaphore(SEMAPHORE)
            .available_permits()
            .expect("available"),
        u64::from(PERMITS),
        "every permit given back"
    );
}

/// A process holding the only permit is killed: the permit comes back once its watchdog lease
/// has run out.
pub fn a_permit_held_by_a_killed_process_comes_back_within_its_lease<E: ServerEnv>(module: &str) {
    let server = E::start();
    let client = server.client();
    let sem = client.semaphore(DEAD_HOLDER);
    assert!(sem.try_set_permits(1).expect("set"));
    let mut holder = Reaped::spawn(module, "permit-hold", &server.url());
    holder.lines_until(Some("HOLDING"));
    assert!(
        sem.try_acquire().expect("try").is_none(),
        "the other process holds it"
    );
    holder.0.kill().expect("kill -9 the holder");
    holder.0.wait().expect("reap");
    let killed = Instant::now();
    let permit = sem
        .try_acquire_for(Duration::from_secs(20))
        .expect("wait")
        .expect("the permit comes back");
    assert!(
        killed.elapsed() < SHORT_LEASE + Duration::from_secs(2),
        "back within its lease: {:?}",
        killed.elapsed()
    );
    permit.release().expect("release");
}

/// A leading process is killed: another leads once its lease has run out, with a higher
/// token, and an observer sees the change.
pub fn a_killed_leader_is_replaced_within_its_lease_by_a_higher_token<E: ServerEnv>(module: &str) {
    let server = E::start();
    let client = server.client();
    let election = client.leader_election(ELECTION);
    let mut leader = Reaped::spawn(module, "lead", &server.url());
    let lines = leader.lines_until(Some("LEADING"));
    let token: u64 = lines
        .iter()
        .find_map(|line| line.split("LEADING ").nth(1))
        .expect("the helper leads")
        .parse()
        .expect("a token");
    assert_eq!(
        election.leader().expect("leader").as_deref(),
        Some("helper")
    );
    let changes = election.observe().expect("observe");
    assert_eq!(
        changes.recv_timeout(Duration::from_secs(5)),
        Ok(Some("helper".to_owned()))
    );
    leader.0.kill().expect("kill -9 the leader");
    leader.0.wait().expect("reap");
    let killed = Instant::now();
    let leading = election
        .try_campaign_for("parent", Duration::from_secs(20))
        .expect("campaign")
        .expect("leads once the dead leader's lease ends");
    assert!(
        killed.elapsed() < SHORT_LEASE + Duration::from_secs(2),
        "replaced within its lease: {:?}",
        killed.elapsed()
    );
    assert!(leading.token() > token);
    // The observer saw the old leader go (possibly only as the new one coming, when both
    // happened between two of its looks) and the new one come.
    loop {
        match changes
            .recv_timeout(Duration::from_secs(10))
            .expect("a change")
        {
            None => continue,
            Some(leader) => {
                assert_eq!(leader, "parent");
                break;
            }
        }
    }
    leading.resign().expect("resign");
}
