//! Linux systemd user timer: an `OnCalendar` hourly tick at a fixed random minute with `Persistent=true`
//! (never `OnUnitActiveSec`, which stops firing after restarts), a oneshot service, and a check after
//! install that the timer is active with a real next trigger.
//!
//! The service has `KillMode=process`: the sweep starts a detached worker per repo (setsid) that runs the
//! capture agent for up to its timeout, and with the default `control-group` systemd would kill that
//! worker the moment the sweep exits. With `process` only the sweep itself is ever signalled; the worker
//! stays in the unit's cgroup (systemd notes "left-over process" on the next start) and ends on its own.
//! Nothing bounds a left-over process's time (a oneshot's timeouts bound the sweep, not what remains).

use super::{text, InstallReport, Installed, JobSpec, Kind};
use std::path::PathBuf;

pub const SERVICE: &str = "codealmanac-capture-sweep.service";
pub const TIMER: &str = "codealmanac-capture-sweep.timer";

pub fn unit_dir(job: &JobSpec) -> PathBuf {
    job.config_home.join("systemd/user")
}

/// Whether the user's systemd answers (it does not under sudo, over SSH without a user manager, or in
/// most containers).
pub fn available() -> bool {
    super::run("systemctl", &["--user", "list-timers"]).is_ok_and(|o| o.status.success())
}

/// systemd unit files treat `%` as a specifier and `$` as a variable: escape both.
fn escape(s: &str) -> String {
    s.replace('%', "%%")
        .replace('$', "$$")
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

pub fn render_service(job: &JobSpec) -> String {
    let exec: Vec<String> = job
        .argv()
        .iter()
        .map(|a| format!("\"{}\"", escape(a)))
        .collect();
    let env: String = job
        .env
        .iter()
        .map(|(k, v)| format!("Environment=\"{k}={}\"\n", escape(v)))
        .collect();
    format!(
        "# Managed by almanac (`almanac automation install`); changes are replaced. Customise with a drop-in.\n\
         [Unit]\n\
         Description=almanac capture sweep (keeps .almanac/ wikis up to date)\n\
         \n\
         [Service]\n\
         Type=oneshot\n\
         # The sweep leaves a detached worker per repo running the capture agent: signal only the sweep.\n\
         KillMode=process\n\
         ExecStart={}\n\
         Environment=\"PATH={}\"\n\
         {env}\
         Nice=10\n",
        exec.join(" "),
        escape(&job.path_env)
    )
}

pub fn render_timer(minute: u32) -> String {
    format!(
        "# Managed by almanac (`almanac automation install`); changes are replaced.\n\
         # An hourly tick: `capture sweep --scheduled` itself decides whether a sweep is due.\n\
         [Unit]\n\
         Description=Hourly tick for almanac capture sweep\n\
         \n\
         [Timer]\n\
         OnCalendar=*-*-* *:{minute:02}:00\n\
         Persistent=true\n\
         \n\
         [Install]\n\
         WantedBy=timers.target\n"
    )
}

/// The minute of an existing timer, so re-installing keeps it (and changes nothing).
fn existing_minute(text: &str) -> Option<u32> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("OnCalendar=*-*-* *:"))?;
    line.split(':').next()?.parse().ok().filter(|m| *m < 60)
}

fn random_minute() -> u32 {
    let b: [u8; 2] = crate::util::ids::random_bytes();
    (u16::from_le_bytes(b) % 60) as u32
}

fn systemctl(args: &[&str]) -> Result<std::process::Output, String> {
    let mut full = vec!["--user"];
    full.extend_from_slice(args);
    super::run("systemctl", &full).map_err(|e| format!("cannot run systemctl: {e}"))
}

/// (ActiveState, NextElapseUSecRealtime) of our timer.
fn timer_state() -> (String, String) {
    let out = systemctl(&[
        "show",
        TIMER,
        "-p",
        "ActiveState",
        "-p",
        "NextElapseUSecRealtime",
    ])
    .ok();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let get = |k: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .unwrap_or("")
            .trim()
            .to_string()
    };
    (get("ActiveState"), get("NextElapseUSecRealtime"))
}

fn has_next_trigger(next: &str) -> bool {
    !matches!(next, "" | "0" | "n/a" | "infinity")
}

