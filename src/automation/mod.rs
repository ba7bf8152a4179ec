//! `almanac automation install|status|uninstall`: one small adapter per OS scheduler behind one interface.
//! The scheduler only wakes us; `capture sweep --scheduled` decides whether a sweep is due. Every external
//! command (`launchctl`, `systemctl`, `crontab`, `loginctl`) is looked up on PATH when it is called, so
//! tests put recording fakes first on PATH.

pub mod cron;
pub mod drift;
pub mod due;
pub mod launchd;
pub mod schtasks;
pub mod systemd;

use crate::context::Context;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// How often a scheduled sweep runs unless `--every` or `[automation.capture] every` says otherwise.
pub const DEFAULT_EVERY: Duration = Duration::from_secs(5 * 3600);

pub const LABEL: &str = "com.codealmanac.capture-sweep";
pub const SWEEP_ARGS: [&str; 3] = ["capture", "sweep", "--scheduled"];

/// What every adapter installs: the same command on the same cadence.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// Absolute path of the almanac binary.
    pub program: PathBuf,
    pub every: Duration,
    /// PATH for the job: the installer's PATH plus the usual tool directories.
    pub path_env: String,
    pub out_log: PathBuf,
    pub err_log: PathBuf,
    pub home: PathBuf,
    pub almanac_home: PathBuf,
    /// `$XDG_CONFIG_HOME` or `~/.config`.
    pub config_home: PathBuf,
    /// The environment the job carries besides PATH: the absolute `ALMANAC_HOME`, then every variable a
    /// rule set's store roots read (`CLAUDE_CONFIG_DIR`, `CODEX_HOME`, ...) that is set now, by name.
    pub env: Vec<(String, String)>,
}

impl JobSpec {
    /// The job for this user: logs under the almanac home, the PATH, homes and variables the job needs;
    /// `store_vars` names the variables the loaded rule sets' store roots read.
    pub fn for_home(
        cx: &Context,
        program: PathBuf,
        every: Duration,
        store_vars: &[String],
    ) -> JobSpec {
        let logs = cx.almanac_home.join("logs");
        let config_home = cx
            .var("XDG_CONFIG_HOME")
            .filter(|v| Path::new(v).is_absolute())
            .map(PathBuf::from)
            .unwrap_or_else(|| cx.home.join(".config"));
        JobSpec {
            program,
            every,
            path_env: job_path(cx.var("PATH").unwrap_or(""), &cx.home),
            out_log: logs.join("capture-sweep.out.log"),
            err_log: logs.join("capture-sweep.err.log"),
            home: cx.home.clone(),
            almanac_home: cx.almanac_home.clone(),
            config_home,
            env: job_env(cx, store_vars),
        }
    }

    pub fn env_map(&self) -> std::collections::BTreeMap<String, String> {
        self.env.iter().cloned().collect()
    }

    pub fn argv(&self) -> Vec<String> {
        let mut v = vec![self.program.display().to_string()];
        v.extend(SWEEP_ARGS.iter().map(|s| s.to_string()));
        v
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Launchd,
    Systemd,
    Cron,
    Schtasks,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Launchd => "launchd",
            Kind::Systemd => "systemd",
            Kind::Cron => "cron",
            Kind::Schtasks => "schtasks",
        }
    }

    pub const ALL: [Kind; 4] = [Kind::Launchd, Kind::Systemd, Kind::Cron, Kind::Schtasks];
}

pub struct InstallReport {
    /// False when everything was already right and nothing was touched.
    pub changed: bool,
    pub file: String,
    pub warnings: Vec<String>,
}

/// What one scheduler holds of ours, read back from its files and asked of the scheduler itself.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Installed {
    pub scheduler: Kind,
    pub file: String,
    pub program: Option<String>,
    pub args: Vec<String>,
    /// launchd: StartInterval; schtasks: the repetition interval; systemd/cron: the tick (3600).
    pub interval_secs: Option<u64>,
    /// The variables the entry sets besides PATH.
    pub env: std::collections::BTreeMap<String, String>,
    /// Scheduler-specific live state (launchd print, systemd show, cron presence).
    pub live: serde_json::Value,
    /// Problems only this scheduler can see (not loaded, no next trigger, schedule edited).
    pub problems: Vec<String>,
}

