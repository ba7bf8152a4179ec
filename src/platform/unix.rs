//! Linux and macOS.

use super::{FileId, Proc, Stop};
use std::fs::{File, Metadata, OpenOptions};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The names of the variables that hold the user's home directory, first set wins.
pub const HOME_VARS: &[&str] = &["HOME"];

/// The OS error of a full disk (for fault injection).
pub const DISK_FULL: i32 = libc::ENOSPC;

// ---------------------------------------------------------------------------------------------------
// Files

pub fn file_id(_path: &Path, meta: &Metadata) -> FileId {
    (meta.dev(), meta.ino())
}

/// Opens `path` with `opts`, refusing a symbolic link in its last component (`is_link_refused`) and
/// never blocking on a FIFO.
pub fn open_no_follow(opts: &mut OpenOptions, path: &Path) -> std::io::Result<File> {
    opts.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
}

/// Opens `path` with `opts`, never blocking on a FIFO (links are followed).
pub fn open_no_wait(opts: &mut OpenOptions, path: &Path) -> std::io::Result<File> {
    opts.custom_flags(libc::O_NONBLOCK).open(path)
}

/// A directory opened without following a link (held open so its identity is not reused).
pub fn open_dir_no_follow(dir: &Path) -> Option<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
        .open(dir)
        .ok()
}

/// Whether an open failed because its path was a link that `open_no_follow` refuses.
pub fn is_link_refused(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ELOOP)
}

/// Files this creates get `mode` (0600 for anything quoting a transcript).
pub fn private_mode(opts: &mut OpenOptions, mode: u32) -> &mut OpenOptions {
    opts.mode(mode)
}

/// Creates `dir` and its parents, each new one 0700.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Makes an existing directory of ours 0700 when others may read it.
pub fn make_private(dir: &Path, meta: &Metadata) -> std::io::Result<()> {
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// None when the file belongs to the user running almanac; otherwise who owns it, in words.
pub fn foreign_owner(meta: &Metadata) -> Option<String> {
    // SAFETY: geteuid has no failure mode.
    let me = unsafe { libc::geteuid() };
    (meta.uid() != me).then(|| format!("uid {}", meta.uid()))
}

/// Modification and status-change times, in ns since the epoch.
pub fn times_ns(meta: &Metadata) -> (i128, i128) {
    let ns = |s: i64, n: i64| i128::from(s) * 1_000_000_000 + i128::from(n);
    (
        ns(meta.mtime(), meta.mtime_nsec()),
        ns(meta.ctime(), meta.ctime_nsec()),
    )
}

/// Whether an open file has exactly one name (no hard link elsewhere writes through it).
pub fn single_link(f: &File) -> bool {
    f.metadata().is_ok_and(|m| m.nlink() == 1)
}

/// Whether `path` (links followed) is a file whose mode lets someone execute it.
pub fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether this process may execute `path` (`access(2)` with `X_OK`).
pub fn can_execute(path: &Path) -> std::io::Result<()> {
    let meta = std::fs::metadata(path)?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a file"));
    }
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a valid NUL-terminated path for the call's duration.
    match unsafe { libc::access(c.as_ptr(), libc::X_OK) } {
        0 => Ok(()),
        _ => Err(std::io::Error::last_os_error()),
    }
}

/// Fills `buf` from `offset` without moving the file's position (`UnexpectedEof` past the end).
pub fn read_exact_at(f: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(f, buf, offset)
}

/// Points this process's stdout and stderr at `f` (the worker's log).
pub fn redirect_output(f: &File) {
    // SAFETY: dup2 onto 1 and 2 only replaces those descriptors.
    unsafe {
        libc::dup2(f.as_raw_fd(), 1);
        libc::dup2(f.as_raw_fd(), 2);
    }
}

/// The identity of this process's stderr.
pub fn stderr_id() -> Option<FileId> {
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat writes into `st` only.
    (unsafe { libc::fstat(2, &mut st) } == 0).then_some((st.st_dev as u64, st.st_ino as u64))
}

/// The real user id (launchd's `gui/<uid>` domain).
pub fn user_id() -> u32 {
    // SAFETY: getuid has no failure mode.
    unsafe { libc::getuid() }
}

