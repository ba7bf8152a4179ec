//! The Windows Task Scheduler adapter against a recording fake `schtasks` on PATH: install, reinstall with
//! a new interval, drift, uninstall, with the registered Task XML parsed and checked field by field.

use crate::automation::{sched, Sched};
use std::collections::BTreeMap;

const FAKE_SCHTASKS: &str = r#"#!/bin/sh
echo "schtasks $*" >> "$FAKE_SCHED_DIR/calls"
task="$FAKE_SCHED_DIR/task.xml"
case "$1" in
  /Create) while [ "$1" != /XML ]; do shift; done; cp "$2" "$task"; cp "$2" "$FAKE_SCHED_DIR/created-$(date +%s%N).xml" ;;
  /Query) if [ -f "$task" ]; then cat "$task"; exit 0; fi
          echo "ERROR: The system cannot find the file specified." >&2; exit 1 ;;
  /Delete) if [ -f "$task" ]; then rm -f "$task"; exit 0; fi
           echo "ERROR: The system cannot find the file specified." >&2; exit 1 ;;
esac
exit 0
"#;

fn with_schtasks() -> Sched {
    let s = sched();
    let p = s.bin.join("schtasks");
    std::fs::write(&p, FAKE_SCHTASKS).unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    s
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

/// A small XML reader for the Task XML: elements to (path, text), attributes dropped, entities decoded.
fn parse(xml: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut path: Vec<String> = Vec::new();
    let body = xml.split_once("?>").map_or(xml, |(_, b)| b);
    let mut rest = body;
    while let Some(lt) = rest.find('<') {
        let text = rest[..lt].trim();
        let gt = lt + rest[lt..].find('>').unwrap();
        let tag = &rest[lt + 1..gt];
        if !text.is_empty() {
            let t = text
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&amp;", "&");
            out.insert(path.join("/"), t);
        }
        if let Some(close) = tag.strip_prefix('/') {
            assert_eq!(path.pop().as_deref(), Some(close), "well-formed");
        } else if !tag.ends_with('/') {
            path.push(tag.split_whitespace().next().unwrap().to_string());
        }
        rest = &rest[gt + 1..];
    }
    assert!(path.is_empty(), "every element closed");
    out
}

/// The registered XML, decoded from UTF-16LE with a byte-order mark.
fn task(s: &Sched) -> (String, BTreeMap<String, String>) {
    let bytes = std::fs::read(s.dir.join("task.xml")).unwrap();
    assert_eq!(&bytes[..2], &[0xFF, 0xFE], "UTF-16LE with a BOM");
    let units: Vec<u16> = bytes[2..]
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
        .collect();
    let xml = String::from_utf16(&units).unwrap();
    assert!(
        xml.starts_with("<?xml version=\"1.0\" encoding=\"UTF-16\"?>"),
        "{xml}"
    );
    let fields = parse(&xml);
    (xml, fields)
}

#[test]
fn schtasks_install_reinstall_drift_uninstall() {
    let s = with_schtasks();
    let ah = s.w.almanac_home().display().to_string();
    let out =
        s.w.almanac()
            .env("PATH", s.path())
            .env("FAKE_SCHED_DIR", &s.dir)
            .env("CODEX_HOME", "/data/codex home")
            .args([
                "automation",
                "install",
                "--scheduler",
                "schtasks",
                "--every",
                "5h",
                "--program",
            ])
            .arg(&s.program)
            .arg("--force")
            .output()
            .unwrap();
    assert!(ok(&out).contains("automatic capture installed (schtasks)"));
    let (xml, f) = task(&s);
    let t = "Task";
    let get = |k: &str| {
        f.get(&format!("{t}/{k}"))
            .map(String::as_str)
            .unwrap_or_else(|| panic!("{k} in {xml}"))
    };
    assert_eq!(get("RegistrationInfo/URI"), "\\CodeAlmanac Capture Sweep");
    assert_eq!(get("Triggers/TimeTrigger/Repetition/Interval"), "PT5H");
    assert_eq!(
        get("Triggers/TimeTrigger/Repetition/StopAtDurationEnd"),
        "false"
    );
    assert_eq!(get("Triggers/TimeTrigger/Enabled"), "true");
    let start = get("Triggers/TimeTrigger/StartBoundary").to_string();
    assert!(
        chrono::NaiveDateTime::parse_from_str(&start, "%Y-%m-%dT%H:%M:%S").is_ok(),
        "{start}"
    );
    assert_eq!(get("Principals/Principal/LogonType"), "InteractiveToken");
    assert_eq!(get("Principals/Principal/RunLevel"), "LeastPrivilege");
    assert_eq!(get("Settings/MultipleInstancesPolicy"), "IgnoreNew");
    assert_eq!(get("Settings/StartWhenAvailable"), "true");
    assert_eq!(get("Settings/Hidden"), "true");
    assert_eq!(get("Settings/Enabled"), "true");
    assert_eq!(get("Settings/WakeToRun"), "false");
    assert_eq!(
        get("Actions/Exec/Command"),
        format!("\"{}\"", s.program.display())
    );
    assert_eq!(
        get("Actions/Exec/Arguments"),
        format!("--env \"ALMANAC_HOME={ah}\" --env \"CODEX_HOME=/data/codex home\" capture sweep --scheduled")
    );
    // Cleaning ours out of the other schedulers first (`crontab -l` here) is the other tests' business.
    let schtasks_calls = || -> Vec<String> {
        s.calls()
            .into_iter()
            .filter(|c| c.starts_with("schtasks"))
            .collect()
    };
    let calls = schtasks_calls();
    assert_eq!(
        calls[0], "schtasks /Query /TN CodeAlmanac Capture Sweep /XML",
        "{calls:?}"
    );
    assert!(
        calls[1].starts_with("schtasks /Create /TN CodeAlmanac Capture Sweep /XML ")
            && calls[1].ends_with(".xml /F"),
        "{calls:?}"
    );
    assert_eq!(calls.len(), 2, "{calls:?}");

    // The same again: only a query.
    s.clear_calls();
    let run = |extra: &[&str]| {
        s.w.almanac()
            .env("PATH", s.path())
            .env("FAKE_SCHED_DIR", &s.dir)
            .env("CODEX_HOME", "/data/codex home")
            .args([
                "automation",
                "install",
                "--scheduler",
                "schtasks",
                "--program",
            ])
            .arg(&s.program)
            .arg("--force")
            .args(extra)
            .output()
            .unwrap()
    };
    assert!(ok(&run(&["--every", "5h"])).contains("nothing changed"));
    assert_eq!(
        schtasks_calls(),
        ["schtasks /Query /TN CodeAlmanac Capture Sweep /XML"]
    );

    // A new interval: re-registered with /F, the first run's time kept.
    ok(&run(&["--every", "2h"]));
    let (_, f2) = task(&s);
    assert_eq!(f2["Task/Triggers/TimeTrigger/Repetition/Interval"], "PT2H");
    assert_eq!(f2["Task/Triggers/TimeTrigger/StartBoundary"], start);

    // Status: clean, then the config edited to another interval, then another environment.
    let status = |codex: &str| {
        let out =
            s.w.almanac()
                .env("PATH", s.path())
                .env("FAKE_SCHED_DIR", &s.dir)
                .env("CODEX_HOME", codex)
                .args(["automation", "status", "--json", "--check"])
                .output()
                .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let codes: Vec<String> = v["drift"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["code"].as_str().unwrap().to_string())
            .collect();
        (out.status.code().unwrap(), codes, v)
    };
    let (code, codes, v) = status("/data/codex home");
    assert_eq!((code, codes.len()), (0, 0), "{v}");
    assert_eq!(v["installed"][0]["scheduler"], "schtasks");
    assert_eq!(v["installed"][0]["intervalSecs"], 7200);
    assert_eq!(v["installed"][0]["env"]["CODEX_HOME"], "/data/codex home");
    let config = s.config();
    std::fs::write(
        s.w.almanac_home().join("config.toml"),
        config.replace("every = \"2h\"", "every = \"3h\""),
    )
    .unwrap();
    let (code, codes, v) = status("/elsewhere");
    assert_eq!(code, 1);
    assert!(
        codes.contains(&"interval-mismatch".into())
            && codes.contains(&"environment-mismatch".into()),
        "{v}"
    );
    std::fs::write(s.w.almanac_home().join("config.toml"), config).unwrap();

    // Uninstall removes it; a second uninstall has nothing to do.
    s.clear_calls();
    let out = ok(&s.run(&["automation", "uninstall"]));
    assert!(out.contains("schtasks: Task Scheduler task"), "{out}");
    assert!(s
        .calls()
        .contains(&"schtasks /Delete /TN CodeAlmanac Capture Sweep /F".to_string()));
    assert!(!s.dir.join("task.xml").exists());
    assert!(ok(&s.run(&["automation", "uninstall"])).contains("not installed"));
}
