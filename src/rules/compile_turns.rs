//! The `turns` section of a rule set, compiled: what is a prompt, an answer, a tool call and its
//! argument, a tool result, and what to ignore or skip.

use super::compile::{predicate, Ctx};
use super::compiled::*;
use super::conversation::{ResultRule, Script, TextSource, ToolRule};
use super::raw::*;

pub(super) fn turns_rule(cx: &mut Ctx<'_>, t: &RawTurns, timestamps: &[JsonPath]) -> TurnsRule {
    let ignore = t
        .ignore
        .iter()
        .enumerate()
        .filter_map(|(i, p)| predicate(cx, &format!("turns.ignore[{i}]"), p))
        .collect();
    let skip = t
        .skip
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let from = predicate(cx, &format!("turns.skip[{i}].from"), &s.from);
            let until = predicate(cx, &format!("turns.skip[{i}].until"), &s.until);
            let until_after = match &s.until_after {
                Some(a) => Some(predicate(cx, &format!("turns.skip[{i}].until_after"), a)?),
                None => None,
            };
            let after = match &s.after {
                Some(a) => Some(predicate(cx, &format!("turns.skip[{i}].after"), a)?),
                None => None,
            };
            Some(Skip {
                from: from?,
                until: until?,
                until_after,
                earliest_line: s.earliest_line.unwrap_or(1),
                after,
            })
        })
        .collect();
    let user = texts(cx, "user", &t.user);
    let queue = t.queue.as_ref().and_then(|q| {
        let one = |cx: &mut Ctx<'_>, name: &str, p: &Option<super::raw::RawPredicate>| match p {
            Some(p) => predicate(cx, &format!("turns.queue.{name}"), p).map(Some),
            None => Some(None),
        };
        let deliver = one(cx, "deliver", &q.deliver);
        let inject = one(cx, "inject", &q.inject);
        let withdraw = one(cx, "withdraw", &q.withdraw);
        let command = match &q.command {
            Some(re) => Some(cx.regex("turns.queue.command", re)?),
            None => None,
        };
        Some(super::compiled::Queue {
            deliver: deliver?,
            inject: inject?,
            withdraw: withdraw?,
            command,
        })
    });
    let resends_prompt = optional_predicate(cx, "turns.resends_prompt", t.resends_prompt.as_ref());
    let assistant = texts(cx, "assistant", &t.assistant);
    let tools = tool_rules(cx, &t.tools);
    let results = result_rules(cx, &t.results);
    let thinking = texts(cx, "thinking", &t.thinking);
    let reports = texts(cx, "reports", &t.reports);
    let compaction = texts(cx, "compaction", &t.compaction);
    let mut rule = TurnsRule {
        ignore,
        merge_repeated_prompts: t.merge_repeated_prompts,
        resends_prompt: resends_prompt.flatten(),
        skip,
        user,
        queue,
        assistant,
        tools,
        results,
        thinking,
        reports,
        compaction,
        reads: super::needs::Need::All,
        render_reads: super::needs::Need::All,
        filter: None,
    };
    rule.reads = rule.needs(timestamps);
    rule.render_reads = rule.render_needs(timestamps);
    rule.filter = Some(super::prefilter::Prefilter::new(&rule));
    rule
}

/// `turns.user`, `assistant`, `thinking`, `reports` or `compaction` (`field`): where each finds its text.
fn texts(cx: &mut Ctx<'_>, field: &str, list: &[RawTurnText]) -> Vec<TurnText> {
    list.iter()
        .enumerate()
        .filter_map(|(i, t)| {
            let f = format!("turns.{field}[{i}]");
            let when = match &t.when {
                Some(w) => Some(predicate(cx, &format!("{f}.when"), w)?),
                None => None,
            };
            let paths: Vec<Option<JsonPath>> = t
                .text
                .iter()
                .enumerate()
                .map(|(j, p)| cx.path(&format!("{f}.text[{j}]"), p))
                .collect();
            let group = match &t.group {
                Some(g) => Some(cx.path(&format!("{f}.group"), g)?),
                None => None,
            };
            let placeholder = match &t.placeholder {
                Some(ph) => Some((
                    predicate(cx, &format!("{f}.placeholder.when"), &ph.when)?,
                    ph.text.clone(),
                )),
                None => None,
            };
            let extract = match &t.extract {
                Some(re) => Some(cx.regex(&format!("{f}.extract"), re)?),
                None => None,
            };
            if t.each_match && extract.is_none() {
                cx.err(
                    format!("{f}.each_match"),
                    "each_match needs an `extract` regex: it makes each of its matches a prompt",
                    "add `extract:` (the wrapper around each prompt), or remove each_match",
                );
                return None;
            }
            if t.label.is_some() && !matches!(field, "user" | "reports") {
                cx.err(
                    format!("{f}.label"),
                    "only a prompt or a report is shown with a label",
                    "remove `label`, or move the entry to `turns.user` or `turns.reports`",
                );
                return None;
            }
            Some(TurnText {
                when,
                text: paths.into_iter().collect::<Option<Vec<_>>>()?,
                group,
                queued: t.queued,
                placeholder,
                extract,
                each_match: t.each_match,
                label: t.label.clone(),
            })
        })
        .collect()
}

