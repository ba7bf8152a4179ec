//! git, run without what the repository could make it run: the snapshot's view of a git work tree
//! (`super`'s module docs say what is compared).

use super::{outside_wiki, split_z, Stamp, Stamper, GIT_TIMEOUT};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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

/// Where the repo sits in its work tree and where git keeps its files.
pub(super) struct Layout {
    pub(super) prefix: String,
    pub(super) git_dirs: Vec<PathBuf>,
}

impl Git {
    pub(super) fn new(repo: &Path) -> Git {
        let mut g = Git {
            repo: repo.to_path_buf(),
            overrides: SAFE_CONFIG.iter().map(|s| s.to_string()).collect(),
        };
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
    pub(super) fn run(&self, args: &[&str]) -> Option<Vec<u8>> {
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
                    return status.success().then_some(out);
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

    /// None outside a git work tree.
    pub(super) fn layout(&self) -> Option<Layout> {
        let out = self.run(&[
            "rev-parse",
            "--show-prefix",
            "--absolute-git-dir",
            "--path-format=absolute",
            "--git-common-dir",
        ])?;
        let text = String::from_utf8_lossy(&out);
        let mut lines = text.split('\n');
        let prefix = lines.next()?.trim().to_string();
        let mut git_dirs: Vec<PathBuf> = lines
            .filter(|l| !l.trim().is_empty())
            .map(|l| PathBuf::from(l.trim()))
            .collect();
        git_dirs.dedup();
        Some(Layout { prefix, git_dirs })
    }

    pub(super) fn head(&self) -> Option<String> {
        self.run(&["rev-parse", "-q", "--verify", "HEAD"])
            .map(|o| String::from_utf8_lossy(&o).trim().to_string())
    }

    pub(super) fn dirty(
        &self,
        prefix: &str,
        st: &mut Stamper,
    ) -> BTreeMap<String, (String, Option<Stamp>)> {
        let args = [
            "status",
            "--porcelain=v1",
            "-z",
            "--untracked-files=all",
            "--no-renames",
            "--ignore-submodules=dirty",
            "--",
            ".",
        ];
        let Some(out) = self.run(&args) else {
            return BTreeMap::new();
        };
        split_z(&out)
            .into_iter()
            .filter(|e| e.len() > 3)
            .filter_map(|e| {
                let rel = outside_wiki(&e[3..], prefix)?;
                let stamp = st.stamp(&self.repo.join(&rel));
                Some((rel, (e[..2].to_string(), stamp)))
            })
            .collect()
    }

    /// Paths (relative to the repo, outside the wiki) the index marks assume-unchanged (a lower-case tag)
    /// or skip-worktree (`S`): `git status` does not look at them.
    pub(super) fn hidden(&self) -> BTreeSet<String> {
        let Some(out) = self.run(&["ls-files", "-v", "-z", "--", "."]) else {
            return BTreeSet::new();
        };
        split_z(&out)
            .into_iter()
            .filter_map(|e| {
                let (tag, path) = e.split_once(' ')?;
                let marked =
                    tag.len() == 1 && (tag.chars().all(|c| c.is_ascii_lowercase()) || tag == "S");
                marked.then(|| outside_wiki(path, "")).flatten()
            })
            .collect()
    }
}