// ---------------------------------------------------------------------------------------------------
// Processes

pub fn alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // kill(pid, 0): 0 or EPERM means the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Whether `pid` is a running process: it exists and is not a zombie waiting to be reaped.
pub fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => alive(pid as i32),
    }
}

/// Whether `start_time` can tell processes apart here (false only where neither source exists).
pub fn has_start_times() -> bool {
    cfg!(target_os = "macos") || Path::new("/proc/self/stat").exists()
}

/// When `pid` started: Linux, clock ticks after boot (field 22 of `/proc/<pid>/stat`); macOS,
/// microseconds since the epoch (`proc_pidinfo`). With the pid, it names one process, not whichever
/// reuses the number. None when it is gone.
#[cfg(target_os = "macos")]
pub fn start_time(pid: u32) -> Option<u64> {
    let mut info: libc::proc_bsdinfo = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::proc_bsdinfo>() as libc::c_int;
    // SAFETY: proc_pidinfo writes at most `size` bytes into `info`.
    let n = unsafe {
        libc::proc_pidinfo(
            pid as libc::c_int,
            libc::PROC_PIDTBSDINFO,
            0,
            (&mut info as *mut libc::proc_bsdinfo).cast(),
            size,
        )
    };
    (n == size).then(|| info.pbi_start_tvsec * 1_000_000 + info.pbi_start_tvusec)
}

#[cfg(not(target_os = "macos"))]
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2 (the command) is in parentheses and may hold spaces: count from the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    // rest starts at field 3 (state); field 22 is the 20th after it.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Whether any process of group `pgid` exists.
pub fn group_exists(pgid: u32) -> bool {
    if pgid == 0 || pgid > i32::MAX as u32 {
        return false;
    }
    let r = unsafe { libc::kill(-(pgid as i32), 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Signals every process of group `pgid` (the agent the record names; from any process).
pub fn stop_group(pgid: u32, how: Stop) {
    if pgid == 0 || pgid > i32::MAX as u32 {
        return;
    }
    let sig = match how {
        Stop::Term => libc::SIGTERM,
        Stop::Kill => libc::SIGKILL,
    };
    // SAFETY: kill has no memory effects.
    unsafe {
        libc::kill(-(pgid as i32), sig);
    }
}

/// Starts the repo's worker detached from the sweep and its terminal: a session of its own.
pub fn spawn_detached(cmd: &mut Command) -> std::io::Result<Child> {
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// The shell that holds the agent back until its process group is recorded.
const GATE_SHELL: &str = "/bin/sh";
/// What the gate waits for on stdin.
const GATE_LINE: &[u8] = b"go\n";

/// The gate's script: `$0` is the agent's program, `$@` its arguments. `read` takes stdin a byte at a
/// time up to the newline (POSIX, for input it cannot seek), so what follows, the prompt, is the
/// agent's; without a line (the worker is gone) it starts nothing. The `/dev/null` form is for an
/// agent whose stdin is not the prompt.
fn gate_script(prompt_on_stdin: bool) -> &'static str {
    match prompt_on_stdin {
        true => r#"IFS= read -r almanac_gate || exit 125; exec "$0" "$@""#,
        false => r#"IFS= read -r almanac_gate || exit 125; exec "$0" "$@" </dev/null"#,
    }
}

/// A started agent's process group.
pub struct AgentGroup {
    pgid: u32,
}

impl AgentGroup {
    /// The group's id, as the run record names it (the agent's pid).
    pub fn id(&self) -> u32 {
        self.pgid
    }

    /// Lets the held agent start: the gate's line on its stdin, before anything else written there.
    pub fn release(&self, stdin: Option<&mut std::process::ChildStdin>) {
        if let Some(s) = stdin {
            let _ = std::io::Write::write_all(s, GATE_LINE);
        }
    }

    pub fn stop(&self, how: Stop) {
        stop_group(self.pgid, how);
    }
}

/// Starts `program args` in a process group of its own, held back: the group's leader is `/bin/sh`,
/// waiting for a line on stdin (`AgentGroup::release`) before it execs the agent (the same process:
/// its number and start time are the agent's). A worker killed before it writes that line (`kill -9`,
/// an OOM kill, systemd stopping it) leaves no agent running that no record names: its pipe closes,
/// the shell reads nothing and exits. stdin is always a pipe; `configure` sets the rest.
pub fn spawn_held(
    program: &Path,
    args: &[String],
    prompt_on_stdin: bool,
    configure: impl FnOnce(&mut Command),
) -> std::io::Result<(Child, AgentGroup)> {
    let mut cmd = Command::new(GATE_SHELL);
    cmd.arg("-c")
        .arg(gate_script(prompt_on_stdin))
        .arg(program)
        .args(args);
    configure(&mut cmd);
    cmd.stdin(Stdio::piped()).process_group(0);
    let child = cmd.spawn()?;
    let pgid = child.id();
    Ok((child, AgentGroup { pgid }))
}

/// `PATHEXT`'s part in looking a program up: none on Unix.
pub fn pathext() -> Option<String> {
    None
}

/// The program to start for `program`, and arguments to put before the agent's: `program` itself here
/// (Windows runs npm's `.cmd` shims' scripts with node directly).
pub fn unwrap_shim(
    program: &Path,
    _find_node: impl FnOnce() -> Option<std::path::PathBuf>,
) -> (std::path::PathBuf, Vec<String>) {
    (program.to_path_buf(), Vec::new())
}

/// Whether spawning failed because the arguments were too long for the OS.
pub fn is_args_too_long(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::E2BIG)
}

/// Makes this process the subreaper of its descendants (Linux), so that a child the agent left behind
/// in a group of its own becomes ours when the agent exits, and can be found and reported.
pub fn become_subreaper() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl with these arguments only sets a flag of this process.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
    }
}

