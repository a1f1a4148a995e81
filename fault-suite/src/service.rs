//! The lock service the workers use: one `redis-server`, or a master with a replica behind a
//! proxy that stands for the service's address (moved to the replica on failover). The replica
//! reaches its master through a proxy of its own, so the replication link can be partitioned:
//! what the master writes meanwhile never reaches the replica.

use std::time::Duration;

use crate::support::redis_server::RedisServer;
use crate::support::tcp_proxy::TcpProxy;

pub struct LockService {
    /// The server lock steps go to (after a failover, the promoted replica).
    pub master: RedisServer,
    /// The master's replica, until a failover promotes it.
    replica: Option<RedisServer>,
    /// The replica's link to the master.
    replication_link: Option<TcpProxy>,
    proxy: Option<TcpProxy>,
    /// The old master, killed by a failover, kept so its process is reaped with the run.
    retired: Vec<RedisServer>,
}

impl LockService {
    /// One server, or a master with one replica behind a proxy.
    pub fn start(with_replica: bool) -> LockService {
        let mut service = LockService {
            master: RedisServer::start(),
            replica: None,
            replication_link: None,
            proxy: None,
            retired: Vec::new(),
        };
        if with_replica {
            service.proxy = Some(TcpProxy::start(service.master.port()));
            service.ensure_replica();
        }
        service
    }

    /// The URL workers connect to.
    pub fn url(&self) -> String {
        match &self.proxy {
            Some(proxy) => proxy.url(),
            None => self.master.url(),
        }
    }

    /// A lagging replica, then the master's death: the replication link is partitioned for
    /// `lag` while the master goes on taking locks, the master is killed (what it wrote
    /// meanwhile is lost with the link), the replica promoted, and the service's address moved
    /// to it (every open connection is closed).
    pub fn failover(&mut self, lag: Duration) -> Result<(), String> {
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

    /// Gives the master a new replica if it has none (at the start, and after a failover for
    /// the next round).
    pub fn ensure_replica(&mut self) {
        if self.proxy.is_some() && self.replica.is_none() {
            let link = TcpProxy::start(self.master.port());
            self.replica = Some(RedisServer::start_replica_via(&self.master, link.port()));
            self.replication_link = Some(link);
        }
    }
}
