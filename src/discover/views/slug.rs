//! A project known only by a lossy slug of its path (Cursor's `~/.cursor/projects/<slug>/`: `/x/my_app`,
//! `/x/my-app`, `/x/my.app` and `/x/my/app` give the same one). A slug is evidence, not proof: a
//! session is placed on a known repo that gives its slug only when its own text confirms it, by naming a
//! path there (a file it read, a `working_directory`), and when it names no other directory that gives
//! the same slug. A session whose text names exactly one such directory, known or not, ran there. The
//! user may vouch for a slug in `[stores.slug_repos]`; otherwise an unconfirmed session stays unplaced,
//! and the words say which repo it may be and how to confirm it.

use regex::Regex;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The most paths one session's text is searched for.
const MAX_PATHS: usize = 200_000;

/// An absolute path in text: Unix or a drive letter, up to a character no path in a transcript holds.
fn path_regex() -> &'static Regex {
    static RE: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
    RE.get_or_init(|| Regex::new(r#"(?:[A-Za-z]:)?[\\/][^\s"'`<>|*?]+"#).expect("a valid regex"))
}

/// Hands every string of a session to its argument.
pub type Texts<'a> = dyn Fn(&mut dyn FnMut(&str)) + 'a;

/// What a slug's placement knows: the slug's regex and value, the known repos, the user's word.
pub struct Slug<'a> {
    pub chars: &'a str,
    pub slug: &'a str,
    pub known: &'a [PathBuf],
    /// `[stores.slug_repos]`: (slug, repo).
    pub vouched: &'a [(String, PathBuf)],
}

impl Slug<'_> {
    /// The directory the session ran in; `texts` hands every string of the session to its argument.
    pub fn place(&self, texts: &Texts) -> Result<String, String> {
        let Ok(re) = Regex::new(self.chars) else {
            return Err(format!("the slug regex /{}/ does not compile", self.chars));
        };
        let slug_of = |p: &str| re.replace_all(p, "-").trim_matches('-').to_string();
        let want = self.slug.trim_matches('-');
        if let Some((_, repo)) = self
            .vouched
            .iter()
            .find(|(s, _)| s.trim_matches('-') == want)
        {
            return Ok(repo.display().to_string());
        }
        let known: Vec<String> = self
            .known
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect();
        // Exactly as written, else regardless of case (a Windows drive letter is slugged lower-case).
        let mut fold = false;
        let mut candidates: Vec<&String> = known.iter().filter(|p| slug_of(p) == want).collect();
        if candidates.is_empty() {
            fold = true;
            candidates = known
                .iter()
                .filter(|p| slug_of(p).eq_ignore_ascii_case(want))
                .collect();
        }
        let key = |p: &str| -> String {
            let p = p.replace('\\', "/");
            let p = p.trim_end_matches('/');
            match fold {
                true => p.to_ascii_lowercase(),
                false => p.to_string(),
            }
        };
        let gives = |s: &str| s == want || (fold && s.eq_ignore_ascii_case(want));
        // A prefix shorter than the slug cannot give it (a run of characters becomes one `-`), nor can
        // one far longer in a real path: only those between are slugged, so a long run of `/` (a
        // base64 blob) costs its length, not its length squared.
        let lengths = want.len()..=want.len() * 4 + 64;
        // The directories the session's own text names that give the slug, by key.
        let mut named: BTreeMap<String, String> = BTreeMap::new();
        let mut paths = 0usize;
        texts(&mut |s: &str| {
            // A candidate named with spaces in it is not one match of the path regex.
            for c in &candidates {
                if names(s, c) {
                    named.entry(key(c)).or_insert_with(|| c.to_string());
                }
            }
            for m in path_regex().find_iter(s) {
                if paths >= MAX_PATHS {
                    break;
                }
                paths += 1;
                let p = unescape(m.as_str());
                let p = p.trim_end_matches(['.', ',', ':', ';', '!', ')', ']', '}']);
                for prefix in prefixes(p, *lengths.end()).filter(|x| lengths.contains(&x.len())) {
                    if gives(&slug_of(prefix)) {
                        named
                            .entry(key(prefix))
                            .or_insert_with(|| prefix.to_string());
                    }
                }
            }
        });
        let confirmed: Vec<&String> = candidates
            .iter()
            .copied()
            .filter(|c| named.contains_key(&key(c)))
            .collect();
        let others: Vec<&String> = named
            .iter()
            .filter(|(k, _)| !candidates.iter().any(|c| key(c) == **k))
            .map(|(_, p)| p)
            .collect();
        let vouch = format!(
            "add \"{want}\" = \"<the repo>\" under [stores.slug_repos] in config.toml to place it"
        );
        match (confirmed.as_slice(), others.as_slice()) {
            ([one], []) => Ok(one.to_string()),
            // Where its text says it ran, known or not, when that directory is there.
            ([], [one]) if Path::new(one.as_str()).is_dir() => Ok(one.to_string()),
            ([], []) if candidates.is_empty() => Err(format!(
                "the slug {want} matches none of the {} repos almanac knows (run `almanac init` in the project)",
                self.known.len()
            )),
            ([], []) => Err(format!(
                "the slug {want} is that of {} (a slug is lossy: other paths give it too), and nothing \
                 in the session names a path there to confirm it: run `almanac init` in the repo it \
                 ran in, or {vouch}",
                list(&candidates)
            )),
            (c, o) => {
                let all: Vec<&String> = c.iter().chain(o.iter()).copied().collect();
                Err(format!(
                    "the slug {want} is that of {} the session names: a slug cannot tell them apart; {vouch}",
                    list(&all)
                ))
            }
        }
    }
}

