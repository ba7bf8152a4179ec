//! What almanac keeps in a repo's `.almanac/runs/` can be written by others: a stranger's commit, or the
//! capture agent itself (its writable area includes `.almanac/`). What almanac trusts there is sealed:
//! run records, the ledger and the journal's lines carry `mac`, an HMAC-SHA256 (RustCrypto `hmac`,
//! compared in constant time) under this user's key, behind a domain string naming what it seals, so a
//! MAC of one kind never passes for another. Anything whose MAC is missing or wrong was not written by
//! this user's almanac: a run record is *foreign* (reported, never run, changed or deleted), a ledger is
//! checked against the sealed run records (`ledger::file`), a journal line is ignored.
//!
//! The key is per user, not per `ALMANAC_HOME`: `~/.codealmanac/state/run-key` (32 bytes from the OS's
//! random source, 0600, created atomically on first need). Two almanac homes of one user therefore
//! trust each other's runs and ledgers instead of cancelling them as foreign. A key an older almanac made
//! under another `ALMANAC_HOME` (`$ALMANAC_HOME/state/run-key`) is still accepted for checking, never
//! used to seal.

use super::record::RunRecord;
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

type HmacSha256 = Hmac<Sha256>;

const KEY_LEN: usize = 32;
/// Binds a MAC to its purpose: the same key never authenticates anything else.
pub const RECORD_DOMAIN: &[u8] = b"almanac run record v1\n";
pub const LEDGER_DOMAIN: &[u8] = b"almanac ledger v1\n";
pub const JOURNAL_DOMAIN: &[u8] = b"almanac journal line v1\n";

struct Homes {
    /// `$ALMANAC_HOME`.
    almanac: PathBuf,
    /// Where the user's key lives: `~/.codealmanac/state`.
    key_dir: PathBuf,
}

static HOMES: OnceLock<Homes> = OnceLock::new();
/// The keys once read or created (the user's, then a legacy one); absence is not remembered (a later
/// write may create the key).
static KEYS: Mutex<Option<Keys>> = Mutex::new(None);

#[derive(Clone, Copy)]
struct Keys {
    user: [u8; KEY_LEN],
    legacy: Option<[u8; KEY_LEN]>,
}

/// Where the key lives and `$ALMANAC_HOME`: set once per process from the environment (`Context`).
pub fn use_homes(home: &Path, almanac_home: &Path) {
    let _ = HOMES.set(Homes {
        almanac: almanac_home.to_path_buf(),
        key_dir: home.join(".codealmanac").join("state"),
    });
}

/// `$ALMANAC_HOME` as `use_homes` set it (None in unit tests).
pub fn almanac_home() -> Option<&'static Path> {
    HOMES.get().map(|h| h.almanac.as_path())
}

/// The directory of this user's run key (`~/.codealmanac/state`), which the shipped agent profiles keep
/// the agent from reading (`{key_dir}`); None in unit tests.
pub fn key_dir() -> Option<&'static Path> {
    HOMES.get().map(|h| h.key_dir.as_path())
}

/// The user's key file for `home` (the user's home directory).
pub fn key_path(home: &Path) -> PathBuf {
    home.join(".codealmanac").join("state").join("run-key")
}

/// The keys; the user's is created when `create` and it does not exist yet. None: no key yet.
fn keys(create: bool) -> std::io::Result<Option<Keys>> {
    let mut cached = KEYS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(k) = *cached {
        return Ok(Some(k));
    }
    let Some(homes) = HOMES.get() else {
        #[cfg(test)]
        return Ok(Some(Keys {
            user: [7; KEY_LEN],
            legacy: None,
        }));
        #[cfg(not(test))]
        return Err(std::io::Error::other("no home directory for the run key"));
    };
    let path = homes.key_dir.join("run-key");
    let user = match read_key(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
            create_key(&path)?;
            read_key(&path)?
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
        Ok(k) => k,
    };
    let legacy_path = homes.almanac.join("state").join("run-key");
    let legacy = (legacy_path != path)
        .then(|| read_key(&legacy_path).ok())
        .flatten()
        .filter(|k| *k != user);
    let k = Keys { user, legacy };
    *cached = Some(k);
    Ok(Some(k))
}

