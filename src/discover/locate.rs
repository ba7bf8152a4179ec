//! Locating one transcript named on the command line: which rule set and store it belongs to (or the one
//! `--app` forces), as the found file a sweep would have produced for it.

use super::{resolve_roots, FoundFile};
use crate::context::Context;
use crate::rules::{Catalog, RuleSet};
use std::path::{Path, PathBuf};

/// The rule set and store a transcript belongs to, and where under the store's root it lies.
pub struct Match<'a> {
    pub rule: &'a RuleSet,
    pub store: String,
    pub root: PathBuf,
    pub root_from: String,
    pub rel: String,
}

/// Why a transcript could not be located.
#[derive(Debug)]
pub enum LocateError {
    CurrentDir(std::io::Error),
    Unreadable(PathBuf, std::io::Error),
    NotAFile(PathBuf),
    /// A store read into views that does not hold exactly one session (the text says what it holds).
    Store(PathBuf, String),
    /// `--app ID` names no loaded rule set.
    UnknownApp {
        id: String,
        loaded: Vec<String>,
    },
    /// Under no store root; `roots` lists every `app: root` looked at. `excluded` names the store
    /// `exclude` glob that refused it, when a store's root holds it and its `include` accepts it.
    NotInAnyStore {
        path: PathBuf,
        roots: Vec<String>,
        excluded: Option<String>,
    },
}

impl LocateError {
    /// A mistake in the command's arguments (rather than in the file).
    pub fn is_usage(&self) -> bool {
        matches!(self, LocateError::UnknownApp { .. })
    }
}

impl std::fmt::Display for LocateError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LocateError::CurrentDir(e) => write!(f, "cannot read the current directory: {e}"),
            LocateError::Unreadable(p, e) => write!(f, "{}: {e}", p.display()),
            LocateError::NotAFile(p) => write!(f, "{}: not a regular file", p.display()),
            LocateError::Store(p, why) => write!(f, "{}: {why}", p.display()),
            LocateError::UnknownApp { id, loaded } => write!(
                f,
                "--app \"{id}\": no such rule set (loaded: {})",
                loaded.join(", ")
            ),
            LocateError::NotInAnyStore {
                path,
                excluded: Some(why),
                ..
            } => write!(
                f,
                "{} is not a transcript: excluded by {why}; pass --app ID to apply a rule set anyway",
                path.display()
            ),
            LocateError::NotInAnyStore { path, roots, .. } => write!(
                f,
                "{} is not a transcript in any store ({}); pass --app ID to apply a rule set anyway",
                path.display(),
                roots.join("; ")
            ),
        }
    }
}

/// The first store (of the `forced` rule set only, when given) whose root holds `path` and whose globs
/// accept it. Roots are compared as given and canonicalised, so a symlinked root still matches. Err
/// carries the first `exclude` glob that refused it (`app store.exclude \`glob\``), if one did.
pub fn find_store<'a>(
    catalog: &'a Catalog,
    cx: &Context,
    path: &Path,
    forced: Option<&str>,
) -> Result<Match<'a>, Option<String>> {
    // A view (`views`): its app is the directory under the views root.
    if let Ok(rel) = path.strip_prefix(super::views::views_root(cx)) {
        let mut parts = rel.components();
        let app = parts
            .next()
            .map(|c| c.as_os_str().to_string_lossy().into_owned());
        let rule = app.as_deref().and_then(|a| catalog.get(a));
        if let Some(rule) = rule.filter(|r| forced.is_none_or(|f| f == r.id) && r.has_views()) {
            return Ok(Match {
                rule,
                store: "view".into(),
                root: super::views::views_root(cx).join(&rule.id),
                root_from: "views".into(),
                rel: parts.as_path().to_string_lossy().replace('\\', "/"),
            });
        }
    }
    let canonical = path.canonicalize().ok();
    let mut excluded = None;
    for rule in &catalog.sets {
        if forced.is_some_and(|f| f != rule.id) {
            continue;
        }
        for store in &rule.stores {
            for root in resolve_roots(store, cx) {
                let root_canon = root.path.canonicalize().ok();
                let rel = path.strip_prefix(&root.path).ok().or_else(|| {
                    match (&canonical, &root_canon) {
                        (Some(p), Some(r)) => p.strip_prefix(r).ok(),
                        _ => None,
                    }
                });
                if let Some(rel) = rel {
                    let rel = rel.to_string_lossy().replace('\\', "/");
                    if !store.include.is_match(&rel) {
                        continue;
                    }
                    if let Some(&i) = store.exclude.matches(&rel).iter().min() {
                        excluded.get_or_insert_with(|| {
                            let glob = &store.exclude_patterns[i];
                            format!("{} {}.exclude `{glob}`", rule.id, store.name)
                        });
                        continue;
                    }
                    return Ok(Match {
                        rule,
                        store: store.name.clone(),
                        root: root.path.clone(),
                        root_from: root.from.clone(),
                        rel,
                    });
                }
            }
        }
    }
    Err(excluded)
}

