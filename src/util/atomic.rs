//! The one atomic-write helper: temp file in the same directory, fsync, rename, fsync the directory.
//! Files are created 0600 and directories 0700: ledgers, run records and prompts quote transcripts.

use std::io::Write;
use std::path::Path;

/// Creates `dir` (and parents) with mode 0700 where it does not exist.
pub fn ensure_private_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    crate::platform::create_private_dir(dir)
}

/// Makes `dir` private (0700), creating it if needed: for almanac's own directories (a repo's
/// `.almanac/runs`, `$ALMANAC_HOME/state`), which may have been made by hand or by an older version.
/// A symbolic link is refused, never followed: its target is not ours to chmod.
pub fn private_dir(dir: &Path) -> std::io::Result<()> {
    ensure_private_dir(dir)?;
    let meta = std::fs::symlink_metadata(dir)?;
    if meta.file_type().is_symlink() {
        return Err(std::io::Error::other(format!(
            "{} is a symbolic link",
            dir.display()
        )));
    }
    crate::platform::make_private(dir, &meta)
}

pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// As `write_atomic`, with the content streamed by `fill` (no copy of a large file in memory).
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    ensure_private_dir(dir)?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(
        ".{name}.tmp-{}-{}",
        std::process::id(),
        super::ids::random_hex(4)
    ));
    let result = (|| {
        let mut o = std::fs::OpenOptions::new();
        let f = crate::platform::private_mode(o.write(true).create_new(true), 0o600).open(&tmp)?;
        let mut w = std::io::BufWriter::with_capacity(64 * 1024, f);
        fill(&mut w)?;
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        crate::util::fault::point("atomic-temp-written");
        std::fs::rename(&tmp, path)?;
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// `value` as every state file holds it: pretty JSON with a trailing newline.
pub fn json_bytes(value: &impl serde::Serialize) -> std::io::Result<Vec<u8>> {
    let mut text = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    text.push(b'\n');
    Ok(text)
}

/// Serialises `value` with `json_bytes` and writes it atomically.
pub fn write_json_atomic(path: &Path, value: &impl serde::Serialize) -> std::io::Result<()> {
    write_atomic(path, &json_bytes(value)?)
}

/// Opens `path` for appending, created 0600 if missing, never through a symbolic link; refused unless it
/// is a regular file with one link owned by this user (a log of ours, not a way to write elsewhere).
pub fn open_append_private(path: &Path) -> std::io::Result<std::fs::File> {
    use crate::platform::{foreign_owner, open_no_follow, private_mode, single_link};
    let mut o = std::fs::OpenOptions::new();
    let f = open_no_follow(private_mode(o.create(true).append(true), 0o600), path)?;
    let m = f.metadata()?;
    if !m.is_file() || !single_link(&f) || foreign_owner(&m).is_some() {
        return Err(std::io::Error::other(format!(
            "{}: not a regular file of yours with one link; refusing to append to it",
            path.display()
        )));
    }
    Ok(f)
}

/// Removes temp files an interrupted `write_atomic` left in `dir` (only ours: regular files named
/// `.<name>.tmp-<pid>-<hex>` whose pid is no longer alive). `dir` itself is never followed if it is a
/// symbolic link.
pub fn remove_stale_temps(dir: &Path) {
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink()) {
        return;
    }
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        if !e.file_type().is_ok_and(|t| t.is_file()) {
            continue;
        }
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix('.') else {
            continue;
        };
        let Some((_, tail)) = rest.rsplit_once(".tmp-") else {
            continue;
        };
        let Some((pid, _)) = tail.split_once('-') else {
            continue;
        };
        if let Ok(pid) = pid.parse::<i32>() {
            if !crate::platform::alive(pid) {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }
}
