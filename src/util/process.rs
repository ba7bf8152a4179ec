//! Process helpers: liveness checks and killing process groups.

pub fn alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // kill(pid, 0): 0 or EPERM means the process exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

pub fn kill_group(pgid: i32, signal: i32) {
    if pgid > 0 {
        unsafe {
            libc::kill(-pgid, signal);
        }
    }
}
