//! macOS launchd: a user LaunchAgent written with the plist crate, registered with `launchctl
//! bootout`/`bootstrap` (never the legacy `load`), read back with `launchctl print`.

use super::{text, InstallReport, Installed, JobSpec, Kind, LABEL};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LaunchAgent {
    #[serde(rename = "Label")]
    pub label: String,
    #[serde(rename = "ProgramArguments")]
    pub program_arguments: Vec<String>,
    #[serde(rename = "StartInterval")]
    pub start_interval: u64,
    #[serde(rename = "RunAtLoad")]
    pub run_at_load: bool,
    #[serde(rename = "EnvironmentVariables")]
    pub environment_variables: BTreeMap<String, String>,
    #[serde(rename = "StandardOutPath")]
    pub standard_out_path: String,
    #[serde(rename = "StandardErrorPath")]
    pub standard_error_path: String,
    #[serde(rename = "ProcessType")]
    pub process_type: String,
    #[serde(rename = "LowPriorityIO")]
    pub low_priority_io: bool,
}

pub fn plist_path(job: &JobSpec) -> PathBuf {
    job.home
        .join("Library/LaunchAgents")
        .join(format!("{LABEL}.plist"))
}

pub fn agent(job: &JobSpec) -> LaunchAgent {
    let mut env = BTreeMap::new();
    env.insert("PATH".to_string(), job.path_env.clone());
    env.extend(job.env.iter().cloned());
    LaunchAgent {
        label: LABEL.into(),
        program_arguments: job.argv(),
        start_interval: job.every.as_secs().max(1),
        run_at_load: true,
        environment_variables: env,
        standard_out_path: job.out_log.display().to_string(),
        standard_error_path: job.err_log.display().to_string(),
        process_type: "Background".into(),
        low_priority_io: true,
    }
}

pub fn render(job: &JobSpec) -> Vec<u8> {
    let mut buf = Vec::new();
    plist::to_writer_xml(&mut buf, &agent(job)).expect("a plist of strings and numbers serialises");
    buf.push(b'\n');
    buf
}

fn uid() -> u32 {
    crate::platform::user_id()
}

fn service_target() -> String {
    format!("gui/{}/{LABEL}", uid())
}

fn loaded() -> Option<String> {
    let out = super::run("launchctl", &["print", &service_target()]).ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub fn install(job: &JobSpec) -> Result<InstallReport, String> {
    let path = plist_path(job);
    let bytes = render(job);
    let report = |changed| InstallReport {
        changed,
        file: path.display().to_string(),
        warnings: Vec::new(),
    };
    if std::fs::read(&path).ok().as_deref() == Some(bytes.as_slice()) && loaded().is_some() {
        return Ok(report(false));
    }
    if let Some(dir) = job.out_log.parent() {
        crate::util::atomic::ensure_private_dir(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    crate::util::atomic::write_atomic(&path, &bytes)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    // Not loaded is fine: bootout only makes sure the new file is the one launchd reads.
    let _ = super::run("launchctl", &["bootout", &service_target()]);
    let domain = format!("gui/{}", uid());
    let plist = path.display().to_string();
    let bootstrap = || super::run("launchctl", &["bootstrap", &domain, &plist]);
    // `bootout` returns before launchd has let the old job go; a bootstrap in that moment fails with
    // "5: Input/output error". One retry a second later (as git maintenance and resticprofile do).
    let first = bootstrap();
    let result = match &first {
        Ok(o) if !o.status.success() && o.status.code() == Some(5) => {
            std::thread::sleep(std::time::Duration::from_secs(1));
            bootstrap()
        }
        _ => first,
    };
    match result {
        Ok(o) if o.status.success() => Ok(report(true)),
        Ok(o) => Err(format!(
            "wrote {plist}, but `launchctl bootstrap {domain} {plist}` failed: {} (is a GUI session logged in? `launchctl print-disabled {domain}` shows whether the job is disabled)",
            text(&o)
        )),
        Err(e) => Err(format!("wrote {plist}, but could not run launchctl: {e}")),
    }
}

pub fn uninstall(job: &JobSpec) -> Result<Option<String>, String> {
    let path = plist_path(job);
    if !path.exists() {
        return Ok(None);
    }
    let _ = super::run("launchctl", &["bootout", &service_target()]);
    std::fs::remove_file(&path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
    Ok(Some(format!("launchd agent {LABEL} ({})", path.display())))
}

/// Top-level `key = value` lines of `launchctl print` (one tab deep; nested blocks repeat keys).
pub fn parse_print(out: &str) -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    for line in out.lines() {
        if !line.starts_with('\t') || line.starts_with("\t\t") {
            continue;
        }
        if let Some((k, v)) = line.trim().split_once(" = ") {
            m.entry(k.trim().to_string())
                .or_insert_with(|| v.trim().to_string());
        }
    }
    m
}

pub fn installed(job: &JobSpec) -> Option<Installed> {
    let path = plist_path(job);
    if !path.exists() {
        return None;
    }
    let parsed: Result<LaunchAgent, _> = plist::from_file(&path);
    let mut problems = Vec::new();
    let (program, args, interval, env) = match &parsed {
        Ok(a) => (
            a.program_arguments.first().cloned(),
            a.program_arguments.iter().skip(1).cloned().collect(),
            Some(a.start_interval),
            a.environment_variables
                .iter()
                .filter(|(k, _)| *k != "PATH")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        Err(e) => {
            problems.push(format!(
                "file-modified: {} does not parse as our LaunchAgent ({e})",
                path.display()
            ));
            (None, Vec::new(), None, BTreeMap::new())
        }
    };
    let live = match loaded() {
        Some(out) => {
            let m = parse_print(&out);
            serde_json::json!({
                "loaded": true,
                "state": m.get("state"),
                "runs": m.get("runs").and_then(|r| r.parse::<u64>().ok()),
                "lastExitCode": m.get("last exit code"),
            })
        }
        None => {
            problems.push(format!(
                "not-loaded: launchd has no {LABEL}; run `almanac automation install`"
            ));
            serde_json::json!({"loaded": false})
        }
    };
    Some(Installed {
        scheduler: Kind::Launchd,
        file: path.display().to_string(),
        program,
        args,
        interval_secs: interval,
        env,
        live,
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn print_parser_keeps_top_level_lines() {
        let out = "gui/501/com.codealmanac.capture-sweep = {\n\tactive count = 0\n\tpath = /Users/u/Library/LaunchAgents/com.codealmanac.capture-sweep.plist\n\tstate = not running\n\truns = 7\n\tlast exit code = 2\n\tendpoints = {\n\t\tstate = active\n\t}\n}\n";
        let m = parse_print(out);
        assert_eq!(m.get("state").map(String::as_str), Some("not running"));
        assert_eq!(m.get("runs").map(String::as_str), Some("7"));
        assert_eq!(m.get("last exit code").map(String::as_str), Some("2"));
    }
}
