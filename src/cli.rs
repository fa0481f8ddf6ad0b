//! The command line, and nothing else.
//!
//! This module imports only clap and std so that the completion and man page generator
//! (`src/bin/gen-docs.rs`) can build it without tokio or redis. Checks that need more than
//! one flag (heartbeat against ttl, ...) live in `config.rs`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

/// Exit code when the lock stays busy (sysexits EX_TEMPFAIL).
pub const EXIT_BUSY: u8 = 75;

/// Usage examples, shared by `--help` and the man page: (comment, command).
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "cron on several hosts: one host runs the batch, the others skip with exit 75",
        "redlock-run --key settle:2024-05 --hold-at-least 1m -- ./batch.sh",
    ),
    (
        "CI: wait up to 10 minutes for the deploy lock, then deploy",
        "redlock-run --key deploy:prod --wait 10m -c './deploy.sh && ./smoke.sh'",
    ),
    ("who holds it?", "redlock-run status --key deploy:prod"),
];

/// The exit-code table, shared by `--help`, the man page and (by hand) the README.
pub const EXIT_CODES: &[(&str, &str)] = &[
    ("child's code", "the command ran and exited with it"),
    (
        "128+N",
        "the command was killed by signal N (or N ended the wait)",
    ),
    (
        "75",
        "lock busy: not acquired within --wait (see --conflict-exit-code)",
    ),
    (
        "74",
        "lock lost while the command ran; the command was stopped",
    ),
    (
        "69",
        "Redis unreachable or refusing, or too few --min-replicas acknowledged",
    ),
    ("124", "--max-runtime reached; the command was stopped"),
    ("126 / 127", "command not executable / not found"),
    (
        "2",
        "bad usage (flags, durations, URL, key, missing command)",
    ),
    ("70", "internal error"),
];

/// What the command finds in its environment.
pub const CHILD_ENV: &[(&str, &str)] = &[
    ("REDLOCK_KEY", "the Redis key of the lock (prefix included)"),
    (
        "REDLOCK_TOKEN",
        "the random token stored as the key's value",
    ),
    ("REDLOCK_TTL_MS", "the lease length in milliseconds"),
    (
        "REDLOCK_FENCE",
        "grows with every acquisition; reject writes with a lower one",
    ),
];

fn after_long_help() -> String {
    let mut out = String::from("Examples:\n");
    for (comment, command) in EXAMPLES {
        out.push_str(&format!("  # {comment}\n  {command}\n\n"));
    }
    out.push_str("Exit codes:\n");
    for (code, meaning) in EXIT_CODES {
        out.push_str(&format!("  {code:<13} {meaning}\n"));
    }
    out.push_str("\nThe command's environment also has:\n");
    for (name, meaning) in CHILD_ENV {
        out.push_str(&format!("  {name:<15} {meaning}\n"));
    }
    out
}

/// Run a command while holding a Redis lock, so it never runs twice at once.
///
/// The lock is taken with SET NX PX and a random token, kept alive while the command runs, and
/// released with a compare-and-delete. If the lease cannot be renewed in time the command's
/// process group is stopped (SIGTERM, then SIGKILL) before the lock can expire on the server.
#[derive(Debug, Parser)]
#[command(
    name = "redlock-run",
    version,
    after_long_help = after_long_help(),
    args_conflicts_with_subcommands = true,
    subcommand_negates_reqs = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(subcommand)]
    pub subcommand: Option<Sub>,

    #[command(flatten)]
    pub conn: ConnArgs,

    #[command(flatten)]
    pub run: RunArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Subcommand)]
pub enum Sub {
    /// Tell who holds a lock: host, pid, command, age, TTL left, fence.
    Status(StatusArgs),
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub conn: ConnArgs,

    /// Print one JSON object instead of text.
    #[arg(long, env = "REDLOCK_STATUS_JSON", action = ArgAction::SetTrue,
          value_parser = parse_switch)]
    pub json: bool,
}

/// Where the lock lives. Shared by the run and `status`.
#[derive(Debug, Args)]
pub struct ConnArgs {
    /// Lock name; the Redis key is PREFIX + KEY.
    #[arg(short, long, env = "REDLOCK_KEY", value_name = "KEY")]
    pub key: Option<String>,

