//! Windows. What holds here that Unix gets from modes and process groups:
//!
//! - Private files: almanac's files live under the user profile (`%USERPROFILE%\.codealmanac`) and in the
//!   user's repos, whose ACLs (inherited from the profile) already keep other users out; almanac sets
//!   no ACL of its own, and an owner check always passes.
//! - The agent runs in a Job object created with `JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE`: stopping it
//!   terminates the Job (every process in it), and a worker that dies takes its Job handle, so the
//!   agent, with it. No orphan is left for a later sweep to find.
//! - The agent starts suspended and is resumed once its run record names it (the Unix gate's job).

use super::{FileId, Proc, Stop};
use std::fs::{File, Metadata, OpenOptions};
use std::io::{Read, Write};
use std::os::windows::fs::{MetadataExt, OpenOptionsExt};
use std::os::windows::io::{AsRawHandle, FromRawHandle, IntoRawHandle, OwnedHandle};
use std::os::windows::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use windows_sys::Win32::Foundation::{
    CloseHandle, GetLastError, SetHandleInformation, ERROR_ACCESS_DENIED, HANDLE,
    HANDLE_FLAG_INHERIT, INVALID_HANDLE_VALUE,
};
use windows_sys::Win32::Storage::FileSystem::{
    GetDiskFreeSpaceExW, GetFileInformationByHandle, BY_HANDLE_FILE_INFORMATION,
    FILE_ATTRIBUTE_DIRECTORY, FILE_ATTRIBUTE_REPARSE_POINT, FILE_FLAG_BACKUP_SEMANTICS,
    FILE_FLAG_OPEN_REPARSE_POINT,
};
use windows_sys::Win32::System::Console::{
    GetStdHandle, SetConsoleCtrlHandler, SetStdHandle, CTRL_BREAK_EVENT, CTRL_C_EVENT,
    STD_ERROR_HANDLE, STD_INPUT_HANDLE, STD_OUTPUT_HANDLE,
};
use windows_sys::Win32::System::Diagnostics::ToolHelp::{
    CreateToolhelp32Snapshot, Thread32First, Thread32Next, TH32CS_SNAPTHREAD, THREADENTRY32,
};
use windows_sys::Win32::System::JobObjects::{
    AssignProcessToJobObject, CreateJobObjectW, JobObjectExtendedLimitInformation,
    SetInformationJobObject, TerminateJobObject, JOBOBJECT_EXTENDED_LIMIT_INFORMATION,
    JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE,
};
use windows_sys::Win32::System::Threading::{
    GetExitCodeProcess, GetProcessTimes, OpenProcess, OpenThread, ResumeThread, TerminateProcess,
    CREATE_BREAKAWAY_FROM_JOB, CREATE_NEW_PROCESS_GROUP, CREATE_NO_WINDOW, CREATE_SUSPENDED,
    DETACHED_PROCESS, PROCESS_QUERY_LIMITED_INFORMATION, PROCESS_TERMINATE, THREAD_SUSPEND_RESUME,
};
use windows_sys::Win32::System::IO::CancelSynchronousIo;

/// The names of the variables that hold the user's home directory, first set wins: the profile, as
/// Claude Code and Codex take it (`os.homedir()`, `dirs::home_dir`).
pub const HOME_VARS: &[&str] = &["USERPROFILE", "HOME"];

/// The OS error of a full disk (for fault injection): `ERROR_DISK_FULL`.
pub const DISK_FULL: i32 = 112;

/// `ERROR_CANT_RESOLVE_FILENAME`: what `open_no_follow` answers for a link (Unix says `ELOOP`).
const LINK_REFUSED: i32 = 1921;
/// `ERROR_FILENAME_EXCED_RANGE`: `CreateProcess`'s answer to a command line over 32,767 characters.
const TOO_LONG: i32 = 206;
/// `STILL_ACTIVE`: the exit code of a process that has not exited.
const STILL_ACTIVE: u32 = 259;

