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

/// The largest `.almanac/.gitignore` `init` reads.
const MAX_GITIGNORE_BYTES: u64 = 1 << 20;

/// A repo may come with `.almanac/` committed by someone else: `init` follows no link there (a
/// `.almanac` or `.gitignore` that is a symbolic link is an error naming it) and only appends to a
/// regular `.gitignore`.
pub fn init(root: &Path) -> std::io::Result<InitOutcome> {
    use std::io::Write;
    let wiki = root.join(".almanac");
    let mut created = Vec::new();
    match std::fs::symlink_metadata(&wiki) {
        Ok(m) if m.file_type().is_symlink() || !m.is_dir() => {
            return Err(std::io::Error::other(format!(
                "{} is not a directory (a symbolic link or a file); almanac does not follow it: replace it with a directory",
                wiki.display()
            )))
        }
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&wiki)?;
            created.push(wiki.clone());
        }
        Err(e) => return Err(e),
    }
    // runs/ holds prompts and logs that quote transcripts: private.
    let runs = wiki.join("runs");
    if !runs.is_dir() {
        crate::util::atomic::ensure_private_dir(&runs)?;
        created.push(runs);
    }
    let ignore = wiki.join(".gitignore");
    let existing = crate::util::untrusted::read_optional(&ignore, MAX_GITIGNORE_BYTES)?
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    let open = |create: bool| {
        let mut o = std::fs::OpenOptions::new();
        match create {
            // A new file only: never through a link left in its place.
            true => {
                crate::platform::private_mode(o.write(true).create_new(true), 0o644).open(&ignore)
            }
            false => crate::platform::open_no_follow(o.append(true), &ignore),
        }
    };
    match existing {
        None => {
            open(true)?.write_all(
                b"# almanac's run records, logs and capture ledger stay out of git\nruns/\n",
            )?;
            created.push(ignore);
        }
        Some(s)
            if !s
                .lines()
                .any(|l| matches!(l.trim(), "runs/" | "runs" | "/runs/" | "/runs")) =>
        {
            let mut add = String::new();
            if !s.is_empty() && !s.ends_with('\n') {
                add.push('\n');
            }
            add.push_str("runs/\n");
            open(false)?.write_all(add.as_bytes())?;
            created.push(ignore);
        }
        Some(_) => {}
    }
    Ok(InitOutcome { wiki, created })
}
