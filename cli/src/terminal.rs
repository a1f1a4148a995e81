//! The terminal a job runs at: its foreground job is the job's process group while the job
//! runs, as a shell makes a command it starts the foreground job.

use nix::sys::signal::{killpg, SigSet, Signal};
use nix::unistd::{getpgrp, tcgetpgrp, tcsetpgrp, Pid};

/// The terminal on standard input, while a job's group is its foreground job.
pub struct Terminal {
    ours: Pid,
}

impl Terminal {
    /// Makes `group` the terminal's foreground job if the calling process's group (`dlock`'s)
    /// is it now, and continues the group (stopped if it touched the terminal before). `None`
    /// when standard input is no terminal, or `dlock` runs in the background.
    pub fn hand_to(group: Pid) -> Option<Terminal> {
        let stdin = std::io::stdin();
        let ours = getpgrp();
        if tcgetpgrp(&stdin).ok()? != ours {
            return None;
        }
        tcsetpgrp(&stdin, group).ok()?;
        let _ = killpg(group, Signal::SIGCONT);
        Some(Terminal { ours })
    }

    /// Gives the terminal back to the calling process's group.
    pub fn take_back(&self) {
        give_to(self.ours);
    }
}

/// Gives the terminal back to the calling process's group if `group` (a job that is gone) has
/// it still: what `dlock` does when a job's keeper ended without doing it.
pub fn take_back_from(group: Pid) {
    if tcgetpgrp(std::io::stdin()).ok() == Some(group) {
        give_to(getpgrp());
    }
}

/// Makes `ours` the terminal's foreground job. Asked from a background group, the kernel would
/// stop the caller with SIGTTOU unless it is held off.
fn give_to(ours: Pid) {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let _ = ttou.thread_block();
    let _ = tcsetpgrp(std::io::stdin(), ours);
    let _ = ttou.thread_unblock();
}
