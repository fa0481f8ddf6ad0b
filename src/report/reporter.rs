//! Messages on stderr: one line each, `redlock-run: ...` or one JSON object.
//!
//! Nothing is printed on success unless `--verbose` (cron mails any output). Problems are
//! always printed, except a busy lock under `--quiet`.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};
use std::fmt::Display;
use std::io::IsTerminal;
use std::time::SystemTime;

use serde::Serialize;

use super::sink;
use crate::cli::LogFormat;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    Error,
    Warn,
    Info,
}

/// One `--log-format json` line. Field order is the output order; `key` is left out, not
/// `null`, when no key is known yet.
#[derive(Serialize)]
struct JsonLine<'a> {
    time: String,
    level: Level,
    event: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    key: Option<&'a str>,
    pid: u32,
    /// The `finished` event's numbers.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    run: Option<&'a RunFields>,
    /// The `busy` event of a paused lock: the pause's reason, who paused it, until when.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pause: Option<&'a PauseFields>,
    message: &'a str,
}

/// What a `busy` event adds in JSON while the lock is paused (`pause`).
#[derive(Debug, Clone, Serialize)]
pub struct PauseFields {
    pub paused_reason: String,
    pub paused_by: String,
    /// RFC 3339, server clock.
    pub paused_until: String,
}

/// What the `finished` event adds for a log pipeline: how the run ended, its exit code, how
/// long it took (from the command's start, or the wrapper's if it never started), how long
/// it waited for the lock, and its fence.
#[derive(Debug, Clone, Serialize)]
pub struct RunFields {
    pub outcome: &'static str,
    pub exit_code: u8,
    pub duration_ms: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub waited_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fence: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Reporter {
    format: LogFormat,
    quiet: bool,
    verbose: bool,
    key: Option<String>,
    /// stderr is a terminal and plain text is wanted: a live status line may be drawn.
    live: bool,
    /// NO_COLOR is set (https://no-color.org): no escape sequences for styling.
    no_color: bool,
    /// A live line is on the screen and must be cleared before the next message.
    line_shown: Cell<bool>,
    /// The live line's text, so an unchanged line is not redrawn.
    line_text: RefCell<String>,
}

impl Reporter {
    pub fn new(format: LogFormat, quiet: bool, verbose: bool) -> Reporter {
        Reporter {
            format,
            quiet,
            verbose,
            key: None,
            live: format == LogFormat::Text && !quiet && std::io::stderr().is_terminal(),
            no_color: std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
            line_shown: Cell::new(false),
            line_text: RefCell::new(String::new()),
        }
    }

    /// Name the lock key in every later JSON line.
    pub fn with_key(mut self, key: &str) -> Reporter {
        self.key = Some(key.to_owned());
        self
    }

