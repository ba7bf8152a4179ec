//! Windows Task Scheduler: a Task XML (a time trigger repeating at the interval, `StartWhenAvailable`
//! so a missed run catches up, `MultipleInstancesPolicy` `IgnoreNew`, hidden) registered with
//! `schtasks /Create /TN <task> /XML <file> /F`, read back with `schtasks /Query /TN <task> /XML`, removed
//! with `schtasks /Delete /TN <task> /F`. A task has no environment of its own, so the variables the job
//! carries ride in its arguments as almanac's hidden `--env NAME=VALUE`, set before anything runs.

use super::{text, InstallReport, Installed, JobSpec, Kind, SWEEP_ARGS};
use std::collections::BTreeMap;
use std::fmt::Write;
use std::time::Duration;

pub const TASK: &str = "CodeAlmanac Capture Sweep";

/// `PT5H`, `PT1H30M`, `PT45S`: the ISO 8601 duration Task Scheduler reads (at least a minute).
pub fn iso_duration(d: Duration) -> String {
    let s = d.as_secs().max(60);
    let mut out = String::from("PT");
    for (n, unit) in [(s / 3600, 'H'), (s % 3600 / 60, 'M'), (s % 60, 'S')] {
        if n > 0 {
            let _ = write!(out, "{n}{unit}");
        }
    }
    out
}

/// Seconds of a `P[nD]T[nH][nM][nS]` duration.
pub fn parse_iso_duration(text: &str) -> Option<u64> {
    let rest = text.trim().strip_prefix('P')?;
    let (days, time) = match rest.split_once('T') {
        Some((d, t)) => (d, t),
        None => (rest, ""),
    };
    let mut total = 0u64;
    for (part, units) in [
        (days, &[('D', 86400u64)][..]),
        (time, &[('H', 3600), ('M', 60), ('S', 1)][..]),
    ] {
        let mut num = String::new();
        for c in part.chars() {
            if c.is_ascii_digit() {
                num.push(c);
            } else {
                let mul = units.iter().find(|(u, _)| *u == c)?.1;
                total += num.parse::<u64>().ok()? * mul;
                num.clear();
            }
        }
        if !num.is_empty() {
            return None;
        }
    }
    Some(total)
}

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn xml_unescape(s: &str) -> String {
    s.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// One argument as Windows' `CommandLineToArgvW` reads it back: quoted, inner quotes and the
/// backslashes before them (or before the closing quote) doubled.
pub fn quote_arg(a: &str) -> String {
    let mut out = String::from("\"");
    let mut slashes = 0;
    for c in a.chars() {
        match c {
            '\\' => slashes += 1,
            '"' => {
                out.push_str(&"\\".repeat(slashes * 2 + 1));
                slashes = 0;
            }
            _ => {
                out.push_str(&"\\".repeat(slashes));
                slashes = 0;
            }
        }
        if c != '\\' {
            out.push(c);
        }
    }
    out.push_str(&"\\".repeat(slashes * 2));
    out.push('"');
    out
}

/// Splits an argument string the way `CommandLineToArgvW` does (the rules `quote_arg` writes for).
pub fn split_args(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut quoted = false;
    let chars: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' {
            let n = chars[i..].iter().take_while(|c| **c == '\\').count();
            let w = word.get_or_insert_with(String::new);
            if chars.get(i + n) == Some(&'"') {
                w.push_str(&"\\".repeat(n / 2));
                if n % 2 == 1 {
                    w.push('"');
                    i += 1;
                }
                i += n;
                continue;
            }
            w.push_str(&"\\".repeat(n));
            i += n;
            continue;
        }
        match c {
            '"' => {
                word.get_or_insert_with(String::new);
                quoted = !quoted;
            }
            ' ' | '\t' if !quoted => out.extend(word.take()),
            _ => word.get_or_insert_with(String::new).push(c),
        }
        i += 1;
    }
    out.extend(word);
    out
}

/// The task's `Arguments`: `--env NAME=VALUE` for each variable, then `capture sweep --scheduled`.
pub fn arguments(job: &JobSpec) -> String {
    let mut parts = Vec::new();
    // No PATH: a task runs with the user's own environment, PATH included; only what the user had set
    // in the installing shell alone must be carried.
    for (k, v) in &job.env {
        parts.push("--env".to_string());
        parts.push(quote_arg(&format!("{k}={v}")));
    }
    parts.extend(SWEEP_ARGS.iter().map(|s| s.to_string()));
    parts.join(" ")
}

