//! What the pieces of one script may share (test only).
//!
//! A script is joined from pieces (`script.rs`): helpers, a kind's check,
//! the request record's fragments, a kind's body. In one Lua chunk a
//! top-level `local` of one piece is visible to every piece after it, so
//! a piece could read another's variable without saying so — and a piece
//! that forgot to set it would be read as "not set", silently. The rule:
//!
//! * a piece may call a **function** an earlier piece defines (helpers,
//!   the body the record's epilogue runs), and read a **constant** one
//!   declares (named in capitals, set once: `JAVA_WAIT`);
//! * a piece reads no **variable** another piece declares: what pieces
//!   share is declared once in the script's first lines (`SHARED` in
//!   `script.rs`), with the value that takes the safe path; a kind's check
//!   hands its body what it read as fields of `found`;
//! * no piece declares a shared name again (it would hide the shared one
//!   from the pieces after it).
//!
//! The parse is line-based and knows this crate's Lua style: top-level
//! declarations start at column 0; comments are `--` to the end of the
//! line; strings are quoted on one line.

use crate::core::script::SHARED;

/// The names [`SHARED`] declares, read from it.
fn shared_names() -> Vec<&'static str> {
    SHARED.lines().flat_map(declared).collect()
}

/// Lua words that are not variables.
const KEYWORDS: &[&str] = &[
    "and", "break", "do", "else", "elseif", "end", "false", "for", "function", "goto", "if", "in",
    "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while",
];

/// A piece's code: comments and string literals blanked.
fn code(piece: &str) -> Vec<String> {
    piece
        .lines()
        .map(|line| {
            let mut out = String::with_capacity(line.len());
            let mut chars = line.chars().peekable();
            let mut quote: Option<char> = None;
            while let Some(c) = chars.next() {
                match quote {
                    Some(q) => {
                        if c == '\\' {
                            chars.next();
                        } else if c == q {
                            quote = None;
                        }
                        out.push(' ');
                    }
                    None if c == '\'' || c == '"' => {
                        quote = Some(c);
                        out.push(' ');
                    }
                    None if c == '-' && chars.peek() == Some(&'-') => break,
                    None => out.push(c),
                }
            }
            out
        })
        .collect()
}

/// The identifiers of a line of code, fields (`a.b`, `a:b`) left out.
fn identifiers(line: &str) -> Vec<&str> {
    let bytes = line.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let field = start > 0
                && matches!(bytes[start - 1], b'.' | b':')
                && !(start > 1 && bytes[start - 2] == b'.');
            if !field {
                out.push(&line[start..i]);
            }
        } else if c.is_ascii_digit() {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    out
}

/// The variables (not functions) a line declares with `local`, anywhere.
fn declared(line: &str) -> Vec<&str> {
    let Some(rest) = line.trim_start().strip_prefix("local ") else {
        return Vec::new();
    };
    if rest.trim_start().starts_with("function") {
        return Vec::new();
    }
    let names = rest.split('=').next().unwrap_or("");
    names
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect()
}

/// The variables a piece declares at top level (column 0).
fn top_level(piece: &[String]) -> Vec<String> {
    piece
        .iter()
        .filter(|l| l.starts_with("local "))
        .flat_map(|l| declared(l).into_iter().map(str::to_owned))
        .collect()
}

/// Every breach of the rule in a script joined from `pieces` (the first
/// may be `SHARED` itself), as readable lines; empty when it keeps it.
pub(crate) fn breaches(name: &str, pieces: &[&str]) -> Vec<String> {
    let pieces: Vec<Vec<String>> = pieces
        .iter()
        .filter(|p| !p.is_empty() && **p != SHARED)
        .map(|p| code(p))
        .collect();
    let shared_names = shared_names();
    let mut out = Vec::new();
    for (j, piece) in pieces.iter().enumerate() {
        let own: Vec<&str> = piece.iter().flat_map(|l| declared(l)).collect();
        for shared in &shared_names {
            if own.contains(shared) {
                out.push(format!(
                    "{name}: piece {j} declares the shared `{shared}` again"
                ));
            }
        }
        for (i, earlier) in pieces.iter().enumerate().take(j) {
            for var in top_level(earlier) {
                let constant = var
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_');
                if own.contains(&var.as_str()) || KEYWORDS.contains(&var.as_str()) || constant {
                    continue;
                }
                if piece.iter().any(|l| identifiers(l).contains(&var.as_str())) {
                    out.push(format!(
                        "{name}: piece {j} reads `{var}`, a variable piece {i} declares"
                    ));
                }
            }
        }
    }
    out
}

/// Panics with every breach in `scripts`.
pub(crate) fn check(scripts: &[&crate::core::script::Script]) {
    let mut all = Vec::new();
    for script in scripts {
        for pieces in script.pieces() {
            all.extend(breaches(script.name(), &pieces));
        }
    }
    assert!(
        all.is_empty(),
        "pieces share variables undeclared:\n{}",
        all.join("\n")
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variable_read_across_pieces_is_a_breach() {
        assert_eq!(
            shared_names(),
            [
                "early",
                "early_replay",
                "read_record",
                "write_record",
                "found"
            ]
        );
        let check = "local pttl = redis.call('pttl', KEYS[1])\nlocal early = nil\n";
        let body = "local function body()\n    return {pttl}\nend\n";
        let found = breaches("t", &[check, body]);
        assert_eq!(
            found,
            [
                "t: piece 0 declares the shared `early` again",
                "t: piece 1 reads `pttl`, a variable piece 0 declares",
            ]
        );
        // Functions are shared; fields of `found` and strings are not reads.
        let check = "local function helper() return 1 end\nfound.pttl = helper()\n";
        let body = "local function body()\n    local pttl = 'pttl'\n    return {found.pttl}\nend\n";
        assert!(breaches("t", &[check, body]).is_empty());
    }
}
