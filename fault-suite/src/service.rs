//! The lock service the workers use.
//!
//! On Redis: one `redis-server`, or a master with a replica behind a proxy that stands for the
//! service's address (moved to the replica on failover); the replica reaches its master through
//! a proxy of its own, so the replication link can be partitioned: what the master writes
//! meanwhile never reaches the replica.
//!
//! On PostgreSQL: one server, or a primary with a streaming standby, both named in the
//! workers' URL (`target_session_attrs=read-write`: they use whichever takes writes). A
//! failover stops the primary's WAL senders (the link partitioned), kills the primary, and
//! promotes the standby; the next standby starts on the old primary's port, so the URL names it.

use std::time::Duration;

use crate::options::Backend;
use crate::support::postgres_server::{PostgresServer, ServerOptions};
use crate::support::redis_server::RedisServer;
use crate::support::tcp_proxy::TcpProxy;

pub struct LockService {
    store: Store,
    /// The network between the workers and the service, when a fault needs one.
    network: Option<TcpProxy>,
}

enum Store {
    Redis(Box<RedisService>),
    Postgres(Box<PostgresService>),
}

struct RedisService {
    /// The server lock steps go to (after a failover, the promoted replica).
    master: RedisServer,
    /// The master's replica, until a failover promotes it.
    replica: Option<RedisServer>,
    /// The replica's link to the master.
    replication_link: Option<TcpProxy>,
    proxy: Option<TcpProxy>,
    /// The old master, killed by a failover, kept so its process is reaped with the run.
    retired: Vec<RedisServer>,
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

impl LockService {
    /// One server, or a primary (master) with one standby (replica); on PostgreSQL a
    /// synchronous one when `synchronous`; reached through a network of the suite's own when
    /// `with_network`.
    pub fn start(
        backend: Backend,
        with_replica: bool,
        synchronous: bool,
        with_network: bool,
    ) -> LockService {
        let store = match backend {
            Backend::Redis => {
                let mut service = RedisService {
                    master: RedisServer::start(),
                    replica: None,
                    replication_link: None,
                    proxy: None,
                    retired: Vec::new(),
                };
                if with_replica {
                    service.proxy = Some(TcpProxy::start(service.master.port()));
                }
                Store::Redis(Box::new(service))
            }
            Backend::Postgres => {
                let primary = PostgresServer::start();
                // The schema exists before a standby copies the cluster.
                drop(primary.backend());
                Store::Postgres(Box::new(PostgresService {
                    primary,
                    standby: None,
                    with_standby: with_replica,
                    synchronous,
                    ports: None,
                }))
            }
        };
        let network = with_network.then(|| {
            TcpProxy::start(match &store {
                Store::Redis(redis) => redis.master.port(),
                Store::Postgres(pg) => pg.primary.port(),
            })
        });
        let mut service = LockService { store, network };
        if with_replica {
            service.ensure_replica();
        }
        service
    }

    /// The network between the workers and the service, if it has one.
    pub fn network(&self) -> Result<&TcpProxy, String> {
        self.network
            .as_ref()
            .ok_or_else(|| "this lock service is reached without a network to fault".to_owned())
    }

    /// The URL workers connect to.
    pub fn url(&self) -> String {
        if let Some(network) = &self.network {
            return match &self.store {
                Store::Redis(_) => network.url(),
                Store::Postgres(_) => {
                    format!("postgres://postgres@127.0.0.1:{}/postgres", network.port())
                }
            };
        }
        match &self.store {
            Store::Redis(redis) => match &redis.proxy {
                Some(proxy) => proxy.url(),
                None => redis.master.url(),
            },
            Store::Postgres(pg) => match pg.ports {
                Some((a, b)) => format!(
                    "postgres://postgres@127.0.0.1:{a},127.0.0.1:{b}/postgres?target_session_attrs=read-write"
                ),
                None => pg.primary.url(),
            },
        }
    }

    /// Kills the lock server and starts it again on the same port: empty on Redis (no
    /// persistence), recovered from its WAL on PostgreSQL.
    pub fn restart(&mut self) {
        match &mut self.store {
            Store::Redis(redis) => redis.master.restart(),
            Store::Postgres(pg) => pg.primary.restart(),
        }
    }

    /// Stops (`SIGSTOP`) every process of the lock server.
    pub fn pause(&self) {
        match &self.store {
            Store::Redis(redis) => redis.master.pause(),
            Store::Postgres(pg) => pg.primary.pause(),
        }
    }

    /// Lets a paused lock server go on.
    pub fn resume(&self) {
        match &self.store {
            Store::Redis(redis) => redis.master.resume(),
            Store::Postgres(pg) => pg.primary.resume(),
        }
    }

    /// Drops every connection waiters are woken through: Redis's pub/sub connections
    /// (`CLIENT KILL TYPE pubsub`), PostgreSQL's listening sessions (`pg_terminate_backend`).
    pub fn kill_wakeup_connections(&self) -> Result<(), String> {
        match &self.store {
            Store::Redis(redis) => redis::cmd("CLIENT")
                .arg("KILL")
                .arg("TYPE")
                .arg("pubsub")
                .query::<i64>(&mut redis.master.admin())
                .map(drop)
                .map_err(|error| format!("CLIENT KILL: {error}")),
            Store::Postgres(pg) => {
                pg.primary.terminate("dlock-listener");
                Ok(())
            }
        }
    }

    /// A lagging replica, then the master's death: the replication link is partitioned for
    /// `lag` while the master goes on taking locks, the master is killed (what it wrote
    /// meanwhile is lost with the link), the replica promoted, and the workers reach it.
    pub fn failover(&mut self, lag: Duration) -> Result<(), String> {
        match &mut self.store {
            Store::Redis(redis) => redis.failover(lag),
            Store::Postgres(pg) => pg.failover(lag),
        }
    }

    /// Gives the master a new replica if it has none (at the start, and after a failover for
    /// the next round).
    pub fn ensure_replica(&mut self) {
        match &mut self.store {
            Store::Redis(redis) => {
                if redis.proxy.is_some() && redis.replica.is_none() {
                    let link = TcpProxy::start(redis.master.port());
                    redis.replica =
                        Some(RedisServer::start_replica_via(&redis.master, link.port()));
                    redis.replication_link = Some(link);
                }
            }
            Store::Postgres(pg) => pg.ensure_standby(),
        }
    }
}

impl RedisService {
    fn failover(&mut self, lag: Duration) -> Result<(), String> {
        let replica = self
            .replica
            .take()
            .ok_or("this lock service has no replica")?;
        let link = self
            .replication_link
            .take()
            .ok_or("this lock service has no replication link")?;
        link.hold_traffic(true);
        std::thread::sleep(lag);
        self.master.kill();
        drop(link);
        let _: () = redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query(&mut replica.admin())
            .map_err(|error| format!("promoting the replica: {error}"))?;
        if let Some(proxy) = &self.proxy {
            proxy.redirect(replica.port());
        }
        let old = std::mem::replace(&mut self.master, replica);
        self.retired.push(old);
        Ok(())
    }
}

impl PostgresService {
    fn failover(&mut self, lag: Duration) -> Result<(), String> {
        let standby = self
            .standby
            .take()
            .ok_or("this lock service has no standby")?;
        self.primary.pause_wal_senders();
        std::thread::sleep(lag);
        self.primary.kill();
        standby.promote();
        // The old primary's port is free for the next standby.
        let old = std::mem::replace(&mut self.primary, standby);
        drop(old);
        Ok(())
    }

    fn ensure_standby(&mut self) {
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
