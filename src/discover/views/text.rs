//! A plain-text transcript of one session (Cursor's agent transcripts): a line the rule's `block`
//! regex matches starts a message, group 1 its role; the lines after it, up to the next such line, are
//! its text. Each message is known by the byte offset of its first line, so a transcript that grows
//! (a reply still being written, a new exchange) keeps the ids of what was there. Text before the first
//! block is a message of no role.

use regex::Regex;
use serde_json::{json, Value};

/// The messages of a transcript: `{"id": "<offset>", "role": …, "text": …}` in order; an error when it
/// holds more than `max` (a file of tiny blocks would cost many times its size).
pub fn messages(block: &Regex, bytes: &[u8], max: usize) -> Result<Vec<Value>, String> {
    let text = String::from_utf8_lossy(bytes);
    let mut out: Vec<(usize, Option<String>, String)> = Vec::new();
    let mut offset = 0;
    for raw in text.split_inclusive('\n') {
        let at = offset;
        offset += raw.len();
        let line = raw.trim_end_matches(['\n', '\r']);
        if let Some(c) = block.captures(line) {
            if out.len() == max {
                return Err(super::read::too_many(max));
            }
            let role = c.get(1).map_or("", |g| g.as_str()).to_string();
            out.push((at, Some(role), String::new()));
            continue;
        }
        match out.last_mut() {
            Some((_, _, body)) => {
                body.push_str(line);
                body.push('\n');
            }
            None if line.trim().is_empty() => {}
            None => out.push((at, None, format!("{line}\n"))),
        }
    }
    Ok(out
        .into_iter()
        .map(|(at, role, body)| json!({"id": at.to_string(), "role": role, "text": body.trim()}))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_messages_known_by_their_offsets() {
        let re = Regex::new(r"^(user|assistant):\s*$").unwrap();
        let t = "user:\n<user_query>\nhi\n</user_query>\n\nassistant:\nHello.\n\nuser: not a block\nuser:\nmore\n";
        let m = messages(&re, t.as_bytes(), 100).unwrap();
        assert_eq!(m.len(), 3, "{m:?}");
        assert_eq!(m[0]["id"], "0");
        assert_eq!(m[0]["role"], "user");
        assert_eq!(m[0]["text"], "<user_query>\nhi\n</user_query>");
        assert_eq!(m[1]["role"], "assistant");
        assert_eq!(m[1]["text"], "Hello.\n\nuser: not a block");
        assert_eq!(m[1]["id"], t.find("assistant:").unwrap().to_string());
        // Grown in place: the ids of what was there are kept.
        let grown = format!("{t}and more\n\nassistant:\nok\n");
        let g = messages(&re, grown.as_bytes(), 100).unwrap();
        assert_eq!(g.len(), 4);
        assert_eq!(g[2]["id"], m[2]["id"]);
        assert_eq!(g[2]["text"], "more\nand more");
        let pre = messages(&re, b"\n\nheader\nuser:\nq\n", 100).unwrap();
        let e = messages(&re, "user:\nq\n".repeat(5).as_bytes(), 4).unwrap_err();
        assert!(e.contains("more than 4 messages"), "{e}");
        assert_eq!(pre[0]["role"], Value::Null);
        assert_eq!(pre[0]["text"], "header");
        assert_eq!(pre[1]["id"], "9");
    }
}
