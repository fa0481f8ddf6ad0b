//! Watching runs from outside (issue 23): `--metrics-file` writes the node_exporter textfile
//! format ([`metrics`]), `--ping` speaks the healthchecks.io protocol to a cron monitor
//! ([`ping`], over the small HTTP/1.1 client in [`http`], to the monitor's [`url`]), and `--ping-output N` keeps the
//! last lines of the command's output for the final ping ([`capture`]).
//!
//! The supervisor tells this module what happened ([`Run`]); nothing here can change how a
//! run ends: a metrics file that cannot be written or a monitor that is down is a warning.
//! Without the flags nothing here runs: no thread, no file, no socket.

mod capture;
mod http;
pub mod metrics;
pub mod ping;
mod url;

use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use crate::cli::RunArgs;

pub use capture::Capture;

/// The most lines `--ping-output` may ask for.
const MOST_OUTPUT_LINES: u32 = 1000;

/// `--metrics-file`, `--ping` and `--ping-output`, checked.
#[derive(Debug, Clone, Default)]
pub struct Settings {
    pub metrics_file: Option<PathBuf>,
    pub ping: Option<url::PingUrl>,
    /// Lines of output for the final ping (0: none).
    pub ping_output: u32,
}

impl Settings {
    /// Checks what can be checked before Redis is contacted: the URL's form, and that the
    /// metrics file's directory exists and can be written.
    pub fn from_args(run: &RunArgs) -> Result<Settings, String> {
        let metrics_file = match &run.metrics_file {
            Some(path) => Some(metrics::check_path(path)?),
            None => None,
        };
        let ping = match &run.ping {
            Some(url) => Some(url::PingUrl::parse(url).map_err(|e| format!("--ping: {e}"))?),
            None => None,
        };
        let ping_output = run.ping_output.unwrap_or(0);
        if ping.is_none() && run.ping_output.is_some() {
            return Err("--ping-output needs --ping (the output goes with the final ping)".into());
        }
        if ping_output > MOST_OUTPUT_LINES {
            return Err(format!(
                "--ping-output {ping_output} is too many lines: use at most {MOST_OUTPUT_LINES}"
            ));
        }
        Ok(Settings {
            metrics_file,
            ping,
            ping_output,
        })
    }
}

/// How a run went, in the words of the metrics, the pings and the JSON log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Outcome {
    /// The command exited 0 under a lease it kept.
    Succeeded,
    /// The command exited with another code, or could not be started (126, 127).
    Failed,
    /// The command was killed by a signal.
    Signalled,
    /// `--max-runtime` stopped it.
    TimedOut,
    /// The lock was lost (before the start, while it ran, or found gone at release).
    Lost,
    /// The lock stayed busy: another host runs the job.
    Busy,
    /// `--once-per`: it already succeeded in this period.
    Skipped,
    /// Redis could not be reached or refused: nothing ran.
    Unavailable,
    /// A signal ended the run before its command started.
    Interrupted,
    /// An internal error before anything ran.
    Error,
}

impl Outcome {
    pub const ALL: [Outcome; 10] = [
        Outcome::Succeeded,
        Outcome::Failed,
        Outcome::Signalled,
        Outcome::TimedOut,
        Outcome::Lost,
        Outcome::Busy,
        Outcome::Skipped,
        Outcome::Unavailable,
        Outcome::Interrupted,
        Outcome::Error,
    ];

    /// As in the run record and `status --json` where both have it.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
            Outcome::Signalled => "signalled",
            Outcome::TimedOut => "timed-out",
            Outcome::Lost => "lost",
            Outcome::Busy => "busy",
            Outcome::Skipped => "skipped",
            Outcome::Unavailable => "unavailable",
            Outcome::Interrupted => "interrupted",
            Outcome::Error => "error",
        }
    }

    pub fn from_str(s: &str) -> Option<Outcome> {
        Outcome::ALL.into_iter().find(|o| o.as_str() == s)
    }

    /// The command started (a /start ping went out, and a final one follows).
    pub fn ran(self) -> bool {
        matches!(
            self,
            Outcome::Succeeded
                | Outcome::Failed
                | Outcome::Signalled
                | Outcome::TimedOut
                | Outcome::Lost
        )
    }
}

/// One run as it ended, for the metrics file and the final ping.
#[derive(Debug, Clone)]
pub struct Run {
    pub key: String,
    pub outcome: Outcome,
    /// The wrapper's exit code (128+N for a signal).
    pub exit_code: u8,
    /// When the command started, or the wrapper if it never did.
    pub started: SystemTime,
    pub ended: SystemTime,
    /// The last success of the job on any host (the run record's `ended_at`, ms since 1970
    /// on the server's clock); `None`: unknown.
    pub last_success_ms: Option<u64>,
    pub fence: Option<u64>,
    pub waited: Option<Duration>,
}

impl Run {
    pub fn duration(&self) -> Duration {
        self.ended.duration_since(self.started).unwrap_or_default()
    }
}

/// Seconds since 1970 with milliseconds, as Prometheus writes timestamps.
pub fn unix_seconds(at: SystemTime) -> f64 {
    let ms = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    ms as f64 / 1000.0
}
