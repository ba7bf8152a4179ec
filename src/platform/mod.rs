//! What almanac needs of the operating system, named for what it does: lock-free file identity, opening
//! without following links, private files, a detached worker, an agent started held back in a process
//! group (Unix) or Job object (Windows) that is stopped as a whole, a process's start time, the agent's
//! pipes read in ticks. The rest of the code calls these and never tests the target itself.
//!
//! Unix (Linux and macOS) is `unix.rs`; Windows is `windows.rs`. What holds where, in short:
//!
//! | need | Linux | macOS | Windows |
//! |---|---|---|---|
//! | file identity | (st_dev, st_ino) | (st_dev, st_ino) | (volume serial, file index) |
//! | no-follow open | `O_NOFOLLOW` | `O_NOFOLLOW` | `FILE_FLAG_OPEN_REPARSE_POINT`, then a reparse point is refused |
//! | private files | mode 0600/0700, owner = euid | the same | the user profile's ACLs (inherited; almanac sets none) |
//! | agent group | process group, SIGTERM/SIGKILL | the same | Job object, kill-on-close, terminated as a whole |
//! | held start | `/bin/sh` gate reading a line | the same | created suspended, resumed once recorded |
//! | start time | `/proc/<pid>/stat` field 22 | `proc_pidinfo` (µs since the epoch) | `GetProcessTimes` (100 ns since 1601) |
//! | detached worker | `setsid` | `setsid` | `DETACHED_PROCESS`, new process group, away from the scheduler's job |
//!
//! File locks need no code here: `std::fs::File::try_lock` is `flock` on Unix and `LockFileEx` on
//! Windows.

#[cfg(unix)]
mod unix;
#[cfg(unix)]
pub use unix::*;

#[cfg(windows)]
mod windows;
#[cfg(windows)]
pub use windows::*;

/// What identifies one file while it exists: two paths naming the same file give the same value.
pub type FileId = (u64, u64);

/// How hard to stop an agent's group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// Asks it to end (SIGTERM; on Windows there is no asking: the Job is terminated).
    Term,
    /// Ends it now (SIGKILL; the Job terminated).
    Kill,
}

/// One process the worker found below itself after a run (Linux: from `/proc`).
pub struct Proc {
    pub pid: u32,
    pub pgid: u32,
    pub state: char,
    pub comm: String,
}

/// Whether `program` names a path (it holds a separator) rather than a name to look up on PATH.
pub fn names_a_path(program: &str) -> bool {
    program.chars().any(std::path::is_separator)
}

/// The files that `name` may be in `dir`: the name itself on Unix; on Windows also the name with each
/// of `PATHEXT`'s extensions when it has none (`claude` is `claude.cmd` from npm).
pub fn program_candidates(
    dir: &std::path::Path,
    name: &str,
    pathext: Option<&str>,
) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    match pathext {
        Some(exts) if std::path::Path::new(name).extension().is_none() => {
            for ext in exts.split(';').map(str::trim).filter(|e| !e.is_empty()) {
                out.push(dir.join(format!("{name}{}", ext.to_ascii_lowercase())));
            }
            out.push(dir.join(name));
        }
        _ => out.push(dir.join(name)),
    }
    out
}

