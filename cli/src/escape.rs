//! Text from the store, made safe to print on a terminal.
//!
//! Any client can write lock names, holder ids, client records (name, host) and election
//! candidates: an escape sequence among them would retitle the operator's window, clear the
//! screen or hide text. Text output shows them escaped (`\x1b`, `\u{202e}`); `--json` output
//! carries them exactly, as JSON escapes them.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with control characters (C0, DEL, C1), the characters that reorder or hide text
/// (bidirectional controls, zero-width characters) and `\` escaped, Rust-style; unchanged (not
/// copied) when there is nothing to escape.
pub fn escaped(text: &str) -> Cow<'_, str> {
    escape(text, true)
}

/// `text` with what a terminal would act on escaped as [`escaped`] does, but not `\`: for
/// messages, whose names are escaped already and may quote what a server said.
pub fn terminal_safe(text: &str) -> Cow<'_, str> {
    escape(text, false)
}

fn escape(text: &str, backslash: bool) -> Cow<'_, str> {
    let needs_escape = |c: char| (backslash && c == '\\') || acted_on(c);
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\\' if backslash => shown.push_str("\\\\"),
            '\n' => shown.push_str("\\n"),
            '\r' => shown.push_str("\\r"),
            '\t' => shown.push_str("\\t"),
            c if u32::from(c) < 0x80 && needs_escape(c) => {
                let _ = write!(shown, "\\x{:02x}", u32::from(c));
            }
            c if needs_escape(c) => {
                let _ = write!(shown, "\\u{{{:x}}}", u32::from(c));
            }
            c => shown.push(c),
        }
    }
    Cow::Owned(shown)
}

/// `text` escaped as [`escaped`] does, in double quotes (with `"` escaped too): a name, as the
/// messages show names.
pub fn quoted(text: &str) -> String {
    let escaped = escaped(text);
    format!("\"{}\"", escaped.replace('"', "\\\""))
}

/// Whether a terminal would act on `c` (or show it as something it is not).
fn acted_on(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' // Arabic letter mark
                | '\u{200b}'..='\u{200f}' // zero-width characters, LRM, RLM
                | '\u{2028}'..='\u{202e}' // line and paragraph separators, embeddings, overrides
                | '\u{2060}'..='\u{2069}' // word joiner, invisible operators, isolates
                | '\u{feff}' // zero-width no-break space
        )
}

#[cfg(test)]
mod tests {
    use super::{escaped, quoted, terminal_safe};

    #[test]
    fn what_a_terminal_would_act_on_is_escaped() {
        for (text, shown) in [
            ("plain:42", "plain:42"),
            ("é ü 日本", "é ü 日本"),
            ("\u{1b}]0;owned\u{7}", "\\x1b]0;owned\\x07"),
            ("\u{1b}[2J\u{1b}[8mhidden", "\\x1b[2J\\x1b[8mhidden"),
            ("a\nb\r\tc", "a\\nb\\r\\tc"),
            ("\u{9b}31m", "\\u{9b}31m"),
            ("abc\u{202e}fed", "abc\\u{202e}fed"),
            ("zero\u{200b}width", "zero\\u{200b}width"),
            ("back\\slash", "back\\\\slash"),
            ("del\u{7f}", "del\\x7f"),
        ] {
            assert_eq!(escaped(text), shown, "{text:?}");
        }
        assert_eq!(quoted("say \"hi\"\u{1b}"), "\"say \\\"hi\\\"\\x1b\"");
        assert_eq!(terminal_safe("\"a\\x1b\" \u{1b}[2J"), "\"a\\x1b\" \\x1b[2J");
    }
}
