//! Reads the head of one transcript and applies a rule set's field sources and record tests. Streams line
//! by line and stops as soon as every field and test is settled, or at the rule's record/byte limits
//! (no record is read that starts past `head.max_bytes`). A record longer than a line may be held (a
//! first prompt with pasted screenshots, over 16 MiB) is parsed as it streams by (`rules::stream`),
//! keeping only what the rule reads, so its session id and cwd are found with bounded memory.

use crate::rules::doc::Pruned;
use crate::rules::pruned::parse_pruned;
use crate::rules::stream::parse_streamed;
use crate::rules::{RecordTest, RuleSet, SourceKind};
use crate::util::lines::LineReader;
use serde::Serialize;
use std::io::{self, Read};
use std::path::Path;

/// The value of a source read from the transcript's name, its path under its store root or a file
/// beside it; None for a record source, or one that gives nothing.
fn file_value(kind: &SourceKind, file_name: &str, at: Option<(&Path, &str)>) -> Option<String> {
    match kind {
        SourceKind::Record { .. } => None,
        SourceKind::Filename(re) => crate::rules::capture(re, file_name),
        SourceKind::Path(re) => {
            let rel = at?.1;
            Some(re.captures(rel)?.get(1)?.as_str().to_string()).filter(|v| !v.is_empty())
        }
        SourceKind::Sidecar {
            template,
            path,
            regex,
        } => {
            let file = crate::discover::views::sidecar_path(template, at?.0, "");
            let text = crate::discover::views::read_sidecar(&file, path.as_ref()).ok()??;
            match regex {
                Some(re) => crate::rules::capture(re, &text),
                None => Some(text).filter(|t| !t.is_empty()),
            }
        }
    }
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FieldResult {
    pub name: String,
    pub value: Option<String>,
    /// Index of the source that gave the value.
    pub source: Option<usize>,
    /// Line the value came from (None for file-name sources).
    pub line: Option<u64>,
    /// Per source: the first line whose record satisfied the source's `when` (for `rules explain`).
    pub first_seen: Vec<Option<u64>>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Verdict {
    /// What decided it, e.g. `path matches **/subagents/agent-*.jsonl` or a record test at a line.
    pub reason: String,
    pub line: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeadScan {
    pub fields: Vec<FieldResult>,
    pub subagent: Option<Verdict>,
    pub excluded: Option<Verdict>,
    /// JSON object records read.
    pub records: u32,
    /// Lines that were blank, not JSON, or not an object.
    pub skipped_lines: u32,
    pub bytes_read: u64,
}

impl HeadScan {
    pub fn get(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|f| f.name == name)
            .and_then(|f| f.value.as_deref())
    }
}

struct TestState {
    closed: Vec<bool>,
    verdict: Option<Verdict>,
}

impl TestState {
    fn new(tests: &[RecordTest], verdict: Option<Verdict>) -> Self {
        TestState {
            closed: vec![false; tests.len()],
            verdict,
        }
    }

    fn settled(&self) -> bool {
        self.verdict.is_some() || self.closed.iter().all(|c| *c)
    }

    /// A test a view's header gives is not applied to a file that is not a view (`view` false).
    fn new_for(tests: &[RecordTest], verdict: Option<Verdict>, view: bool) -> Self {
        let mut s = TestState::new(tests, verdict);
        for (i, t) in tests.iter().enumerate() {
            s.closed[i] = t.header && !view;
        }
        s
    }

    fn apply(&mut self, tests: &[RecordTest], record: &Pruned, line: u64) {
        if self.verdict.is_some() {
            return;
        }
        for (i, t) in tests.iter().enumerate() {
            if self.closed[i] || !t.when.as_ref().is_none_or(|w| w.holds(record)) {
                continue;
            }
            if t.first_only {
                self.closed[i] = true;
            }
            if t.test.holds(record) {
                self.verdict = Some(Verdict {
                    reason: t.describe.clone(),
                    line: Some(line),
                });
                return;
            }
        }
    }
}

/// `at`: the transcript's path and its path relative to the store root (`/`-separated), read by
/// subagent path globs and `path` and `sidecar` sources; None for a view, whose header says what its
/// store file's path gave.
pub fn scan_head<R: Read>(
    rule: &RuleSet,
    file_name: &str,
    at: Option<(&Path, &str)>,
    reader: R,
) -> io::Result<HeadScan> {
    let rel_path = at.map(|(_, rel)| rel);
    let mut fields: Vec<FieldResult> = rule
        .fields
        .iter()
        .map(|f| {
            let mut r = FieldResult {
                name: f.name.clone(),
                value: None,
                source: None,
                line: None,
                first_seen: vec![None; f.sources.len()],
            };
            // File-name, path and sidecar sources need no record; they count only if no earlier
            // source yields a value.
            for (i, s) in f.sources.iter().enumerate() {
                if let Some(v) = file_value(&s.kind, file_name, at) {
                    r.value = Some(v);
                    r.source = Some(i);
                    break;
                }
            }
            r
        })
        .collect();
    // closed[f][s]: source s of field f can no longer give a value (first_only consumed, or file name).
    let mut closed: Vec<Vec<bool>> = rule
        .fields
        .iter()
        .map(|f| {
            f.sources
                .iter()
                // A view header's source is read from views only: a JSONL transcript of a set with
                // stores of both kinds may hold a record shaped like a header, and it is not one.
                .map(|s| !matches!(s.kind, SourceKind::Record { .. }) || (s.header && at.is_some()))
                .collect()
        })
        .collect();

    let path_verdict = rel_path
        .and_then(|rel| rule.subagent_path(rel))
        .map(|glob| Verdict {
            reason: format!("path matches {glob}"),
            line: None,
        });
    let view = at.is_none();
    let mut subagent = TestState::new_for(&rule.subagent_records, path_verdict, view);
    let mut excluded = TestState::new_for(&rule.exclude_when, None, view);

    let field_settled = |fields: &[FieldResult], closed: &[Vec<bool>], i: usize| {
        let best = fields[i].source.unwrap_or(closed[i].len());
        closed[i][..best].iter().all(|c| *c)
    };
    let all_settled =
        |fields: &[FieldResult], closed: &[Vec<bool>], sub: &TestState, exc: &TestState| {
            (0..fields.len()).all(|i| field_settled(fields, closed, i))
                && sub.settled()
                && exc.settled()
        };

    let mut reader = LineReader::new(reader);
    let mut records = 0u32;
    let mut skipped_lines = 0u32;
    while records < rule.head.max_records
        && reader.bytes_read() < rule.head.max_bytes
        && !all_settled(&fields, &closed, &subagent, &excluded)
    {
        let stream = |r: &mut dyn Read| parse_streamed(r, &rule.head_reads);
        let Some((line, streamed)) = reader.next_line_streaming(stream)? else {
            break;
        };
        let record = match streamed {
            Some(Some(v @ serde_json::Value::Object(_))) => Some(Pruned::from_value(v)),
            Some(_) => None,
            None => parse_pruned(line.bytes, &rule.head_reads),
        };
        let Some(record) = record else {
            skipped_lines += 1;
            continue;
        };
        let line_no = line.number;
        records += 1;
        for (fi, field) in rule.fields.iter().enumerate() {
            if field_settled(&fields, &closed, fi) {
                continue;
            }
            let best = fields[fi].source.unwrap_or(field.sources.len());
            for (si, source) in field.sources.iter().enumerate().take(best) {
                if closed[fi][si] {
                    continue;
                }
                if !source.when.as_ref().is_none_or(|w| w.holds(&record)) {
                    continue;
                }
                fields[fi].first_seen[si].get_or_insert(line_no);
                if source.first_only {
                    closed[fi][si] = true;
                }
                if let Some(v) = source.extract(&record) {
                    fields[fi].value = Some(v);
                    fields[fi].source = Some(si);
                    fields[fi].line = Some(line_no);
                    break;
                }
            }
        }
        subagent.apply(&rule.subagent_records, &record, line_no);
        excluded.apply(&rule.exclude_when, &record, line_no);
    }
    // A session with a parent is a subagent's, wherever the parent came from.
    let subagent_verdict = subagent.verdict.or_else(|| {
        let f = fields.iter().find(|f| f.name == "parent_session")?;
        Some(Verdict {
            reason: format!("parent_session = {}", f.value.as_deref()?),
            line: f.line,
        })
    });
    Ok(HeadScan {
        fields,
        subagent: subagent_verdict,
        excluded: excluded.verdict,
        records,
        skipped_lines,
        bytes_read: reader.bytes_read(),
    })
}
