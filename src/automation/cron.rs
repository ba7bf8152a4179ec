//! Linux cron fallback: a marked block in the user's crontab. Every line outside the block is kept byte
//! for byte; the new table is handed to `crontab <file>` (portable, unlike stdin).

use super::{text, InstallReport, Installed, JobSpec, Kind};

pub const BEGIN: &str = "# BEGIN CODEALMANAC CAPTURE SWEEP";
pub const END: &str = "# END CODEALMANAC CAPTURE SWEEP";

/// The current crontab; "no crontab for `<user>`" is an empty one.
pub fn read() -> Result<String, String> {
    let o = super::run("crontab", &["-l"]).map_err(|e| format!("cannot run crontab: {e}"))?;
    if o.status.success() {
        return Ok(String::from_utf8_lossy(&o.stdout).into_owned());
    }
    let msg = text(&o);
    if msg.to_lowercase().contains("no crontab") {
        return Ok(String::new());
    }
    Err(format!("`crontab -l` failed: {msg}"))
}

fn write(table: &str, job: &JobSpec) -> Result<(), String> {
    let dir = job.almanac_home.join("state");
    crate::util::atomic::ensure_private_dir(&dir).map_err(|e| e.to_string())?;
    let tmp = dir.join(format!("crontab.{}.tmp", std::process::id()));
    std::fs::write(&tmp, table).map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    let out = super::run("crontab", &[&tmp.display().to_string()]);
    let _ = std::fs::remove_file(&tmp);
    match out {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!("`crontab <file>` failed: {}", text(&o))),
        Err(e) => Err(format!("cannot run crontab: {e}")),
    }
}

/// The table without our block, and the block's minute if there was one. A block that does not close
/// (a BEGIN line with no END after it, or a second BEGIN before the END) is an error that changes
/// nothing: almanac cannot tell where its lines end and the user's begin, and dropping to the end of the
/// table would delete the user's jobs.
fn split(table: &str) -> Result<(String, Option<u32>), String> {
    let mut kept = String::new();
    let mut inside = None;
    let mut minute = None;
    for (n, line) in table.split_inclusive('\n').enumerate() {
        let bare = line.trim_end_matches(['\n', '\r']);
        if bare == BEGIN {
            if let Some(open) = inside {
                return Err(unclosed(open, Some(n + 1)));
            }
            inside = Some(n + 1);
            continue;
        }
        if bare == END && inside.is_some() {
            inside = None;
            continue;
        }
        if inside.is_some() {
            if minute.is_none() && !bare.starts_with('#') {
                minute = bare
                    .split_whitespace()
                    .next()
                    .and_then(|m| m.parse().ok())
                    .filter(|m: &u32| *m < 60);
            }
            continue;
        }
        kept.push_str(line);
    }
    match inside {
        Some(open) => Err(unclosed(open, None)),
        None => Ok((kept, minute)),
    }
}

fn unclosed(begin_line: usize, second_begin: Option<usize>) -> String {
    let what = match second_begin {
        Some(n) => format!("another BEGIN line at line {n} before its END line"),
        None => "no END line after it".to_string(),
    };
    format!(
        "your crontab has almanac's block start `{BEGIN}` at line {begin_line} but {what}, so almanac \
         cannot tell its lines from yours and changed nothing; fix it with `crontab -e` (put `{END}` right \
         after almanac's `capture sweep` line, or delete almanac's lines) and run this again"
    )
}

fn quote(s: &str) -> Result<String, String> {
    if s.contains('%') || s.contains('\n') {
        return Err(format!("{s:?} contains % or a newline, which cron would break; install almanac under a plainer path"));
    }
    Ok(format!("'{}'", s.replace('\'', "'\\''")))
}

pub fn render_block(job: &JobSpec, minute: u32) -> Result<String, String> {
    let mut env = format!("PATH={}", quote(&job.path_env)?);
    for (k, v) in &job.env {
        env.push_str(&format!(" {k}={}", quote(v)?));
    }
    Ok(format!(
        "{BEGIN}\n# Managed by almanac (`almanac automation install`); an hourly tick, the sweep decides when it is due.\n{minute} * * * * env {env} {} capture sweep --scheduled >>{} 2>>{}\n{END}\n",
        quote(&job.program.display().to_string())?,
        quote(&job.out_log.display().to_string())?,
        quote(&job.err_log.display().to_string())?
    ))
}