/// The Task XML; `start` is the trigger's first run (local time, `YYYY-MM-DDTHH:MM:SS`).
pub fn render(job: &JobSpec, start: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-16"?>
<Task version="1.2" xmlns="http://schemas.microsoft.com/windows/2004/02/mit/task">
  <RegistrationInfo>
    <Description>almanac capture sweep: keeps .almanac/ wikis up to date. Managed by `almanac automation install`; changes are replaced.</Description>
    <URI>\{task}</URI>
  </RegistrationInfo>
  <Triggers>
    <TimeTrigger>
      <Repetition>
        <Interval>{interval}</Interval>
        <StopAtDurationEnd>false</StopAtDurationEnd>
      </Repetition>
      <StartBoundary>{start}</StartBoundary>
      <Enabled>true</Enabled>
    </TimeTrigger>
  </Triggers>
  <Principals>
    <Principal id="Author">
      <LogonType>InteractiveToken</LogonType>
      <RunLevel>LeastPrivilege</RunLevel>
    </Principal>
  </Principals>
  <Settings>
    <MultipleInstancesPolicy>IgnoreNew</MultipleInstancesPolicy>
    <DisallowStartIfOnBatteries>false</DisallowStartIfOnBatteries>
    <StopIfGoingOnBatteries>false</StopIfGoingOnBatteries>
    <StartWhenAvailable>true</StartWhenAvailable>
    <RunOnlyIfNetworkAvailable>false</RunOnlyIfNetworkAvailable>
    <AllowStartOnDemand>true</AllowStartOnDemand>
    <Enabled>true</Enabled>
    <Hidden>true</Hidden>
    <RunOnlyIfIdle>false</RunOnlyIfIdle>
    <WakeToRun>false</WakeToRun>
    <ExecutionTimeLimit>PT72H</ExecutionTimeLimit>
    <Priority>7</Priority>
  </Settings>
  <Actions Context="Author">
    <Exec>
      <Command>{command}</Command>
      <Arguments>{arguments}</Arguments>
    </Exec>
  </Actions>
</Task>
"#,
        task = xml_escape(TASK),
        interval = iso_duration(job.every),
        command = xml_escape(&quote_arg(&job.program.display().to_string())),
        arguments = xml_escape(&arguments(job)),
    )
}

/// UTF-16LE with a byte-order mark: what `schtasks /XML` reads for any path, ASCII or not.
pub fn encode(xml: &str) -> Vec<u8> {
    let mut out = vec![0xFF, 0xFE];
    for u in xml.encode_utf16() {
        out.extend_from_slice(&u.to_le_bytes());
    }
    out
}

/// Task XML as `schtasks /Query /XML` prints it: UTF-16 with a byte-order mark, or UTF-8.
pub fn decode(bytes: &[u8]) -> String {
    match bytes {
        [0xFF, 0xFE, rest @ ..] => {
            let units: Vec<u16> = rest
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]]))
                .collect();
            String::from_utf16_lossy(&units)
        }
        [0xEF, 0xBB, 0xBF, rest @ ..] => String::from_utf8_lossy(rest).into_owned(),
        _ => String::from_utf8_lossy(bytes).into_owned(),
    }
}

/// The text of the first `<name>` element (no nesting of the same name in a Task XML).
pub fn element(xml: &str, name: &str) -> Option<String> {
    let open = format!("<{name}");
    let mut from = 0;
    let start = loop {
        let at = from + xml[from..].find(&open)?;
        let after = xml[at + open.len()..].chars().next()?;
        if after == '>' || after == ' ' {
            break at + xml[at..].find('>')? + 1;
        }
        from = at + open.len();
    };
    let end = start + xml[start..].find(&format!("</{name}>"))?;
    Some(xml_unescape(xml[start..end].trim()))
}

fn schtasks(args: &[&str]) -> Result<std::process::Output, String> {
    super::run("schtasks", args).map_err(|e| format!("cannot run schtasks: {e}"))
}

/// The registered task's XML, if there is one.
fn query() -> Option<String> {
    let o = schtasks(&["/Query", "/TN", TASK, "/XML"]).ok()?;
    o.status.success().then(|| decode(&o.stdout))
}

/// The first run's time, local as Task Scheduler reads it. On macOS (where only a fake `schtasks` can
/// be found) it is UTC: chrono's local time zone there needs CoreFoundation, which the SDK-less release
/// link does not have.
fn now_local() -> String {
    #[cfg(not(target_vendor = "apple"))]
    let now = chrono::Local::now().naive_local();
    #[cfg(target_vendor = "apple")]
    let now = chrono::Utc::now().naive_utc();
    now.format("%Y-%m-%dT%H:%M:00").to_string()
}

