//! A pooled command connection: it reads replies within each step's deadline, carries the
//! replies owed by commands sent unanswered, and tells the pool when it broke.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use redis::{Connection, ConnectionLike, RedisError, RedisResult, Value};

use super::{Connector, Pooled};
use crate::tidying::Tidying;

/// How much later than asked a read may give up, at most, when the socket's timeout is kept
/// instead of set again. The kernel counts socket timeouts in scheduler ticks (1–10 ms), so a
/// timeout set to the microsecond was never kept to the microsecond.
const READ_TIMEOUT_SLACK: Duration = Duration::from_millis(2);

/// A pooled command connection.
///
/// It may owe replies: a command sent with [`send_unanswered`](PooledConnection::send_unanswered)
/// is not waited for; its reply is read and dropped right after the connection's next command
/// has been sent, so it costs that command no round trip. A command
/// [`deferred`](PooledConnection::defer) is not even sent yet: it goes in the same write as the
/// next command of any connection to the server.
pub(crate) struct PooledConnection {
    pub(crate) con: Connection,
    /// The connector's epoch when this connection was opened: if it has moved since, another
    /// connection broke and this one is not trusted.
    pub(crate) epoch: u64,
    /// Set after an error that leaves the connection unusable; r2d2 then discards it.
    pub(crate) broken: bool,
    /// Replies owed for commands sent without waiting.
    unread: usize,
    /// Where a step's commands are packed before one write (kept to reuse its memory).
    out: Vec<u8>,
    /// The server's commands to write ahead of the next step, their replies to be skipped.
    pub(super) tidying: Tidying,
    /// The read timeout the socket has now (changing it is a system call).
    read_timeout: Duration,
    /// The read timeout of commands sent through [`ConnectionLike`]: the response timeout.
    pub(super) response_timeout: Duration,
    /// When the step using the connection must be over (its response timeout counted from
    /// when it started, the wait for the connection included).
    step_deadline: Option<Instant>,
}

impl Pooled for PooledConnection {
    fn epoch(&self) -> u64 {
        self.epoch
    }

    fn broken(&mut self) -> &mut bool {
        &mut self.broken
    }

    fn set_step_deadline(&mut self, deadline: Option<Instant>) {
        self.step_deadline = deadline;
    }
}

impl PooledConnection {
    /// When a reply must have come, at most `timeout` from now and never after the step's
    /// deadline.
    pub(crate) fn deadline_within(&self, timeout: Duration) -> Instant {
        let own = Instant::now() + timeout;
        self.step_deadline.map_or(own, |step| step.min(own))
    }

    /// What is left of `timeout` within the step's deadline (1 ms at least: a read with no time
    /// left still gets one try).
    fn left_within(&self, timeout: Duration) -> Duration {
        self.deadline_within(timeout)
            .saturating_duration_since(Instant::now())
            .max(Duration::from_millis(1))
    }

    /// Sends `cmd` without waiting for its reply (see the type's docs). For commands whose
    /// outcome nobody needs: if the send fails, the connection is marked broken and nothing
    /// else happens.
    pub(crate) fn send_unanswered(&mut self, cmd: &redis::Cmd) {
        match self.con.send_packed_command(&cmd.get_packed_command()) {
            Ok(()) => self.unread += 1,
            Err(error) => {
                tracing::debug!(%error, "sending a command without waiting failed");
                self.broken = true;
            }
        }
    }

    /// Keeps the command of `words` to be written in front of the next command any connection
    /// to the server sends, its reply skipped: for tidying (a release's latch) that need not
    /// cost a write of its own. If that write fails, the command is never sent: use it only for
    /// what also ends by itself (a key with an expiry).
    pub(crate) fn defer(&mut self, words: &[&[u8]]) {
        self.tidying.push(words);
    }

    /// Writes packed commands whose replies are read later with
    /// [`read_replies`](Self::read_replies).
    pub(crate) fn send_packed(&mut self, packed: &[u8]) -> RedisResult<()> {
        self.send_encoded(|out| out.extend_from_slice(packed))
    }

    /// As [`send_packed`](Self::send_packed), with `encode` appending the packed commands to
    /// the connection's own buffer (after the deferred ones): a step's commands are encoded
    /// once, into memory the connection keeps, and written in one system call.
    pub(crate) fn send_encoded(&mut self, encode: impl FnOnce(&mut Vec<u8>)) -> RedisResult<()> {
        self.out.clear();
        let deferred = self.tidying.take_into(&mut self.out);
        encode(&mut self.out);
        let written = self.con.send_packed_command(&self.out);
        self.unread += deferred;
        written.inspect_err(|_| self.broken = true)
    }