pub fn install(job: &JobSpec) -> Result<InstallReport, String> {
    let dir = unit_dir(job);
    let service_path = dir.join(SERVICE);
    let timer_path = dir.join(TIMER);
    let old_timer = std::fs::read_to_string(&timer_path).ok();
    let minute = old_timer
        .as_deref()
        .and_then(existing_minute)
        .unwrap_or_else(random_minute);
    let service = render_service(job);
    let timer = render_timer(minute);
    let mut report = InstallReport {
        changed: false,
        file: timer_path.display().to_string(),
        warnings: lingering_warning().into_iter().collect(),
    };
    let same = std::fs::read_to_string(&service_path).ok().as_deref() == Some(service.as_str())
        && old_timer.as_deref() == Some(timer.as_str());
    let (active, next) = timer_state();
    if same && active == "active" && has_next_trigger(&next) {
        return Ok(report);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (p, body) in [(&service_path, &service), (&timer_path, &timer)] {
        crate::util::atomic::write_atomic(p, body.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    for args in [&["daemon-reload"][..], &["enable", "--now", TIMER]] {
        let o = systemctl(args)?;
        if !o.status.success() {
            return Err(format!(
                "wrote {}, but `systemctl --user {}` failed: {}",
                timer_path.display(),
                args.join(" "),
                text(&o)
            ));
        }
    }
    if !same && active == "active" {
        // enable --now does not restart an active timer; a changed schedule needs it.
        let _ = systemctl(&["restart", TIMER]);
    }
    let (active, next) = timer_state();
    if active != "active" || !has_next_trigger(&next) {
        return Err(format!(
            "wrote {}, but the timer is not running (ActiveState={active}, next trigger {}); see `systemctl --user status {TIMER}`",
            timer_path.display(),
            if next.is_empty() { "none" } else { next.as_str() }
        ));
    }
    report.changed = true;
    Ok(report)
}

/// User timers run only while the user is logged in unless lingering is on; say so, do not change it.
fn lingering_warning() -> Option<String> {
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()?;
    let out = super::run("loginctl", &["show-user", &user, "-p", "Linger"]).ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().any(|l| l.trim() == "Linger=no").then(|| {
        format!("lingering is off for {user}: the timer runs only while you are logged in; `loginctl enable-linger {user}` lets it run always")
    })
}

pub fn uninstall(job: &JobSpec) -> Result<Option<String>, String> {
    let dir = unit_dir(job);
    let files = [dir.join(TIMER), dir.join(SERVICE)];
    if !files.iter().any(|f| f.exists()) {
        return Ok(None);
    }
    let _ = systemctl(&["disable", "--now", TIMER]);
    for f in &files {
        if f.exists() {
            std::fs::remove_file(f).map_err(|e| format!("cannot remove {}: {e}", f.display()))?;
        }
    }
    let _ = systemctl(&["daemon-reload"]);
    Ok(Some(format!(
        "systemd user timer {TIMER} ({})",
        dir.display()
    )))
}

pub fn installed(job: &JobSpec) -> Option<Installed> {
    let dir = unit_dir(job);
    let timer_path = dir.join(TIMER);
    let service = std::fs::read_to_string(dir.join(SERVICE)).ok();
    let timer = std::fs::read_to_string(&timer_path).ok();
    if service.is_none() && timer.is_none() {
        return None;
    }
    let mut problems = Vec::new();
    let exec: Vec<String> = service
        .as_deref()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("ExecStart=")))
        .map(|l| {
            l.split("\" \"")
                .map(|a| a.trim_matches('"').replace("%%", "%").replace("$$", "$"))
                .collect()
        })
        .unwrap_or_default();
    let unescape = |v: &str| {
        v.replace("\\\"", "\"")
            .replace("\\\\", "\\")
            .replace("%%", "%")
            .replace("$$", "$")
    };
    let env: std::collections::BTreeMap<String, String> = service
        .as_deref()
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.strip_prefix("Environment="))
        .filter_map(|l| {
            let (k, v) = l.trim_matches('"').split_once('=')?;
            (k != "PATH").then(|| (k.to_string(), unescape(v)))
        })
        .collect();
    let kill_mode = service
        .as_deref()
        .unwrap_or("")
        .lines()
        .filter_map(|l| l.strip_prefix("KillMode="))
        .next_back()
        .unwrap_or("control-group")
        .trim()
        .to_string();
    if service.is_some() && kill_mode != "process" {
        problems.push(format!("kill-mode: {SERVICE} has KillMode={kill_mode}, so systemd kills the capture worker when the sweep exits; run `almanac automation install`"));
    }
    if service.is_none() || exec.is_empty() {
        problems.push(format!(
            "file-modified: {} is missing or has no ExecStart",
            dir.join(SERVICE).display()
        ));
    }
    if timer.as_deref().and_then(existing_minute).is_none() {
        problems.push(format!(
            "file-modified: {} is not our hourly timer",
            timer_path.display()
        ));
    }
    let (active, next) = timer_state();
    if active != "active" || !has_next_trigger(&next) {
        problems.push(format!("not-active: the timer is {active:?} with next trigger {next:?}; run `almanac automation install`"));
    }
    Some(Installed {
        scheduler: Kind::Systemd,
        file: timer_path.display().to_string(),
        program: exec.first().cloned(),
        args: exec.iter().skip(1).cloned().collect(),
        interval_secs: Some(3600),
        env,
        live: serde_json::json!({"activeState": active, "nextTrigger": next, "killMode": kill_mode}),
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minute_round_trips_and_next_trigger_is_checked() {
        assert_eq!(existing_minute(&render_timer(7)), Some(7));
        assert!(!has_next_trigger("infinity"));
        assert!(!has_next_trigger(""));
        assert!(has_next_trigger("Sun 2026-11-29 18:07:00 UTC"));
        assert_eq!(escape("/a b/%x$y"), "/a b/%%x$$y");
    }
}
