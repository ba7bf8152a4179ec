//! Fault injection for crash-safety tests: debug builds abort at the point named by
//! `ALMANAC_FAULT=<point>`, or fail the writes at `enospc-<point>` with ENOSPC (a full disk) while the
//! file `ALMANAC_FAULT_FILE` exists (always, when it is not set); release builds compile this to nothing.

#[cfg(debug_assertions)]
pub fn point(name: &str) {
    if std::env::var("ALMANAC_FAULT").is_ok_and(|v| v == name) {
        eprintln!("almanac: fault injected at {name}");
        std::process::abort();
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn point(_name: &str) {}

/// A write at `name` fails with ENOSPC when `ALMANAC_FAULT=enospc-<name>` (while `ALMANAC_FAULT_FILE`
/// exists, when set).
#[cfg(debug_assertions)]
pub fn disk_full(name: &str) -> std::io::Result<()> {
    let on = std::env::var("ALMANAC_FAULT").is_ok_and(|v| v.strip_prefix("enospc-") == Some(name))
        && std::env::var_os("ALMANAC_FAULT_FILE").is_none_or(|f| std::path::Path::new(&f).exists());
    if on {
        return Err(std::io::Error::from_raw_os_error(
            crate::platform::DISK_FULL,
        ));
    }
    Ok(())
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn disk_full(_name: &str) -> std::io::Result<()> {
    Ok(())
}

/// For concurrency tests: with `ALMANAC_FAULT=pause-<name>` and `ALMANAC_FAULT_FILE` set, creates
/// `<ALMANAC_FAULT_FILE>.reached` and waits (at most 60 s) while `ALMANAC_FAULT_FILE` exists, so a test
/// can change the world at exactly this point.
#[cfg(debug_assertions)]
pub fn pause(name: &str) {
    let on = std::env::var("ALMANAC_FAULT").is_ok_and(|v| v.strip_prefix("pause-") == Some(name));
    let Some(file) = std::env::var_os("ALMANAC_FAULT_FILE").filter(|_| on) else {
        return;
    };
    let file = std::path::PathBuf::from(file);
    let mut reached = file.clone().into_os_string();
    reached.push(".reached");
    let _ = std::fs::write(&reached, b"");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while file.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn pause(_name: &str) {}
