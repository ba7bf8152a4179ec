//! A repo's `.almanac/runs/` may come from a stranger's commit. Before almanac reads, writes, locks,
//! chmods or deletes anything there, the store must be its own: `.almanac` and `.almanac/runs` real
//! directories (not symbolic links) owned by this user, and the files with fixed names in it (ledger,
//! journal, locks, worker log) regular files, not links. Files under `runs/` are then opened with `O_NOFOLLOW`,
//! so nothing outside the directory is ever written through a link.

use std::path::Path;

/// The files in `runs/` whose names an attacker knows in advance.
const FIXED: [&str; 5] = [
    super::LEDGER_FILE,
    "ledger.journal",
    "ledger.lock",
    "worker.lock",
    "worker.log",
];

/// Ok when the repo's run store is safe to use; otherwise why not, in words (`runs-dir-unsafe`).
/// `runs/` not existing yet is fine: it is created as a real directory.
pub fn check_runs_dir(repo: &Path) -> Result<(), String> {
    let wiki = repo.join(".almanac");
    let runs = super::runs_dir(repo);
    for dir in [&wiki, &runs] {
        let m = match std::fs::symlink_metadata(dir) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir == &runs => return Ok(()),
            Err(e) => return Err(format!("{}: {e}", dir.display())),
        };
        if m.file_type().is_symlink() {
            return Err(format!(
                "{} is a symbolic link; almanac does not follow it (remove it to capture here)",
                dir.display()
            ));
        }
        if !m.is_dir() {
            return Err(format!("{} is not a directory", dir.display()));
        }
        if let Some(owner) = crate::platform::foreign_owner(&m) {
            return Err(format!("{} is owned by {owner}, not by you", dir.display()));
        }
    }
    for name in FIXED {
        let p = runs.join(name);
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(format!(
                    "{} is a symbolic link; almanac writes nothing through it (remove it)",
                    p.display()
                ))
            }
            Ok(m) if !m.is_file() => return Err(format!("{} is not a regular file", p.display())),
            _ => {}
        }
    }
    Ok(())
}

/// `check_runs_dir` as an I/O error, for the store's writers.
pub fn ensure_safe(repo: &Path) -> std::io::Result<()> {
    check_runs_dir(repo)
        .map_err(|why| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why))
}
