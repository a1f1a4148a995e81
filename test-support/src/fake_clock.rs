//! A server's wall clock that a test can step forward, as NTP or an operator steps a real one:
//! the server runs with Debian's `libfaketime` preloaded, reading its offset from a file the
//! test rewrites. The monotonic clock is left alone (a stepped wall clock does not move it).
//! A server that counts leases on the wall clock (PostgreSQL's `clock_timestamp()`) sees the
//! jump at its next reading. (Not Redis: Debian's `redis-server` is built with jemalloc,
//! which hangs under `libfaketime`; [`RedisServer::jump_expiry`](crate::redis_server::RedisServer::jump_expiry)
//! does to its keys what the jump would.)

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

/// Where Debian's `faketime` package puts the library.
const LIBRARY_GLOBS: [&str; 2] = ["/usr/lib", "/usr/local/lib"];

/// One server's clock offset.
pub struct FakeClock {
    file: PathBuf,
    offset: Mutex<Duration>,
}

impl FakeClock {
    /// A clock at the real time, its offset kept in a file in `dir`. The server keeps it
    /// across restarts: a restarted server's clock stays stepped.
    pub fn in_dir(dir: &Path) -> FakeClock {
        let clock = FakeClock {
            file: dir.join("faketime"),
            offset: Mutex::new(Duration::ZERO),
        };
        clock
            .write(Duration::ZERO)
            .unwrap_or_else(|error| panic!("{error}"));
        clock
    }

    /// `env` arguments that run a program on this clock: `env <these> program args...`.
    /// (Given to the server's own program, not to a `setpriv` before it: a process that
    /// changes its user must not load the library first.) Panics (the test fails, never
    /// skips) if `libfaketime` is not installed.
    pub fn env_args(&self) -> Vec<String> {
        let library = library().unwrap_or_else(|| {
            panic!(
                "libfaketime is not installed (Debian package `faketime`); a clock jump needs it"
            )
        });
        vec![
            format!("LD_PRELOAD={}", library.display()),
            format!("FAKETIME_TIMESTAMP_FILE={}", self.file.display()),
            // Read at every call, so the jump is seen at once.
            "FAKETIME_NO_CACHE=1".to_owned(),
            "FAKETIME_DONT_FAKE_MONOTONIC=1".to_owned(),
        ]
    }

    /// Steps the clock forward by `by`.
    pub fn jump(&self, by: Duration) -> Result<(), String> {
        let mut offset = self.offset.lock().unwrap_or_else(|p| p.into_inner());
        let ahead = *offset + by;
        self.write(ahead)?;
        *offset = ahead;
        Ok(())
    }

    /// Writes the offset at once (a new file renamed over the old: never read half written).
    fn write(&self, offset: Duration) -> Result<(), String> {
        let next = self.file.with_extension("next");
        std::fs::write(&next, format!("+{:.6}\n", offset.as_secs_f64()))
            .and_then(|()| std::fs::rename(&next, &self.file))
            .map_err(|error| format!("writing {}: {error}", self.file.display()))
    }
}

/// The `libfaketime` library, if installed.
fn library() -> Option<PathBuf> {
    LIBRARY_GLOBS.iter().find_map(|root| {
        let direct = Path::new(root).join("faketime/libfaketime.so.1");
        if direct.exists() {
            return Some(direct);
        }
        std::fs::read_dir(root)
            .ok()?
            .flatten()
            .map(|entry| entry.path().join("faketime/libfaketime.so.1"))
            .find(|path| path.exists())
    })
}
