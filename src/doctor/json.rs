//! The report as JSON, written by hand (the crate has no JSON dependency).

use std::fmt::Write as _;

use super::DoctorReport;

/// `{"exit_code":N,"checks":[{"name","status","found","advice"}]}`.
pub(super) fn report(report: &DoctorReport) -> String {
    let mut out = format!("{{\"exit_code\":{},\"checks\":[", report.exit_code());
    for (i, c) in report.checks.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str("{\"name\":");
        string(&mut out, &c.name);
        out.push_str(",\"status\":");
        string(&mut out, c.status.as_str());
        out.push_str(",\"found\":");
        string(&mut out, &c.found);
        out.push_str(",\"advice\":");
        match &c.advice {
            Some(a) => string(&mut out, a),
            None => out.push_str("null"),
        }
        out.push('}');
    }
    out.push_str("]}");
    out
}

/// `s` as a JSON string, quotes included.
fn string(out: &mut String, s: &str) {
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::super::{Check, Status};
    use super::*;

    #[test]
    fn escapes_and_shape() {
        let r = DoctorReport {
            checks: vec![
                Check::ok("a", "q\"b\\s\n\u{1}é"),
                Check::new("b", Status::Warn, "x").advise("do"),
            ],
        };
        assert_eq!(
            report(&r),
            "{\"exit_code\":1,\"checks\":[{\"name\":\"a\",\"status\":\"ok\",\"found\":\"q\\\"b\\\\s\\n\\u0001é\",\"advice\":null},\
             {\"name\":\"b\",\"status\":\"warn\",\"found\":\"x\",\"advice\":\"do\"}]}"
        );
    }
}
