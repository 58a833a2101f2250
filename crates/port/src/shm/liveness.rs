//! Owner liveness (pid plus process start time, so a reused pid is not mistaken for the owner)
//! and the private segment directory.

use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Once;

use super::ShmError;

/// Pid and start time (field 22 of `/proc/<pid>/stat`, clock ticks since boot) of a process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ProcessIdentity {
    pub pid: u32,
    pub start_time: u64,
}

impl ProcessIdentity {
    /// The calling process.
    pub fn current() -> io::Result<ProcessIdentity> {
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() } as u32;
        match read_stat(pid)? {
            Some(stat) => Ok(ProcessIdentity {
                pid,
                start_time: stat.start_time,
            }),
            None => Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "cannot parse /proc/self/stat",
            )),
        }
    }

    /// True when a process with this pid exists, is not a zombie, and started at the recorded
    /// time. When `/proc` cannot be read for a process that `kill(pid, 0)` reports present, the
    /// answer is "alive" (the conservative side: never reclaim a live owner's segment).
    pub fn alive(&self) -> bool {
        if self.pid == 0 || self.pid > i32::MAX as u32 {
            return false;
        }
        // SAFETY: signal 0 performs only the existence and permission check.
        let rc = unsafe { libc::kill(self.pid as libc::pid_t, 0) };
        if rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EPERM) {
            return false;
        }
        match read_stat(self.pid) {
            Ok(Some(stat)) => {
                !matches!(stat.state, b'Z' | b'X' | b'x') && stat.start_time == self.start_time
            }
            Ok(None) => true,
            Err(e) => e.kind() != io::ErrorKind::NotFound,
        }
    }
}

struct Stat {
    state: u8,
    start_time: u64,
}

/// Reads state (field 3) and start time (field 22) of `/proc/<pid>/stat`. `Ok(None)` when the
/// file does not parse.
fn read_stat(pid: u32) -> io::Result<Option<Stat>> {
    let mut buf = [0u8; 1024];
    let mut file = fs::File::open(format!("/proc/{pid}/stat"))?;
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(parse_stat(&buf[..n]))
}

/// The command name (field 2) is in parentheses and may itself contain spaces and parentheses,
/// so the fields after it are found from the last `)`.
fn parse_stat(text: &[u8]) -> Option<Stat> {
    let close = text.iter().rposition(|&b| b == b')')?;
    let mut fields = text[close + 1..]
        .split(|b| b.is_ascii_whitespace())
        .filter(|f| !f.is_empty());
    let state = *fields.next()?.first()?; // field 3
    let start = fields.nth(22 - 4)?; // field 22
    let start_time = std::str::from_utf8(start).ok()?.parse().ok()?;
    Some(Stat { state, start_time })
}

/// Creates `dir` (and missing parents) with mode 0700, or checks that an existing `dir` is a
/// real directory (not a symlink) owned by our effective uid with no group or other access.
pub fn ensure_private_dir(dir: &Path) -> Result<(), ShmError> {
    match fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(ShmError::Io(e)),
    }
    let meta = fs::symlink_metadata(dir).map_err(ShmError::from)?;
    if !meta.file_type().is_dir() {
        return Err(ShmError::Permission(
            "segment directory must be a directory, not a symlink",
        ));
    }
    // SAFETY: geteuid has no preconditions.
    if meta.uid() != unsafe { libc::geteuid() } {
        return Err(ShmError::Permission(
            "segment directory must be owned by our effective uid",
        ));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(ShmError::Permission(
            "segment directory must have no group or other access",
        ));
    }
    Ok(())
}

/// Whether process `pid` exists (a pid reused by another process counts as alive, which errs
/// on the safe side: what its first holder left waits until that one ends).
pub(crate) fn pid_exists(pid: u32) -> bool {
    if pid == 0 || pid > i32::MAX as u32 {
        return false;
    }
    // SAFETY: signal 0 performs only the existence and permission check.
    let rc = unsafe { libc::kill(pid as libc::pid_t, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// This process's pid, as a reservation records it: one load, and right in a child after
/// `fork` too (a handler registered with `pthread_atfork` refreshes it there), so a child
/// never reserves slots under its parent's pid, which the consumer would take for a dead
/// producer once the parent died.
#[inline]
#[cfg_attr(loom, allow(dead_code))]
pub(crate) fn my_pid() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => first_pid(),
        pid => pid,
    }
}

/// `my_pid`'s cache: 0 until first asked.
#[cfg_attr(loom, allow(dead_code))]
static PID: AtomicU32 = AtomicU32::new(0);

/// The first `my_pid`: records the pid and registers the handler that refreshes it in a child.
#[cold]
#[cfg_attr(loom, allow(dead_code))]
fn first_pid() -> u32 {
    static REGISTER: Once = Once::new();
    extern "C" fn refresh_in_child() {
        // SAFETY: getpid has no preconditions and is async-signal-safe, as a handler run in a
        // child of a multi-threaded process must be; so is an atomic store.
        PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
    }
    REGISTER.call_once(|| {
        // SAFETY: registers a handler that only does async-signal-safe work; getpid has no
        // preconditions. Registration failing (ENOMEM) leaves the pid unrefreshed after a fork,
        // which is what happened before this existed.
        unsafe {
            libc::pthread_atfork(None, None, Some(refresh_in_child));
            PID.store(libc::getpid() as u32, Ordering::Relaxed);
        }
    });
    PID.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_stat_with_odd_command_name() {
        let line =
            b"1234 (a) b (c)) S 1 1234 1234 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        let stat = parse_stat(line).expect("parses");
        assert_eq!(stat.state, b'S');
        assert_eq!(stat.start_time, 987654);
    }

    #[test]
    fn parse_stat_rejects_truncated() {
        assert!(parse_stat(b"1 (x) S 1 2 3").is_none());
        assert!(parse_stat(b"no parenthesis").is_none());
    }

    #[test]
    fn current_process_is_alive_and_a_wrong_start_time_is_not() {
        let me = ProcessIdentity::current().expect("own identity");
        assert!(me.alive());
        let impostor = ProcessIdentity {
            start_time: me.start_time.wrapping_add(1),
            ..me
        };
        assert!(!impostor.alive());
        assert!(!ProcessIdentity {
            pid: 0,
            start_time: 0
        }
        .alive());
    }

    /// A child forked after the pid was first asked for sees its own.
    #[test]
    fn the_recorded_pid_follows_a_fork() {
        let parent = super::my_pid();
        // SAFETY: getpid has no preconditions.
        assert_eq!(parent, unsafe { libc::getpid() } as u32);
        // SAFETY: the child only reads an atomic, calls getpid and _exits (all
        // async-signal-safe), as a child of a multi-threaded test binary must.
        let child = unsafe { libc::fork() };
        assert!(child >= 0, "fork failed");
        if child == 0 {
            let ok = super::my_pid() == unsafe { libc::getpid() } as u32;
            unsafe { libc::_exit(if ok { 0 } else { 1 }) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked, into a local.
        let waited = unsafe { libc::waitpid(child, &mut status, 0) };
        assert_eq!(waited, child);
        assert!(
            libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
            "child saw {status}"
        );
        assert_ne!(child as u32, parent);
    }
}
