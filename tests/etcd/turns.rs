//! A fair waiter's turn, seen on the name's watch: the release of the key before its place
//! makes the place the first key under the name, which holds (etcd's `Mutex` rule), and the
//! waiter takes it with no request of its own. Its first renewal, made at once, writes the
//! hold's id into the place and moves it onto the client's session.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use dlock_test_support::conformance::unique;
use dlock_test_support::etcd_server::EtcdCluster;
use dlock_test_support::tcp_proxy::TcpProxy;
use dlocks::backend::Inspection;
use dlocks::{FairLock, LockClient, OwnedLockGuard};

/// How long a test waits for what must come (a waiter queued, its turn, the next holder).
const PATIENCE: Duration = Duration::from_secs(30);

/// A client with the default watchdog lease, straight on the cluster (another process).
fn client(cluster: &EtcdCluster) -> LockClient {
    LockClient::new(cluster.backend())
}

/// A client with the default watchdog lease whose requests go through `proxy`.
fn client_through(proxy: &TcpProxy) -> LockClient {
    LockClient::new(crate::backend_through(proxy, Duration::from_millis(500)))
}

/// A transaction on a name's keys comparing a value with the empty one: a turn's claim (no
/// take, place or release compares that).
const CLAIM: &str = r#""target":"VALUE","value":"""#;

/// A turn on a fresh name: the first client holds it, the second queues behind it, `hold_up`
/// is set on the proxy (given the name's key prefix, in base64: a needle), and the holder lets
/// go. The name, and what the waiter got.
fn turn_after(
    cluster: &EtcdCluster,
    (holder, waiter): (&LockClient, &LockClient),
    what: &str,
    hold_up: impl FnOnce(&str),
) -> (String, OwnedLockGuard) {
    let name = crate::aligned_name(what);
    let held = holder.fair_lock(name.clone()).lock().expect("lock");
    let turn = wait_on(waiter.fair_lock(name.clone()));
    crate::await_queued(cluster, &name, 1);
    hold_up(&STANDARD.encode(cluster.backend().key_prefix(&name)));
    held.unlock().expect("unlock");
    let turn = turn
        .recv_timeout(PATIENCE)
        .expect("the waiter answered")
        .expect("the lock");
    (name, turn)
}

/// `lock`'s `lock_owned()` on a thread of its own (a waiter of its own).
fn wait_on(lock: FairLock) -> mpsc::Receiver<Result<OwnedLockGuard, dlocks::LockError>> {
    let (sender, received) = mpsc::channel();
    thread::spawn(move || {
        let _ = sender.send(lock.lock_owned());
    });
    received
}

/// The write that makes a turn a hold like any other (the waiter's first renewal, which writes
/// its id into its place as it was, still empty) is held up in the network from before the
/// holder's release: the waiter holds the lock all the same, from the release seen on its
/// watch. Its place's lease lasts only as long as its client keeps it alive for that turn: the
/// waiter is told its hold is lost, and another client gets the lock only after that.
///
/// A waiter's own try after it subscribed may still be on its way when the holder releases:
/// it then takes the lock itself, with a write (a hold on the watchdog's lease, which no claim
/// follows). The case is played again on a new name until the release comes first, five times
/// at most.
#[test]
fn a_turn_seen_on_the_watch_is_held_unclaimed_and_lost_before_anyone_else_gets_it() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let (holder, waiter, next) = (client(&cluster), client_through(&proxy), client(&cluster));
    for _ in 0..5 {
        let (name, turn) = turn_after(&cluster, (&holder, &waiter), "turn-unclaimed", |prefix| {
            proxy.hold_back_every(&[prefix, CLAIM]);
        });
        assert!(!turn.is_lost(), "held");
        if turn.lease_deadline() > Instant::now() + Duration::from_secs(10) {
            // Taken by its own try, on the watchdog's lease: played again.
            proxy.stop_holding_back();
            turn.unlock().expect("unlock");
            continue;
        }

        let taken = next
            .fair_lock(name.clone())
            .try_lock_for(PATIENCE)
            .expect("wait")
            .expect("the lock, once the turn's place is gone");
        let granted_at = Instant::now();
        assert!(proxy.held_back() > 0, "the turn's claim was held up");
        assert!(
            turn.lease_deadline() <= granted_at,
            "another client got the lock {:?} before the turn's hold ended",
            turn.lease_deadline() - granted_at
        );
        assert!(turn.is_lost(), "the waiter knows its turn's hold is lost");
        proxy.stop_holding_back();
        assert!(turn.unlock().is_err(), "a lost hold's release says so");
        taken.unlock().expect("unlock");
        return;
    }
    panic!("the waiter took the lock with its own try five times: no turn was seen");
}

