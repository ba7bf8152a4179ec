//! Path helpers: `~` expansion against the injected home, and lexical normalisation.

use std::path::{Component, Path, PathBuf};

/// Expands a leading `~` or `~/` against `home`. Other paths are returned as they are.
pub fn expand_home(text: &str, home: &Path) -> PathBuf {
    if text == "~" {
        home.to_path_buf()
    } else if let Some(rest) = text.strip_prefix("~/") {
        home.join(rest)
    } else {
        PathBuf::from(text)
    }
}

/// Removes `.` and resolves `..` lexically, without touching the disk (the path may not exist).
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_and_normalizes() {
        let home = Path::new("/home/u");
        assert_eq!(
            expand_home("~/.claude", home),
            PathBuf::from("/home/u/.claude")
        );
        assert_eq!(expand_home("/abs", home), PathBuf::from("/abs"));
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
    }
}
