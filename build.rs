//! Names the commit `almanac --version` reports, beside the version: `ALMANAC_COMMIT` when the build is
//! given one (a release built from a source archive), else the source checkout's `git rev-parse
//! --short=12 HEAD`, else none (a build from the crates.io package says its version alone).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=ALMANAC_COMMIT");
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let from_env = std::env::var("ALMANAC_COMMIT")
        .ok()
        .map(|c| c.trim().to_string())
        .filter(|c| !c.is_empty());
    let commit = from_env.or_else(|| checkout_commit(Path::new(&dir)));
    let version = std::env::var("CARGO_PKG_VERSION").unwrap_or_default();
    let text = match commit {
        Some(c) => format!("{version} (commit {c})"),
        None => version,
    };
    println!("cargo:rustc-env=ALMANAC_VERSION_TEXT={text}");
}

/// The commit of the git checkout the source is in, when it is one; the build is run again when its
/// HEAD or branches move.
fn checkout_commit(dir: &Path) -> Option<String> {
    let git = dir.join(".git");
    if !git.is_dir() {
        return None;
    }
    for watched in ["HEAD", "refs", "packed-refs"] {
        if git.join(watched).exists() {
            println!("cargo:rerun-if-changed=.git/{watched}");
        }
    }
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && text.chars().all(|c| c.is_ascii_hexdigit()) && !text.is_empty())
        .then_some(text)
}