// ---------------------------------------------------------------------------------------------------
// Files

fn handle_info(h: HANDLE) -> Option<BY_HANDLE_FILE_INFORMATION> {
    // SAFETY: the struct is plain data; the call writes it only.
    let mut info: BY_HANDLE_FILE_INFORMATION = unsafe { std::mem::zeroed() };
    (unsafe { GetFileInformationByHandle(h, &mut info) } != 0).then_some(info)
}

fn id_of(info: &BY_HANDLE_FILE_INFORMATION) -> FileId {
    (
        info.dwVolumeSerialNumber as u64,
        ((info.nFileIndexHigh as u64) << 32) | info.nFileIndexLow as u64,
    )
}

/// (volume serial number, file index). The file is opened for no access (directories too) to ask;
/// one that cannot be opened gets an identity from its path, so it is still told apart from others.
pub fn file_id(path: &Path, _meta: &Metadata) -> FileId {
    OpenOptions::new()
        .access_mode(0)
        .custom_flags(FILE_FLAG_BACKUP_SEMANTICS)
        .open(path)
        .ok()
        .and_then(|f| open_file_id(&f))
        .unwrap_or_else(|| {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            path.hash(&mut h);
            (u64::MAX, h.finish())
        })
}

/// The identity of an open file.
fn open_file_id(f: &File) -> Option<FileId> {
    handle_info(f.as_raw_handle() as HANDLE).map(|i| id_of(&i))
}

fn is_reparse_point(m: &Metadata) -> bool {
    m.file_attributes() & FILE_ATTRIBUTE_REPARSE_POINT != 0
}

/// Opens `path` with `opts` without following a link or junction: the reparse point itself is opened
/// and then refused (`is_link_refused`).
pub fn open_no_follow(opts: &mut OpenOptions, path: &Path) -> std::io::Result<File> {
    let f = opts.custom_flags(FILE_FLAG_OPEN_REPARSE_POINT).open(path)?;
    if is_reparse_point(&f.metadata()?) {
        return Err(std::io::Error::from_raw_os_error(LINK_REFUSED));
    }
    Ok(f)
}

/// Opens `path` with `opts` (a FIFO cannot block an open here).
pub fn open_no_wait(opts: &mut OpenOptions, path: &Path) -> std::io::Result<File> {
    opts.open(path)
}

/// A directory opened without following a link or junction.
pub fn open_dir_no_follow(dir: &Path) -> Option<File> {
    let f = OpenOptions::new()
        .read(true)
        .custom_flags(FILE_FLAG_BACKUP_SEMANTICS | FILE_FLAG_OPEN_REPARSE_POINT)
        .open(dir)
        .ok()?;
    let m = f.metadata().ok()?;
    (m.file_attributes() & FILE_ATTRIBUTE_DIRECTORY != 0 && !is_reparse_point(&m)).then_some(f)
}

pub fn is_link_refused(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(LINK_REFUSED)
}

/// Modes do not exist here: the profile's ACLs hold (see the module's docs).
pub fn private_mode(opts: &mut OpenOptions, _mode: u32) -> &mut OpenOptions {
    opts
}

pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)
}

pub fn make_private(_dir: &Path, _meta: &Metadata) -> std::io::Result<()> {
    Ok(())
}

/// Always None: files under the profile are the user's (see the module's docs).
pub fn foreign_owner(_meta: &Metadata) -> Option<String> {
    None
}

/// Last-write and creation times, in ns since 1601: Windows keeps a change time too, but only behind
/// another call per file; an edit that restores size and last-write time is not seen here.
pub fn times_ns(meta: &Metadata) -> (i128, i128) {
    (
        i128::from(meta.last_write_time()) * 100,
        i128::from(meta.creation_time()) * 100,
    )
}

pub fn single_link(f: &File) -> bool {
    handle_info(f.as_raw_handle() as HANDLE).is_some_and(|i| i.nNumberOfLinks == 1)
}

