//! The terminal a job runs at: its foreground job is the job's process group while the job
//! runs, as a shell makes a command it starts the foreground job.

use nix::sys::signal::{killpg, SigSet, SigmaskHow, Signal};
use nix::unistd::{getpgrp, tcgetpgrp, tcsetpgrp, Pid};

/// The terminal on standard input, while a job's group is its foreground job.
pub struct Terminal {
    ours: Pid,
}

impl Terminal {
    /// Makes `group` the terminal's foreground job if `ours` (`dlock`'s group, which the
    /// keeper has left) is it now, and continues the group (stopped if it touched the terminal
    /// before). `None` when standard input is no terminal, or `dlock` runs in the background.
    pub fn hand_to(group: Pid, ours: Pid) -> Option<Terminal> {
        if tcgetpgrp(std::io::stdin()).ok()? != ours {
            return None;
        }
        set_foreground(group).ok()?;
        let _ = killpg(group, Signal::SIGCONT);
        Some(Terminal { ours })
    }

    /// Gives the terminal back to `dlock`'s group.
    pub fn take_back(&self) {
        let _ = set_foreground(self.ours);
    }
}

/// Gives the terminal back to the calling process's group if `group` (a job that is gone) has
/// it still: what `dlock` does when a job's keeper ended without doing it.
pub fn take_back_from(group: Pid) {
    if tcgetpgrp(std::io::stdin()).ok() == Some(group) {
        let _ = set_foreground(getpgrp());
    }
}

/// Makes `group` the terminal's foreground job. Asked from a background group (the keeper's
/// always is), the kernel would stop the caller with SIGTTOU unless it is held off.
fn set_foreground(group: Pid) -> nix::Result<()> {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let before = ttou.thread_swap_mask(SigmaskHow::SIG_BLOCK);
    let set = tcsetpgrp(std::io::stdin(), group);
    if let Ok(before) = before {
        let _ = before.thread_set_mask();
    }
    set
}
