//! Test helpers: a temporary user home with transcript stores and repos, and the real binary run in it.

use assert_cmd::Command;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

pub const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// The cwd the real fixtures were recorded in; tests rewrite it to a repo of their own.
pub const REAL_CWD: &str = "/home/dev/proj/my_repo.x";

pub struct World {
    pub dir: tempfile::TempDir,
}

impl World {
    pub fn new() -> World {
        let w = World {
            dir: tempfile::tempdir().unwrap(),
        };
        std::fs::create_dir_all(w.home()).unwrap();
        w
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn home(&self) -> PathBuf {
        self.root().join("home")
    }

    pub fn almanac_home(&self) -> PathBuf {
        self.home().join(".codealmanac")
    }

    /// The binary with HOME and ALMANAC_HOME in this world and no store variables from the outside.
    pub fn almanac(&self) -> Command {
        let mut c = Command::cargo_bin("almanac").unwrap();
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home())
            .env("ALMANAC_HOME", self.almanac_home())
            .current_dir(self.root());
        c
    }

    /// The binary as `almanac()` sets it up, as a plain `std::process::Command` (to watch it run).
    pub fn almanac_process(&self) -> std::process::Command {
        let mut c = std::process::Command::new(assert_cmd::cargo::cargo_bin("almanac"));
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", self.home())
            .env("ALMANAC_HOME", self.almanac_home())
            .current_dir(self.root());
        c
    }

    /// Creates `<root>/<rel>` with a `.almanac/` wiki and returns its path.
    pub fn repo(&self, rel: &str) -> PathBuf {
        let p = self.root().join(rel);
        std::fs::create_dir_all(p.join(".almanac/runs")).unwrap();
        p
    }

    /// Writes a file under the world root, creating parents; mtime is set `age` in the past.
    pub fn write(&self, rel: &str, content: &str, age: Duration) -> PathBuf {
        let p = self.root().join(rel);
        write_aged(&p, content.as_bytes(), age);
        p
    }

    /// Runs the dry-run sweep with the given extra args and returns the parsed summary.
    pub fn dry_run(&self, args: &[&str]) -> serde_json::Value {
        let mut cmd = self.almanac();
        cmd.args(["capture", "sweep", "--dry-run", "--json"])
            .args(args);
        json_ok(&mut cmd)["summary"].clone()
    }
}

/// Runs the command, requires success, and returns its stdout parsed as the one JSON object it is.
pub fn json_ok(cmd: &mut Command) -> serde_json::Value {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "exit {:?}: {}\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("stdout is one JSON object");
    assert_ne!(v["ok"], false, "{v}");
    v
}

/// Runs the command, requires success, and returns its stdout as text (stderr in the failure message).
pub fn stdout_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub fn write_aged(p: &Path, content: &[u8], age: Duration) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, content).unwrap();
    set_age(p, age);
}

pub fn set_age(p: &Path, age: Duration) {
    let f = std::fs::File::options().write(true).open(p).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

pub fn fixture(rel: &str) -> String {
    std::fs::read_to_string(Path::new(FIXTURES).join(rel)).unwrap()
}

pub const HOURS_2: Duration = Duration::from_secs(2 * 3600);

/// Complete lines and the byte just past the last `\n`, computed independently of the binary.
pub fn complete_range(content: &str) -> (u64, u64) {
    let lines = content.bytes().filter(|b| *b == b'\n').count() as u64;
    let end = content.rfind('\n').map(|i| i as u64 + 1).unwrap_or(0);
    (lines, end)
}

pub fn items<'a>(summary: &'a serde_json::Value, list: &str) -> Vec<&'a serde_json::Value> {
    summary[list].as_array().unwrap().iter().collect()
}

pub fn find_by_path<'a>(
    summary: &'a serde_json::Value,
    list: &str,
    path: &Path,
) -> Option<&'a serde_json::Value> {
    let p = path.display().to_string();
    summary[list]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["transcriptPath"] == p.as_str())
}

/// Every file under `dir`, relative, sorted: to prove a command wrote nothing.
pub fn tree(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = walkdir::WalkDir::new(dir)
        .into_iter()
        .filter_map(|e| e.ok())
        .map(|e| e.path().strip_prefix(dir).unwrap().display().to_string())
        .collect();
    out.sort();
    out
}

/// The pid a test agent wrote to `file` (`echo $$ > file`), once it is there: the shell creates the
/// file before it writes the number, so an empty file is waited on too.
pub fn wait_for_pid(file: &Path) -> i32 {
    let start = std::time::Instant::now();
    loop {
        let pid = std::fs::read_to_string(file)
            .ok()
            .and_then(|s| s.trim().parse::<i32>().ok());
        if let Some(pid) = pid {
            return pid;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "no pid in {} after 30 s",
            file.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` to its end; returns its stdout, exit code and its peak resident memory in KiB, as the
/// process's own high-water mark (`VmHWM`, Linux) last seen while it ran (the rusage of a child forked
/// from this test process would count this process's pages too).
pub fn output_and_peak_rss(mut cmd: std::process::Command) -> (Vec<u8>, i32, Option<u64>) {
    use std::io::Read;
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).unwrap();
        out
    });
    let status_file = format!("/proc/{}/status", child.id());
    let mut peak = None;
    let status = loop {
        let hwm = std::fs::read_to_string(&status_file).ok().and_then(|s| {
            let l = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            l[6..]
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        });
        peak = peak.max(hwm);
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    (reader.join().unwrap(), status.code().unwrap_or(-1), peak)
}

/// A rendered conversation with its texts' indent taken off (almanac indents every line of a prompt or
/// an answer by two spaces): for looking up a text that spans lines.
pub fn unindented(conversation: &str) -> String {
    conversation.replace("\n  ", "\n")
}
