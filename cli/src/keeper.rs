//! The keeper of a `dlock run` job: `dlock` run again by itself (see [`crate::job`]) to start
//! the command as a process group of its own and to make sure the group dies with `dlock`.
//!
//! It first leaves `dlock`'s process group, and its session where it can, so that a supervisor
//! that kills those (`timeout`, `kill -- -PGID`, a CI runner) leaves it to kill the job. It
//! connects back to `dlock`, starts the command as the leader of a new group (and, at a
//! terminal whose foreground `dlock` has, makes the group the foreground job, so it can read
//! the terminal and Ctrl-C reaches it), reports the command's exit, and exits once no process
//! of the job is left.
//!
//! The job is every process of the group and, on Linux, every descendant of the keeper: it is
//! the job's subreaper, so a process that left the group (`timeout`, `setsid`) stays its
//! descendant, reparented to it when its parent ends. No child left to wait for means no
//! process of the job left. Every kill reaches all of them: when `dlock`'s end of the
//! connection closes (`dlock` died: `kill -9`, a crash, a supervisor's kill), when the last
//! instant `dlock` gave passes without a newer one (`dlock` stopped), and when `dlock` asks.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{never, select, Receiver};
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::termios::tcgetsid;
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{getpgrp, getpid, getsid, setpgid, setsid, Pid};

use crate::exit_code::{CANNOT_RUN, NOT_FOUND};
use crate::job::EMPTY_POLL;
use crate::terminal::Terminal;

/// How long the keeper goes on killing the job once `dlock` is gone, before it exits. A
/// process that cannot die yet (stuck in the kernel) dies when it can, with the SIGKILL it has.
const KILL_BOUND: Duration = Duration::from_secs(5);

/// What the keeper hears from `dlock`.
enum Told {
    /// The job must be dead within this long, unless a newer instant comes.
    KillIn(Duration),
    /// Kill every process of the job now.
    Kill,
    /// `dlock` is gone.
    Gone,
}

/// Runs the keeper: `args` are the socket's path, `--`, and the command. Returns the
/// keeper's exit code (it matters to nobody: `dlock` reads the connection).
pub fn keep(args: &[OsString]) -> i32 {
    let (Some(socket), Some(command)) = (args.first(), args.get(2..)) else {
        eprintln!("dlock: {} is for dlock's own use", crate::job::KEEPER_ARG);
        return crate::exit_code::USAGE;
    };
    let dlock_group = leave_dlocks_group();
    let Ok(mut control) = UnixStream::connect(socket) else {
        // dlock is gone already: nothing was started.
        return CANNOT_RUN;
    };
    // Signals meant for dlock (its group's or session's) are dlock's to pass on to the job.
    // Caught rather than ignored, so the command starts with the default handling.
    let caught = Arc::new(AtomicBool::new(false));
    for signal in [
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGQUIT,
    ] {
        let _ = signal_hook::flag::register(signal, caught.clone());
    }
    let Some((program, arguments)) = command.split_first() else {
        let _ = writeln!(
            control,
            "failed {} no command to run",
            crate::exit_code::USAGE
        );
        return CANNOT_RUN;
    };
    // Orphans of the job are reparented to the keeper, which reaps them (see `wait_for`).
    #[cfg(target_os = "linux")]
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let leader = match Command::new(program)
        .args(arguments)
        .process_group(0)
        .spawn()
    {
        Ok(child) => Pid::from_raw(child.id() as i32),
        Err(error) => {
            let code = if error.kind() == std::io::ErrorKind::NotFound {
                NOT_FOUND
            } else {
                CANNOT_RUN
            };
            let _ = writeln!(control, "failed {code} cannot run {program:?}: {error}");
            return code;
        }
    };
    // The leader's pid is the group's id.
    let group = leader;
    let terminal = Terminal::hand_to(group, dlock_group);
    let childless = Arc::new(AtomicBool::new(false));
    let mut exited = wait_for(leader, terminal.is_some(), &childless);
    if writeln!(control, "group {group}").is_err() {
        kill_until_gone(group, &childless);
        return CANNOT_RUN;
    }
    let told = listen(&control);
    let mut kill_at: Option<Instant> = None;
    let mut leader_exited = false;
    // Once a kill is due, the job is killed again at each poll until it is gone: a process may
    // have started another while it was being killed.
    let mut killing = false;
    // One ticker for the whole loop: a timer made anew each turn would never fire while
    // `dlock`'s messages come more often than it (they did, a message per kill, under load).
    let ticker = crossbeam_channel::tick(EMPTY_POLL);
    let idle = never();
    loop {
        let timer = kill_at.map_or(never(), crossbeam_channel::at);
        let poll = if leader_exited || killing {
            &ticker
        } else {
            &idle
        };
        select! {
            recv(told) -> message => match message {
                Ok(Told::KillIn(within)) => kill_at = Some(Instant::now() + within),
                Ok(Told::Kill) => {
                    kill_job(group);
                    killing = true;
                }
                Ok(Told::Gone) | Err(_) => {
                    kill_until_gone(group, &childless);
                    return 0;
                }
            },
            recv(exited) -> code => {
                leader_exited = true;
                exited = never();
                let _ = writeln!(control, "exited {}", code.unwrap_or(CANNOT_RUN));
            },
            recv(timer) -> _ => {
                kill_job(group);
                killing = true;
                let _ = writeln!(control, "killed");
                kill_at = None;
            },
            recv(poll) -> _ => {
                if killing {
                    kill_job(group);
                }
                if leader_exited && gone(group, &childless) {
                    if let Some(terminal) = &terminal {
                        terminal.take_back();
                    }
                    let _ = writeln!(control, "empty");
                    return 0;
                }
            },
        }
    }
}