fn proc_stat(pid: u32) -> Option<(u32, Proc)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (head, rest) = s.rsplit_once(") ")?;
    let comm = head.split_once(" (")?.1.to_string();
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ppid = f.get(1)?.parse().ok()?;
    Some((
        ppid,
        Proc {
            pid,
            pgid: f.get(2)?.parse().ok()?,
            state: f.first()?.chars().next()?,
            comm,
        },
    ))
}

/// This process's children, with every descendant of theirs, from /proc (empty where there is none).
pub fn descendants() -> Vec<Proc> {
    let me = std::process::id();
    let mut all: Vec<(u32, Option<Proc>)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(proc_stat)
        .map(|(ppid, p)| (ppid, Some(p)))
        .collect();
    let mut parents = vec![me];
    let mut out = Vec::new();
    while let Some(p) = parents.pop() {
        for (ppid, proc) in all.iter_mut() {
            if *ppid == p {
                if let Some(proc) = proc.take() {
                    parents.push(proc.pid);
                    out.push(proc);
                }
            }
        }
    }
    out
}

/// Collects children of ours that exited (the agent's, reparented to us): never the running ones.
pub fn reap_zombies(except: Option<u32>) {
    for p in descendants() {
        if p.state == 'Z' && Some(p.pid) != except {
            // SAFETY: WNOHANG never blocks; the status is not wanted.
            unsafe {
                libc::waitpid(p.pid as i32, std::ptr::null_mut(), libc::WNOHANG);
            }
        }
    }
}

/// Runs `f` when the user presses Ctrl-C, instead of ending the process. `f` must be
/// async-signal-safe (an atomic store).
pub fn on_interrupt(f: fn()) {
    static HANDLER: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();
    let _ = HANDLER.set(f);
    extern "C" fn handler(_: libc::c_int) {
        if let Some(f) = HANDLER.get() {
            f();
        }
    }
    let handler: extern "C" fn(libc::c_int) = handler;
    // SAFETY: the handler only reads a set OnceLock and calls an async-signal-safe function.
    unsafe {
        libc::signal(libc::SIGINT, handler as libc::sighandler_t);
    }
}