/// A turn taken from the watch becomes a hold like any other: it outlives its place's lease
/// (its id written, on the client's session), holds another client off for as long as it is
/// held, reads as held by its holder, and its release lets the next waiter in.
#[test]
fn a_turn_seen_on_the_watch_becomes_a_hold_like_any_other() {
    let cluster = EtcdCluster::single();
    let (holder, waiter, next) = (client(&cluster), client(&cluster), client(&cluster));
    let name = unique("turn-claimed");
    let held = holder.fair_lock(name.clone()).lock().expect("lock");
    let turn = wait_on(waiter.fair_lock(name.clone()));
    crate::await_queued(&cluster, &name, 1);
    held.unlock().expect("unlock");
    let turn = turn
        .recv_timeout(PATIENCE)
        .expect("the waiter answered")
        .expect("its turn");

    // Longer than the place's lease (3 s) and the grant it started on.
    let refused = next
        .fair_lock(name.clone())
        .try_lock_for(Duration::from_secs(5))
        .expect("wait");
    assert!(
        refused.is_none(),
        "another client got the lock while it was held"
    );
    assert!(!turn.is_lost(), "still held");
    let info = cluster.backend().inspect(&name).expect("inspect");
    assert_eq!(
        info.holders.first().map(|holder| holder.owner.as_str()),
        Some(turn.owner()),
        "the name is held by the turn's hold: {info:?}"
    );
    assert!(
        turn.lease_deadline() > Instant::now() + Duration::from_secs(20),
        "on the watchdog's lease"
    );

    let after = wait_on(next.fair_lock(name.clone()));
    crate::await_queued(&cluster, &name, 1);
    turn.unlock().expect("unlock");
    after
        .recv_timeout(PATIENCE)
        .expect("the next waiter answered")
        .expect("the next waiter's turn")
        .unlock()
        .expect("unlock");
}

/// A turn taken moments after its client's session was granted or kept alive is claimed in
/// one request, the write of the hold's id into its place, onto the session: the session
/// already lasts past what the renewal promises, so it is not kept alive again for it.
///
/// The waiter's own try may take the lock before the release comes (a take, not a turn): the
/// case is then played again on a new name, five times at most.
#[test]
fn a_turn_soon_after_its_session_was_kept_alive_is_claimed_in_one_request() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let (holder, waiter) = (client(&cluster), client_through(&proxy));
    let session = session_of(&cluster, &waiter);
    let names_session = |request: &Vec<u8>| contains(request, &format!("\"{session}\""));
    for _ in 0..5 {
        let (name, turn) = turn_after(&cluster, (&holder, &waiter), "turn-one-request", |_| {
            proxy.record_requests("POST /v3/");
        });
        let prefix = cluster.backend().key_prefix(&name);
        let deadline = Instant::now() + PATIENCE;
        while crate::leases::lease_of(&cluster, &prefix) != session {
            assert!(
                Instant::now() < deadline,
                "the hold never went onto the session"
            );
            thread::sleep(Duration::from_millis(10));
        }
        let requests = proxy.recorded();
        let claimed = requests
            .iter()
            .any(|request| names_session(request) && contains(request, CLAIM));
        turn.unlock().expect("unlock");
        if !claimed {
            // Taken by its own try: played again.
            continue;
        }
        let kept_alive: Vec<String> = requests
            .iter()
            .filter(|request| contains(request, "/v3/lease/keepalive") && names_session(request))
            .map(|request| String::from_utf8_lossy(request).into_owned())
            .collect();
        assert!(
            kept_alive.is_empty(),
            "the session was kept alive again for the turn: {kept_alive:?}"
        );
        return;
    }
    panic!("the waiter took the lock with its own try five times: no turn was seen");
}

