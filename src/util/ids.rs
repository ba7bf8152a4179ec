//! Identifiers: random hex, UUID v4, and run ids that sort by creation time.

use chrono::{DateTime, Utc};

/// Random bytes from the OS (`getrandom`); for ids, not for keys (`ledger::seal` makes its own).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut b = [0u8; N];
    if getrandom::fill(&mut b).is_err() {
        // Fall back to time and pid: uniqueness, not secrecy, is what ids need.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
            ^ ((std::process::id() as u128) << 64);
        for (i, x) in b.iter_mut().enumerate() {
            *x = (seed >> ((i % 16) * 8)) as u8 ^ (i as u8).wrapping_mul(31);
        }
    }
    b
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub fn random_hex(bytes: usize) -> String {
    let raw: [u8; 16] = random_bytes();
    hex(&raw[..bytes.min(16)])
}

pub fn uuid_v4() -> String {
    let mut b: [u8; 16] = random_bytes();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h = hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// `run_20261129T171108123Z_1a2b3c4d`: UTC time to the millisecond, then randomness; sorts by time.
pub fn run_id(now: DateTime<Utc>) -> String {
    format!("run_{}_{}", now.format("%Y%m%dT%H%M%S%3fZ"), random_hex(4))
}

/// A name safe to use as one path component: ids from transcripts are never used raw.
pub fn is_safe_run_id(id: &str) -> bool {
    id.starts_with("run_")
        && id.len() < 64
        && id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_the_documented_shapes() {
        let u = uuid_v4();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
        let t = DateTime::parse_from_rfc3339("2026-11-29T17:11:08.123Z")
            .unwrap()
            .with_timezone(&Utc);
        let id = run_id(t);
        assert!(id.starts_with("run_20261129T171108123Z_"), "{id}");
        assert!(is_safe_run_id(&id));
        assert!(!is_safe_run_id("run_../x"));
        let later = run_id(t + chrono::Duration::milliseconds(1));
        assert!(later > id);
    }
}
