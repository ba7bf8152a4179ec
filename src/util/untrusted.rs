//! Opening files that someone other than almanac may have put in place: anything under a repo's
//! `.almanac/` (a stranger's commit, the capture agent). Such a file is opened without following a
//! symbolic link (a link to `/dev/zero` or to a file outside the repo is refused, not read or written
//! through), without blocking on a FIFO, must be a regular file, and is read up to a size cap: a larger
//! one is an error that names it, never a read of unbounded size.

use std::io::Read;
use std::path::Path;

/// `path` opened for reading, refused (with the reason in the error) unless it is a regular file
/// reached without a symbolic link in its last component. A missing file is `NotFound`.
pub fn open_regular(path: &Path) -> std::io::Result<std::fs::File> {
    let f = crate::platform::open_no_follow(std::fs::OpenOptions::new().read(true), path).map_err(
        |e| match crate::platform::is_link_refused(&e) {
            true => std::io::Error::other(format!(
                "{} is a symbolic link; almanac does not follow it (replace it with a regular file)",
                path.display()
            )),
            _ => e,
        })?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not a regular file; almanac reads only regular files there",
            path.display()
        )));
    }
    Ok(f)
}

/// The bytes of `path` (see `open_regular`), at most `cap` of them: a larger file is an error.
pub fn read_capped(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    let f = open_regular(path)?;
    let mut bytes = Vec::new();
    f.take(cap + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(std::io::Error::other(format!(
            "{} is larger than {}; almanac reads at most that much of it",
            path.display(),
            crate::util::duration::format_size(cap)
        )));
    }
    Ok(bytes)
}

/// `read_capped`, with a missing file as None.
pub fn read_optional(path: &Path, cap: u64) -> std::io::Result<Option<Vec<u8>>> {
    match read_capped(path, cap) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn links_devices_and_large_files_are_refused_with_their_names() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("f");
        std::fs::write(&file, b"0123456789").unwrap();
        assert_eq!(read_capped(&file, 10).unwrap(), b"0123456789");
        let big = read_capped(&file, 9).unwrap_err().to_string();
        assert!(big.contains("larger than 9 bytes"), "{big}");
        let link = d.path().join("l");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        let e = read_capped(&link, 1 << 20).unwrap_err().to_string();
        assert!(e.contains("is a symbolic link"), "{e}");
        let e = read_capped(Path::new("/dev/zero"), 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a regular file"), "{e}");
        assert!(read_optional(&d.path().join("none"), 1).unwrap().is_none());
    }
}