/// A turn let go at once is never renewed: its grant lasts until its place's lease ends (1.5 s
/// at least), and the watchdog renews it only once half of that has passed. Its release deletes
/// the place it took as its hold; no request writes the hold's id into it.
///
/// A turn is on the places' lease, not on the session (the waiter's own try may take the lock
/// before the release comes: played again on a new name, five times at most).
#[test]
fn a_turn_let_go_at_once_is_never_renewed() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let (holder, waiter) = (client(&cluster), client_through(&proxy));
    let session = session_of(&cluster, &waiter);
    for _ in 0..5 {
        let (name, turn) = turn_after(&cluster, (&holder, &waiter), "turn-let-go", |_| {
            proxy.record_requests("POST /v3/");
        });
        let prefix = cluster.backend().key_prefix(&name);
        let a_turn = crate::leases::lease_of(&cluster, &prefix) != session;
        turn.unlock().expect("unlock");
        if !a_turn {
            continue;
        }
        let claims: Vec<String> = proxy
            .recorded()
            .iter()
            .filter(|request| contains(request, CLAIM))
            .map(|request| String::from_utf8_lossy(request).into_owned())
            .collect();
        assert!(claims.is_empty(), "the turn was renewed: {claims:?}");
        assert!(
            !holder.fair_lock(name).is_locked().expect("status"),
            "the release let it go"
        );
        return;
    }
    panic!("the waiter's lock was on its session five times: no turn was seen");
}

/// `client`'s session: granted for a hold of its own on another name, let go.
fn session_of(cluster: &EtcdCluster, client: &LockClient) -> i64 {
    let other = unique("turn-session");
    let kept = client.lock(other.clone()).lock().expect("lock");
    let session = crate::leases::lease_of(cluster, &cluster.backend().key_prefix(&other));
    kept.unlock().expect("unlock");
    session
}

/// Whether `request` contains `text`.
fn contains(request: &[u8], text: &str) -> bool {
    request
        .windows(text.len())
        .any(|window| window == text.as_bytes())
}

/// A turn whose first renewal gets no answer in time (held up in the network past the request
/// timeout) is kept: the renewal is tried again while the turn's grant still lasts, and the
/// hold goes on as any other.
#[test]
fn a_turn_whose_first_renewal_is_not_answered_is_kept() {
    let cluster = EtcdCluster::single();
    let proxy = TcpProxy::start(cluster.members()[0].client_port);
    let (holder, waiter, next) = (client(&cluster), client_through(&proxy), client(&cluster));
    for _ in 0..5 {
        let (name, turn) = turn_after(&cluster, (&holder, &waiter), "turn-unanswered", |prefix| {
            proxy.hold_back_next_all(&[prefix, CLAIM]);
        });
        if turn.lease_deadline() > Instant::now() + Duration::from_secs(10)
            && proxy.held_back() == 0
        {
            // Taken by its own try (no turn, no claim): played again.
            proxy.stop_holding_back();
            turn.unlock().expect("unlock");
            continue;
        }
        // Past the turn's grant (the places' lease, 3 s) and the first renewal's retries.
        let refused = next
            .fair_lock(name.clone())
            .try_lock_for(Duration::from_secs(5))
            .expect("wait");
        assert!(proxy.held_back() > 0, "the first renewal was held up");
        assert!(!turn.is_lost(), "the turn was kept");
        assert!(
            refused.is_none(),
            "another client got the lock while it was held"
        );
        assert!(
            turn.lease_deadline() > Instant::now() + Duration::from_secs(20),
            "on the watchdog's lease"
        );
        turn.unlock().expect("unlock");
        return;
    }
    panic!("the waiter took the lock with its own try five times: no turn was seen");
}
