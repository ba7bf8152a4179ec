//! The repos almanac knows: those `almanac init` made and those sweeps found sessions for, one path a
//! line in `$ALMANAC_HOME/state/repos.txt`. Stores that live inside projects are looked for in them
//! (never by walking the disk), and a project known only by a hash of its path is matched against them.

use crate::context::Context;
use std::path::{Path, PathBuf};

const FILE: &str = "state/repos.txt";
const CAP: u64 = 16 << 20;

fn path(cx: &Context) -> PathBuf {
    cx.almanac_home.join(FILE)
}

/// Every repo remembered that still has its `.almanac/` directory, in the order they were added.
pub fn known(cx: &Context) -> Vec<PathBuf> {
    let Ok(Some(bytes)) = crate::util::untrusted::read_optional(&path(cx), CAP) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&bytes)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(PathBuf::from)
        .filter(|p| p.is_absolute() && p.join(".almanac").is_dir())
        .collect()
}

/// Adds `repos` not yet remembered (and forgets those whose `.almanac/` is gone).
pub fn remember<'a>(
    cx: &Context,
    repos: impl IntoIterator<Item = &'a Path>,
) -> std::io::Result<()> {
    let mut list = known(cx);
    let before = list.clone();
    for r in repos {
        if r.is_absolute() && !list.iter().any(|k| k == r) && r.join(".almanac").is_dir() {
            list.push(r.to_path_buf());
        }
    }
    let on_disk = std::fs::read_to_string(path(cx)).unwrap_or_default();
    let text: String = list
        .iter()
        .map(|p| format!("{}\n", p.to_string_lossy()))
        .collect();
    if list == before && text == on_disk {
        return Ok(());
    }
    crate::util::atomic::write_atomic(&path(cx), text.as_bytes())
}
