//! git, run without what the repository could make it run: the one way almanac runs git in a repo (the
//! post-run check, the question whether git tracks a store file). A repository is a stranger's: its
//! config, hooks and attributes may name programs, and none of them runs.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// git gets this long per command.
const GIT_TIMEOUT: Duration = Duration::from_secs(10);

/// git, run without what the repository could make it run. Every command gets `-c` overrides for the
/// config keys that name programs or hide changes (and for each filter driver the config defines), the
/// system config is not read, and the environment git would take a repository or a program from is
/// cleared.
pub struct Git {
    repo: PathBuf,
    overrides: Vec<String>,
}

/// Config keys set for every git command almanac runs.
const SAFE_CONFIG: &[&str] = &[
    "core.fsmonitor=false",
    "core.hooksPath=/dev/null",
    "core.untrackedCache=false",
    "core.trustctime=true",
    "core.checkStat=default",
    "core.pager=cat",
    "core.sshCommand=",
    "core.askPass=",
    "diff.external=",
    "status.submoduleSummary=false",
    "submodule.recurse=false",
];

/// Environment variables git reads a repository, config or program from: removed.
const GIT_ENV: &[&str] = &[
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_NAMESPACE",
    "GIT_CEILING_DIRECTORIES",
    "GIT_CONFIG",
    "GIT_CONFIG_PARAMETERS",
    "GIT_CONFIG_COUNT",
    "GIT_CONFIG_GLOBAL",
    "GIT_EXTERNAL_DIFF",
    "GIT_DIFF_OPTS",
    "GIT_PAGER",
    "GIT_SSH",
    "GIT_SSH_COMMAND",
    "GIT_ASKPASS",
    "GIT_EXEC_PATH",
    "GIT_TEMPLATE_DIR",
];

impl Git {
    /// git in `repo` with the config overrides every command gets: enough for commands that run no
    /// filter (`ls-files`, `rev-parse`).
    pub fn plain(repo: &Path) -> Git {
        Git {
            repo: repo.to_path_buf(),
            overrides: SAFE_CONFIG.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// `plain`, and every filter driver the config names emptied (for `status` and `diff`).
    pub fn new(repo: &Path) -> Git {
        let mut g = Git::plain(repo);
        // Clean and smudge filters run on `git status` (to compare a file's content with the index):
        // every driver the config names is emptied, which git takes as no filter.
        let args = ["config", "-z", "--name-only", "--get-regexp", r"^filter\."];
        let names = g.run(&args).map(|o| split_z(&o)).unwrap_or_default();
        let drivers: BTreeSet<String> = names
            .iter()
            .filter_map(|n| {
                let rest = n.strip_prefix("filter.")?;
                rest.rsplit_once('.').map(|(driver, _)| driver.to_string())
            })
            .collect();
        for d in drivers {
            for key in ["clean", "smudge", "process"] {
                g.overrides.push(format!("filter.{d}.{key}="));
            }
            g.overrides.push(format!("filter.{d}.required=false"));
        }
        g
    }

    /// Runs git in the repo; its stdout when it exits 0 within `GIT_TIMEOUT`.
    pub fn run(&self, args: &[&str]) -> Option<Vec<u8>> {
        self.run_allowing(args, &[0])
    }

    /// `run`, taking the exit codes in `ok` as success (`check-ignore` exits 1 for "none").
    pub fn run_allowing(&self, args: &[&str], ok: &[i32]) -> Option<Vec<u8>> {
        let mut cmd = Command::new("git");
        cmd.arg("--no-optional-locks");
        for o in &self.overrides {
            cmd.arg("-c").arg(o);
        }
        for v in GIT_ENV {
            cmd.env_remove(v);
        }
        cmd.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .arg("-C")
            .arg(&self.repo)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn().ok()?;
        let mut stdout = child.stdout.take()?;
        let reader = std::thread::spawn(move || {
            let mut buf = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stdout, &mut buf);
            buf
        });
        let start = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(status)) => {
                    let out = reader.join().ok()?;
                    return status
                        .code()
                        .is_some_and(|c| ok.contains(&c))
                        .then_some(out);
                }
                Ok(None) if start.elapsed() < GIT_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                _ => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return None;
                }
            }
        }
    }

    /// The directory git runs in.
    pub fn dir(&self) -> &Path {
        &self.repo
    }

    /// Those of `paths` (relative to the directory, `/`-separated, taken literally) that git tracks;
    /// None when git could not tell (not installed, not a work tree, a command that failed).
    pub fn tracked(&self, paths: &[String]) -> Option<BTreeSet<String>> {
        let mut args = vec!["--literal-pathspecs", "ls-files", "-z", "--cached", "--"];
        args.extend(paths.iter().map(String::as_str));
        let out = self.run(&args)?;
        Some(split_z(&out).into_iter().collect())
    }
}

/// git's `-z` output, one string a record.
pub fn split_z(out: &[u8]) -> Vec<String> {
    out.split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}
