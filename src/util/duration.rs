//! The one duration parser. Accepts what humantime accepts (`45m`, `5h`, `1h 30m`, `90s`, `2d`, `1w`)
//! plus a bare `0`, and rejects everything else with a message that names the value and the forms.

use std::time::Duration;

pub const DURATION_FORMS: &str = "a number and a unit, e.g. 0m, 30s, 45m, 5h, 2d, 1w";

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let t = text.trim();
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.is_empty() || !t.as_bytes()[0].is_ascii_digit() {
        return Err(format!(
            "invalid duration \"{text}\" (expected {DURATION_FORMS})"
        ));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("invalid duration \"{text}\": {e} (expected {DURATION_FORMS})"))
}

/// Renders a duration the way users write it (`45m`, `5h`, `0s`).
pub fn format_duration(d: Duration) -> String {
    if d.is_zero() {
        return "0s".into();
    }
    humantime::format_duration(Duration::from_secs(d.as_secs())).to_string()
}

/// Sizes in rule files: a plain number of bytes or a number with B, KiB, MiB, GiB (or KB, MB, GB).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("invalid size \"{text}\" (expected e.g. 65536, 64KiB, 16MiB)"))?;
    let mult = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "KB" | "K" => 1 << 10,
        "MiB" | "MB" | "M" => 1 << 20,
        "GiB" | "GB" | "G" => 1 << 30,
        _ => {
            return Err(format!(
                "invalid size \"{text}\" (expected e.g. 65536, 64KiB, 16MiB)"
            ))
        }
    };
    n.checked_mul(mult)
        .ok_or_else(|| format!("size \"{text}\" is too large"))
}

/// A size in the units `parse_size` reads: `9 bytes`, `64KiB`, `16MiB`, `1GiB` (a whole number of the
/// largest unit that divides it).
pub fn format_size(n: u64) -> String {
    for (unit, m) in [("GiB", 1u64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if n >= m && n.is_multiple_of(m) {
            return format!("{}{unit}", n / m);
        }
    }
    format!("{n} bytes")
}

/// A size as a person reads it, to a tenth of its unit (`2.3 GiB`, `81.0 MiB`, `512 bytes`): for sizes
/// that are not a bound (`format_size` writes those exactly).
pub fn approx_size(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n => format!("{n} bytes"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_in_the_forms_users_write() {
        assert_eq!(parse_duration("45m").unwrap(), Duration::from_secs(2700));
        assert_eq!(parse_duration("5h").unwrap(), Duration::from_secs(18000));
        assert_eq!(parse_duration("0m").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(
            parse_duration(" 1h 30m ").unwrap(),
            Duration::from_secs(5400)
        );
        let err = parse_duration("5x").unwrap_err();
        assert!(err.contains("\"5x\"") && err.contains("45m"), "{err}");
        assert!(parse_duration("").is_err());
        assert!(parse_duration("m5").is_err());
        assert_eq!(format_duration(Duration::from_secs(2700)), "45m");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16MiB").unwrap(), 16 << 20);
        for n in [9, 64 << 10, 16 << 20, 1 << 30, 1536] {
            assert_eq!(
                parse_size(format_size(n).trim_end_matches(" bytes")).unwrap(),
                n
            );
        }
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("64 KiB").unwrap(), 64 << 10);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("99999999999999GiB").is_err());
    }
}