fn read_key(path: &Path) -> std::io::Result<[u8; KEY_LEN]> {
    let f = crate::platform::open_no_follow(std::fs::OpenOptions::new().read(true), path)?;
    let m = f.metadata()?;
    if !m.is_file() || crate::platform::foreign_owner(&m).is_some() || m.len() != KEY_LEN as u64 {
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
    getrandom::fill(&mut k)
        .map_err(|e| std::io::Error::other(format!("no random bytes for the run key: {e}")))?;
    let tmp = dir.join(format!(".run-key.tmp-{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        use std::io::Write;
        let mut o = std::fs::OpenOptions::new();
        let mut f =
            crate::platform::private_mode(o.write(true).create_new(true), 0o600).open(&tmp)?;
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

fn mac_with(key: &[u8], domain: &[u8], parts: &[&[u8]]) -> HmacSha256 {
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
    m.update(domain);
    for p in parts {
        m.update(p);
    }
    m
}

/// The MAC of `parts` under `domain`, in lower-case hex (the user's key is created if needed).
pub fn mac_hex(domain: &[u8], parts: &[&[u8]]) -> std::io::Result<String> {
    let k = keys(true)?.expect("created");
    let tag = mac_with(&k.user, domain, parts).finalize().into_bytes();
    Ok(crate::util::ids::hex(&tag))
}

/// Ok when `mac` (hex) is the MAC of `parts` under `domain` with this user's key (or a legacy one);
/// otherwise why not, in words.
pub fn check_hex(domain: &[u8], parts: &[&[u8]], mac: &str) -> Result<(), String> {
    let Some(tag) = unhex(mac) else {
        return Err("its MAC is not 64 hex digits".into());
    };
    let k = match keys(false) {
        Ok(Some(k)) => k,
        Ok(None) => return Err("this user's almanac has no run key yet".into()),
        Err(e) => return Err(format!("the run key cannot be read: {e}")),
    };
    let ok = |key: &[u8]| mac_with(key, domain, parts).verify_slice(&tag).is_ok();
    if ok(&k.user) || k.legacy.is_some_and(|l| ok(&l)) {
        Ok(())
    } else {
        Err("its MAC does not match this user's run key".into())
    }
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    let b = s.as_bytes();
    if b.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, pair) in b.chunks(2).enumerate() {
        let digit = |c: u8| (c as char).to_digit(16);
        out[i] = (digit(pair[0])? * 16 + digit(pair[1])?) as u8;
    }
    Some(out)
}

fn record_body(r: &RunRecord) -> std::io::Result<Vec<u8>> {
    let mut unsealed = r.clone();
    unsealed.mac = None;
    serde_json::to_vec(&unsealed).map_err(std::io::Error::other)
}

/// Sets `r.mac` (creating the key if this user has none yet).
pub fn seal(r: &mut RunRecord) -> std::io::Result<()> {
    let body = record_body(r)?;
    r.mac = Some(mac_hex(RECORD_DOMAIN, &[&body])?);
    Ok(())
}

/// Ok when this user's almanac wrote `r` as it is; otherwise why it is foreign, in words.
pub fn verify(r: &RunRecord) -> Result<(), String> {
    let Some(mac) = r.mac.as_deref() else {
        return Err("it carries no MAC".into());
    };
    let body = record_body(r).map_err(|e| e.to_string())?;
    check_hex(RECORD_DOMAIN, &[&body], mac)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_matches_rfc_4231_test_case_2() {
        let mac = mac_with(b"Jefe", b"what do ya want ", &[b"for nothing?"]).finalize();
        assert_eq!(
            crate::util::ids::hex(&mac.into_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_mac_checks_only_for_its_own_domain_and_parts() {
        let m = mac_hex(LEDGER_DOMAIN, &[b"body"]).unwrap();
        assert_eq!(check_hex(LEDGER_DOMAIN, &[b"body"], &m), Ok(()));
        assert!(check_hex(JOURNAL_DOMAIN, &[b"body"], &m).is_err());
        assert!(check_hex(LEDGER_DOMAIN, &[b"bodz"], &m).is_err());
        assert!(check_hex(LEDGER_DOMAIN, &[b"body"], "00").is_err());
        assert!(check_hex(LEDGER_DOMAIN, &[b"body"], &"zz".repeat(32)).is_err());
    }
}
