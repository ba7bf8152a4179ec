//! `rules validate`: which rule files are checked and what is wrong in them.

use super::output::Out;
use super::{Failure, EXIT_CONFIG, EXIT_OK};
use crate::context::Context;
use crate::rules;
use std::path::{Path, PathBuf};

/// Every rule file `rules validate` checks by default (the built-in ones and each rule directory's
/// YAML files), with the problems loading them finds.
fn default_rule_files(
    cx: &Context,
    rules_dir: Option<&Path>,
) -> (Vec<String>, Vec<rules::Diagnostic>) {
    let mut checked: Vec<String> = rules::BUILTIN_RULES
        .iter()
        .map(|(n, _)| format!("{n} (built in)"))
        .collect();
    checked.push(format!("{} (built in)", rules::BUILTIN_POLICY.0));
    for dir in rules::rule_dirs(&cx.almanac_home, rules_dir) {
        if let Ok(rd) = std::fs::read_dir(&dir) {
            let mut fs: Vec<String> = rd
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .map(|p| p.display().to_string())
                .collect();
            fs.sort();
            checked.extend(fs);
        }
    }
    let diags = match rules::load(&rules::rule_dirs(&cx.almanac_home, rules_dir)) {
        Ok(_) => Vec::new(),
        Err(d) => d,
    };
    (checked, diags)
}

pub(super) fn validate_command(
    cx: &Context,
    rules_dir: Option<&Path>,
    files: Vec<PathBuf>,
    out: &mut Out,
) -> Result<i32, Failure> {
    let (checked, diags) = if files.is_empty() {
        default_rule_files(cx, rules_dir)
    } else {
        (
            files.iter().map(|f| f.display().to_string()).collect(),
            rules::validate_files(&files),
        )
    };
    out.emit(
        || {
            let items: Vec<_> = diags
                .iter()
                .map(|d| serde_json::json!({"file": d.file, "field": d.field, "message": d.message, "help": d.help}))
                .collect();
            serde_json::json!({"ok": diags.is_empty(), "checked": checked, "errors": items})
        },
        |out| {
            if diags.is_empty() {
                for c in &checked {
                    out.line(&format!("ok {c}"));
                }
            }
        },
    );
    if diags.is_empty() {
        return Ok(EXIT_OK);
    }
    let mut lines: Vec<String> = diags.iter().map(|d| d.to_string()).collect();
    lines.push(format!("{} problem(s) in rule files", diags.len()));
    if !out.is_json() {
        return Err(Failure::Config(lines));
    }
    // The JSON object above already says what failed; stderr gets the lines, stdout no second object.
    for l in &lines {
        eprintln!("almanac: {l}");
    }
    Ok(EXIT_CONFIG)
}
