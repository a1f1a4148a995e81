//! Where the test servers' clusters are kept: a memory file system when the machine has one
//! with room to spare, else the temp directory.
//!
//! Every server starts from a copy of the template cluster, about a thousand files. On a disk
//! file system that has just deleted the last tests' copies, making those files cost more CPU
//! than the tests themselves (ext4 searching its inode tables for ones it may reuse): a run of
//! the PostgreSQL suite spent two thirds of its CPU in `cp`.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The memory file system most Linux machines mount.
const MEMORY_FS: &str = "/dev/shm";

/// The room the memory file system must have free to be used: a server's cluster takes about
/// 30 MB, and a run keeps a few dozen at a time.
const ROOM: u64 = 4 << 30;

/// The directory the servers' directories and the template go in.
pub(super) fn root() -> &'static Path {
    static ROOT: OnceLock<PathBuf> = OnceLock::new();
    ROOT.get_or_init(|| memory_fs().unwrap_or_else(std::env::temp_dir))
}

/// `/dev/shm/dlock-tests`, when `/dev/shm` has `ROOM` free and the directory can be made.
fn memory_fs() -> Option<PathBuf> {
    let stats = rustix::fs::statvfs(MEMORY_FS).ok()?;
    if stats.f_bavail.saturating_mul(stats.f_frsize) < ROOM {
        return None;
    }
    let dir = Path::new(MEMORY_FS).join("dlock-tests");
    std::fs::create_dir_all(&dir).ok()?;
    // Any user's tests may put their servers there: writable by all and sticky, as /tmp is
    // (made by another user, it stays as they left it, and the probe below tells).
    let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777));
    let probe = dir.join(format!(
        "probe-{}-{}",
        std::process::id(),
        uuid::Uuid::new_v4()
    ));
    std::fs::create_dir(&probe).ok()?;
    std::fs::remove_dir(&probe).ok()?;
    Some(dir)
}