/// Runs an external command found on PATH now. Its output is returned, never printed.
pub fn run(program: &str, args: &[&str]) -> std::io::Result<Output> {
    std::process::Command::new(program)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
}

pub fn on_path(program: &str) -> bool {
    crate::capture::agent::resolve_program(program).is_some()
}

fn text(o: &Output) -> String {
    let mut s = String::from_utf8_lossy(&o.stderr).trim().to_string();
    if s.is_empty() {
        s = String::from_utf8_lossy(&o.stdout).trim().to_string();
    }
    s
}

/// Schedulers this machine may hold ours in. Never `crontab` on macOS: it raises a privacy prompt;
/// Task Scheduler only on Windows or where a `schtasks` program is on PATH.
pub fn kinds_here() -> Vec<Kind> {
    Kind::ALL
        .into_iter()
        .filter(|k| !(cfg!(target_os = "macos") && *k == Kind::Cron))
        .filter(|k| *k != Kind::Schtasks || cfg!(windows) || on_path("schtasks"))
        .collect()
}

/// The variables store roots read, from every loaded rule set (`env:` of a root), de-duplicated.
pub fn store_vars(catalog: &crate::rules::Catalog) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for set in &catalog.sets {
        for store in &set.stores {
            for root in &store.roots {
                if let Some(v) = root.env.as_ref().filter(|v| !out.contains(v)) {
                    out.push(v.clone());
                }
            }
        }
    }
    out
}

/// Variables the OS sets in every session of the user, the scheduler's included: a store root may read
/// them (`%APPDATA%` for VS Code's storage), but a job need not carry them.
const SESSION_VARS: &[&str] = &["APPDATA", "LOCALAPPDATA", "USERPROFILE", "HOME"];

/// What a job carries besides PATH: `ALMANAC_HOME` always, absolute; each store variable set now (not
/// those every session of the user has).
fn job_env(cx: &Context, store_vars: &[String]) -> Vec<(String, String)> {
    let home = if cx.almanac_home.is_absolute() {
        cx.almanac_home.clone()
    } else {
        std::env::current_dir()
            .map(|d| d.join(&cx.almanac_home))
            .unwrap_or_else(|_| cx.almanac_home.clone())
    };
    let mut env = vec![(
        "ALMANAC_HOME".to_string(),
        crate::util::paths::normalize(&home).display().to_string(),
    )];
    for name in store_vars {
        if let Some(v) = cx.var(name).filter(|v| !v.is_empty()) {
            if name != "ALMANAC_HOME" && name != "PATH" && !SESSION_VARS.contains(&name.as_str()) {
                env.push((name.clone(), v.to_string()));
            }
        }
    }
    env
}

/// `auto`: macOS -> launchd; Windows -> schtasks; elsewhere systemd when `systemctl --user` answers,
/// else cron.
pub fn choose(requested: &str) -> Result<Kind, String> {
    match requested {
        "launchd" => Ok(Kind::Launchd),
        "systemd" => Ok(Kind::Systemd),
        "cron" => Ok(Kind::Cron),
        "schtasks" => Ok(Kind::Schtasks),
        "auto" => {
            if cfg!(target_os = "macos") {
                Ok(Kind::Launchd)
            } else if cfg!(windows) {
                Ok(Kind::Schtasks)
            } else if systemd::available() {
                Ok(Kind::Systemd)
            } else if on_path("crontab") {
                Ok(Kind::Cron)
            } else {
                Err("neither systemd user timers (`systemctl --user` does not answer) nor `crontab` is available; install cron or run `almanac capture sweep` yourself".into())
            }
        }
        other => Err(format!(
            "--scheduler \"{other}\": expected auto, launchd, systemd, cron or schtasks"
        )),
    }
}

pub fn install(kind: Kind, job: &JobSpec) -> Result<InstallReport, String> {
    match kind {
        Kind::Launchd => launchd::install(job),
        Kind::Systemd => systemd::install(job),
        Kind::Cron => cron::install(job),
        Kind::Schtasks => schtasks::install(job),
    }
}