/// `turns.tools`: each call's name and main argument.
fn tool_rules(cx: &mut Ctx<'_>, list: &[RawTool]) -> Vec<ToolRule> {
    list.iter()
        .enumerate()
        .filter_map(|(i, tool)| {
            let f = format!("turns.tools[{i}]");
            let when = optional_predicate(cx, &format!("{f}.when"), tool.when.as_ref())?;
            let each = optional_path(cx, &format!("{f}.each"), tool.each.as_deref())?;
            let name = cx.path(&format!("{f}.name"), &tool.name);
            let argument = text_sources(cx, &format!("{f}.argument"), &tool.argument, true);
            let reason = text_sources(cx, &format!("{f}.reason"), &tool.reason, true);
            let script = match &tool.script {
                Some(sc) => {
                    let path = cx.path(&format!("{f}.script.path"), &sc.path);
                    let call = cx.regex(&format!("{f}.script.call"), &sc.call);
                    let argument =
                        text_sources(cx, &format!("{f}.script.argument"), &sc.argument, true);
                    let reason = text_sources(cx, &format!("{f}.script.reason"), &sc.reason, true);
                    Some(Script {
                        path: path?,
                        call: call?,
                        argument: argument?,
                        reason: reason?,
                    })
                }
                None => None,
            };
            if tool.script.is_some() && script.is_none() {
                return None;
            }
            Some(ToolRule {
                when,
                each,
                name: name?,
                argument: argument?,
                reason: reason?,
                script,
            })
        })
        .collect()
}

/// `turns.results`: tool results' text.
fn result_rules(cx: &mut Ctx<'_>, list: &[RawResult]) -> Vec<ResultRule> {
    list.iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let f = format!("turns.results[{i}]");
            let when = optional_predicate(cx, &format!("{f}.when"), r.when.as_ref())?;
            let each = optional_path(cx, &format!("{f}.each"), r.each.as_deref())?;
            let text = text_sources(cx, &format!("{f}.text"), &r.text, false);
            let failed = optional_predicate(cx, &format!("{f}.failed"), r.failed.as_ref());
            let exit_code = text_sources(cx, &format!("{f}.exit_code"), &r.exit_code, false);
            let error = text_sources(cx, &format!("{f}.error"), &r.error, false);
            let mut regex = |name: &str, re: &Option<String>| match re {
                Some(re) => cx.regex(&format!("{f}.{name}"), re).map(Some),
                None => Some(None),
            };
            // A preamble line is all one match: checked anchored, so that a line that is not one
            // fails at its first characters (every line of a result's start is tried).
            let preamble = match regex("preamble", &r.preamble) {
                Some(Some(_)) => regex(
                    "preamble",
                    &r.preamble.as_ref().map(|p| format!(r"\A(?:{p})\z")),
                ),
                other => other,
            };
            let brief = regex("brief", &r.brief);
            Some(ResultRule {
                when,
                each,
                text: text?,
                failed: failed?,
                exit_code: exit_code?,
                error: error?,
                preamble: preamble?,
                brief: brief?,
            })
        })
        .collect()
}

/// An optional predicate: `Some(None)` when there is none, None when it does not compile.
fn optional_predicate(
    cx: &mut Ctx<'_>,
    field: &str,
    p: Option<&super::raw::RawPredicate>,
) -> Option<Option<Predicate>> {
    match p {
        Some(p) => predicate(cx, field, p).map(Some),
        None => Some(None),
    }
}

/// An optional JSONPath: `Some(None)` when there is none, None when it does not parse.
fn optional_path(cx: &mut Ctx<'_>, field: &str, p: Option<&str>) -> Option<Option<JsonPath>> {
    match p {
        Some(p) => cx.path(field, p).map(Some),
        None => Some(None),
    }
}

/// Text sources (`turns.tools[].argument`, `turns.results[].text`); `tools` only where `for_calls`.
fn text_sources(
    cx: &mut Ctx<'_>,
    field: &str,
    list: &[RawTextSource],
    for_calls: bool,
) -> Option<Vec<TextSource>> {
    let each: Vec<Option<TextSource>> = list
        .iter()
        .enumerate()
        .map(|(j, s)| {
            let f = format!("{field}[{j}]");
            let full = match s {
                RawTextSource::Path(p) => {
                    return cx.path(&f, p).map(|path| TextSource {
                        tools: Vec::new(),
                        path,
                        json: None,
                        regex: None,
                        each_match: false,
                    })
                }
                RawTextSource::Full(full) => full,
            };
            if !for_calls && !full.tools.is_empty() {
                cx.err(
                    format!("{f}.tools"),
                    "only a tool call's argument is for some tools",
                    "remove `tools`, or move the source to `turns.tools[].argument`",
                );
                return None;
            }
            let path = cx.path(&format!("{f}.path"), &full.path);
            let json = optional_path(cx, &format!("{f}.json"), full.json.as_deref());
            let regex = match &full.regex {
                Some(r) => Some(cx.regex(&format!("{f}.regex"), r)?),
                None => None,
            };
            if full.each_match && regex.is_none() {
                cx.err(
                    format!("{f}.each_match"),
                    "each_match needs a `regex`: it takes group 1 of each of its matches",
                    "add `regex:`, or remove each_match",
                );
                return None;
            }
            Some(TextSource {
                tools: full.tools.clone(),
                path: path?,
                json: json?,
                regex,
                each_match: full.each_match,
            })
        })
        .collect();
    each.into_iter().collect()
}
