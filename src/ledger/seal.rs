//! Run records are sealed: a repo's `.almanac/runs/` may hold files a stranger committed, so a worker
//! runs only what this user's almanac queued. Every record almanac writes carries `mac`, an HMAC-SHA256
//! of the record (its compact JSON without `mac`) under a per-user key, `$ALMANAC_HOME/state/run-key`
//! (32 random bytes, 0600, created on first need). A record whose MAC is missing or wrong is *foreign*:
//! reported, never run, never changed, never deleted.

use super::record::RunRecord;
use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

const KEY_LEN: usize = 32;
/// Binds a MAC to its purpose: the same key never authenticates anything else.
const DOMAIN: &[u8] = b"almanac run record v1\n";

static HOME: OnceLock<PathBuf> = OnceLock::new();
/// The key once read or created; its absence is not remembered (a later write may create it).
static KEY: Mutex<Option<[u8; KEY_LEN]>> = Mutex::new(None);

/// Where the key lives: set once per process from `$ALMANAC_HOME`.
pub fn use_home(almanac_home: &Path) {
    let _ = HOME.set(almanac_home.to_path_buf());
}

/// `$ALMANAC_HOME` as `use_home` set it (None in unit tests).
pub fn almanac_home() -> Option<&'static Path> {
    HOME.get().map(PathBuf::as_path)
}

pub fn key_path(almanac_home: &Path) -> PathBuf {
    almanac_home.join("state").join("run-key")
}

/// The key; created (0600, atomically: a second process creating it at the same time gets the first
/// one's) when `create` and it does not exist yet.
fn key(create: bool) -> std::io::Result<Option<[u8; KEY_LEN]>> {
    let mut cached = KEY.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(k) = *cached {
        return Ok(Some(k));
    }
    let Some(home) = HOME.get() else {
        #[cfg(test)]
        return Ok(Some([7; KEY_LEN]));
        #[cfg(not(test))]
        return Err(std::io::Error::other("no $ALMANAC_HOME for the run key"));
    };
    let path = key_path(home);
    let found = match read_key(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            create_key(&path)?;
            read_key(&path).map(Some)?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
        Ok(k) => Some(k),
    };
    *cached = found;
    Ok(found)
}

fn read_key(path: &Path) -> std::io::Result<[u8; KEY_LEN]> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)?;
    let m = f.metadata()?;
    if !m.is_file() || m.uid() != unsafe { libc::geteuid() } || m.len() != KEY_LEN as u64 {
        return Err(std::io::Error::other(format!(
            "{}: not a {KEY_LEN}-byte file of yours; remove it and almanac makes a new one",
            path.display()
        )));
    }
    let mut k = [0u8; KEY_LEN];
    (&f).read_exact(&mut k)?;
    Ok(k)
}

fn create_key(path: &Path) -> std::io::Result<()> {
    let dir = path.parent().expect("the key is in state/");
    crate::util::atomic::private_dir(dir)?;
    let mut k = [0u8; KEY_LEN];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut k)?;
    let tmp = dir.join(format!(".run-key.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&k)?;
        f.sync_all()?;
        // A hard link never replaces: whoever links first made the key.
        match std::fs::hard_link(&tmp, path) {
            Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        }
    })();
    let _ = std::fs::remove_file(&tmp);
    result
}

/// HMAC-SHA256 (RFC 2104) for a key of at most one block.
fn hmac(key: &[u8], msg: &[&[u8]]) -> [u8; 32] {
    let mut block = [0u8; 64];
    block[..key.len()].copy_from_slice(key);
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    for m in msg {
        inner.update(m);
    }
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

fn mac_of(key: &[u8; KEY_LEN], r: &RunRecord) -> std::io::Result<String> {
    let mut unsealed = r.clone();
    unsealed.mac = None;
    let body = serde_json::to_vec(&unsealed).map_err(std::io::Error::other)?;
    Ok(hmac(key, &[DOMAIN, &body])
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// Sets `r.mac` (creating the key if this user has none yet).
pub fn seal(r: &mut RunRecord) -> std::io::Result<()> {
    let k = key(true)?.expect("created");
    r.mac = Some(mac_of(&k, r)?);
    Ok(())
}

/// Ok when this user's almanac wrote `r` as it is; otherwise why it is foreign, in words.
pub fn verify(r: &RunRecord) -> Result<(), String> {
    let Some(mac) = r.mac.as_deref() else {
        return Err("it carries no MAC".into());
    };
    let k = match key(false) {
        Ok(Some(k)) => k,
        Ok(None) => return Err("this user's almanac has no run key yet".into()),
        Err(e) => return Err(format!("the run key cannot be read: {e}")),
    };
    let want = mac_of(&k, r).map_err(|e| e.to_string())?;
    // Compared in constant time.
    let same = want.len() == mac.len()
        && want
            .bytes()
            .zip(mac.bytes())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0;
    if same {
        Ok(())
    } else {
        Err("its MAC does not match this user's run key".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_test_case_2() {
        let mac = hmac(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }
}