/// SIGKILL to every process of the job: its group, and every descendant of the keeper.
fn kill_job(group: Pid) {
    let _ = killpg(group, Signal::SIGKILL);
    for pid in crate::descendants::of(getpid()) {
        let _ = kill(pid, Signal::SIGKILL);
    }
}

/// Kills the job again until it is gone, within [`KILL_BOUND`]: what the keeper does before
/// it exits, once nobody else can.
fn kill_until_gone(group: Pid, childless: &AtomicBool) {
    let deadline = Instant::now() + KILL_BOUND;
    loop {
        kill_job(group);
        if gone(group, childless) || Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(EMPTY_POLL);
    }
}

/// Whether no process of the job is left: the keeper has no child, not even one to reap (on
/// Linux, no descendant: they would be its children once orphaned), and the group is empty
/// (elsewhere, orphans go to the system's first process and only the group tells).
fn gone(group: Pid, childless: &AtomicBool) -> bool {
    childless.load(Ordering::SeqCst) && killpg(group, None).is_err()
}

/// Takes the keeper out of `dlock`'s process group, so that a kill of that group leaves the
/// keeper to kill the job, and out of `dlock`'s session, for a kill of every process of the
/// session, unless standard input is that session's controlling terminal: handing it to the
/// job (`tcsetpgrp`) and its job control need the job in the terminal's session. Returns
/// `dlock`'s group. (Called before the job starts: a kill meanwhile finds no job to leave.)
fn leave_dlocks_group() -> Pid {
    let dlock_group = getpgrp();
    let at_terminal = tcgetsid(std::io::stdin()).is_ok_and(|session| getsid(None) == Ok(session));
    if at_terminal || setsid().is_err() {
        if let Err(error) = setpgid(Pid::from_raw(0), Pid::from_raw(0)) {
            eprintln!(
                "dlock: the job's keeper cannot leave dlock's process group ({error}); a kill \
                 of that group would not leave it to kill the job"
            );
        }
    }
    dlock_group
}

/// `dlock`'s messages, read on a thread of their own.
fn listen(control: &UnixStream) -> Receiver<Told> {
    let (sender, told) = crossbeam_channel::unbounded();
    let reader = control.try_clone().map(BufReader::new);
    let spawned = std::thread::Builder::new()
        .name("dlock-keeper".into())
        .spawn(move || {
            let Ok(mut reader) = reader else {
                let _ = sender.send(Told::Gone);
                return;
            };
            let mut line = String::new();
            loop {
                line.clear();
                match reader.read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        let _ = sender.send(Told::Gone);
                        return;
                    }
                    Ok(_) => {}
                }
                if line.trim_end() == "kill" {
                    let _ = sender.send(Told::Kill);
                } else if let Some(ms) = line.trim_end().strip_prefix("kill-in ") {
                    if let Ok(ms) = ms.parse() {
                        let _ = sender.send(Told::KillIn(Duration::from_millis(ms)));
                    }
                }
            }
        });
    if spawned.is_err() {
        // Without the thread, a closed channel: treated as dlock gone.
        let (_, closed) = crossbeam_channel::bounded(0);
        return closed;
    }
    told
}

/// The leader's exit code (128 + N when signal N ended it), from a thread that reaps every
/// child of the keeper: the leader, and on Linux the processes of the job orphaned by their
/// parents (the keeper is their subreaper: without it they would wait, dead, for the system's
/// first process to reap them, and count as the group's meanwhile). It sets `childless` once
/// the keeper has no child left.
///
/// A leader stopped while it has the terminal (Ctrl-Z) is continued: `dlock` keeps renewing
/// the lock, and a job stopped while it holds it would hold it for as long as nobody noticed.
fn wait_for(leader: Pid, has_terminal: bool, childless: &Arc<AtomicBool>) -> Receiver<i32> {
    let (sender, exited) = crossbeam_channel::bounded(1);
    let no_child = childless.clone();
    let spawned = std::thread::Builder::new()
        .name("dlock-keeper-wait".into())
        .spawn(move || loop {
            let code = match waitpid(None, Some(WaitPidFlag::WUNTRACED)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == leader => code,
                Ok(WaitStatus::Signaled(pid, signal, _)) if pid == leader => 128 + signal as i32,
                Ok(WaitStatus::Stopped(pid, signal)) if pid == leader => {
                    if has_terminal {
                        eprintln!(
                            "dlock: the command was stopped ({signal}) and is continued: it \
                             holds the lock, and stopped it would keep it held (Ctrl-C ends \
                             it)"
                        );
                        let _ = killpg(leader, Signal::SIGCONT);
                    } else {
                        // In the background, it would only stop again.
                        eprintln!(
                            "dlock: the command was stopped ({signal}) while it holds the \
                             lock; `kill -CONT -{leader}` continues it"
                        );
                    }
                    continue;
                }
                // An orphan reaped, or nothing to reap until another is orphaned.
                Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                Err(nix::errno::Errno::ECHILD) => {
                    no_child.store(true, Ordering::SeqCst);
                    std::thread::sleep(EMPTY_POLL);
                    continue;
                }
                Err(_) => {
                    std::thread::sleep(EMPTY_POLL);
                    CANNOT_RUN
                }
            };
            // Sent once; the thread goes on reaping orphans.
            let _ = sender.try_send(code);
        });
    if spawned.is_err() {
        let _ = killpg(leader, Signal::SIGKILL);
        // Nobody reaps: only the group can tell when the job is gone.
        childless.store(true, Ordering::SeqCst);
        let (_, closed) = crossbeam_channel::bounded(0);
        return closed;
    }
    exited
}
