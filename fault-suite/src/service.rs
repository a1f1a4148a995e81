//! The lock service the workers use: one `redis-server`, or a master with a replica behind a
//! proxy that stands for the service's address (moved to the replica on failover).

use std::time::Duration;

use crate::support::redis_server::RedisServer;
use crate::support::tcp_proxy::TcpProxy;

pub struct LockService {
    /// The server lock steps go to (after a failover, the promoted replica).
    pub master: RedisServer,
    /// The master's replica, until a failover promotes it.
    replica: Option<RedisServer>,
    proxy: Option<TcpProxy>,
    /// The old master, killed by a failover, kept so its process is reaped with the run.
    retired: Vec<RedisServer>,
}

impl LockService {
    /// One server, or a master with one replica behind a proxy.
    pub fn start(with_replica: bool) -> LockService {
        let master = RedisServer::start();
        let (replica, proxy) = if with_replica {
            let replica = RedisServer::start_replica_of(&master);
            (Some(replica), Some(TcpProxy::start(master.port())))
        } else {
            (None, None)
        };
        LockService {
            master,
            replica,
            proxy,
            retired: Vec::new(),
        }
    }

    /// The URL workers connect to.
    pub fn url(&self) -> String {
        match &self.proxy {
            Some(proxy) => proxy.url(),
            None => self.master.url(),
        }
    }

    /// A lagging replica, then the master's death: the replica is stopped for `lag` while the
    /// master goes on taking locks, the master is killed, the replica continued and promoted,
    /// and the service's address moved to it (every open connection is closed).
    pub fn failover(&mut self, lag: Duration) -> Result<(), String> {
        let replica = self
            .replica
            .take()
            .ok_or("this lock service has no replica")?;
        replica.pause();
        std::thread::sleep(lag);
        self.master.kill();
        replica.resume();
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

    /// Gives the master a new replica if it has none (after a failover), for the next round.
    pub fn ensure_replica(&mut self) {
        if self.proxy.is_some() && self.replica.is_none() {
            self.replica = Some(RedisServer::start_replica_of(&self.master));
        }
    }
}
