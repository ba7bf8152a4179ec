//! The tool calls a script makes (`turns.tools[].script`): an agent that writes a program calling its
//! tools (Codex's code mode, 0.144+: a `custom_tool_call` named `exec` whose input is JavaScript such as
//! `const r = await tools.exec_command({ cmd: "git status", workdir: "/src" }); text(r.output);`) has
//! its calls inside that program. Each match of the rule's regex is one call, and the value written
//! right after it is its argument: read as JavaScript writes a literal (JSON, plus unquoted keys,
//! single quotes, template strings without `${…}`, trailing commas and comments). A value the reader
//! cannot take as a literal (a variable, an expression) is `null`, and the rest is read on.

use regex::Regex;
use serde_json::{Map, Value};

/// The calls in `script`: each match of `call` (group 1 the tool's name) with the value after it, at
/// most `max`.
pub fn calls(call: &Regex, script: &str, max: usize) -> Vec<(String, Value)> {
    call.captures_iter(script)
        .filter_map(|c| {
            let name = c.get(1)?.as_str().to_string();
            let end = c.get(0)?.end();
            let mut p = Parser {
                s: script.as_bytes(),
                i: end,
                depth: 0,
            };
            p.ws();
            let value = match p.peek() {
                Some(b')') | None => Value::Null,
                _ => p.value().unwrap_or(Value::Null),
            };
            Some((name, value))
        })
        .take(max)
        .collect()
}