/// Free bytes for an unprivileged writer on the file system holding `path`.
#[allow(clippy::unnecessary_cast)] // the field types differ between Linux and macOS
pub fn free_space(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `statvfs` is plain data; zeroed is a valid value of it.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `s` a valid place for the result.
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some((s.f_bavail as u64).saturating_mul(s.f_frsize as u64))
}

/// The bytes a file takes on its disk (a sparse file takes fewer than its length).
pub fn allocated_bytes(meta: &Metadata) -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    Some(meta.blocks().saturating_mul(512))
}

/// A write past the process's file size limit (`ulimit -f`) fails with EFBIG, like a full disk,
/// instead of SIGXFSZ ending the process mid-write.
pub fn ignore_file_size_signal() {
    // SAFETY: setting a signal's disposition to ignored has no other effect.
    unsafe {
        libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
    }
}

/// Sets glibc's mmap threshold (see `main`); other C libraries are left alone.
pub fn fix_mmap_threshold(bytes: usize) {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets an allocator parameter; it is called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, bytes as libc::c_int);
    }
    let _ = bytes;
}

// ---------------------------------------------------------------------------------------------------
// The agent's pipes

/// How often a blocked pipe thread looks whether it was told to stop.
const TICK_MS: i32 = 100;

/// An OS pipe end, as `std::process` hands them out.
pub type OwnedPipe = OwnedFd;

/// One end of a pipe, read or written in ticks so that a stop request is seen.
pub struct Pipe {
    fd: OwnedFd,
    stop: Arc<AtomicBool>,
}

impl Pipe {
    /// A reading end.
    pub fn reader(fd: impl Into<OwnedFd>, stop: Arc<AtomicBool>) -> Pipe {
        Pipe {
            fd: fd.into(),
            stop,
        }
    }

    /// A writing end (made non-blocking: a write never waits past a stop request).
    pub fn writer(fd: impl Into<OwnedFd>, stop: Arc<AtomicBool>) -> Pipe {
        let p = Pipe::reader(fd, stop);
        let fd = p.fd.as_raw_fd();
        // SAFETY: fcntl on a descriptor this value owns.
        unsafe {
            libc::fcntl(
                fd,
                libc::F_SETFL,
                libc::fcntl(fd, libc::F_GETFL) | libc::O_NONBLOCK,
            );
        }
        p
    }

    /// Waits until `events` are ready on the fd; false once told to stop.
    fn ready(&self, events: i16) -> bool {
        loop {
            if self.stop.load(Ordering::SeqCst) {
                return false;
            }
            let mut p = libc::pollfd {
                fd: self.fd.as_raw_fd(),
                events,
                revents: 0,
            };
            if unsafe { libc::poll(&mut p, 1, TICK_MS) } != 0 {
                return true;
            }
        }
    }

    /// Writes all of `data` unless the reader goes away or a stop is requested first.
    pub fn write_all(&self, data: &[u8]) {
        let mut rest = data;
        while !rest.is_empty() && self.ready(libc::POLLOUT) {
            // SAFETY: writes from a live slice to a descriptor this value owns.
            let n = unsafe { libc::write(self.fd.as_raw_fd(), rest.as_ptr().cast(), rest.len()) };
            match n {
                n if n > 0 => rest = &rest[n as usize..],
                _ if matches!(
                    std::io::Error::last_os_error().kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
                _ => break,
            }
        }
    }
}

impl std::io::Read for Pipe {
    /// End of file when the writers are gone or when told to stop.
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if !self.ready(libc::POLLIN) {
            return Ok(0);
        }
        // SAFETY: reads into a live buffer from a descriptor this value owns.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(n as usize)
    }
}

/// Unblocks a pipe thread told to stop (Unix threads see the stop within a tick by themselves).
pub fn unblock(_thread: &std::thread::JoinHandle<()>) {}

// ---------------------------------------------------------------------------------------------------
// Tests' helpers

#[cfg(test)]
pub(super) fn test_symlink(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap();
}

#[cfg(test)]
pub(super) fn test_marker_program(marker: &Path) -> (std::path::PathBuf, Vec<String>) {
    (
        std::path::PathBuf::from("/bin/sh"),
        vec!["-c".into(), format!("touch '{}'", marker.display())],
    )
}
