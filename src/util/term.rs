//! Text almanac prints for a person comes partly from files others write: transcripts (a prompt can
//! hold anything a web page or a command printed), a planted ledger or run record. A terminal obeys
//! escape sequences in what it is given (clear the screen, set the title, write the clipboard with OSC
//! 52, hide text), so every line of human output passes through `visible` first: control characters
//! and the Unicode controls that reorder or hide text are shown as escapes (`\x1b`, `\r`, `\u{202e}`),
//! never sent as they are. Newlines and tabs stay (almanac's own layout uses them). `--json` output is
//! JSON-escaped by serde and left alone.

use std::borrow::Cow;

/// Whether `c` would act on a terminal (or on how the text reads) instead of being shown.
fn acts(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        // C0, DEL and C1 controls (U+009B is a one-character CSI).
        c if c.is_control() => true,
        // Bidirectional overrides and isolates ("Trojan Source"), and the characters that mark them.
        '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

/// `text` with every character that would act on a terminal written as a visible escape.
pub fn visible(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if !acts(c) {
            out.push(c);
            continue;
        }
        match c {
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_become_visible_and_plain_text_is_borrowed() {
        assert!(matches!(
            visible("plain text\twith tab\n"),
            Cow::Borrowed(_)
        ));
        assert_eq!(
            visible("a\x1b]52;c;ZXZpbA==\x07b\x1b[2Jc\rd"),
            "a\\x1b]52;c;ZXZpbA==\\x07b\\x1b[2Jc\\rd"
        );
        assert_eq!(visible("x\u{9b}31m\u{202e}y"), "x\\u{9b}31m\\u{202e}y");
        assert_eq!(visible("naïve ünïcode ✓"), "naïve ünïcode ✓");
    }
}
