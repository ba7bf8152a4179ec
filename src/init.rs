//! `almanac init`: create a repo's `.almanac/` wiki directory. Idempotent.

use std::path::{Path, PathBuf};

pub struct InitOutcome {
    pub wiki: PathBuf,
    pub created: Vec<PathBuf>,
}

/// The git work-tree root at or above `start`, else `start` itself.
pub fn repo_root(start: &Path) -> PathBuf {
    start
        .ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(start)
        .to_path_buf()
}

pub fn init(root: &Path) -> std::io::Result<InitOutcome> {
    let wiki = root.join(".almanac");
    let mut created = Vec::new();
    if !wiki.is_dir() {
        std::fs::create_dir_all(&wiki)?;
        created.push(wiki.clone());
    }
    // runs/ holds prompts and logs that quote transcripts: private.
    let runs = wiki.join("runs");
    if !runs.is_dir() {
        crate::util::atomic::ensure_private_dir(&runs)?;
        created.push(runs);
    }
    let ignore = wiki.join(".gitignore");
    let existing = match std::fs::read_to_string(&ignore) {
        Ok(s) => Some(s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    match existing {
        None => {
            std::fs::write(
                &ignore,
                "# almanac's run records, logs and capture ledger stay out of git\nruns/\n",
            )?;
            created.push(ignore);
        }
        Some(s)
            if !s
                .lines()
                .any(|l| matches!(l.trim(), "runs/" | "runs" | "/runs/" | "/runs")) =>
        {
            let mut s = s;
            if !s.is_empty() && !s.ends_with('\n') {
                s.push('\n');
            }
            s.push_str("runs/\n");
            std::fs::write(&ignore, s)?;
            created.push(ignore);
        }
        Some(_) => {}
    }
    Ok(InitOutcome { wiki, created })
}
