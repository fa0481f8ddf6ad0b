//! Messages on stderr: one line each, `redlock-run: ...` or one JSON object.
//!
//! Nothing is printed on success unless `--verbose` (cron mails any output). Problems are
//! always printed, except a busy lock under `--quiet`.

use std::fmt::Display;
use std::io::Write;
use std::time::SystemTime;

use crate::cli::LogFormat;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Error,
    Warn,
    Info,
}

impl Level {
    fn as_str(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
        }
    }
}

#[derive(Debug, Clone)]
pub struct Reporter {
    format: LogFormat,
    quiet: bool,
    verbose: bool,
    key: Option<String>,
}

impl Reporter {
    pub fn new(format: LogFormat, quiet: bool, verbose: bool) -> Reporter {
        Reporter {
            format,
            quiet,
            verbose,
            key: None,
        }
    }

    /// Name the lock key in every later JSON line.
    pub fn with_key(mut self, key: &str) -> Reporter {
        self.key = Some(key.to_owned());
        self
    }

    pub fn verbose(&self) -> bool {
        self.verbose
    }

    pub fn error(&self, event: &str, msg: impl Display) {
        self.emit(Level::Error, event, &msg.to_string());
    }

    pub fn warn(&self, event: &str, msg: impl Display) {
        self.emit(Level::Warn, event, &msg.to_string());
    }

    /// Only with --verbose.
    pub fn info(&self, event: &str, msg: impl Display) {
        if self.verbose {
            self.emit(Level::Info, event, &msg.to_string());
        }
    }

    /// The lock stayed busy: silent under --quiet.
    pub fn busy(&self, msg: impl Display) {
        if !self.quiet {
            self.emit(Level::Error, "busy", &msg.to_string());
        }
    }

    fn emit(&self, level: Level, event: &str, msg: &str) {
        let line = match self.format {
            LogFormat::Text => format!("redlock-run: {msg}\n"),
            LogFormat::Json => self.json_line(level, event, msg),
        };
        // One write per line, so lines from concurrent wrappers on one stderr do not interleave.
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }

    fn json_line(&self, level: Level, event: &str, msg: &str) -> String {
        let time = humantime::format_rfc3339_millis(SystemTime::now());
        let mut line = format!(
            "{{\"time\":\"{time}\",\"level\":\"{}\",\"event\":{}",
            level.as_str(),
            json_string(event)
        );
        if let Some(key) = &self.key {
            line.push_str(&format!(",\"key\":{}", json_string(key)));
        }
        line.push_str(&format!(
            ",\"pid\":{},\"message\":{}}}\n",
            std::process::id(),
            json_string(msg)
        ));
        line
    }
}

/// `s` as a JSON string literal.
pub fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
    }

    #[test]
    fn json_lines_are_one_object() {
        let r = Reporter::new(LogFormat::Json, false, true).with_key("redlock:k");
        let line = r.json_line(Level::Info, "acquired", "got \"it\"");
        assert!(line.starts_with("{\"time\":\""), "{line}");
        assert!(
            line.ends_with("\"message\":\"got \\\"it\\\"\"}\n"),
            "{line}"
        );
        assert!(line.contains("\"key\":\"redlock:k\""), "{line}");
        assert_eq!(line.matches('\n').count(), 1);
    }
}