pub fn install(job: &JobSpec) -> Result<InstallReport, String> {
    let old = query();
    // The first run's time is kept across reinstalls, so an unchanged job renders the same XML.
    let start = old
        .as_deref()
        .and_then(|x| element(x, "StartBoundary"))
        .unwrap_or_else(now_local);
    let xml = render(job, &start);
    let report = |changed| InstallReport {
        changed,
        file: format!("Task Scheduler task \"{TASK}\""),
        warnings: Vec::new(),
    };
    if old.as_deref().map(str::trim) == Some(xml.trim()) {
        return Ok(report(false));
    }
    let dir = job.almanac_home.join("state");
    crate::util::atomic::ensure_private_dir(&dir).map_err(|e| e.to_string())?;
    let file = dir.join(format!("schtasks.{}.xml", std::process::id()));
    std::fs::write(&file, encode(&xml))
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    let path = file.display().to_string();
    let out = schtasks(&["/Create", "/TN", TASK, "/XML", &path, "/F"]);
    let _ = std::fs::remove_file(&file);
    let o = out?;
    if !o.status.success() {
        return Err(format!(
            "`schtasks /Create /TN \"{TASK}\" /XML <file> /F` failed: {}",
            text(&o)
        ));
    }
    Ok(report(true))
}

pub fn uninstall(_job: &JobSpec) -> Result<Option<String>, String> {
    if query().is_none() {
        return Ok(None);
    }
    let o = schtasks(&["/Delete", "/TN", TASK, "/F"])?;
    if !o.status.success() {
        return Err(format!(
            "`schtasks /Delete /TN \"{TASK}\" /F` failed: {}",
            text(&o)
        ));
    }
    Ok(Some(format!("Task Scheduler task \"{TASK}\"")))
}

/// `--env NAME=VALUE` pairs, then the rest of the arguments.
fn split_env(args: Vec<String>) -> (BTreeMap<String, String>, Vec<String>) {
    let mut env = BTreeMap::new();
    let mut rest = Vec::new();
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        if a == "--env" {
            if let Some((k, v)) = it.next().as_deref().and_then(|kv| kv.split_once('=')) {
                if k != "PATH" {
                    env.insert(k.to_string(), v.to_string());
                }
            }
        } else {
            rest.push(a);
        }
    }
    (env, rest)
}

pub fn installed(_job: &JobSpec) -> Option<Installed> {
    let xml = query()?;
    let mut problems = Vec::new();
    let program = element(&xml, "Command").and_then(|c| split_args(&c).into_iter().next());
    let (env, args) = split_env(split_args(&element(&xml, "Arguments").unwrap_or_default()));
    let interval = element(&xml, "Interval").and_then(|i| parse_iso_duration(&i));
    for (name, want) in [
        ("StartWhenAvailable", "true"),
        ("MultipleInstancesPolicy", "IgnoreNew"),
        ("Enabled", "true"),
    ] {
        let got = element(&xml, name);
        if got.as_deref() != Some(want) {
            problems.push(format!(
                "file-modified: the task's {name} is {}, not {want}; run `almanac automation install`",
                got.as_deref().unwrap_or("missing")
            ));
        }
    }
    Some(Installed {
        scheduler: Kind::Schtasks,
        file: format!("Task Scheduler task \"{TASK}\""),
        program,
        args,
        interval_secs: interval,
        env,
        live: serde_json::json!({"registered": true, "startBoundary": element(&xml, "StartBoundary")}),
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_arguments_round_trip() {
        assert_eq!(iso_duration(Duration::from_secs(5 * 3600)), "PT5H");
        assert_eq!(iso_duration(Duration::from_secs(5400)), "PT1H30M");
        assert_eq!(parse_iso_duration("PT1H30M"), Some(5400));
        assert_eq!(parse_iso_duration("P1DT2H"), Some(93600));
        assert_eq!(parse_iso_duration("PT5X"), None);
        for a in [
            r"C:\Program Files\almanac.exe",
            r#"say "hi""#,
            r"C:\dir\",
            "plain",
        ] {
            assert_eq!(split_args(&quote_arg(a)), [a], "{a}");
        }
        let xml = "<A><Enabled>true</Enabled><Exec><Command>&quot;x&quot;</Command></Exec></A>";
        assert_eq!(element(xml, "Command").as_deref(), Some("\"x\""));
        assert_eq!(
            element(xml, "Exec").as_deref(),
            Some("<Command>\"x\"</Command>")
        );
        assert_eq!(decode(&encode("ünï")), "ünï");
    }
}
