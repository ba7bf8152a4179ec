//! The stages' dependencies run one way: no top-level module refers to one that (through others)
//! refers back to it. `refs` reads the crate's own sources and finds every `crate::<module>` path in
//! code that is not test code (`use` lines and paths inside expressions alike, `crate::{a, b}` groups
//! too); the test below fails on any circle, naming the files and lines that make it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A reference from one top-level module to another: (from, to) -> where (file:line).
pub type Refs = BTreeMap<(String, String), Vec<String>>;

/// The top-level module a source file belongs to (`src/ledger/file.rs` -> `ledger`, `src/init.rs` ->
/// `init`); None for the crate root and `main.rs`.
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let rel = file.strip_prefix(src).ok()?;
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.strip_suffix(".rs").unwrap_or(first);
    (!matches!(name, "lib" | "main")).then(|| name.to_string())
}

/// The lines of `text` that are not test code: a `#[cfg(test)]` item (a module, a function, a `use`)
/// is left out whole, as are files named `*_tests.rs` or `tests.rs` (test modules in their own file).
fn non_test_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut skip_next_item = false;
    let mut depth: i64 = 0;
    let mut skipping = false;
    for (i, line) in text.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        let trimmed = code.trim();
        if skipping {
            depth += braces(code);
            if depth <= 0 {
                skipping = false;
            }
            continue;
        }
        if trimmed.starts_with("#[cfg(test)]") {
            skip_next_item = true;
            continue;
        }
        if skip_next_item {
            if trimmed.is_empty() || trimmed.starts_with("#[") {
                continue;
            }
            skip_next_item = false;
            depth = braces(code);
            // An item that opens a block is skipped to its end; one that ends on this line (`use`,
            // `mod x;`) is this line alone.
            skipping = depth > 0;
            continue;
        }
        out.push((i + 1, line));
    }
    out
}

/// `{` minus `}` on a line, outside string and character literals.
fn braces(code: &str) -> i64 {
    let mut n = 0;
    let mut in_str = false;
    let mut prev = ' ';
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '"' if prev != '\\' => in_str = !in_str,
            '\'' if !in_str && i + 2 < chars.len() && chars[i + 2] == '\'' => {
                i += 3;
                prev = ' ';
                continue;
            }
            '{' if !in_str => n += 1,
            '}' if !in_str => n -= 1,
            _ => {}
        }
        prev = if c == '\\' && prev == '\\' { ' ' } else { c };
        i += 1;
    }
    n
}

/// The modules a line refers to through `crate::`.
fn targets(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item
                    .trim()
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                if !name.is_empty() {
                    out.push(name);
                }
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                out.push(name);
            }
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The files of modules declared `#[cfg(test)] mod name;` in `file` (`name.rs` or `name/mod.rs` in the
/// directory that holds `file`'s own submodules).
fn test_module_files(file: &Path, text: &str) -> Vec<PathBuf> {
    let dir = match file.file_name().and_then(|n| n.to_str()) {
        Some("mod.rs" | "lib.rs" | "main.rs") => file.parent().map(Path::to_path_buf),
        _ => file.parent().zip(file.file_stem()).map(|(d, s)| d.join(s)),
    };
    let Some(dir) = dir else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut after_cfg_test = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with("#[cfg(test)]") {
            after_cfg_test = true;
            continue;
        }
        if after_cfg_test {
            let decl = t.strip_prefix("pub ").unwrap_or(t);
            if let Some(name) = decl.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
                out.push(dir.join(format!("{name}.rs")));
                out.push(dir.join(name).join("mod.rs"));
            }
            after_cfg_test = t.starts_with("#[");
        }
    }
    out
}

/// Every reference between top-level modules in the non-test code under `src`.
pub fn refs(src: &Path) -> Refs {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files.sort();
    let test_only: BTreeSet<PathBuf> = files
        .iter()
        .flat_map(|f| test_module_files(f, &std::fs::read_to_string(f).unwrap_or_default()))
        .collect();
    let mut refs = Refs::new();
    for f in files {
        let Some(from) = module_of(src, &f) else {
            continue;
        };
        let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if test_only.contains(&f) || name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for (n, line) in non_test_lines(&text) {
            for to in targets(line) {
                if to != from {
                    let rel = f.strip_prefix(src).unwrap_or(&f).display().to_string();
                    refs.entry((from.clone(), to))
                        .or_default()
                        .push(format!("src/{rel}:{n}"));
                }
            }
        }
    }
    refs
}

/// The circles among the modules: each strongly connected set of two or more, sorted.
pub fn circles(refs: &Refs) -> Vec<BTreeSet<String>> {
    let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (from, to) in refs.keys() {
        edges.entry(from).or_default().insert(to);
        edges.entry(to).or_default();
    }
    let reach = |start: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start];
        while let Some(n) = todo.pop() {
            for m in edges.get(n).into_iter().flatten() {
                if seen.insert(*m) {
                    todo.push(m);
                }
            }
        }
        seen
    };
    let reachable: BTreeMap<&str, BTreeSet<&str>> = edges.keys().map(|n| (*n, reach(n))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for (n, r) in &reachable {
        let set: BTreeSet<String> = r
            .iter()
            .filter(|m| reachable[*m].contains(n))
            .map(|m| m.to_string())
            .chain(std::iter::once(n.to_string()))
            .collect();
        if set.len() > 1 && !out.contains(&set) {
            out.push(set);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_top_level_module_refers_back_to_itself() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let refs = refs(&src);
        assert!(
            refs.len() > 20,
            "the sources were read: {} references",
            refs.len()
        );
        let found = circles(&refs);
        let mut report = String::new();
        for c in &found {
            report.push_str(&format!("circle among {c:?}:\n"));
            for ((from, to), at) in &refs {
                if c.contains(from) && c.contains(to) {
                    report.push_str(&format!("  {from} -> {to}: {}\n", at.join(", ")));
                }
            }
        }
        assert!(found.is_empty(), "{report}");
    }

    #[test]
    fn the_check_sees_uses_groups_and_paths_but_not_tests() {
        let text = "use crate::{ledger, util::x};\nfn f() { crate::sweep::run(); }\n\
                    #[cfg(test)]\nmod tests {\n    use crate::cli;\n    fn g() { let s = \"}\"; }\n}\n\
                    #[cfg(test)]\nuse crate::policy;\nfn h() { crate::turns::x() }\n";
        let found: Vec<String> = non_test_lines(text)
            .into_iter()
            .flat_map(|(_, l)| targets(l))
            .collect();
        assert_eq!(found, ["ledger", "util", "sweep", "turns"]);
        let mut refs = Refs::new();
        for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
            refs.insert((a.into(), b.into()), vec![]);
        }
        let c = circles(&refs);
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].iter().collect::<Vec<_>>(), ["a", "b", "c"]);
        let declared = test_module_files(
            Path::new("src/util/mod.rs"),
            "pub mod atomic;\n#[cfg(test)]\npub mod testing;\n",
        );
        assert_eq!(declared[0], Path::new("src/util/testing.rs"));
        let nested = test_module_files(Path::new("src/turns/mod.rs"), "#[cfg(test)]\nmod tests;\n");
        assert_eq!(nested[0], Path::new("src/turns/tests.rs"));
    }
}