fn list(dirs: &[&String]) -> String {
    dirs.iter()
        .map(|d| d.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `text` names `dir` as a path: the directory itself, or a path below it.
fn names(text: &str, dir: &str) -> bool {
    text.match_indices(dir).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + dir.len()..].chars().next();
        let path_char = |c: char| c.is_alphanumeric() || matches!(c, '-' | '_' | '.');
        before.is_none_or(|c| !path_char(c) && c != '/' && c != '\\')
            && after.is_none_or(|c| matches!(c, '/' | '\\') || !path_char(c))
    })
}

/// `/a/b/c` → `/a`, `/a/b`, `/a/b/c`; `C:\a\b` → `C:`, `C:\a`, `C:\a\b`: those at most `longest` long.
fn prefixes(path: &str, longest: usize) -> impl Iterator<Item = &str> {
    let whole = path.trim_end_matches(['/', '\\']);
    path.char_indices()
        .take_while(move |&(i, _)| i <= longest)
        .filter(|&(i, c)| i > 0 && matches!(c, '/' | '\\'))
        .map(|(i, _)| &path[..i])
        .chain((whole.len() <= longest).then_some(whole))
}

/// A path found inside a JSON-encoded string keeps its escapes (`C:\\Users`): undone.
fn unescape(s: &str) -> std::borrow::Cow<'_, str> {
    match s.contains("\\\\") || s.contains("\\/") {
        true => std::borrow::Cow::Owned(s.replace("\\\\", "\\").replace("\\/", "/")),
        false => std::borrow::Cow::Borrowed(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CHARS: &str = "[^A-Za-z0-9]+";
    static CHARS_RE: std::sync::LazyLock<Regex> =
        std::sync::LazyLock::new(|| Regex::new(CHARS).unwrap());

    fn place(slug: &str, known: &[&str], text: &str) -> Result<String, String> {
        let known: Vec<PathBuf> = known.iter().map(PathBuf::from).collect();
        let s = Slug {
            chars: CHARS,
            slug,
            known: &known,
            vouched: &[],
        };
        s.place(&|f: &mut dyn FnMut(&str)| f(text))
    }

    #[test]
    fn a_slug_is_placed_on_the_repo_the_sessions_own_paths_confirm() {
        let known = ["/x/my-app", "/x/other"];
        let read = "[Tool call] ReadFile\n  path: /x/my-app/src/main.rs\n";
        assert_eq!(place("x-my-app", &known, read).unwrap(), "/x/my-app");
        // The session ran in /x/my_app: not the known repo, whatever the slug says; placed there when
        // that directory is there, else nowhere.
        let elsewhere = "working_directory: /x/my_app\n  path: /x/my_app/README.md";
        assert!(place("x-my-app", &known, elsewhere).is_err());
        let d = tempfile::tempdir().unwrap();
        let (mine, theirs) = (d.path().join("my_app"), d.path().join("my-app"));
        std::fs::create_dir_all(&mine).unwrap();
        let want = CHARS_RE
            .replace_all(&theirs.to_string_lossy(), "-")
            .trim_matches('-')
            .to_string();
        let text = format!("working_directory: {}", mine.display());
        let known_dirs = [theirs.to_str().unwrap()];
        assert_eq!(
            place(&want, &known_dirs, &text).unwrap(),
            mine.to_str().unwrap()
        );
        // A blob of a million slashes is one "path": read in its length, not its length squared.
        let blob = format!("data:{}", "/a".repeat(500_000));
        assert!(place("x-my-app", &known, &blob).is_err());
        // Nothing names a path: unplaced, with the candidate and how to confirm it.
        let e = place("x-my-app", &known, "what is a monad?").unwrap_err();
        assert!(
            e.contains("/x/my-app") && e.contains("[stores.slug_repos]"),
            "{e}"
        );
        // Both named: a slug cannot tell them apart.
        let e = place("x-my-app", &known, "cp /x/my_app/a /x/my-app/b").unwrap_err();
        assert!(e.contains("a slug cannot tell them apart"), "{e}");
        let e = place("x-gone", &known, "/x/my-app/a").unwrap_err();
        assert!(e.contains("matches none of the 2 repos"), "{e}");
    }

    #[test]
    fn two_known_repos_of_one_slug_are_told_apart_by_the_text_and_case_is_folded_with_proof() {
        let known = ["/home/u/my_app", "/home/u/my-app"];
        assert_eq!(
            place("home-u-my-app", &known, "edited /home/u/my_app/x.py.").unwrap(),
            "/home/u/my_app"
        );
        let win = [r"D:\1spbfq\video_player_app"];
        let text = r#"{"path":"D:\\1spbfq\\video_player_app\\lib\\main.dart"}"#;
        assert_eq!(
            place("d-1spbfq-video-player-app", &win, text).unwrap(),
            r"D:\1spbfq\video_player_app"
        );
        let e = place("d-1spbfq-video-player-app", &win, "no paths").unwrap_err();
        assert!(
            e.contains("nothing in the session names a path there"),
            "{e}"
        );
        // A repo path with a space is found as it is written.
        let spaced = ["/Users/me/My App"];
        let text = "opened /Users/me/My App/README.md";
        assert_eq!(
            place("Users-me-My-App", &spaced, text).unwrap(),
            "/Users/me/My App"
        );
    }

    #[test]
    fn the_users_word_places_a_slug() {
        let known: Vec<PathBuf> = vec!["/x/my-app".into()];
        let vouched = vec![("x-my-app".to_string(), PathBuf::from("/x/my-app"))];
        let s = Slug {
            chars: CHARS,
            slug: "x-my-app",
            known: &known,
            vouched: &vouched,
        };
        assert_eq!(s.place(&|_: &mut dyn FnMut(&str)| {}).unwrap(), "/x/my-app");
    }
}