/// Finds the rule set and store a transcript belongs to (or applies `forced`), as a found file. A
/// relative `transcript` is taken from the current directory.
pub fn locate<'a>(
    catalog: &'a Catalog,
    cx: &Context,
    transcript: &Path,
    forced: Option<&str>,
) -> Result<(Match<'a>, FoundFile), LocateError> {
    let path = if transcript.is_absolute() {
        transcript.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(LocateError::CurrentDir)?
            .join(transcript)
    };
    let meta = std::fs::metadata(&path).map_err(|e| LocateError::Unreadable(path.clone(), e))?;
    if !meta.is_file() {
        return Err(LocateError::NotAFile(path));
    }
    if let Some(id) = forced {
        if catalog.get(id).is_none() {
            return Err(LocateError::UnknownApp {
                id: id.to_string(),
                loaded: catalog.ids().iter().map(|s| s.to_string()).collect(),
            });
        }
    }
    let m = match find_store(catalog, cx, &path, forced) {
        Ok(m) => m,
        Err(excluded) => match forced.and_then(|id| catalog.get(id)) {
            Some(rule) => forced_match(rule, &path),
            None => {
                return Err(LocateError::NotInAnyStore {
                    roots: all_roots(catalog, cx),
                    path,
                    excluded,
                })
            }
        },
    };
    // A store read into views: its one session's view stands for it.
    let (m, path, meta) = match view_of_store(catalog, cx, &m, &path) {
        Ok(Some((m, view))) => {
            let meta =
                std::fs::metadata(&view).map_err(|e| LocateError::Unreadable(view.clone(), e))?;
            (m, view, meta)
        }
        Ok(None) => (m, path, meta),
        Err(why) => return Err(LocateError::Store(path, why)),
    };
    let rel_offset = path.to_string_lossy().len().saturating_sub(m.rel.len());
    let file = FoundFile {
        app: std::sync::Arc::from(m.rule.id.as_str()),
        rel_offset,
        size: meta.len(),
        mtime: meta.modified().unwrap_or(std::time::SystemTime::UNIX_EPOCH),
        file_id: crate::platform::file_id(&path, &meta),
        path,
    };
    Ok((m, file))
}

/// When `m` is a store file read into views (not a view itself), the view of its one session, as a
/// match; None when it is not such a store; Err when it holds no session or several.
fn view_of_store<'a>(
    catalog: &'a Catalog,
    cx: &Context,
    m: &Match<'a>,
    path: &Path,
) -> Result<Option<(Match<'a>, PathBuf)>, String> {
    let spec = m
        .rule
        .stores
        .iter()
        .find(|s| s.name == m.store)
        .and_then(|s| s.kind.view());
    let Some(spec) = spec else { return Ok(None) };
    let known = super::registry::known(cx);
    // Inside a project, the same checks as a walk's: no link, not tracked by git.
    // (By the root it was found under: the path typed may reach the file another way.)
    if let Some(repo) = known.iter().find(|r| m.root.starts_with(r)) {
        let from_repo = m.root_from == super::KNOWN_REPOS;
        let inside = super::in_project::InProject::open(cx, (repo, from_repo), &m.root)?;
        let file = m.root.join(&m.rel);
        if let Some((_, why)) = inside.refuse(&file, &super::views::companions(spec, &file)) {
            return Err(why);
        }
    }
    let by_path = m.rule.subagent_path(&m.rel);
    let made = super::views::views_of(cx, (&m.rule.id, spec, by_path), path, &m.rel, &known);
    match (made.files.as_slice(), made.errors.into_iter().next()) {
        ([one], _) => {
            let one = one.clone();
            let found = find_store(catalog, cx, &one, Some(&m.rule.id)).map_err(|_| {
                format!("its view {} is not under the views root", one.display())
            })?;
            Ok(Some((found, one)))
        }
        ([], Some((_, e))) => Err(format!("cannot be read: {e}")),
        ([], None) => Err("holds no session".into()),
        (many, _) => Err(format!(
            "holds {} sessions; name one by its view path (`almanac capture sessions` lists them) or `capture now --session ID`",
            many.len()
        )),
    }
}

/// Forced onto a file outside the stores: the root is its directory, the relative path its file name.
fn forced_match<'a>(rule: &'a RuleSet, path: &Path) -> Match<'a> {
    Match {
        rule,
        store: "(none)".into(),
        root: path.parent().unwrap_or(Path::new("/")).to_path_buf(),
        root_from: "--app".into(),
        rel: path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
    }
}

fn all_roots(catalog: &Catalog, cx: &Context) -> Vec<String> {
    let mut roots = Vec::new();
    for rule in &catalog.sets {
        for store in &rule.stores {
            for r in resolve_roots(store, cx) {
                roots.push(format!("{}: {}", rule.id, r.path.display()));
            }
        }
    }
    roots
}

/// Every transcript of the rule sets `apps` names, modified within `max_age` when given, most recent
/// first (ties by path); those `subagent.paths` name only if `subagents` lists them.
pub fn recent<T: super::WalkItem>(
    catalog: &Catalog,
    cx: &Context,
    apps: &[String],
    max_age: Option<std::time::Duration>,
    subagents: super::SubagentFiles,
) -> Vec<T> {
    let mut walk = super::Walk::<T>::default();
    for id in apps {
        if let Some(rule) = catalog.get(id) {
            walk.rule_set(rule, cx, subagents);
        }
    }
    let (mut files, _) = walk.finish();
    let cutoff = max_age.map(|d| std::time::SystemTime::now() - d);
    files.retain(|f: &T| cutoff.is_none_or(|c| f.file().mtime >= c));
    // Unstable, so in place (a stable sort took a copy of half the list); no two files share a path.
    files.sort_unstable_by(|x, y| {
        let (x, y) = (x.file(), y.file());
        y.mtime.cmp(&x.mtime).then_with(|| x.path.cmp(&y.path))
    });
    files
}