/// The script an npm `.cmd` shim runs with node, relative to the shim's directory (`node_modules\…\cli.js`),
/// read from the shim's text; None when it is not npm's shim. npm's shims (cmd-shim) end in a line
/// `… "%_prog%"  "%dp0%\<script>" %*` (older: `"%~dp0\node.exe"  "%~dp0\<script>" %*`).
///
/// Running the script with node directly, instead of the shim through `cmd.exe`, keeps every argument as
/// it is: `cmd.exe` and a batch file's `%*` reparse arguments (`%`, `^`, `&`), which no quoting makes safe
/// in every case.
pub fn npm_shim_script(shim: &str) -> Option<String> {
    let line = shim.lines().rev().find(|l| l.trim_end().ends_with("%*"))?;
    for prefix in ["\"%dp0%\\", "\"%~dp0\\"] {
        // The script is the last quoted argument that starts at the shim's directory.
        if let Some(at) = line.rfind(prefix) {
            let rest = &line[at + prefix.len()..];
            let script = &rest[..rest.find('"')?];
            if script.eq_ignore_ascii_case("node.exe") || script.is_empty() || script.contains('%')
            {
                return None;
            }
            return Some(script.to_string());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// What npm 10's cmd-shim writes for `@anthropic-ai/claude-code` (line endings CRLF).
    const NPM_SHIM: &str = "@ECHO off\r\nGOTO start\r\n:find_dp0\r\nSET dp0=%~dp0\r\nEXIT /b\r\n:start\r\nSETLOCAL\r\nCALL :find_dp0\r\n\r\nIF EXIST \"%dp0%\\node.exe\" (\r\n  SET \"_prog=%dp0%\\node.exe\"\r\n) ELSE (\r\n  SET \"_prog=node\"\r\n  SET PATHEXT=%PATHEXT:;.JS;=;%\r\n)\r\n\r\nendLocal & goto #_undefined_# 2>NUL || title %COMSPEC% & \"%_prog%\"  \"%dp0%\\node_modules\\@anthropic-ai\\claude-code\\cli.js\" %*\r\n";

    #[test]
    fn an_npm_shim_names_the_script_node_runs() {
        assert_eq!(
            npm_shim_script(NPM_SHIM).as_deref(),
            Some("node_modules\\@anthropic-ai\\claude-code\\cli.js")
        );
        // The older form, node beside the shim named on the line itself.
        let old = "@IF EXIST \"%~dp0\\node.exe\" (\r\n  \"%~dp0\\node.exe\"  \"%~dp0\\..\\codex\\bin\\codex.js\" %*\r\n) ELSE (\r\n  node  \"%~dp0\\..\\codex\\bin\\codex.js\" %*\r\n)\r\n";
        assert_eq!(
            npm_shim_script(old).as_deref(),
            Some("..\\codex\\bin\\codex.js")
        );
        // Anything else is run as it is, through cmd.exe.
        assert_eq!(npm_shim_script("@echo off\r\nmy-tool.exe %*\r\n"), None);
        assert_eq!(npm_shim_script("@\"%~dp0\\node.exe\" %*\r\n"), None);
        assert_eq!(npm_shim_script(""), None);
    }

    #[test]
    fn a_name_without_an_extension_is_tried_with_each_pathext_extension_first() {
        let c = program_candidates(Path::new("/bin"), "claude", Some(".COM;.EXE;.BAT;.CMD"));
        let names: Vec<_> = c
            .iter()
            .map(|p| p.file_name().unwrap().to_owned())
            .collect();
        assert_eq!(
            names,
            [
                "claude.com",
                "claude.exe",
                "claude.bat",
                "claude.cmd",
                "claude"
            ]
        );
        // With an extension, or without PATHEXT (Unix), only the name itself.
        assert_eq!(
            program_candidates(Path::new("/bin"), "codex.cmd", Some(".EXE;.CMD")),
            [Path::new("/bin/codex.cmd")]
        );
        assert_eq!(
            program_candidates(Path::new("/bin"), "claude", None),
            [Path::new("/bin/claude")]
        );
    }

    #[test]
    fn a_separator_makes_a_program_a_path() {
        assert!(names_a_path("./agent"));
        assert!(names_a_path("/usr/bin/claude"));
        assert!(!names_a_path("claude"));
    }

    #[test]
    fn a_file_has_one_identity_whatever_path_names_it() {
        let d = tempfile::tempdir().unwrap();
        let a = d.path().join("a");
        std::fs::write(&a, b"x").unwrap();
        std::fs::hard_link(&a, d.path().join("b")).unwrap();
        std::fs::write(d.path().join("c"), b"x").unwrap();
        let id = |n: &str| {
            let p = d.path().join(n);
            file_id(&p, &std::fs::metadata(&p).unwrap())
        };
        assert_eq!(id("a"), id("b"));
        assert_ne!(id("a"), id("c"));
    }

    #[test]
    fn a_link_is_refused_by_a_no_follow_open_and_a_file_is_not() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"x").unwrap();
        let l = d.path().join("l");
        test_symlink(&f, &l);
        let mut o = std::fs::OpenOptions::new();
        o.read(true);
        assert!(open_no_follow(&mut o, &f).is_ok());
        let e = open_no_follow(&mut o, &l).unwrap_err();
        assert!(is_link_refused(&e), "{e}");
    }

    #[test]
    fn this_process_runs_and_has_a_start_time_that_does_not_change() {
        let me = std::process::id();
        assert!(running(me));
        assert!(alive(me as i32));
        if has_start_times() {
            let t = start_time(me);
            assert!(t.is_some());
            assert_eq!(t, start_time(me));
        }
    }

    #[test]
    fn a_private_file_is_private_and_single_linked() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("log");
        let mut o = std::fs::OpenOptions::new();
        o.create(true).append(true);
        private_mode(&mut o, 0o600);
        let f = open_no_follow(&mut o, &p).unwrap();
        assert!(single_link(&f));
        assert!(foreign_owner(&f.metadata().unwrap()).is_none());
        std::fs::hard_link(&p, d.path().join("other")).unwrap();
        assert!(!single_link(&f));
    }

    #[test]
    fn a_held_agent_group_starts_only_when_released_and_is_stopped_as_a_whole() {
        let d = tempfile::tempdir().unwrap();
        let marker = d.path().join("started");
        let (program, args) = test_marker_program(&marker);
        let (mut child, group) = spawn_held(&program, &args, true, |c| {
            c.stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
        })
        .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(!marker.exists(), "the agent ran before it was released");
        let mut stdin = child.stdin.take();
        group.release(stdin.as_mut());
        drop(stdin);
        let status = child.wait().unwrap();
        assert!(status.success());
        assert!(marker.exists(), "the released agent did not run");
        group.stop(Stop::Kill);
        assert!(!group_exists(group.id()));
    }
}
