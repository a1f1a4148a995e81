//! PostgreSQL with a standby, each server in a network namespace of its own (`--topology
//! postgres-standby`): the primary on one node, a streaming standby on the other, both named
//! in the workers' URL (`target_session_attrs=read-write`: they use whichever takes writes).
//!
//! PostgreSQL promotes nothing by itself: the suite plays the part of the HA manager (Patroni,
//! pg_auto_failover). When the primary is cut off it promotes the standby, and it stops the old
//! primary before the network heals, as such a manager demotes a primary that lost its leader
//! key; without that, two primaries would take locks once the partition healed, whatever the
//! lock library did.

use std::time::Duration;

use super::{postgres, Store};
use crate::support::network::Network;
use crate::support::postgres_server::{PostgresServer, ServerOptions};
use crate::support::tcp_proxy::TcpProxy;

/// The primary and the standby, each on a node of its own.
pub fn start(synchronous: bool) -> Box<dyn Store> {
    let network = match Network::create(2) {
        Ok(network) => network,
        Err(error) => panic!("the postgres-standby topology needs its network: {error}"),
    };
    let primary = PostgresServer::start_on_node(network.node(0), ServerOptions::default());
    // The schema exists before the standby copies the cluster.
    drop(primary.backend());
    let mut service = StandbyService {
        network,
        primary,
        primary_node: 0,
        standby: None,
        synchronous,
    };
    service.ensure_replica();
    Box::new(service)
}

struct StandbyService {
    /// Dropped last: the servers in its namespaces go first.
    network: Network,
    primary: PostgresServer,
    /// The node the primary runs on; the standby runs on the other.
    primary_node: usize,
    standby: Option<PostgresServer>,
    /// Whether the standby is synchronous (the workers then wait for it: `remote_apply`).
    synchronous: bool,
}

impl StandbyService {
    fn standby_node(&self) -> usize {
        1 - self.primary_node
    }

    /// The old primary stopped (by the HA manager), the promoted standby the primary.
    fn replace_primary(&mut self, promoted: PostgresServer) {
        let mut old = std::mem::replace(&mut self.primary, promoted);
        old.kill();
        self.primary_node = self.standby_node();
    }
}

impl Drop for StandbyService {
    fn drop(&mut self) {
        // Every server stopped before its namespace goes.
        self.standby.take();
        self.primary.kill();
    }
}

impl Store for StandbyService {
    fn port(&self) -> u16 {
        self.primary.port()
    }

    /// Both nodes, whichever is the primary: the workers' connections find the one that
    /// takes writes. (No proxy: the faults that need one are not taken.)
    fn url(&self, _network: Option<&TcpProxy>) -> String {
        let host = |at: usize| self.network.node(at).address();
        format!(
            "postgres://postgres@{}:{port},{}:{port}/postgres?target_session_attrs=read-write",
            host(0),
            host(1),
            port = self.primary.port()
        )
    }

    fn restart(&mut self) {
        self.primary.restart();
    }

    fn pause(&self) {
        self.primary.pause();
    }

    fn resume(&self) {
        self.primary.resume();
    }

    fn kill_wakeup_connections(&self) -> Result<(), String> {
        self.primary.terminate("dlock-listener");
        Ok(())
    }

    /// The standby lags (the primary's WAL senders stopped) for `lag`, the primary is killed
    /// and the standby promoted.
    fn failover(&mut self, lag: Duration) -> Result<(), String> {
        let standby = self
            .standby
            .take()
            .ok_or("this lock service has no standby")?;
        drop(postgres::fail_over(&mut self.primary, standby, lag));
        self.primary_node = self.standby_node();
        Ok(())
    }

    /// The primary cut off from the standby and from every client, both ways, for `length`;
    /// a third of the way in, the standby is promoted; the old primary is stopped before the
    /// network heals.
    fn partition(&mut self, length: Duration) -> Result<(), String> {
        let standby = self
            .standby
            .take()
            .ok_or("this lock service has no standby")?;
        let cut = [self.primary_node];
        self.network.isolate(&cut)?;
        self.network.cut_from_clients(&cut)?;
        std::thread::sleep(length / 3);
        standby.promote();
        std::thread::sleep(length - length / 3);
        self.replace_primary(standby);
        self.network.heal()
    }

    /// What the primary sends the standby dropped (its WAL), what the standby sends still
    /// arriving, for `length`; the clients reach both. A synchronous primary's commits wait
    /// for the standby meanwhile.
    fn partition_one_way(&mut self, length: Duration) -> Result<(), String> {
        if self.standby.is_none() {
            return Err("this lock service has no standby".to_owned());
        }
        self.network
            .cut(&[self.primary_node], &[self.standby_node()], false)?;
        std::thread::sleep(length);
        self.network.heal()
    }

    /// A new standby on the node the old primary had, when there is none.
    fn ensure_replica(&mut self) {
        if self.standby.is_some() {
            return;
        }
        let node = self.network.node(self.standby_node());
        let standby = PostgresServer::start_standby_on_node(&self.primary, node);
        if self.synchronous {
            self.primary.make_standbys_synchronous();
        }
        self.standby = Some(standby);
    }
}