/// Any file may be started here; what runs it is its extension's business (`program_candidates`).
pub fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file())
}

pub fn can_execute(path: &Path) -> std::io::Result<()> {
    match std::fs::metadata(path)?.is_file() {
        true => Ok(()),
        false => Err(std::io::Error::other("not a file")),
    }
}

/// Fills `buf` from `offset` (`UnexpectedEof` past the end). The file's position moves; callers never
/// rely on it.
pub fn read_exact_at(f: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(f, buf, offset) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Points this process's stdout and stderr at `f` (the worker's log). The handles are leaked on
/// purpose: they stay the process's standard handles until it exits.
pub fn redirect_output(f: &File) {
    for which in [STD_OUTPUT_HANDLE, STD_ERROR_HANDLE] {
        if let Ok(dup) = f.try_clone() {
            // SAFETY: the handle is valid and owned by nothing else once leaked.
            unsafe {
                SetStdHandle(which, dup.into_raw_handle() as HANDLE);
            }
        }
    }
}

pub fn stderr_id() -> Option<FileId> {
    // SAFETY: GetStdHandle only reads the process's table.
    let h = unsafe { GetStdHandle(STD_ERROR_HANDLE) };
    if h.is_null() || h == INVALID_HANDLE_VALUE {
        return None;
    }
    handle_info(h).map(|i| id_of(&i))
}

/// No uid here; launchd's domain is never asked for on Windows.
pub fn user_id() -> u32 {
    0
}

// ---------------------------------------------------------------------------------------------------
// Processes

struct ProcessHandle(HANDLE);

impl ProcessHandle {
    fn open(pid: u32, access: u32) -> Result<ProcessHandle, u32> {
        // SAFETY: OpenProcess returns a handle or null.
        let h = unsafe { OpenProcess(access, 0, pid) };
        match h.is_null() {
            true => Err(unsafe { GetLastError() }),
            false => Ok(ProcessHandle(h)),
        }
    }
}

impl Drop for ProcessHandle {
    fn drop(&mut self) {
        // SAFETY: the handle is ours.
        unsafe {
            CloseHandle(self.0);
        }
    }
}

pub fn alive(pid: i32) -> bool {
    pid > 0 && running(pid as u32)
}

pub fn running(pid: u32) -> bool {
    match ProcessHandle::open(pid, PROCESS_QUERY_LIMITED_INFORMATION) {
        Ok(h) => {
            let mut code = 0u32;
            // SAFETY: writes the exit code only.
            unsafe { GetExitCodeProcess(h.0, &mut code) != 0 && code == STILL_ACTIVE }
        }
        Err(e) => e == ERROR_ACCESS_DENIED,
    }
}

pub fn has_start_times() -> bool {
    true
}

/// When `pid` was created, in 100 ns intervals since 1601 (`GetProcessTimes`).
pub fn start_time(pid: u32) -> Option<u64> {
    let h = ProcessHandle::open(pid, PROCESS_QUERY_LIMITED_INFORMATION).ok()?;
    let zero = windows_sys::Win32::Foundation::FILETIME {
        dwLowDateTime: 0,
        dwHighDateTime: 0,
    };
    let (mut created, mut exited, mut kernel, mut user) = (zero, zero, zero, zero);
    // SAFETY: the call writes the four FILETIMEs only.
    let ok = unsafe { GetProcessTimes(h.0, &mut created, &mut exited, &mut kernel, &mut user) };
    (ok != 0).then_some(((created.dwHighDateTime as u64) << 32) | created.dwLowDateTime as u64)
}

/// Whether the agent a record names still runs. Its Job dies with the worker that made it, so the
/// agent's own process stands for the group.
pub fn group_exists(pgid: u32) -> bool {
    pgid != 0 && running(pgid)
}