    /// Whether messages are JSON lines (`--log-format json`).
    pub fn is_json(&self) -> bool {
        self.format == LogFormat::Json
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

    /// The lock stayed busy: a warning (for cron it is the expected outcome on all hosts but
    /// one, not a failure), silent under --quiet.
    /// `pause`: the pause that made it busy, as JSON fields.
    pub fn busy(&self, msg: impl Display, pause: Option<&PauseFields>) {
        if self.quiet {
            return;
        }
        self.emit_with(Level::Warn, "busy", &msg.to_string(), pause);
    }

    /// An operator's command (`break`, `pause`, `resume`, `release`) did what was asked: one
    /// line, silent under --quiet.
    pub fn done(&self, event: &str, msg: impl Display) {
        if !self.quiet {
            self.emit(Level::Info, event, &msg.to_string());
        }
    }

    /// Some servers failed but the run goes on (a Redlock master down): a warning, silent
    /// under --quiet.
    pub fn degraded(&self, msg: impl Display) {
        if !self.quiet {
            self.emit(Level::Warn, "degraded", &msg.to_string());
        }
    }

    /// A server that `degraded` told of answers again (a Redlock master that confirms
    /// renewals again): one line, silent under --quiet.
    pub fn recovered(&self, msg: impl Display) {
        if !self.quiet {
            self.emit(Level::Info, "recovered", &msg.to_string());
        }
    }

    /// `--once-per` skipped the command: one line, silent under --quiet.
    pub fn skipped(&self, msg: impl Display) {
        if !self.quiet {
            self.emit(Level::Info, "skipped", &msg.to_string());
        }
    }

    /// The end of a run, with its numbers (`RunFields`) in JSON. Only with --verbose.
    pub fn finished(&self, msg: impl Display, fields: &RunFields) {
        if self.verbose {
            self.waiting_done();
            let line = match self.format {
                LogFormat::Text => format!("redlock-run: {}\n", one_line(&msg.to_string())),
                LogFormat::Json => self.json_line_with(
                    Level::Info,
                    "finished",
                    &msg.to_string(),
                    Some(fields),
                    None,
                ),
            };
            sink::send(line.into_bytes());
        }
    }

    /// Worth a line even without --verbose (the start of a wait in a CI log); silent under
    /// --quiet, and left to the live line on a terminal.
    pub fn notice(&self, event: &str, msg: impl Display) {
        if !self.quiet && !self.live {
            self.emit(Level::Info, event, &msg.to_string());
        }
    }

    /// Whether a live line is drawn (stderr is a terminal, text format, not --quiet).
    pub fn is_live(&self) -> bool {
        self.live
    }

    /// Redraw the one live line shown while waiting for a busy lock. Only on a terminal.
    pub fn waiting(&self, msg: impl Display) {
        if !self.live {
            return;
        }
        let text = msg.to_string();
        if self.line_shown.get() && *self.line_text.borrow() == text {
            return;
        }
        let (dim, reset) = if self.no_color {
            ("", "")
        } else {
            ("\x1b[2m", "\x1b[0m")
        };
        // \r and erase-line redraw in place; no newline, so the line never scrolls.
        let line = format!("\r\x1b[2K{dim}redlock-run: {}{reset}", one_line(&text));
        sink::send(line.into_bytes());
        self.line_shown.set(true);
        *self.line_text.borrow_mut() = text;
    }

    /// Remove the live line, if one is shown.
    pub fn waiting_done(&self) {
        if self.line_shown.replace(false) {
            sink::send(b"\r\x1b[2K".to_vec());
        }
    }

    fn emit(&self, level: Level, event: &str, msg: &str) {
        self.emit_with(level, event, msg, None);
    }

    fn emit_with(&self, level: Level, event: &str, msg: &str, pause: Option<&PauseFields>) {
        self.waiting_done();
        // Lines that a blocked stderr made us drop are counted, and said as soon as there is
        // room again (see sink.rs).
        if sink::has_room() {
            let dropped = sink::take_dropped();
            if dropped > 0 {
                let notice = format!("{dropped} messages were dropped: stderr was not being read");
                sink::send(self.line(Level::Warn, "dropped", &notice).into_bytes());
            }
        }
        let line = match self.format {
            LogFormat::Text => format!("redlock-run: {}\n", one_line(msg)),
            LogFormat::Json => self.json_line_with(level, event, msg, None, pause),
        };
        sink::send(line.into_bytes());
    }

    fn line(&self, level: Level, event: &str, msg: &str) -> String {
        match self.format {
            LogFormat::Text => format!("redlock-run: {}\n", one_line(msg)),
            LogFormat::Json => self.json_line(level, event, msg),
        }
    }

    fn json_line(&self, level: Level, event: &str, msg: &str) -> String {
        self.json_line_with(level, event, msg, None, None)
    }

    fn json_line_with(
        &self,
        level: Level,
        event: &str,
        msg: &str,
        run: Option<&RunFields>,
        pause: Option<&PauseFields>,
    ) -> String {
        let line = JsonLine {
            time: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
            level,
            event,
            key: self.key.as_deref(),
            pid: std::process::id(),
            run,
            pause,
            message: msg,
        };
        // Cannot fail: plain fields, no maps with non-string keys.
        let mut out = serde_json::to_string(&line).expect("log line JSON serializes");
        out.push('\n');
        out
    }
}

/// `msg` on one line: control characters (a newline in a key or a `-c` script) are shown
/// escaped, so every message stays one line and no escape sequence reaches the terminal.
pub fn one_line(msg: &str) -> Cow<'_, str> {
    if !msg.chars().any(char::is_control) {
        return Cow::Borrowed(msg);
    }
    Cow::Owned(
        msg.chars()
            .map(|c| {
                if c.is_control() {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_strings_are_escaped() {
        let r = Reporter::new(LogFormat::Json, false, true);
        let line = r.json_line(Level::Warn, "ev", "a\"b\\c\nd\u{1}");
        assert!(
            line.ends_with("\"message\":\"a\\\"b\\\\c\\nd\\u0001\"}\n"),
            "{line}"
        );
        // No key given: the field is left out.
        assert!(
            line.contains("\"level\":\"warn\",\"event\":\"ev\",\"pid\":"),
            "{line}"
        );
    }

    #[test]
    fn text_lines_escape_control_characters() {
        assert_eq!(one_line("plain"), "plain");
        assert_eq!(one_line("a\nb\x1b[2Kc\t"), "a\\nb\\u{1b}[2Kc\\t");
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
