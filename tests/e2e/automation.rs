//! `almanac automation` against recording fakes of launchctl, systemctl, loginctl and crontab placed first
//! on PATH, and `capture sweep --scheduled`.

use crate::common::*;
use std::path::PathBuf;

const FAKE_LAUNCHCTL: &str = r#"#!/bin/sh
echo "launchctl $*" >> "$FAKE_SCHED_DIR/calls"
loaded="$FAKE_SCHED_DIR/launchd-loaded"
case "$1" in
  print)
    if [ -f "$loaded" ]; then printf '%s = {\n\tstate = not running\n\truns = 3\n\tlast exit code = 0\n\tendpoints = {\n\t\tstate = active\n\t}\n}\n' "$2"; exit 0; fi
    echo "Could not find service" >&2; exit 113 ;;
  bootout)
    if [ -f "$loaded" ]; then rm -f "$loaded"; exit 0; fi
    echo "Boot-out failed: 3: No such process" >&2; exit 3 ;;
  bootstrap)
    cp "$ALMANAC_HOME/config.toml" "$FAKE_SCHED_DIR/config-at-registration" 2>/dev/null
    if [ -f "$FAKE_SCHED_DIR/bootstrap-fails" ]; then echo "Bootstrap failed: 5: Input/output error" >&2; exit 5; fi
    if [ -f "$FAKE_SCHED_DIR/bootstrap-fails-once" ]; then rm "$FAKE_SCHED_DIR/bootstrap-fails-once"; echo "Bootstrap failed: 5: Input/output error" >&2; exit 5; fi
    touch "$loaded"; exit 0 ;;
esac
exit 0
"#;

const FAKE_SYSTEMCTL: &str = r#"#!/bin/sh
echo "systemctl $*" >> "$FAKE_SCHED_DIR/calls"
if [ -f "$FAKE_SCHED_DIR/no-systemd" ]; then echo "Failed to connect to bus: No medium found" >&2; exit 1; fi
active="$FAKE_SCHED_DIR/timer-active"
case "$2" in
  enable) cp "$ALMANAC_HOME/config.toml" "$FAKE_SCHED_DIR/config-at-registration" 2>/dev/null; touch "$active" ;;
  disable) rm -f "$active" ;;
  show)
    if [ -f "$active" ]; then echo "ActiveState=active"; echo "NextElapseUSecRealtime=Sun 2026-11-29 18:07:00 UTC";
    else echo "ActiveState=inactive"; echo "NextElapseUSecRealtime="; fi ;;
esac
exit 0
"#;

const FAKE_LOGINCTL: &str = r#"#!/bin/sh
echo "loginctl $*" >> "$FAKE_SCHED_DIR/calls"
echo "Linger=no"
"#;

const FAKE_CRONTAB: &str = r#"#!/bin/sh
echo "crontab $*" >> "$FAKE_SCHED_DIR/calls"
tab="$FAKE_SCHED_DIR/crontab"
if [ "$1" = "-l" ]; then
  if [ -f "$tab" ]; then cat "$tab"; exit 0; fi
  echo "no crontab for tester" >&2; exit 1
fi
cp "$ALMANAC_HOME/config.toml" "$FAKE_SCHED_DIR/config-at-registration" 2>/dev/null
cp "$1" "$tab"
"#;

pub struct Sched {
    pub w: World,
    pub bin: PathBuf,
    pub dir: PathBuf,
    pub program: PathBuf,
}