/// Ends the agent a record names, from another process (its worker's Job handle is not ours): its
/// own process; the rest of its Job ends when the Job's last handle closes.
pub fn stop_group(pgid: u32, _how: Stop) {
    if let Ok(h) = ProcessHandle::open(pgid, PROCESS_TERMINATE) {
        // SAFETY: terminates the process the handle names.
        unsafe {
            TerminateProcess(h.0, 1);
        }
    }
}

/// Starts the repo's worker detached: no console, a process group of its own, and out of the
/// scheduler's Job when that Job allows it (else inside it: it still outlives the sweep).
///
/// `CreateProcess` hands a child every inheritable handle of its parent, whatever its own stdio: the
/// sweep's stdout pipe would stay open in the worker, and whoever reads the sweep's output (a script,
/// `capture sweep --json | …`) would wait for the whole capture. So the sweep's own standard handles
/// stop being inheritable first (children given `Stdio::inherit` still get duplicates of them).
pub fn spawn_detached(cmd: &mut Command) -> std::io::Result<Child> {
    for which in [STD_INPUT_HANDLE, STD_OUTPUT_HANDLE, STD_ERROR_HANDLE] {
        // SAFETY: GetStdHandle reads the process's table; a null or invalid handle is skipped.
        unsafe {
            let h = GetStdHandle(which);
            if !h.is_null() && h != INVALID_HANDLE_VALUE {
                SetHandleInformation(h, HANDLE_FLAG_INHERIT, 0);
            }
        }
    }
    let flags = DETACHED_PROCESS | CREATE_NEW_PROCESS_GROUP;
    match cmd
        .creation_flags(flags | CREATE_BREAKAWAY_FROM_JOB)
        .spawn()
    {
        Err(e) if e.raw_os_error() == Some(ERROR_ACCESS_DENIED as i32) => {
            cmd.creation_flags(flags).spawn()
        }
        r => r,
    }
}

/// A started agent's Job object.
pub struct AgentGroup {
    pid: u32,
    job: OwnedHandle,
}

impl AgentGroup {
    pub fn id(&self) -> u32 {
        self.pid
    }

    /// Resumes the suspended agent's threads.
    pub fn release(&self, _stdin: Option<&mut std::process::ChildStdin>) {
        resume_threads(self.pid);
    }

    /// Terminates every process in the Job.
    pub fn stop(&self, _how: Stop) {
        // SAFETY: the Job handle is ours.
        unsafe {
            TerminateJobObject(self.job.as_raw_handle() as HANDLE, 1);
        }
    }
}

fn resume_threads(pid: u32) {
    // SAFETY: the snapshot handle is closed below; THREADENTRY32 is plain data with its size set.
    unsafe {
        let snap = CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0);
        if snap == INVALID_HANDLE_VALUE {
            return;
        }
        let mut e: THREADENTRY32 = std::mem::zeroed();
        e.dwSize = std::mem::size_of::<THREADENTRY32>() as u32;
        let mut ok = Thread32First(snap, &mut e) != 0;
        while ok {
            if e.th32OwnerProcessID == pid {
                let t = OpenThread(THREAD_SUSPEND_RESUME, 0, e.th32ThreadID);
                if !t.is_null() {
                    ResumeThread(t);
                    CloseHandle(t);
                }
            }
            ok = Thread32Next(snap, &mut e) != 0;
        }
        CloseHandle(snap);
    }
}

fn kill_on_close_job() -> std::io::Result<OwnedHandle> {
    // SAFETY: a nameless Job with default security; the handle is owned from here on.
    let job = unsafe { CreateJobObjectW(std::ptr::null(), std::ptr::null()) };
    if job.is_null() {
        return Err(std::io::Error::last_os_error());
    }
    let job = unsafe { OwnedHandle::from_raw_handle(job as _) };
    let mut limits: JOBOBJECT_EXTENDED_LIMIT_INFORMATION = unsafe { std::mem::zeroed() };
    limits.BasicLimitInformation.LimitFlags = JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE;
    // SAFETY: passes a live struct of the size given.
    let ok = unsafe {
        SetInformationJobObject(
            job.as_raw_handle() as HANDLE,
            JobObjectExtendedLimitInformation,
            (&limits as *const JOBOBJECT_EXTENDED_LIMIT_INFORMATION).cast(),
            std::mem::size_of::<JOBOBJECT_EXTENDED_LIMIT_INFORMATION>() as u32,
        )
    };
    match ok {
        0 => Err(std::io::Error::last_os_error()),
        _ => Ok(job),
    }
}

