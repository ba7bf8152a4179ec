//! Store roots: a rule set's `roots` made directories (environment variables, defaults, the repos
//! almanac knows), and which apps that are off have a store on this machine.

use super::registry;
use crate::context::Context;
use crate::rules::Store;
use serde::Serialize;
use std::path::PathBuf;

/// `ResolvedRoot::from` of a root that is a repo almanac knows.
pub const KNOWN_REPOS: &str = "known repos";

/// A store root after environment expansion.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedRoot {
    pub store: String,
    pub path: PathBuf,
    /// `$VAR` when the directory came from an environment variable, else `default`.
    pub from: String,
    pub exists: bool,
    /// The known repo the directory is in, for a root of stores inside projects.
    #[serde(skip)]
    pub repo: Option<PathBuf>,
}

/// Resolves a store's roots: a root with `env` uses the variable's directories (split on `split`) when it
/// is set and non-empty, else its defaults; `join` is appended unless the directory already ends with it.
pub fn resolve_roots(store: &Store, cx: &Context) -> Vec<ResolvedRoot> {
    let mut out: Vec<ResolvedRoot> = Vec::new();
    for spec in &store.roots {
        let from_env = spec
            .env
            .as_ref()
            .and_then(|name| cx.var(name).map(|v| (name, v)))
            .filter(|(_, v)| !v.trim().is_empty());
        if spec.known_repos {
            for repo in registry::known(cx) {
                let path = match &spec.join {
                    Some(j) => repo.join(j),
                    None => repo.clone(),
                };
                if !out.iter().any(|r| r.path == path) {
                    out.push(ResolvedRoot {
                        store: store.name.clone(),
                        exists: path.is_dir(),
                        path,
                        from: KNOWN_REPOS.into(),
                        repo: Some(repo),
                    });
                }
            }
            continue;
        }
        let (dirs, from): (Vec<String>, String) = match from_env {
            Some((name, value)) => {
                let parts = match &spec.split {
                    Some(sep) => value
                        .split(sep.as_str())
                        .map(|s| s.trim().to_string())
                        .collect(),
                    None => vec![value.trim().to_string()],
                };
                (
                    parts.into_iter().filter(|s| !s.is_empty()).collect(),
                    format!("${name}"),
                )
            }
            None => (spec.default.clone(), "default".into()),
        };
        for d in dirs {
            let mut path = crate::util::paths::expand_home(&d, &cx.home);
            if let Some(j) = &spec.join {
                if path.file_name().is_none_or(|n| n != j.as_str()) {
                    path.push(j);
                }
            }
            if out.iter().any(|r| r.path == path) {
                continue;
            }
            out.push(ResolvedRoot {
                store: store.name.clone(),
                exists: path.is_dir(),
                path,
                from: from.clone(),
                repo: None,
            });
        }
    }
    out
}

/// A rule set this machine has transcripts for (a store root exists) that `enabled` (the apps a sweep
/// covers) leaves out, with the roots that exist.
pub struct IdleApp<'a> {
    pub rule: &'a crate::rules::RuleSet,
    pub roots: Vec<PathBuf>,
}

/// The rule sets not in `enabled` whose store roots exist here (`doctor` and `rules list` say how to
/// enable them).
pub fn idle_apps<'a>(
    catalog: &'a crate::rules::Catalog,
    cx: &Context,
    enabled: &[String],
) -> Vec<IdleApp<'a>> {
    catalog
        .sets
        .iter()
        .filter(|s| !enabled.contains(&s.id))
        .filter_map(|rule| {
            // A known repo is a root of stores that live inside projects: it counts when it holds one.
            let holds = |st: &Store, r: &ResolvedRoot| {
                r.from != KNOWN_REPOS || st.include_patterns.iter().any(|p| r.path.join(p).exists())
            };
            let roots: Vec<PathBuf> = rule
                .stores
                .iter()
                .flat_map(|st| resolve_roots(st, cx).into_iter().map(move |r| (st, r)))
                .filter(|(st, r)| r.exists && holds(st, r))
                .map(|(_, r)| r.path)
                .collect();
            (!roots.is_empty()).then_some(IdleApp { rule, roots })
        })
        .collect()
}
