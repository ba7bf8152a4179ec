//! A line diff for a person to read (what `capture trust-prompt` shows of a changed prompt override):
//! `-` for a line only in the old text, `+` for one only in the new, two spaces for a line both share,
//! with long runs of shared lines shortened to the three on each side of a change.

/// Shared lines kept on each side of a change.
const CONTEXT: usize = 3;
/// Past this many line pairs the middle is not aligned line by line: it is shown removed, then added.
const MAX_CELLS: usize = 4_000_000;

/// The lines of `old` and `new` as a diff, one line each, without a trailing newline.
pub fn lines(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let ops = align(&a, &b);
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ops.len() {
        let (tag, line) = ops[i];
        if tag != ' ' {
            out.push(format!("{tag} {line}"));
            i += 1;
            continue;
        }
        let run_end = ops[i..]
            .iter()
            .position(|(t, _)| *t != ' ')
            .map_or(ops.len(), |n| i + n);
        let run = &ops[i..run_end];
        let (head, tail) = (i > 0, run_end < ops.len());
        let keep = CONTEXT * (usize::from(head) + usize::from(tail));
        // Nothing changed at all: the whole text.
        if run.len() <= keep + 1 || !(head || tail) {
            out.extend(run.iter().map(|(_, l)| format!("  {l}")));
        } else {
            if head {
                out.extend(run[..CONTEXT].iter().map(|(_, l)| format!("  {l}")));
            }
            let hidden = run.len() - keep;
            out.push(format!(
                "  … {hidden} unchanged line{} …",
                if hidden == 1 { "" } else { "s" }
            ));
            if tail {
                out.extend(
                    run[run.len() - CONTEXT..]
                        .iter()
                        .map(|(_, l)| format!("  {l}")),
                );
            }
        }
        i = run_end;
    }
    out.join("\n")
}

/// Each line tagged `' '`, `'-'` or `'+'`: the common prefix and suffix, and between them the longest
/// common subsequence (or, when that would take too long, the old middle then the new).
fn align<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<(char, &'a str)> {
    let pre = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suf = a[pre..]
        .iter()
        .rev()
        .zip(b[pre..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[pre..a.len() - suf], &b[pre..b.len() - suf]);
    let mut out: Vec<(char, &str)> = a[..pre].iter().map(|l| (' ', *l)).collect();
    if am.len().saturating_mul(bm.len()) > MAX_CELLS {
        out.extend(am.iter().map(|l| ('-', *l)));
        out.extend(bm.iter().map(|l| ('+', *l)));
    } else {
        // lcs[i][j]: the longest common subsequence of am[i..] and bm[j..].
        let w = bm.len() + 1;
        let mut lcs = vec![0u32; (am.len() + 1) * w];
        for i in (0..am.len()).rev() {
            for j in (0..bm.len()).rev() {
                lcs[i * w + j] = match am[i] == bm[j] {
                    true => lcs[(i + 1) * w + j + 1] + 1,
                    false => lcs[(i + 1) * w + j].max(lcs[i * w + j + 1]),
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < am.len() || j < bm.len() {
            if i < am.len() && j < bm.len() && am[i] == bm[j] {
                out.push((' ', am[i]));
                (i, j) = (i + 1, j + 1);
            } else if i < am.len() && (j == bm.len() || lcs[(i + 1) * w + j] >= lcs[i * w + j + 1])
            {
                out.push(('-', am[i]));
                i += 1;
            } else {
                out.push(('+', bm[j]));
                j += 1;
            }
        }
    }
    out.extend(a[a.len() - suf..].iter().map(|l| (' ', *l)));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_shown_with_three_lines_around_it() {
        let old: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        let new = old.replace("line 10\n", "line ten\nand more\n");
        let d = lines(&old, &new);
        assert_eq!(
            d,
            "  … 6 unchanged lines …\n  line 7\n  line 8\n  line 9\n- line 10\n+ line ten\n+ and more\n  line 11\n  line 12\n  line 13\n  … 7 unchanged lines …"
        );
        assert_eq!(lines("a\nb\n", "a\nb\n"), "  a\n  b");
        assert_eq!(lines("", "x\n"), "+ x");
        assert_eq!(lines("a\nx\nb\ny\n", "a\nb\n"), "  a\n- x\n  b\n- y");
    }
}