/// Starts `program args` suspended, in a Job of its own that is terminated as a whole and dies with
/// this process; `AgentGroup::release` lets it run. A `.cmd`/`.bat` program (npm's shims) is run
/// through `cmd.exe` with its arguments quoted for it by the standard library. stdin is a pipe when
/// the prompt goes there, else the null device.
pub fn spawn_held(
    program: &Path,
    args: &[String],
    prompt_on_stdin: bool,
    configure: impl FnOnce(&mut Command),
) -> std::io::Result<(Child, AgentGroup)> {
    let job = kill_on_close_job()?;
    let mut cmd = Command::new(program);
    cmd.args(args);
    configure(&mut cmd);
    cmd.stdin(match prompt_on_stdin {
        true => Stdio::piped(),
        false => Stdio::null(),
    })
    .creation_flags(CREATE_SUSPENDED | CREATE_NEW_PROCESS_GROUP | CREATE_NO_WINDOW);
    let mut child = cmd.spawn()?;
    // SAFETY: both handles are live.
    if unsafe {
        AssignProcessToJobObject(
            job.as_raw_handle() as HANDLE,
            child.as_raw_handle() as HANDLE,
        )
    } == 0
    {
        let e = std::io::Error::last_os_error();
        let _ = child.kill();
        let _ = child.wait();
        return Err(e);
    }
    let pid = child.id();
    Ok((child, AgentGroup { pid, job }))
}

/// The extensions a program name may stand for (`PATHEXT`, or its usual value when unset).
pub fn pathext() -> Option<String> {
    Some(std::env::var("PATHEXT").unwrap_or_else(|_| ".COM;.EXE;.BAT;.CMD".into()))
}

/// The program to start for `program`, and arguments to put before the agent's. An npm `.cmd` shim
/// (`claude.cmd`, `codex.cmd`) is unwrapped: its script is run with the `node.exe` beside it, else the
/// one `find_node` finds, so no argument passes through `cmd.exe` (`super::npm_shim_script`). Any other
/// program, or a shim whose node is not found, is started as it is.
pub fn unwrap_shim(
    program: &Path,
    find_node: impl FnOnce() -> Option<std::path::PathBuf>,
) -> (std::path::PathBuf, Vec<String>) {
    let as_is = (program.to_path_buf(), Vec::new());
    let is_cmd = program
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("cmd"));
    let Some(dir) = program.parent().filter(|_| is_cmd) else {
        return as_is;
    };
    let Ok(text) = std::fs::File::open(program).and_then(|f| {
        let mut s = String::new();
        f.take(64 * 1024).read_to_string(&mut s).map(|_| s)
    }) else {
        return as_is;
    };
    let Some(script) = super::npm_shim_script(&text) else {
        return as_is;
    };
    let beside = dir.join("node.exe");
    let node = match beside.is_file() {
        true => Some(beside),
        false => find_node(),
    };
    match node {
        Some(node) => (node, vec![dir.join(script).display().to_string()]),
        None => as_is,
    }
}

pub fn is_args_too_long(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(TOO_LONG)
}

/// Nothing to do: the Job holds every descendant.
pub fn become_subreaper() {}

/// Empty: a descendant cannot leave the agent's Job (breakaway is not allowed), so none is ever left.
pub fn descendants() -> Vec<Proc> {
    Vec::new()
}

pub fn reap_zombies(_except: Option<u32>) {}

static INTERRUPT: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