pub fn sched() -> Sched {
    let w = World::new();
    let bin = w.root().join("fakebin");
    let dir = w.root().join("sched");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&dir).unwrap();
    for (name, body) in [
        ("launchctl", FAKE_LAUNCHCTL),
        ("systemctl", FAKE_SYSTEMCTL),
        ("loginctl", FAKE_LOGINCTL),
        ("crontab", FAKE_CRONTAB),
    ] {
        let p = bin.join(name);
        std::fs::write(&p, body).unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    // The "installed" almanac: a stable path outside target/.
    let program = w.root().join("opt/bin/almanac");
    std::fs::create_dir_all(program.parent().unwrap()).unwrap();
    std::fs::write(
        &program,
        format!(
            "#!/bin/sh\nexec '{}' \"$@\"\n",
            assert_cmd::cargo::cargo_bin("almanac").display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &program,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    Sched {
        w,
        bin,
        dir,
        program,
    }
}

impl Sched {
    pub fn path(&self) -> String {
        format!("{}:/usr/bin:/bin", self.bin.display())
    }

    pub fn run(&self, args: &[&str]) -> std::process::Output {
        self.w
            .almanac()
            .env("PATH", self.path())
            .env("FAKE_SCHED_DIR", &self.dir)
            .env("USER", "tester")
            .args(args)
            .output()
            .unwrap()
    }

    /// Install with the stable program path (the test's temp dir would otherwise be refused).
    pub fn install(&self, extra: &[&str]) -> std::process::Output {
        let program = self.program.display().to_string();
        let mut args = vec![
            "automation",
            "install",
            "--program",
            program.as_str(),
            "--force",
        ];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    pub fn calls(&self) -> Vec<String> {
        let uid = unsafe { libc::getuid() };
        std::fs::read_to_string(self.dir.join("calls"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                l.replace(&format!("gui/{uid}"), "gui/UID")
                    .replace(&self.w.home().display().to_string(), "HOME")
            })
            .collect()
    }

    pub fn clear_calls(&self) {
        let _ = std::fs::remove_file(self.dir.join("calls"));
    }

    pub fn plist(&self) -> PathBuf {
        self.w
            .home()
            .join("Library/LaunchAgents/com.codealmanac.capture-sweep.plist")
    }

    pub fn config(&self) -> String {
        std::fs::read_to_string(self.w.almanac_home().join("config.toml")).unwrap_or_default()
    }

    pub fn status(&self) -> (i32, serde_json::Value) {
        let out = self.run(&["automation", "status", "--json", "--check"]);
        (
            out.status.code().unwrap(),
            serde_json::from_slice(&out.stdout).unwrap(),
        )
    }
}

fn ok(out: &std::process::Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[derive(serde::Deserialize, Debug)]
struct Agent {
    #[serde(rename = "Label")]
    label: String,
    #[serde(rename = "ProgramArguments")]
    program_arguments: Vec<String>,
    #[serde(rename = "StartInterval")]
    start_interval: u64,
    #[serde(rename = "RunAtLoad")]
    run_at_load: bool,
    #[serde(rename = "EnvironmentVariables")]
    environment_variables: std::collections::BTreeMap<String, String>,
    #[serde(rename = "StandardOutPath")]
    standard_out_path: String,
    #[serde(rename = "StandardErrorPath")]
    standard_error_path: String,
    #[serde(rename = "ProcessType")]
    process_type: String,
    #[serde(rename = "LowPriorityIO")]
    low_priority_io: bool,
}

#[test]
fn launchd_plist_has_every_key_and_the_exact_launchctl_sequence() {
    let s = sched();
    let text = ok(&s.install(&["--scheduler", "launchd", "--every", "5h"]));
    assert!(
        text.contains("automatic capture installed (launchd)"),
        "{text}"
    );
    let a: Agent = plist::from_file(s.plist()).expect("the plist parses back");
    assert_eq!(a.label, "com.codealmanac.capture-sweep");
    assert_eq!(
        a.program_arguments,
        vec![
            s.program.display().to_string(),
            "capture".into(),
            "sweep".into(),
            "--scheduled".into()
        ]
    );
    assert_eq!(a.start_interval, 18000);
    assert!(a.run_at_load);
    let path = &a.environment_variables["PATH"];
    assert!(
        path.starts_with(&format!("{}:/usr/bin:/bin:", s.bin.display())),
        "{path}"
    );
    for extra in [
        ".local/bin",
        ".cargo/bin",
        "/opt/homebrew/bin",
        "/usr/local/bin",
    ] {
        assert!(path.contains(extra), "{path}");
    }
    assert_eq!(
        path.matches(":/usr/bin:").count() + usize::from(path.ends_with(":/usr/bin")),
        1,
        "de-duplicated: {path}"
    );
    let logs = s.w.almanac_home().join("logs");
    assert_eq!(
        a.standard_out_path,
        logs.join("capture-sweep.out.log").display().to_string()
    );
    assert_eq!(
        a.standard_error_path,
        logs.join("capture-sweep.err.log").display().to_string()
    );
    assert!(
        logs.is_dir(),
        "the log directory exists before launchd opens the logs"
    );
    assert_eq!(a.process_type, "Background");
    assert!(a.low_priority_io);
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(s.plist()).unwrap().permissions(),
    );
    assert_eq!(mode & 0o022, 0, "not group- or world-writable");
    assert_eq!(
        s.calls(),
        vec![
            "crontab -l".to_string(),
            "launchctl bootout gui/UID/com.codealmanac.capture-sweep".into(),
            "launchctl bootstrap gui/UID HOME/Library/LaunchAgents/com.codealmanac.capture-sweep.plist".into(),
        ]
    );
    assert!(
        !s.calls().iter().any(|c| c.contains(" load")),
        "never the legacy load"
    );

    // Re-running changes nothing: no re-registration.
    s.clear_calls();
    let text = ok(&s.install(&["--scheduler", "launchd", "--every", "5h"]));
    assert!(text.contains("already installed"), "{text}");
    assert_eq!(
        s.calls(),
        vec![
            "crontab -l".to_string(),
            "launchctl print gui/UID/com.codealmanac.capture-sweep".into()
        ]
    );

    // A changed interval re-registers.
    s.clear_calls();
    ok(&s.install(&["--scheduler", "launchd", "--every", "30m"]));
    let a: Agent = plist::from_file(s.plist()).unwrap();
    assert_eq!(a.start_interval, 1800);
    assert!(s
        .calls()
        .iter()
        .any(|c| c.starts_with("launchctl bootstrap")));
}

#[test]
fn a_bootstrap_that_races_the_bootout_is_retried_once() {
    let s = sched();
    std::fs::write(s.dir.join("bootstrap-fails-once"), "").unwrap();
    let text = ok(&s.install(&["--scheduler", "launchd"]));
    assert!(
        text.contains("automatic capture installed (launchd)"),
        "{text}"
    );
    let bootstraps = s
        .calls()
        .iter()
        .filter(|c| c.starts_with("launchctl bootstrap gui/UID "))
        .count();
    assert_eq!(bootstraps, 2, "{:?}", s.calls());
}

#[test]
fn a_failed_bootstrap_says_the_plist_was_written() {
    let s = sched();
    std::fs::write(s.dir.join("bootstrap-fails"), "").unwrap();
    let out = s.install(&["--scheduler", "launchd"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains(&format!("wrote {}", s.plist().display()))
            && err.contains("bootstrap")
            && err.contains("Input/output error"),
        "{err}"
    );
    assert!(s.plist().is_file());
}

#[test]
fn capture_since_is_written_before_registration_and_kept_on_reinstall() {
    let s = sched();
    std::fs::create_dir_all(s.w.almanac_home()).unwrap();
    std::fs::write(
        s.w.almanac_home().join("config.toml"),
        "# my almanac settings\n[capture]\nagent = \"codex\"  # codex for me\n",
    )
    .unwrap();
    ok(&s.install(&["--scheduler", "launchd"]));
    let at_registration = std::fs::read_to_string(s.dir.join("config-at-registration")).unwrap();
    let since_line = at_registration
        .lines()
        .find(|l| l.starts_with("capture_since = "))
        .expect("capture_since existed when launchd was told")
        .to_string();
    let config = s.config();
    assert!(
        config.contains("# my almanac settings")
            && config.contains("agent = \"codex\"  # codex for me"),
        "comments survive: {config}"
    );
    for key in [
        "enabled = true",
        "every = \"5h\"",
        "quiet = \"45m\"",
        "apps = [\"claude\", \"codex\"]",
        "program = ",
    ] {
        assert!(config.contains(key), "{key} in {config}");
    }
    std::thread::sleep(std::time::Duration::from_millis(20));
    ok(&s.install(&["--scheduler", "launchd", "--every", "2h"]));
    assert!(
        s.config().contains(&since_line),
        "the first activation time is preserved"
    );
    assert!(s.config().contains("every = \"2h\""));
}

#[test]
fn uninstall_twice_and_keep_logs() {
    let s = sched();
    ok(&s.install(&["--scheduler", "launchd"]));
    std::fs::write(
        s.w.almanac_home().join("logs/capture-sweep.out.log"),
        "old log\n",
    )
    .unwrap();
    s.clear_calls();
    let text = ok(&s.run(&["automation", "uninstall"]));
    assert!(text.contains("removed launchd"), "{text}");
    assert!(!s.plist().exists());
    assert!(
        s.w.almanac_home()
            .join("logs/capture-sweep.out.log")
            .is_file(),
        "logs are kept"
    );
    assert_eq!(
        s.calls(),
        vec![
            "launchctl bootout gui/UID/com.codealmanac.capture-sweep".to_string(),
            "crontab -l".into()
        ]
    );
    assert!(s.config().contains("enabled = false"));
    s.clear_calls();
    let text = ok(&s.run(&["automation", "uninstall"]));
    assert!(text.contains("not installed; nothing to remove"), "{text}");
    assert_eq!(s.calls(), vec!["crontab -l".to_string()]);
}

#[test]
fn switching_schedulers_removes_ours_from_the_others() {
    let s = sched();
    ok(&s.install(&["--scheduler", "launchd"]));
    s.clear_calls();
    let text = ok(&s.install(&["--scheduler", "systemd"]));
    assert!(text.contains("removed from launchd"), "{text}");
    assert!(!s.plist().exists());
    let units = s.w.home().join(".config/systemd/user");
    let service = std::fs::read_to_string(units.join("codealmanac-capture-sweep.service")).unwrap();
    let timer = std::fs::read_to_string(units.join("codealmanac-capture-sweep.timer")).unwrap();
    assert!(service.contains("Type=oneshot"));
    assert!(
        service.contains(&format!(
            "ExecStart=\"{}\" \"capture\" \"sweep\" \"--scheduled\"",
            s.program.display()
        )),
        "{service}"
    );
    assert!(service.contains("Environment=\"PATH="));
    assert!(timer.contains("Persistent=true") && timer.contains("WantedBy=timers.target"));
    assert!(
        timer
            .lines()
            .any(|l| l.starts_with("OnCalendar=*-*-* *:") && l.ends_with(":00")),
        "{timer}"
    );
    assert!(!timer.contains("OnUnitActiveSec"));
    assert_eq!(
        s.calls(),
        vec![
            "launchctl bootout gui/UID/com.codealmanac.capture-sweep".to_string(),
            "crontab -l".into(),
            "loginctl show-user tester -p Linger".into(),
            "systemctl --user show codealmanac-capture-sweep.timer -p ActiveState -p NextElapseUSecRealtime".into(),
            "systemctl --user daemon-reload".into(),
            "systemctl --user enable --now codealmanac-capture-sweep.timer".into(),
            "systemctl --user show codealmanac-capture-sweep.timer -p ActiveState -p NextElapseUSecRealtime".into(),
        ]
    );
    let err = String::from_utf8(s.install(&["--scheduler", "systemd"]).stderr).unwrap();
    assert!(err.contains("lingering is off"), "{err}");

    // Reinstall: nothing changes, the minute is kept.
    s.clear_calls();
    let text = ok(&s.install(&["--scheduler", "systemd"]));
    assert!(text.contains("already installed"), "{text}");
    assert_eq!(
        std::fs::read_to_string(units.join("codealmanac-capture-sweep.timer")).unwrap(),
        timer
    );
    assert!(
        !s.calls()
            .iter()
            .any(|c| c.contains("enable") || c.contains("daemon-reload")),
        "{:?}",
        s.calls()
    );

    // On to cron: the units go, the crontab gets the block.
    s.clear_calls();
    ok(&s.install(&["--scheduler", "cron"]));
    assert!(!units.join("codealmanac-capture-sweep.timer").exists());
    assert!(s
        .calls()
        .contains(&"systemctl --user disable --now codealmanac-capture-sweep.timer".to_string()));
    let tab = std::fs::read_to_string(s.dir.join("crontab")).unwrap();
    assert!(
        tab.contains("# BEGIN CODEALMANAC CAPTURE SWEEP")
            && tab.contains("capture sweep --scheduled")
    );
}

#[test]
fn a_timer_without_a_next_trigger_fails_the_install() {
    let s = sched();
    // A systemctl that accepts everything but never activates the timer.
    std::fs::write(
        s.bin.join("systemctl"),
        "#!/bin/sh\necho \"systemctl $*\" >> \"$FAKE_SCHED_DIR/calls\"\n[ \"$2\" = show ] && { echo ActiveState=active; echo NextElapseUSecRealtime=infinity; }\nexit 0\n",
    )
    .unwrap();
    let out = s.install(&["--scheduler", "systemd"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("not running") && err.contains("infinity"),
        "{err}"
    );
}

#[test]
fn cron_block_round_trip_keeps_every_other_line() {
    let s = sched();
    let mine = "MAILTO=me@example.com\n# nightly backup\n0 3 * * * /usr/local/bin/backup --all\n\n*/5 * * * * echo 'hi'  # no newline at end";
    std::fs::write(s.dir.join("crontab"), mine).unwrap();
    ok(&s.install(&["--scheduler", "cron"]));
    let tab = std::fs::read_to_string(s.dir.join("crontab")).unwrap();
    assert!(
        tab.starts_with(&format!("{mine}\n# BEGIN CODEALMANAC CAPTURE SWEEP\n")),
        "{tab}"
    );
    let line = tab
        .lines()
        .find(|l| l.contains("capture sweep --scheduled"))
        .unwrap();
    let fields: Vec<&str> = line.split_whitespace().collect();
    assert!(fields[0].parse::<u32>().unwrap() < 60);
    assert_eq!(&fields[1..5], &["*", "*", "*", "*"], "hourly");
    assert!(
        line.contains(&format!(
            "'{}' capture sweep --scheduled",
            s.program.display()
        )),
        "{line}"
    );
    assert!(
        line.contains("env PATH='")
            && line.contains(">>'")
            && line.contains("capture-sweep.err.log'"),
        "{line}"
    );
    assert!(tab.ends_with("# END CODEALMANAC CAPTURE SWEEP\n"));
    // Twice: still one block.
    ok(&s.install(&["--scheduler", "cron"]));
    let again = std::fs::read_to_string(s.dir.join("crontab")).unwrap();
    assert_eq!(again, tab);
    ok(&s.run(&["automation", "uninstall"]));
    assert_eq!(
        std::fs::read_to_string(s.dir.join("crontab")).unwrap(),
        format!("{mine}\n"),
        "everything else kept byte for byte"
    );
}

#[test]
fn a_cron_block_without_its_end_line_is_reported_and_nothing_is_changed() {
    let s = sched();
    // almanac's block lost its END line (a hand edit); the user's jobs follow it.
    let table = "MAILTO=me@example.com\n# BEGIN CODEALMANAC CAPTURE SWEEP\n17 * * * * env PATH='/bin' '/opt/almanac' capture sweep --scheduled\n0 3 * * * /usr/local/bin/backup --all\n30 * * * * /usr/local/bin/sync-mail\n";
    std::fs::write(s.dir.join("crontab"), table).unwrap();
    for args in [
        vec!["automation", "install", "--scheduler", "cron"],
        vec!["automation", "uninstall"],
    ] {
        s.clear_calls();
        let out = if args[1] == "install" {
            s.install(&args[2..])
        } else {
            s.run(&args)
        };
        assert_eq!(out.status.code(), Some(1), "{args:?} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no END line")
                && err.contains("crontab -e")
                && err.contains("changed nothing"),
            "{args:?}: {err}"
        );
        assert_eq!(
            std::fs::read_to_string(s.dir.join("crontab")).unwrap(),
            table,
            "{args:?}: the crontab is untouched"
        );
        assert!(
            s.calls().iter().all(|c| !c.starts_with("crontab /")),
            "{args:?}: no crontab was written: {:?}",
            s.calls()
        );
    }
}

#[test]
fn auto_picks_systemd_when_it_answers_else_cron() {
    let s = sched();
    std::fs::write(s.dir.join("no-systemd"), "").unwrap();
    let text = ok(&s.install(&[]));
    assert!(text.contains("(cron)"), "{text}");
    std::fs::remove_file(s.dir.join("no-systemd")).unwrap();
    let text = ok(&s.install(&[]));
    assert!(
        text.contains("(systemd)") && text.contains("removed from cron"),
        "{text}"
    );
}

#[test]
fn status_reports_each_kind_of_drift() {
    let s = sched();
    let codes = |v: &serde_json::Value| -> Vec<String> {
        v["drift"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["code"].as_str().unwrap().to_string())
            .collect()
    };
    ok(&s.install(&["--scheduler", "launchd", "--every", "5h"]));
    let (code, v) = s.status();
    assert_eq!(code, 0, "{v}");
    assert!(codes(&v).is_empty(), "{v}");
    assert_eq!(v["configured"]["enabled"], true);
    assert_eq!(v["configured"]["every"], "5h");
    assert_eq!(v["installed"][0]["scheduler"], "launchd");
    assert_eq!(v["installed"][0]["intervalSecs"], 18000);
    assert_eq!(v["installed"][0]["live"]["state"], "not running");
    assert_eq!(v["installed"][0]["live"]["runs"], 3);

    // Config edited by hand to another interval.
    let edited = s.config().replace("every = \"5h\"", "every = \"2h\"");
    std::fs::write(s.w.almanac_home().join("config.toml"), &edited).unwrap();
    let (code, v) = s.status();
    assert_eq!(code, 1);
    assert!(codes(&v).contains(&"interval-mismatch".to_string()), "{v}");
    std::fs::write(
        s.w.almanac_home().join("config.toml"),
        edited.replace("every = \"2h\"", "every = \"5h\""),
    )
    .unwrap();

    // launchd lost the job.
    std::fs::remove_file(s.dir.join("launchd-loaded")).unwrap();
    assert!(codes(&s.status().1).contains(&"not-loaded".to_string()));
    std::fs::write(s.dir.join("launchd-loaded"), "").unwrap();

    // The program was moved away, or config names another one.
    std::fs::rename(&s.program, s.program.with_extension("old")).unwrap();
    assert!(codes(&s.status().1).contains(&"program-missing".to_string()));
    std::fs::rename(s.program.with_extension("old"), &s.program).unwrap();
    let other = s.config().replace(
        &format!("program = \"{}\"", s.program.display()),
        "program = \"/usr/local/bin/almanac\"",
    );
    std::fs::write(s.w.almanac_home().join("config.toml"), &other).unwrap();
    assert!(codes(&s.status().1).contains(&"program-mismatch".to_string()));

    // Also in a second scheduler.
    let units = s.w.home().join(".config/systemd/user");
    std::fs::create_dir_all(&units).unwrap();
    std::fs::write(
        units.join("codealmanac-capture-sweep.timer"),
        "[Timer]\nOnCalendar=daily\n",
    )
    .unwrap();
    let c = codes(&s.status().1);
    assert!(
        c.contains(&"foreign-scheduler".to_string()) && c.contains(&"file-modified".to_string()),
        "{c:?}"
    );
    std::fs::remove_dir_all(&units).unwrap();

    // Nothing installed while config says enabled.
    std::fs::remove_file(s.plist()).unwrap();
    let (code, v) = s.status();
    assert_eq!(code, 1);
    assert!(codes(&v).contains(&"not-installed".to_string()), "{v}");
    let text = ok(&s.run(&["automation", "status"]));
    assert!(text.contains("drift: not-installed"), "{text}");
}

#[test]
fn a_program_under_target_is_refused_without_force() {
    let s = sched();
    let out = s.run(&[
        "automation",
        "install",
        "--scheduler",
        "launchd",
        "--program",
        assert_cmd::cargo::cargo_bin("almanac").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("target/") && err.contains("--force"), "{err}");
    assert!(!s.plist().exists());
    assert!(s.calls().is_empty(), "nothing registered");
}

#[test]
fn scheduled_sweeps_run_only_when_due() {
    let s = sched();
    ok(&s.install(&["--scheduler", "cron", "--every", "5h"]));
    let state = s.w.almanac_home().join("state/last-sweep.json");
    let write_last = |ago: chrono::Duration| {
        let t = (chrono::Utc::now() - ago).to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
        std::fs::write(
            &state,
            format!("{{\"startedAt\":\"{t}\",\"scheduledStartedAt\":\"{t}\",\"exit\":0}}"),
        )
        .unwrap();
        t
    };
    // Swept an hour ago: the hourly tick is not due.
    let t = write_last(chrono::Duration::hours(1));
    let text = ok(&s.run(&["capture", "sweep", "--scheduled"]));
    assert!(
        text.contains("not due") && text.lines().count() == 1,
        "{text}"
    );
    assert!(
        std::fs::read_to_string(&state).unwrap().contains(&t),
        "no sweep ran"
    );
    // Exactly one interval later (a launchd StartInterval tick) is due.
    let t = write_last(chrono::Duration::hours(5));
    let text = ok(&s.run(&["capture", "sweep", "--scheduled"]));
    assert!(text.contains("capture sweep:"), "{text}");
    assert!(
        !std::fs::read_to_string(&state).unwrap().contains(&t),
        "a sweep ran and recorded itself"
    );
    // Disabled by uninstall: a leftover scheduler entry does nothing.
    ok(&s.run(&["automation", "uninstall"]));
    write_last(chrono::Duration::hours(6));
    let text = ok(&s.run(&["capture", "sweep", "--scheduled"]));
    assert!(text.contains("disabled"), "{text}");
}

#[test]
fn a_manual_or_narrowed_sweep_does_not_postpone_the_schedule() {
    let s = sched();
    ok(&s.install(&["--scheduler", "cron", "--every", "5h"]));
    let state = s.w.almanac_home().join("state/last-sweep.json");
    let scheduled_at = || -> Option<String> {
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).ok()?).ok()?;
        v["scheduledStartedAt"].as_str().map(str::to_string)
    };
    // The first scheduled sweep is due and stamps the schedule.
    let text = ok(&s.run(&["capture", "sweep", "--scheduled"]));
    assert!(text.contains("capture sweep:"), "{text}");
    let first = scheduled_at().expect("a full scheduled sweep stamps it");
    let text = ok(&s.run(&["capture", "sweep", "--scheduled"]));
    assert!(text.contains("not due"), "{text}");
    // Six hours later: a narrowed sweep (manual or scheduled) and a manual full one leave the stamp as
    // it is, so the next scheduled tick still sweeps every app.
    let six_ago = (chrono::Utc::now() - chrono::Duration::hours(6))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    std::fs::write(
        &state,
        format!("{{\"startedAt\":\"{six_ago}\",\"scheduledStartedAt\":\"{six_ago}\",\"exit\":0}}"),
    )
    .unwrap();
    for args in [
        vec!["capture", "sweep", "--apps", "codex"],
        vec!["capture", "sweep", "--scheduled", "--apps", "codex"],
        vec!["capture", "sweep"],
    ] {
        let text = ok(&s.run(&args));
        assert!(text.contains("capture sweep:"), "{args:?}: {text}");
        assert_eq!(
            scheduled_at().as_deref(),
            Some(six_ago.as_str()),
            "{args:?}"
        );
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&state).unwrap()).unwrap();
        assert_ne!(
            v["startedAt"],
            six_ago.as_str(),
            "{args:?}: the last sweep is still recorded"
        );
    }
    let text = ok(&s.run(&["capture", "sweep", "--scheduled"]));
    assert!(
        text.contains("capture sweep:") && !text.contains("not due"),
        "{text}"
    );
    assert_ne!(scheduled_at().unwrap(), six_ago);
    assert_ne!(scheduled_at().unwrap(), first);
}

#[test]
fn setup_never_blocks_without_a_terminal_and_installs_with_yes() {
    let s = sched();
    let repo = s.w.root().join("proj");
    std::fs::create_dir_all(repo.join(".git")).unwrap();
    let out =
        s.w.almanac()
            .env("PATH", s.path())
            .env("FAKE_SCHED_DIR", &s.dir)
            .current_dir(&repo)
            .arg("setup")
            .output()
            .unwrap();
    let text = ok(&out);
    assert!(text.contains("not a terminal"), "{text}");
    assert!(s.calls().is_empty() && !repo.join(".almanac").exists());
    let program = s.program.display().to_string();
    let out =
        s.w.almanac()
            .env("PATH", s.path())
            .env("FAKE_SCHED_DIR", &s.dir)
            .env("USER", "tester")
            .current_dir(&repo)
            .args([
                "setup",
                "--yes",
                "--auto-capture-every",
                "3h",
                "--scheduler",
                "cron",
                "--program",
                &program,
                "--force",
            ])
            .output()
            .unwrap();
    let text = ok(&out);
    assert!(
        text.contains("automatic capture installed (cron)") && text.contains("every: 3h"),
        "{text}"
    );
    assert!(repo.join(".almanac/runs").is_dir());
    let out =
        s.w.almanac()
            .env("PATH", s.path())
            .env("FAKE_SCHED_DIR", &s.dir)
            .current_dir(&repo)
            .args(["setup", "--skip-automation"])
            .output()
            .unwrap();
    assert!(ok(&out).contains("skipped"));
}

#[test]
fn rendered_units_pass_systemd_analyze_verify() {
    let Some(analyze) = ["/usr/bin/systemd-analyze", "/bin/systemd-analyze"]
        .into_iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
    else {
        eprintln!("skipping: systemd-analyze is not installed");
        return;
    };
    let s = sched();
    // The real binary, so ExecStart points at an existing executable.
    let real = assert_cmd::cargo::cargo_bin("almanac");
    let out = s.run(&[
        "automation",
        "install",
        "--scheduler",
        "systemd",
        "--program",
        real.to_str().unwrap(),
        "--force",
    ]);
    ok(&out);
    let units = s.w.home().join(".config/systemd/user");
    let out = std::process::Command::new(analyze)
        .arg("verify")
        .arg(units.join("codealmanac-capture-sweep.service"))
        .arg(units.join("codealmanac-capture-sweep.timer"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let relevant: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("codealmanac-capture-sweep"))
        .collect();
    assert!(
        out.status.success() && relevant.is_empty(),
        "systemd-analyze verify: {err}"
    );
}

#[test]
fn real_crontab_round_trip() {
    if std::env::var("ALMANAC_REAL_CRONTAB").ok().as_deref() != Some("1") {
        eprintln!("skipping: set ALMANAC_REAL_CRONTAB=1 (as .ci/run does) to edit this user's real crontab");
        return;
    }
    let s = sched();
    // The real crontab, not the fake: no fake crontab on this PATH.
    std::fs::remove_file(s.bin.join("crontab")).unwrap();
    let before = std::process::Command::new("crontab")
        .arg("-l")
        .output()
        .unwrap();
    let original = before.status.success().then(|| before.stdout.clone());
    let restore = |o: &Option<Vec<u8>>| match o {
        Some(bytes) => {
            let f = s.w.root().join("restore.cron");
            std::fs::write(&f, bytes).unwrap();
            std::process::Command::new("crontab")
                .arg(&f)
                .status()
                .unwrap();
        }
        None => {
            std::process::Command::new("crontab")
                .arg("-r")
                .status()
                .unwrap();
        }
    };
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mine = "# almanac test: a user line that must survive\n0 4 * * * /bin/true\n";
        let f = s.w.root().join("mine.cron");
        std::fs::write(&f, mine).unwrap();
        assert!(std::process::Command::new("crontab")
            .arg(&f)
            .status()
            .unwrap()
            .success());
        ok(&s.install(&["--scheduler", "cron"]));
        let tab = String::from_utf8(
            std::process::Command::new("crontab")
                .arg("-l")
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        assert!(
            tab.contains(mine) && tab.contains("# BEGIN CODEALMANAC CAPTURE SWEEP"),
            "{tab}"
        );
        ok(&s.run(&["automation", "uninstall"]));
        let tab = String::from_utf8(
            std::process::Command::new("crontab")
                .arg("-l")
                .output()
                .unwrap()
                .stdout,
        )
        .unwrap();
        assert!(tab.contains(mine) && !tab.contains("CODEALMANAC"), "{tab}");
    }));
    restore(&original);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