/// Removes ours from one scheduler; Some(what) when something was removed.
pub fn uninstall(kind: Kind, job: &JobSpec) -> Result<Option<String>, String> {
    match kind {
        Kind::Launchd => launchd::uninstall(job),
        Kind::Systemd => systemd::uninstall(job),
        Kind::Cron => cron::uninstall(job),
        Kind::Schtasks => schtasks::uninstall(job),
    }
}

pub fn installed(kind: Kind, job: &JobSpec) -> Option<Installed> {
    match kind {
        Kind::Launchd => launchd::installed(job),
        Kind::Systemd => systemd::installed(job),
        Kind::Cron => cron::installed(job),
        Kind::Schtasks => schtasks::installed(job),
    }
}

/// The PATH a scheduled job gets: the installer's PATH, then the usual tool directories, de-duplicated
/// with the first occurrence kept (launchd and cron start jobs with a minimal PATH).
pub fn job_path(installer_path: &str, home: &Path) -> String {
    let mut out: Vec<String> = Vec::new();
    let extra = [
        home.join(".local/bin").display().to_string(),
        home.join(".cargo/bin").display().to_string(),
        "/opt/homebrew/bin".into(),
        "/usr/local/bin".into(),
        "/usr/bin".into(),
        "/bin".into(),
    ];
    for p in installer_path
        .split(':')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .chain(extra)
    {
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out.join(":")
}

/// Picks the binary the scheduler runs: `--program`, else `almanac` on PATH when it is this very binary
/// (a stable symlink such as ~/.cargo/bin/almanac or Homebrew's bin/almanac survives upgrades), else
/// Homebrew's `opt/` link when this binary is a versioned Cellar path, else this binary (installed by
/// npm, it is the platform package's binary, not the node launcher on PATH, so a scheduled sweep needs
/// no node). Paths that vanish (a cargo `target/` dir, a temp dir, npx's cache) are refused unless
/// `force`, which turns the refusal into a warning.
pub fn resolve_program(flag: Option<&Path>, force: bool) -> Result<(PathBuf, Vec<String>), String> {
    let mut warnings = Vec::new();
    let exe =
        std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?;
    let program = match flag {
        Some(p) => {
            let p = if p.is_absolute() {
                p.to_path_buf()
            } else {
                std::env::current_dir().map_err(|e| e.to_string())?.join(p)
            };
            crate::util::paths::normalize(&p)
        }
        None => {
            let id = |p: &Path| std::fs::metadata(p).map(|m| crate::platform::file_id(p, &m));
            let same = |a: &Path, b: &Path| matches!((id(a), id(b)), (Ok(x), Ok(y)) if x == y);
            match crate::capture::agent::resolve_program("almanac") {
                Some(found) if found.is_absolute() && same(&found, &exe) => found,
                _ => homebrew_opt(&exe).filter(|o| same(o, &exe)).unwrap_or(exe),
            }
        }
    };
    let executable = crate::platform::is_executable(&program);
    if !executable {
        let msg = format!(
            "program {} does not exist or is not executable",
            program.display()
        );
        if !force {
            return Err(format!("{msg}; pass --program with the installed almanac"));
        }
        warnings.push(msg);
    }
    // A project's own dependency (`npx almanac` there runs `<project>/node_modules/.bin/almanac`): its
    // lockfile decides that binary and `rm -rf node_modules` removes it. Named with --program, it is
    // the user's choice.
    if let Some(project) = flag
        .is_none()
        .then(|| project_dependency(&program))
        .flatten()
    {
        return Err(format!(
            "program {} is the project {}'s own dependency (its node_modules), which its lockfile decides and `rm -rf node_modules` removes; install almanac globally (`npm install -g codealmanac`, or README \"Install\") and run `almanac automation install` again, or pass --program {} to schedule it anyway",
            program.display(),
            project.display(),
            program.display()
        ));
    }
    if let Some(why) = vanishing(&program) {
        let msg = format!("program {} is {why}, which would vanish; install almanac (README \"Install\": the installer, Homebrew, `npm install -g codealmanac` or `cargo install codealmanac`) or pass --program", program.display());
        if !force {
            return Err(format!("{msg} (or --force to use it anyway)"));
        }
        warnings.push(msg);
    }
    Ok((program, warnings))
}

/// Homebrew installs a formula's files under `<prefix>/Cellar/<formula>/<version>/`, which `brew upgrade`
/// removes, and keeps `<prefix>/opt/<formula>` linked to the current version: for a binary in the
/// Cellar, the same binary through `opt/`.
fn homebrew_opt(exe: &Path) -> Option<PathBuf> {
    let name = exe.file_name()?;
    let bin = exe.parent()?;
    let version = bin.parent()?;
    let formula = version.parent()?;
    let cellar = formula.parent()?;
    if bin.file_name()? != "bin" || cellar.file_name()? != "Cellar" {
        return None;
    }
    Some(
        cellar
            .parent()?
            .join("opt")
            .join(formula.file_name()?)
            .join("bin")
            .join(name),
    )
}

/// The project whose `node_modules` holds `p`: the directory above its first `node_modules` holds a
/// `package.json`. A global install is not one: npm's prefix (`lib/node_modules`, Windows'
/// `npm/node_modules`) has no `package.json`, and pnpm's, Yarn's and Bun's global stores sit under a
/// directory named `global`.
fn project_dependency(p: &Path) -> Option<PathBuf> {
    let mut above = PathBuf::new();
    for c in p.components() {
        let name = c.as_os_str();
        if name == "node_modules" {
            let global = above.components().any(|c| c.as_os_str() == "global");
            return (!global && above.join("package.json").is_file()).then_some(above);
        }
        above.push(name);
    }
    None
}

/// Where a scheduled program would vanish. `ALMANAC_TEST_NOT_TEMP`, a directory, is not counted as a
/// temporary one: the tests build their installs under cargo's target directory, which may itself be
/// in `/tmp`.
fn vanishing(p: &Path) -> Option<&'static str> {
    let parts: Vec<String> = p
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .windows(2)
        .any(|w| w[0] == "target" && matches!(w[1].as_str(), "debug" | "release"))
    {
        return Some("in a cargo target/ directory");
    }
    // `npx codealmanac` runs the binary from npm's cache (~/.npm/_npx/<hash>/node_modules), which npm
    // clears and replaces at will.
    if parts.iter().any(|c| c == "_npx") {
        return Some("in npx's cache");
    }
    let tmp = std::env::temp_dir();
    let temps = [
        tmp.as_path(),
        Path::new("/tmp"),
        Path::new("/var/tmp"),
        Path::new("/private/tmp"),
        Path::new("/var/folders"),
    ];
    let exempt = std::env::var_os("ALMANAC_TEST_NOT_TEMP")
        .filter(|d| !d.is_empty())
        .is_some_and(|d| p.starts_with(d));
    if !exempt && temps.iter().any(|t| p.starts_with(t)) {
        return Some("in a temporary directory");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_path_keeps_order_and_drops_duplicates() {
        let p = job_path(
            "/opt/homebrew/bin:/opt/homebrew/bin:/custom/bin::/bin",
            Path::new("/h"),
        );
        assert_eq!(p, "/opt/homebrew/bin:/custom/bin:/bin:/h/.local/bin:/h/.cargo/bin:/usr/local/bin:/usr/bin");
    }

    #[test]
    fn vanishing_paths() {
        assert!(vanishing(Path::new("/w/almanac/target/debug/almanac")).is_some());
        assert!(vanishing(Path::new("/tmp/x/almanac")).is_some());
        assert!(vanishing(Path::new("/home/u/.cargo/bin/almanac")).is_none());
        assert!(vanishing(Path::new(
            "/home/u/.npm/_npx/5f2a/node_modules/codealmanac-linux-x64/bin/almanac"
        ))
        .is_some());
        assert!(vanishing(Path::new(
            "/usr/lib/node_modules/codealmanac/node_modules/codealmanac-linux-x64/bin/almanac"
        ))
        .is_none());
    }

    #[test]
    fn a_cellar_binary_is_named_through_homebrews_opt_link() {
        assert_eq!(
            homebrew_opt(Path::new("/opt/homebrew/Cellar/almanac/0.1.0/bin/almanac")),
            Some(PathBuf::from("/opt/homebrew/opt/almanac/bin/almanac"))
        );
        assert_eq!(homebrew_opt(Path::new("/usr/local/bin/almanac")), None);
        assert_eq!(
            homebrew_opt(Path::new("/x/Cellar/almanac/0.1.0/libexec/almanac")),
            None
        );
    }
}