unsafe extern "system" fn console_handler(kind: u32) -> windows_sys::core::BOOL {
    match (kind, INTERRUPT.get()) {
        (CTRL_C_EVENT | CTRL_BREAK_EVENT, Some(f)) => {
            f();
            1
        }
        _ => 0,
    }
}

/// Runs `f` when the user presses Ctrl-C or Ctrl-Break, instead of ending the process.
pub fn on_interrupt(f: fn()) {
    let _ = INTERRUPT.set(f);
    // SAFETY: registers a handler that only reads a set OnceLock.
    unsafe {
        SetConsoleCtrlHandler(Some(console_handler), 1);
    }
}

/// Free bytes for this user on the volume holding `path`.
pub fn free_space(path: &Path) -> Option<u64> {
    use std::os::windows::ffi::OsStrExt;
    use std::ptr::null_mut;
    let wide: Vec<u16> = path.as_os_str().encode_wide().chain([0]).collect();
    let mut avail: u64 = 0;
    // SAFETY: `wide` is NUL-terminated; the two totals not asked for may be null.
    let ok = unsafe { GetDiskFreeSpaceExW(wide.as_ptr(), &mut avail, null_mut(), null_mut()) };
    (ok != 0).then_some(avail)
}

/// Not known from a file's metadata on Windows (a sparse file is not told apart there).
pub fn allocated_bytes(_meta: &Metadata) -> Option<u64> {
    None
}

/// Windows has no file size signal.
pub fn ignore_file_size_signal() {}

pub fn fix_mmap_threshold(_bytes: usize) {}

// ---------------------------------------------------------------------------------------------------
// The agent's pipes

/// An OS pipe end, as `std::process` hands them out.
pub type OwnedPipe = OwnedHandle;

/// One end of an anonymous pipe. Reads and writes block; a thread told to stop is woken by `unblock`
/// (`CancelSynchronousIo`), since anonymous pipes cannot be polled.
pub struct Pipe {
    file: File,
    stop: Arc<AtomicBool>,
}

impl Pipe {
    pub fn reader(h: impl Into<OwnedHandle>, stop: Arc<AtomicBool>) -> Pipe {
        Pipe {
            file: File::from(h.into()),
            stop,
        }
    }

    pub fn writer(h: impl Into<OwnedHandle>, stop: Arc<AtomicBool>) -> Pipe {
        Pipe::reader(h, stop)
    }

    pub fn write_all(&self, data: &[u8]) {
        let mut rest = data;
        while !rest.is_empty() && !self.stop.load(Ordering::SeqCst) {
            match (&self.file).write(rest) {
                Ok(n) if n > 0 => rest = &rest[n..],
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                _ => break,
            }
        }
    }
}

impl Read for Pipe {
    /// End of file when the writers are gone (a broken pipe) or when told to stop.
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if self.stop.load(Ordering::SeqCst) {
            return Ok(0);
        }
        match self.file.read(buf) {
            Err(_) if self.stop.load(Ordering::SeqCst) => Ok(0),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
            r => r,
        }
    }
}

/// Wakes a pipe thread blocked in a read or write once it was told to stop.
pub fn unblock(thread: &std::thread::JoinHandle<()>) {
    for _ in 0..200 {
        if thread.is_finished() {
            return;
        }
        // SAFETY: the thread handle is live while the JoinHandle is.
        unsafe {
            CancelSynchronousIo(thread.as_raw_handle() as HANDLE);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

// ---------------------------------------------------------------------------------------------------
// Tests' helpers

#[cfg(test)]
pub(super) fn test_symlink(target: &Path, link: &Path) {
    std::os::windows::fs::symlink_file(target, link).unwrap();
}

#[cfg(test)]
pub(super) fn test_marker_program(marker: &Path) -> (std::path::PathBuf, Vec<String>) {
    (
        std::path::PathBuf::from("cmd.exe"),
        vec!["/c".into(), format!("type nul > \"{}\"", marker.display())],
    )
}
