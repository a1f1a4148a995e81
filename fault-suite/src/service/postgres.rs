//! The PostgreSQL lock service: one server, or a primary with a streaming standby, both named
//! in the workers' URL (`target_session_attrs=read-write`: they use whichever takes writes). A
//! failover stops the primary's WAL senders (the link partitioned), kills the primary, and
//! promotes the standby; the next standby starts on the old primary's port, so the URL names it.

use std::sync::Arc;
use std::time::Duration;

use dlocks::backend::DistributedLock;
use dlocks::postgres::{Durability, PostgresBackend};
use dlocks::LockError;

use super::{Backend, Store};
use crate::options::FaultKind;
use crate::support::postgres_server::{PostgresServer, ServerOptions};
use crate::support::tcp_proxy::TcpProxy;
use crate::worker::WorkerSpec;

pub static BACKEND: Backend = Backend {
    name: "postgres",
    start,
    claims: |url| url.starts_with("postgres"),
    connect,
    start_partitionable: None,
    takes: |_| true,
    runs: |_| true,
};

fn start(fault: FaultKind) -> Box<dyn Store> {
    let with_standby = fault.needs_replica();
    let synchronous = fault != FaultKind::FailoverUnsynced;
    let primary = PostgresServer::start_with(ServerOptions {
        fake_clock: fault.needs_fake_clock(),
        ..ServerOptions::default()
    });
    // The schema exists before a standby copies the cluster.
    drop(primary.backend());
    Box::new(PostgresService {
        primary,
        standby: None,
        with_standby,
        synchronous,
        ports: None,
    })
}

/// A worker's backend: waiting for the standby (`remote_apply`) when the spec asks for the
/// replica's acknowledgement, else `local`.
fn connect(spec: &WorkerSpec) -> Result<Arc<dyn DistributedLock>, LockError> {
    let backend = PostgresBackend::builder(&spec.lock_url)
        .connect_timeout(spec.response_timeout)
        .statement_timeout(spec.response_timeout)
        .checkout_timeout(spec.response_timeout * 2)
        .synchronous_commit(if spec.replica_sync {
            Durability::RemoteApply
        } else {
            Durability::Local
        })
        .build()?;
    Ok(Arc::new(backend))
}

struct PostgresService {
    primary: PostgresServer,
    standby: Option<PostgresServer>,
    /// Whether the service keeps a standby (the failover faults).
    with_standby: bool,
    /// Whether the standby is synchronous (the workers then wait for it: `remote_apply`).
    synchronous: bool,
    /// The two ports the URL names: the primary and the standby take turns on them.
    ports: Option<(u16, u16)>,
}

impl Store for PostgresService {
    fn port(&self) -> u16 {
        self.primary.port()
    }

    fn url(&self, network: Option<&TcpProxy>) -> String {
        if let Some(network) = network {
            return format!("postgres://postgres@127.0.0.1:{}/postgres", network.port());
        }
        match self.ports {
            Some((a, b)) => format!(
                "postgres://postgres@127.0.0.1:{a},127.0.0.1:{b}/postgres?target_session_attrs=read-write"
            ),
            None => self.primary.url(),
        }
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

    fn failover(&mut self, lag: Duration) -> Result<(), String> {
        let standby = self
            .standby
            .take()
            .ok_or("this lock service has no standby")?;
        // The old primary's port is free for the next standby.
        drop(fail_over(&mut self.primary, standby, lag));
        Ok(())
    }

    fn jump_clock(&mut self, by: Duration) -> Result<(), String> {
        self.primary.jump_clock(by)
    }

    fn ensure_replica(&mut self) {
        if !self.with_standby || self.standby.is_some() {
            return;
        }
        let port = self
            .ports
            .map(|(a, b)| if a == self.primary.port() { b } else { a });
        let standby =
            PostgresServer::start_standby_on(&self.primary, ServerOptions::default(), port);
        if self.synchronous {
            self.primary.make_standbys_synchronous();
        }
        self.ports
            .get_or_insert((self.primary.port(), standby.port()));
        self.standby = Some(standby);
    }
}

/// A lagging standby, then the primary's death: `primary`'s WAL senders are stopped (the link
/// partitioned) for `lag` while it goes on committing, then it is killed and `standby`
/// promoted in its place. Returns the killed primary.
pub(super) fn fail_over(
    primary: &mut PostgresServer,
    standby: PostgresServer,
    lag: Duration,
) -> PostgresServer {
    primary.pause_wal_senders();
    std::thread::sleep(lag);
    primary.kill();
    standby.promote();
    std::mem::replace(primary, standby)
}
