//! A multi-lock whose members live on different stores: taken all or none, waited for member
//! by member, lost as a whole when one member is, without deadlock between sets taken in
//! opposite orders.

use std::thread;
use std::time::Duration;

use dlocks::{LockClient, MemoryBackend, MultiLock};

use super::ServerEnv;

/// A multi-lock whose members live on two servers of the backend and in the in-process store,
/// taken [`ServerEnv::LOAD`]'s rounds by each of the two threads.
pub fn members_on_two_servers_and_in_memory_are_taken_all_or_none_without_deadlock<E: ServerEnv>() {
    let (one, two) = (E::start(), E::start());
    let memory = MemoryBackend::new();
    // Each thread is a service with its own clients on the three stores.
    members_on_several_stores_are_taken_all_or_none_without_deadlock(
        || vec![one.client(), two.client(), LockClient::new(memory.clone())],
        &["orders", "ledger", "cache"],
        E::LOAD.multi_lock_rounds,
    );
}

/// `service` makes one client on each of the stores (a service with its own clients, one per
/// thread); `names` name one member on each store, in the same order. Two threads then take one
/// set across the stores in opposite orders, `rounds` times each.
pub fn members_on_several_stores_are_taken_all_or_none_without_deadlock(
    service: impl Fn() -> Vec<LockClient> + Sync,
    names: &[&str],
    rounds: usize,
) {
    let first = service();
    assert_eq!(first.len(), names.len(), "one member name per store");
    assert!(
        (2..=4).contains(&first.len()),
        "members on two to four stores"
    );
    let members = |clients: &[LockClient]| -> Vec<_> {
        clients
            .iter()
            .zip(names)
            .map(|(client, name)| client.lock(*name))
            .collect()
    };
    let set = MultiLock::new(members(&first));
    let guard = set.lock().expect("every member");
    let others = service();
    for (client, name) in others.iter().zip(names) {
        assert!(
            client.lock(*name).try_lock().expect("try").is_none(),
            "{name}"
        );
    }
    // Another set sharing one member waits for all, and keeps nothing meanwhile.
    let last = others.len() - 1;
    let theirs = MultiLock::new([others[last].lock(names[last]), others[0].lock("other")]);
    assert!(theirs
        .try_lock_for(Duration::from_millis(50))
        .expect("try")
        .is_none());
    assert!(
        !first[0].lock("other").is_locked().expect("status"),
        "nothing kept while waiting"
    );
    guard.unlock().expect("unlock every member");
    theirs
        .try_lock()
        .expect("try")
        .expect("free now")
        .unlock()
        .expect("unlock");

    // A member force-unlocked on the first store loses the set; unlock still releases the rest.
    let guard = set.lock().expect("every member again");
    assert!(others[0].lock(names[0]).force_unlock().expect("force"));
    assert!(guard.unlock().is_err(), "a lost member is reported");
    for (client, name) in others.iter().zip(names).skip(1) {
        assert!(
            !client.lock(*name).is_locked().expect("status"),
            "{name} on another store was released"
        );
    }

    // Two threads taking one set across the stores in opposite orders.
    thread::scope(|s| {
        for reversed in [false, true] {
            let clients = service();
            s.spawn(move || {
                let mut members: Vec<_> = clients
                    .iter()
                    .zip(["x", "y", "z", "w"])
                    .map(|(client, name)| client.lock(name))
                    .collect();
                if reversed {
                    members.reverse();
                }
                let set = MultiLock::new(members);
                for _ in 0..rounds {
                    set.lock().expect("lock").unlock().expect("unlock");
                }
            });
        }
    });
}
