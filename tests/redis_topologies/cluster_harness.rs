//! The Redis Cluster harness itself, with plain redis commands only: the cluster starts and
//! routes keys, a slot moves between masters in steps, a killed master's replica takes over.

#![cfg(feature = "redis")]

use dlock_test_support as support;

use redis::cluster::{ClusterClient, ClusterConnection};
use support::cluster::ClusterSetup;

fn cluster_connection(setup: &ClusterSetup) -> ClusterConnection {
    ClusterClient::new(setup.urls())
        .expect("a cluster client over the nodes")
        .get_connection()
        .expect("a cluster connection")
}

/// Whether `node` holds `key` itself (`KEYS` answers locally, where `EXISTS` on a node not
/// serving the key would answer MOVED or ASK).
fn holds(setup: &ClusterSetup, node: usize, key: &str) -> bool {
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(key)
        .query(&mut setup.nodes[node].admin())
        .expect("KEYS on one node");
    keys == [key]
}

#[test]
fn three_masters_route_a_key() {
    let setup = ClusterSetup::start(3, 0);
    assert_eq!(setup.masters().len(), 3);
    let mut con = cluster_connection(&setup);
    let key = "harness:routed";
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("value")
        .query(&mut con)
        .expect("SET through the cluster");
    let value: String = redis::cmd("GET")
        .arg(key)
        .query(&mut con)
        .expect("GET through the cluster");
    assert_eq!(value, "value");

    let master = setup.master_of_slot(setup.slot_of(key));
    let exists: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query(&mut setup.nodes[master].admin())
        .expect("EXISTS on the master of the key's slot");
    assert_eq!(exists, 1);
    for node in 0..setup.nodes.len() {
        assert_eq!(
            holds(&setup, node, key),
            node == master,
            "the key should be on node {master} only (checking node {node})"
        );
    }
}

#[test]
fn a_slot_moves_with_its_key() {
    let setup = ClusterSetup::start(3, 0);
    let mut con = cluster_connection(&setup);
    let key = "harness:moved";
    let _: () = redis::cmd("SET")
        .arg(key)
        .arg("value")
        .query(&mut con)
        .expect("SET through the cluster");
    let slot = setup.slot_of(key);
    let source = setup.master_of_slot(slot);
    let target = setup.other_master(source);

    let migration = setup.migrate(slot, target);
    assert_eq!(migration.move_keys(10), 1);
    assert!(holds(&setup, target, key), "moved to the target");
    assert!(!holds(&setup, source, key), "gone from the source");
    // Half moved: the source answers ASK, the client follows it.
    let value: String = redis::cmd("GET")
        .arg(key)
        .query(&mut con)
        .expect("GET during the migration");
    assert_eq!(value, "value");
    assert_eq!(migration.move_keys(10), 0, "nothing left to move");
    migration.finish();

    assert_eq!(setup.master_of_slot(slot), target);
    assert!(holds(&setup, target, key));
    let exists: i64 = redis::cmd("EXISTS")
        .arg(key)
        .query(&mut setup.nodes[target].admin())
        .expect("EXISTS on the target, which serves the slot now");
    assert_eq!(exists, 1);
    let value: String = redis::cmd("GET")
        .arg(key)
        .query(&mut con)
        .expect("GET after the migration (MOVED followed)");
    assert_eq!(value, "value");
    let value: String = redis::cmd("GET")
        .arg(key)
        .query(&mut cluster_connection(&setup))
        .expect("GET on a new cluster connection");
    assert_eq!(value, "value");
}

#[test]
fn failover_promotes_a_replica() {
    let mut setup = ClusterSetup::start(3, 1);
    let key = "harness:failover";
    let slot = setup.slot_of(key);
    let old = setup.master_of_slot(slot);
    let replicas = setup.replicas_of(old);
    assert_eq!(replicas.len(), 1);
    // Written on the master and acknowledged by its replica, so it survives the failover.
    let mut admin = setup.nodes[old].admin();
    let (_, acks): ((), i64) = redis::pipe()
        .cmd("SET")
        .arg(key)
        .arg("value")
        .cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut admin)
        .expect("SET + WAIT on the master");
    assert_eq!(acks, 1, "the replica acknowledged the write");
    drop(admin);

    setup.kill(old);
    let new = setup.await_failover(old, slot);
    assert_ne!(new, old);
    assert_eq!(new, replicas[0], "the master's own replica took over");
    assert_eq!(setup.master_of_slot(slot), new);
    assert!(!setup.masters().contains(&old));
    let value: String = redis::cmd("GET")
        .arg(key)
        .query(&mut setup.nodes[new].admin())
        .expect("GET on the new master");
    assert_eq!(value, "value");
    let value: String = redis::cmd("GET")
        .arg(key)
        .query(&mut cluster_connection(&setup))
        .expect("GET through the cluster after the failover");
    assert_eq!(value, "value");
}