    /// Reads `count` replies of commands written with [`send_packed`](Self::send_packed)
    /// (after the replies owed), waiting at most until `deadline`. A time-out leaves the
    /// connection broken.
    pub(crate) fn read_replies(
        &mut self,
        count: usize,
        deadline: Instant,
    ) -> RedisResult<Vec<Value>> {
        let result = (|| {
            let left = || {
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1))
            };
            while self.unread > 0 {
                self.wait_at_most(left())?;
                self.skip_one()?;
            }
            let mut replies = Vec::with_capacity(count);
            while replies.len() < count {
                self.wait_at_most(left())?;
                replies.push(self.next_reply()?);
            }
            Ok(replies)
        })();
        if result.is_err() {
            self.broken = true;
        }
        result
    }

    /// Makes the socket's next reads give up after `left`, or at most a little later
    /// ([`READ_TIMEOUT_SLACK`]): a timeout that is already close enough is kept, so that a step
    /// whose deadline is the usual response timeout makes no system call for it, and a read
    /// with another deadline sets its own instead of putting the old one back after it.
    fn wait_at_most(&mut self, left: Duration) -> RedisResult<()> {
        let slack = (left / 16).min(READ_TIMEOUT_SLACK);
        if self.read_timeout < left || self.read_timeout > left + slack {
            self.con.set_read_timeout(Some(left))?;
            self.read_timeout = left;
        }
        Ok(())
    }

    /// Reads and drops one owed reply.
    fn skip_one(&mut self) -> RedisResult<()> {
        if let Value::ServerError(error) = self.con.recv_response()? {
            tracing::debug!(%error, "a command sent without waiting was refused");
        }
        self.unread -= 1;
        Ok(())
    }

    /// Reads and drops the replies owed, after the next command was sent.
    fn skip_unread(&mut self) -> RedisResult<()> {
        while self.unread > 0 {
            if let Value::ServerError(error) = self.con.recv_response()? {
                // A refused clean-up (an ACL without DEL on the key, say) leaves the key to
                // expire on its own.
                tracing::debug!(%error, "a command sent without waiting was refused");
            }
            self.unread -= 1;
        }
        Ok(())
    }

    /// The next reply that is not a RESP3 push.
    fn next_reply(&mut self) -> RedisResult<Value> {
        loop {
            match self.con.recv_response()? {
                Value::Push { .. } => continue,
                value => return Ok(value),
            }
        }
    }
}

impl ConnectionLike for PooledConnection {
    fn req_packed_command(&mut self, cmd: &[u8]) -> RedisResult<Value> {
        self.wait_at_most(self.left_within(self.response_timeout))?;
        if self.unread == 0 && !self.tidying.waiting() {
            return self.con.req_packed_command(cmd);
        }
        self.send_packed(cmd)?;
        self.skip_unread()?;
        self.next_reply()
    }

    fn req_packed_commands(
        &mut self,
        cmd: &[u8],
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.wait_at_most(self.left_within(self.response_timeout))?;
        if self.unread == 0 && !self.tidying.waiting() {
            return self.con.req_packed_commands(cmd, offset, count);
        }
        self.send_packed(cmd)?;
        self.skip_unread()?;
        let mut replies = Vec::with_capacity(count);
        for index in 0..offset + count {
            let reply = self.next_reply()?;
            if index >= offset {
                replies.push(reply);
            }
        }
        Ok(replies)
    }

    fn get_db(&self) -> i64 {
        self.con.get_db()
    }

    fn check_connection(&mut self) -> bool {
        self.wait_at_most(self.response_timeout).is_ok()
            && self.skip_unread().is_ok()
            && self.con.check_connection()
    }

    fn is_open(&self) -> bool {
        self.con.is_open()
    }
}

impl r2d2::ManageConnection for Connector {
    type Connection = PooledConnection;
    type Error = RedisError;

    fn connect(&self) -> Result<PooledConnection, RedisError> {
        let epoch = self.endpoint.current_epoch();
        let con = self.open();
        self.endpoint
            .shared
            .reachable
            .store(con.is_ok(), Ordering::Release);
        Ok(PooledConnection {
            con: con?,
            epoch,
            broken: false,
            unread: 0,
            out: Vec::new(),
            tidying: self.endpoint.tidying().clone(),
            read_timeout: self.endpoint.response_timeout,
            response_timeout: self.endpoint.response_timeout,
            step_deadline: None,
        })
    }

    fn is_valid(&self, conn: &mut PooledConnection) -> Result<(), RedisError> {
        // Only used if checkout testing is turned on (it is off: it would cost a round trip).
        let result = redis::cmd("PING").query::<String>(conn);
        conn.note(&result);
        result.map(drop)
    }

    fn has_broken(&self, conn: &mut PooledConnection) -> bool {
        conn.broken || !conn.con.is_open()
    }
}