/// Nesting read at most (deeper values are `null`).
const MAX_DEPTH: u32 = 64;

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    depth: u32,
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    /// Whitespace and comments.
    fn ws(&mut self) {
        loop {
            match (self.peek(), self.s.get(self.i + 1)) {
                (Some(b' ' | b'\n' | b'\r' | b'\t'), _) => self.i += 1,
                (Some(b'/'), Some(b'/')) => {
                    while !matches!(self.peek(), Some(b'\n') | None) {
                        self.i += 1;
                    }
                }
                (Some(b'/'), Some(b'*')) => {
                    self.i += 2;
                    while self.i < self.s.len() && !self.s[self.i..].starts_with(b"*/") {
                        self.i += 1;
                    }
                    self.i = (self.i + 2).min(self.s.len());
                }
                _ => return,
            }
        }
    }

    /// One value; None (the reader past it) when it is not a literal.
    fn value(&mut self) -> Option<Value> {
        self.ws();
        match self.peek()? {
            b'{' => self.nested(|p| p.object()),
            b'[' => self.nested(|p| p.array()),
            q @ (b'"' | b'\'' | b'`') => self.string(q).map(Value::String),
            b'-' | b'0'..=b'9' | b'.' => {
                let start = self.i;
                while matches!(
                    self.peek(),
                    Some(b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9')
                ) {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).ok()?;
                serde_json::from_str::<serde_json::Number>(text)
                    .ok()
                    .map(Value::Number)
                    .or_else(|| self.rest_of_expression())
            }
            _ => {
                let word = self.word();
                match word {
                    "true" if self.at_value_end() => Some(Value::Bool(true)),
                    "false" if self.at_value_end() => Some(Value::Bool(false)),
                    "null" | "undefined" if self.at_value_end() => Some(Value::Null),
                    _ => self.rest_of_expression(),
                }
            }
        }
    }

    fn nested(&mut self, f: impl FnOnce(&mut Self) -> Option<Value>) -> Option<Value> {
        if self.depth >= MAX_DEPTH {
            return self.rest_of_expression();
        }
        self.depth += 1;
        let v = f(self);
        self.depth -= 1;
        v
    }

    fn word(&mut self) -> &'a str {
        let (s, start) = (self.s, self.i);
        while matches!(self.peek(), Some(c) if c == b'_' || c == b'$' || c.is_ascii_alphanumeric())
        {
            self.i += 1;
        }
        std::str::from_utf8(&s[start..self.i]).unwrap_or("")
    }

    fn at_value_end(&mut self) -> bool {
        self.ws();
        matches!(self.peek(), Some(b',' | b'}' | b']' | b')') | None)
    }

    /// Skips an expression up to the `,`, `}`, `]` or `)` that ends it (brackets and strings in it
    /// balanced): not a literal.
    fn rest_of_expression(&mut self) -> Option<Value> {
        let mut depth = 0u32;
        while let Some(c) = self.peek() {
            match c {
                b'"' | b'\'' | b'`' => {
                    self.string(c);
                    continue;
                }
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' | b',' if depth == 0 => return None,
                b')' | b']' | b'}' => depth -= 1,
                _ => {}
            }
            self.i += 1;
        }
        None
    }

    /// A quoted string (the reader at its opening quote). A template's substitutions are kept as
    /// written (`gh pr view ${n}`): what the command is, if not its value.
    fn string(&mut self, quote: u8) -> Option<String> {
        self.i += 1;
        let mut out = Vec::new();
        while let Some(c) = self.peek() {
            self.i += 1;
            match c {
                _ if c == quote => return Some(String::from_utf8_lossy(&out).into_owned()),
                b'$' if quote == b'`' && self.peek() == Some(b'{') => {
                    let start = self.i - 1;
                    self.i += 1;
                    let _ = self.rest_of_expression();
                    if self.peek() == Some(b'}') {
                        self.i += 1;
                    }
                    out.extend_from_slice(&self.s[start..self.i]);
                }
                b'\\' => self.escape(&mut out),
                c => out.push(c),
            }
        }
        None
    }

    /// The escape after a backslash, onto `out`.
    fn escape(&mut self, out: &mut Vec<u8>) {
        let Some(c) = self.peek() else { return };
        self.i += 1;
        let ch = match c {
            b'n' => '\n',
            b't' => '\t',
            b'r' => '\r',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'0' => '\0',
            b'u' => {
                let hex = |p: &mut Self, n: usize| {
                    let h = p.s.get(p.i..p.i + n)?;
                    let v = u32::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok()?;
                    p.i += n;
                    Some(v)
                };
                let code = match self.peek() {
                    Some(b'{') => {
                        let close = self.s[self.i..].iter().position(|b| *b == b'}');
                        close.and_then(|e| {
                            let v = std::str::from_utf8(&self.s[self.i + 1..self.i + e]).ok()?;
                            let v = u32::from_str_radix(v, 16).ok()?;
                            self.i += e + 1;
                            Some(v)
                        })
                    }
                    _ => hex(self, 4).map(|hi| {
                        // A surrogate pair written as two escapes.
                        if (0xD800..0xDC00).contains(&hi) && self.s[self.i..].starts_with(b"\\u") {
                            let save = self.i;
                            self.i += 2;
                            match hex(self, 4) {
                                Some(lo) if (0xDC00..0xE000).contains(&lo) => {
                                    return 0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00);
                                }
                                _ => self.i = save,
                            }
                        }
                        hi
                    }),
                };
                code.and_then(char::from_u32).unwrap_or('\u{FFFD}')
            }
            b'\n' => return,
            c => {
                out.push(c);
                return;
            }
        };
        let mut buf = [0u8; 4];
        out.extend_from_slice(ch.encode_utf8(&mut buf).as_bytes());
    }

    fn object(&mut self) -> Option<Value> {
        self.i += 1;
        let mut map = Map::new();
        loop {
            self.ws();
            let key = match self.peek()? {
                b'}' => {
                    self.i += 1;
                    return Some(Value::Object(map));
                }
                q @ (b'"' | b'\'') => self.string(q)?,
                _ => self.word().to_string(),
            };
            self.ws();
            match self.peek()? {
                b':' => {
                    self.i += 1;
                    let v = self.value().unwrap_or(Value::Null);
                    map.insert(key, v);
                }
                // `{ cmd }`: shorthand for a variable, not a literal.
                b',' | b'}' if !key.is_empty() => {
                    map.insert(key, Value::Null);
                }
                _ => return self.rest_of_expression(),
            }
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b'}' => {}
                _ => return self.rest_of_expression(),
            }
        }
    }

    fn array(&mut self) -> Option<Value> {
        self.i += 1;
        let mut items = Vec::new();
        loop {
            self.ws();
            if self.peek()? == b']' {
                self.i += 1;
                return Some(Value::Array(items));
            }
            items.push(self.value().unwrap_or(Value::Null));
            self.ws();
            match self.peek()? {
                b',' => self.i += 1,
                b']' => {}
                _ => return self.rest_of_expression(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call() -> Regex {
        Regex::new(r"\btools\.([A-Za-z_][A-Za-z0-9_]*)\(").unwrap()
    }

    #[test]
    fn each_call_and_its_literal_argument() {
        // As Codex 0.145's code mode writes them (tests/fixtures/corpus/codex/0.145.0-alpha.30).
        let script = "const results = await Promise.all([\n  tools.exec_command({\n    cmd: \"entire trail show 8 --json\",\n    workdir: \"/Users/t/p\",\n    yield_time_ms: 10000,\n  }),\n  tools.exec_command({ 'cmd': 'git log --oneline -12', max_output_tokens: 1e4 }) // why\n]);\nconst p = await tools.apply_patch(\"*** Begin Patch\\n*** Update File: a.rs\\n@@\\n*** End Patch\");\nawait tools.web__run({ q: `rust ${x}`, n: [1, 2,], flag: true, dir });\nfor (const r of results) text(r.output);\n";
        let got = calls(&call(), script, 10);
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            ["exec_command", "exec_command", "apply_patch", "web__run"]
        );
        assert_eq!(got[0].1["cmd"], "entire trail show 8 --json");
        assert_eq!(got[0].1["yield_time_ms"], 10000);
        assert_eq!(got[1].1["cmd"], "git log --oneline -12");
        assert_eq!(
            got[2].1,
            Value::String("*** Begin Patch\n*** Update File: a.rs\n@@\n*** End Patch".into())
        );
        // A template's substitution is kept as written; a shorthand property is no literal.
        assert_eq!(got[3].1["q"], "rust ${x}");
        assert_eq!(got[3].1["n"], serde_json::json!([1, 2]));
        assert_eq!(got[3].1["flag"], true);
        assert_eq!(got[3].1["dir"], Value::Null);
    }

    #[test]
    fn what_is_not_a_literal_is_null_and_nothing_breaks() {
        let got = calls(
            &call(),
            "tools.exec_command(args); tools.exec_command({ cmd: base + \" -v\", workdir }); tools.x(\"\\u00e9\\ud83d\\ude00\\ud83d\"); tools.y(",
            10,
        );
        assert_eq!(got[0].1, Value::Null);
        assert_eq!(got[1].1["cmd"], Value::Null);
        assert_eq!(got[2].1, Value::String("é😀\u{FFFD}".into()));
        assert_eq!(got[3].1, Value::Null);
        let deep = format!("tools.z({}{})", "[".repeat(200), "]".repeat(200));
        assert_eq!(calls(&call(), &deep, 1).len(), 1);
        assert_eq!(calls(&call(), &"tools.a(1);".repeat(100), 64).len(), 64);
    }
}