    /// Redis URL: redis://[user:password@]host[:port][/db], rediss:// (TLS) or unix:///path.
    #[arg(
        short,
        long,
        env = "REDLOCK_REDIS",
        value_name = "URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true
    )]
    pub redis: String,

    /// Read the Redis password from FILE (keeps it out of `ps`); overrides one in the URL.
    #[arg(long, env = "REDLOCK_PASSWORD_FILE", value_name = "FILE")]
    pub password_file: Option<PathBuf>,

    /// Prefix of the Redis key. '' uses KEY as it is, so clients that lock the same key with
    /// SET NX (e.g. redis-py's Lock) and redlock-run exclude each other.
    #[arg(
        long,
        env = "REDLOCK_PREFIX",
        value_name = "P",
        default_value = "redlock:"
    )]
    pub prefix: String,

    /// Bound on connecting to Redis and on each command's reply.
    #[arg(long, env = "REDLOCK_CONNECT_TIMEOUT", value_name = "DUR", default_value = "5s",
          value_parser = parse_duration)]
    pub connect_timeout: Duration,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Lease length; a holder that dies frees the lock within this time.
    #[arg(short, long, env = "REDLOCK_TTL", value_name = "DUR", default_value = "30s",
          value_parser = parse_duration)]
    pub ttl: Duration,

    /// Renewal interval [default: ttl/3]; must be shorter than --ttl.
    #[arg(long, env = "REDLOCK_HEARTBEAT", value_name = "DUR", value_parser = parse_duration)]
    pub heartbeat: Option<Duration>,

    /// How long to wait for a busy lock: 0 tries once, 'forever' (or 'inf') waits without
    /// limit.
    #[arg(short, long, env = "REDLOCK_WAIT", value_name = "DUR|forever", default_value = "0",
          value_parser = parse_wait)]
    pub wait: Wait,

    /// Exit code when the lock stays busy.
    #[arg(short = 'E', long, env = "REDLOCK_CONFLICT_EXIT_CODE", value_name = "N",
          default_value_t = EXIT_BUSY)]
    pub conflict_exit_code: u8,

    /// Time between SIGTERM and SIGKILL when the command must be stopped
    /// [default: 10s, at most ttl/3]; must be shorter than --ttl.
    #[arg(long, env = "REDLOCK_GRACE", value_name = "DUR", value_parser = parse_duration)]
    pub grace: Option<Duration>,

    /// Stop the command after DUR (SIGTERM, SIGKILL after --grace) and exit 124.
    #[arg(long, env = "REDLOCK_MAX_RUNTIME", value_name = "DUR", value_parser = parse_duration)]
    pub max_runtime: Option<Duration>,

    /// Keep the lock until DUR after the acquire even if the command ends sooner, so cron
    /// runs of the same job on hosts with skewed clocks do not run it twice.
    #[arg(long, env = "REDLOCK_HOLD_AT_LEAST", value_name = "DUR", value_parser = parse_duration)]
    pub hold_at_least: Option<Duration>,

    /// Require N replicas to acknowledge the acquire and each renewal (Redis WAIT).
    #[arg(
        long,
        env = "REDLOCK_MIN_REPLICAS",
        value_name = "N",
        default_value_t = 0
    )]
    pub min_replicas: u32,

    /// How long to wait for --min-replicas acknowledgements.
    #[arg(long, env = "REDLOCK_REPLICA_TIMEOUT", value_name = "DUR", default_value = "1s",
          value_parser = parse_duration)]
    pub replica_timeout: Duration,

    /// Run SHELL_STRING with /bin/sh -c instead of COMMAND.
    // No environment variable: the command is not a setting, and one inherited by a job that
    // itself calls redlock-run would clash with that call's own command.
    #[arg(
        short = 'c',
        long = "command",
        value_name = "SHELL_STRING",
        conflicts_with = "command"
    )]
    pub shell: Option<String>,

    /// The command to run, after `--`.
    #[arg(value_name = "COMMAND", trailing_var_arg = true,
          action = ArgAction::Append)]
    pub command: Vec<OsString>,
}

/// Messages on stderr. `--log-format` applies to `status` too; `-q` and `-v` only to a run.
#[derive(Debug, Args)]
pub struct OutputArgs {
    /// Print nothing for a busy lock.
    #[arg(short, long, env = "REDLOCK_QUIET", action = ArgAction::SetTrue,
          value_parser = parse_switch)]
    pub quiet: bool,

    /// Report acquire time, renewals and the release outcome.
    #[arg(short, long, env = "REDLOCK_VERBOSE", action = ArgAction::SetTrue,
          value_parser = parse_switch)]
    pub verbose: bool,

    #[command(flatten)]
    pub format: FormatArgs,
}

#[derive(Debug, Args)]
pub struct FormatArgs {
    /// Format of the messages on stderr.
    #[arg(
        long,
        global = true,
        env = "REDLOCK_LOG_FORMAT",
        value_name = "FORMAT",
        default_value = "text"
    )]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// One `redlock-run: ...` line a message.
    Text,
    /// One JSON object a line.
    Json,
}

/// How long to wait for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    For(Duration),
    Forever,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| format!("{e} (examples: 500ms, 30s, 2m)"))
}

/// A switch from the environment: the usual spellings, and empty means off (as if unset).
fn parse_switch(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "" | "0" | "false" | "no" | "off" | "n" | "f" => Ok(false),
        "1" | "true" | "yes" | "on" | "y" | "t" => Ok(true),
        _ => Err("use 1/0, true/false, yes/no or on/off".to_owned()),
    }
}

fn parse_wait(s: &str) -> Result<Wait, String> {
    match s.trim() {
        "forever" | "inf" => Ok(Wait::Forever),
        other => parse_duration(other).map(Wait::For),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// Every option can be set from a REDLOCK_* variable (shown in --help), except the
    /// command itself and help/version.
    #[test]
    fn every_option_has_an_environment_variable() {
        fn check(cmd: &clap::Command) {
            for arg in cmd.get_arguments() {
                let id = arg.get_id().as_str();
                if arg.is_positional() || matches!(id, "help" | "version" | "shell") {
                    continue;
                }
                let env = arg.get_env().map(|e| e.to_string_lossy().into_owned());
                assert!(
                    env.as_deref().is_some_and(|e| e.starts_with("REDLOCK_")),
                    "--{id} of `{}` has no REDLOCK_* variable",
                    cmd.get_name()
                );
            }
            for sub in cmd.get_subcommands() {
                check(sub);
            }
        }
        check(&Cli::command());
    }

    #[test]
    fn switches_take_the_usual_spellings() {
        for on in ["1", "true", "YES", "on", " y "] {
            assert_eq!(parse_switch(on), Ok(true), "{on}");
        }
        for off in ["", "0", "false", "No", "off"] {
            assert_eq!(parse_switch(off), Ok(false), "{off}");
        }
        assert!(parse_switch("maybe").is_err());
    }

    #[test]
    fn wait_parses_forever_and_durations() {
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(parse_wait("0"), Ok(Wait::For(Duration::ZERO)));
        assert_eq!(parse_wait("1m"), Ok(Wait::For(Duration::from_secs(60))));
        assert!(parse_wait("soon").is_err());
    }
}