pub fn install(job: &JobSpec) -> Result<InstallReport, String> {
    let table = read()?;
    let (mut kept, minute) = split(&table)?;
    let minute = minute.unwrap_or_else(|| {
        let b: [u8; 2] = crate::util::ids::random_bytes();
        (u16::from_le_bytes(b) % 60) as u32
    });
    if !kept.is_empty() && !kept.ends_with('\n') {
        kept.push('\n');
    }
    let new = format!("{kept}{}", render_block(job, minute)?);
    let report = |changed| InstallReport {
        changed,
        file: "crontab".into(),
        warnings: Vec::new(),
    };
    if new == table {
        return Ok(report(false));
    }
    if let Some(dir) = job.out_log.parent() {
        crate::util::atomic::ensure_private_dir(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    write(&new, job)?;
    Ok(report(true))
}

pub fn uninstall(job: &JobSpec) -> Result<Option<String>, String> {
    if !super::on_path("crontab") {
        return Ok(None);
    }
    let table = read()?;
    let (kept, _) = split(&table)?;
    if kept == table {
        return Ok(None);
    }
    write(&kept, job)?;
    Ok(Some("the crontab block".into()))
}

pub fn installed(_job: &JobSpec) -> Option<Installed> {
    if !super::on_path("crontab") {
        return None;
    }
    let table = read().ok()?;
    let start = table.find(BEGIN)?;
    let block = &table[start..];
    let line = block
        .lines()
        .skip(1)
        .find(|l| !l.starts_with('#'))?
        .to_string();
    let mut problems = Vec::new();
    if let Err(e) = split(&table) {
        problems.push(format!("file-modified: {e}"));
    }
    // `M * * * * env PATH='..' NAME='..' '<program>' capture sweep --scheduled >>'..' 2>>'..'`
    let words = shell_words(&line);
    let after_env: Vec<&String> = words.iter().skip_while(|w| *w != "env").skip(1).collect();
    let is_assign = |w: &str| {
        w.split_once('=').is_some_and(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
    };
    let env = after_env
        .iter()
        .take_while(|w| is_assign(w))
        .filter_map(|w| w.split_once('='))
        .filter(|(k, _)| *k != "PATH")
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let program = after_env
        .iter()
        .find(|w| !is_assign(w))
        .map(|w| w.to_string());
    if !line.contains("capture sweep --scheduled") || line.split_whitespace().nth(1) != Some("*") {
        problems.push(
            "file-modified: the crontab line is not our hourly `capture sweep --scheduled`".into(),
        );
    }
    Some(Installed {
        scheduler: Kind::Cron,
        file: "crontab".into(),
        program,
        args: vec!["capture".into(), "sweep".into(), "--scheduled".into()],
        interval_secs: Some(3600),
        env,
        live: serde_json::json!({"present": true, "line": line}),
        problems,
    })
}

/// The words of a line as `sh` splits them, for the quoting `quote` writes: blanks separate words,
/// single quotes group, a backslash escapes one character.
fn shell_words(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => out.extend(word.take()),
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    w.push(q);
                }
            }
            '\\' => {
                let w = word.get_or_insert_with(String::new);
                w.extend(chars.next());
            }
            _ => word.get_or_insert_with(String::new).push(c),
        }
    }
    out.extend(word);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_everything_outside_the_block() {
        let table = format!("MAILTO=me\n0 1 * * * backup\n{BEGIN}\n# note\n17 * * * * x\n{END}\n# trailing comment without newline");
        let (kept, minute) = split(&table).unwrap();
        assert_eq!(
            kept,
            "MAILTO=me\n0 1 * * * backup\n# trailing comment without newline"
        );
        assert_eq!(minute, Some(17));
        assert_eq!(split("").unwrap().0, "");
        // A block that never closes, or opens twice, changes nothing.
        let open = format!("MAILTO=me\n{BEGIN}\n17 * * * * x\n0 1 * * * backup\n");
        let e = split(&open).unwrap_err();
        assert!(e.contains("at line 2") && e.contains("no END line"), "{e}");
        let twice = format!("{BEGIN}\n17 * * * * x\n{BEGIN}\n0 1 * * * backup\n{END}\n");
        let e = split(&twice).unwrap_err();
        assert!(e.contains("another BEGIN line at line 3"), "{e}");
        assert_eq!(quote("/a b/it's").unwrap(), "'/a b/it'\\''s'");
        assert!(quote("/50%/x").is_err());
        let line = format!(
            "5 * * * * env PATH={} A={} {} capture",
            quote("/b").unwrap(),
            quote("it's").unwrap(),
            quote("/p q/almanac").unwrap()
        );
        assert_eq!(
            shell_words(&line)[5..],
            ["env", "PATH=/b", "A=it's", "/p q/almanac", "capture"]
        );
    }
}
