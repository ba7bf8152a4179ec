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

/// When `pid` started, in clock ticks after boot (field 22 of `/proc/<pid>/stat`): with the pid, it names
/// one process, not whichever reuses the number. None when it is gone or on systems without `/proc`.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2 (the command) is in parentheses and may hold spaces: count from the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    // rest starts at field 3 (state); field 22 is the 20th after it.
    rest.split_whitespace().nth(19)?.parse().ok()
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

/// Whether any process of group `pgid` exists.
pub fn group_exists(pgid: u32) -> bool {
    if pgid == 0 {
        return false;
    }
    let r = unsafe { libc::kill(-(pgid as i32), 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_process_has_a_start_time_and_runs() {
        let me = std::process::id();
        if std::path::Path::new("/proc/self/stat").exists() {
            assert!(super::start_time(me).is_some());
        }
        assert!(super::running(me));
    }
}
