//! Turns flags, environment and the config file into checked settings. Everything here runs
//! before Redis is contacted and before the command is spawned, so bad input can never lead
//! to a run without the lock.
//!
//! - `file.rs`: which config file, whether it may be trusted, its names, types and sections;
//! - `layers.rs`: the file beneath the command line (flag > environment > section > defaults
//!   > built-in), through the flags' own parsers;
//! - here: the checks that need more than one option, and the settings they make.

mod file;
mod layers;

pub use layers::{CliError, parse as parse_cli};

use std::ffi::OsString;
use std::time::Duration;

use thiserror::Error;

use crate::cli::{AcquireArgs, ConnArgs, ListArgs, Period, ReleaseArgs, RunArgs, Wait};
use crate::lease;
use crate::lock::target::{self, Endpoint, Target, TargetError, Tls};
use crate::lock::{self, ListQuery, ReplicaAck};

/// The longest --ttl, --hold-at-least and --max-runtime accepted: far beyond any job, well
/// inside what Redis' PX and the clocks can represent.
const LONGEST: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The longest lock name accepted, prefix included. The name reaches the command as
/// `REDLOCK_KEY`, and Linux refuses to start a program with an environment string over
/// 128 KiB; lock names are short in practice, so a clear limit well below that.
pub const LONGEST_KEY: usize = 4096;

/// The largest --limit: every acquire reads the whole set of holders, so keep it small
/// enough for one script call; far above any real use ("at most 3 backups at a time").
const LARGEST_LIMIT: u32 = 1000;

/// The shortest --heartbeat: Redis counts TTLs in whole milliseconds, so renewing more often
/// only loads the server (a 1ns heartbeat sent over ten thousand renewals a second).
const SHORTEST_HEARTBEAT: Duration = Duration::from_millis(1);

/// A problem with the command line, reported as one line and exit code 2.
#[derive(Debug, Error)]
#[error("{0}")]
pub struct UsageError(pub String);

impl From<TargetError> for UsageError {
    fn from(err: TargetError) -> UsageError {
        UsageError(err.to_string())
    }
}

fn usage(msg: impl Into<String>) -> UsageError {
    UsageError(msg.into())
}

/// What to run and how.
#[derive(Debug, Clone)]
pub struct RunConfig {
    pub target: Target,
    pub ttl: Duration,
    pub heartbeat: Duration,
    pub grace: Duration,
    pub wait: Wait,
    pub conflict_exit_code: u8,
    pub max_runtime: Option<Duration>,
    pub hold_at_least: Option<Duration>,
    /// `--min-replicas` and `--replica-timeout`, when replicas must acknowledge.
    pub replicas: Option<ReplicaAck>,
    pub command: Command,
    /// `--once-per` with its time zone: skip the command when it already succeeded in the
    /// current period.
    pub once_per: Option<OncePer>,
    /// Exit code of a run that `--once-per` skipped.
    pub done_exit_code: u8,
    /// `--metrics-file`, `--ping`, `--ping-output` (checked in `observe`).
    pub observe: crate::observe::Settings,
    /// `--note`: shown by `status` with the holder (checked by `one_line_text`).
    pub note: Option<String>,
}

/// `--once-per PERIOD` in `--timezone`.
#[derive(Debug, Clone)]
pub struct OncePer {
    pub period: Period,
    pub zone: jiff::tz::TimeZone,
}

/// The child to spawn.
#[derive(Debug, Clone)]
pub struct Command {
    pub program: OsString,
    pub args: Vec<OsString>,
    /// Run through `/bin/sh -c` (`-c`): an exit of 126 or 127 then means the shell could not
    /// run the program, not that the program ran.
    pub via_shell: bool,
    /// Short text for messages and `status`.
    pub display: String,
}

/// Where the lock lives, from the connection flags (`status` needs no more).
pub fn target_from_args(conn: &ConnArgs) -> Result<Target, UsageError> {
    let name = conn
        .key
        .as_deref()
        .ok_or_else(|| usage("missing --key (or REDLOCK_KEY): the lock name is required"))?;
    let name = held_name(name, &conn.prefix).unwrap_or(name);
    if name.is_empty() {
        return Err(usage("--key is empty: give the lock a name"));
    }
    let key = format!("{}{}", conn.prefix, name);
    if key.len() > LONGEST_KEY {
        return Err(usage(format!(
            "--key is {} bytes long with its prefix; at most {LONGEST_KEY} are accepted",
            key.len()
        )));
    }
    // Shown in every message, by status and by list: one line of visible text.
    if let Some(c) = key
        .chars()
        .find(|c| c.is_control() || is_invisible_or_reordering(*c))
    {
        return Err(usage(format!(
            "--key (with --prefix) holds U+{:04X}, a control or invisible character: a lock \
             name is shown in messages, status and list, so it must be one line of visible text",
            u32::from(c)
        )));
    }
    lock::check_name(&key).map_err(|e| usage(format!("--key: the lock name {key:?} {e}")))?;
    target_for(conn, key)
}

/// The lock name in `key` when it is the full key of a hold across CI steps: `acquire` prints
/// REDLOCK_KEY as a run's command sees it (prefix included), and a later step's `release` or
/// `status` reads it back from the environment beside the hold's REDLOCK_TOKEN. Taken as
/// that key, not prefixed a second time (and its config section is the name's).
pub fn held_name<'a>(key: &'a str, prefix: &str) -> Option<&'a str> {
    let from_hold = std::env::var("REDLOCK_KEY").is_ok_and(|env_key| env_key == key)
        && std::env::var_os("REDLOCK_TOKEN").is_some();
    if !from_hold || prefix.is_empty() {
        return None;
    }
    key.strip_prefix(prefix).filter(|name| !name.is_empty())
}

/// `list`: the servers of `conn` and what to list. `--key` is not used: the backend is
/// opened for the start of the names listed (`--prefix` + `--name-prefix`), which only
/// decides the first master a Cluster is asked through.
pub fn list_from_args(conn: &ConnArgs, args: &ListArgs) -> Result<(Target, ListQuery), UsageError> {
    let starts_with = format!("{}{}", conn.prefix, args.name_prefix);
    if starts_with.len() > LONGEST_KEY {
        return Err(usage(format!(
            "--name-prefix is {} bytes long with --prefix; at most {LONGEST_KEY} are accepted",
            starts_with.len()
        )));
    }
    lock::check_name(&starts_with).map_err(|e| {
        usage(format!(
            "--name-prefix: {starts_with:?} {e}; list with a shorter --name-prefix"
        ))
    })?;
    if args.scan_time.is_zero() {
        return Err(usage("--scan-time must be more than 0"));
    }
    if args.scan_time > LONGEST {
        return Err(usage("--scan-time is longer than 10 years"));
    }
    let target = target_for(conn, starts_with.clone())?;
    let query = ListQuery {
        starts_with,
        scan_count: args.scan_count,
        max_locks: usize::try_from(args.max_locks).unwrap_or(usize::MAX),
        scan_time: args.scan_time,
        reply_within: target.timeout,
    };
    Ok((target, query))
}

/// The servers and settings of `conn`, for the lock `key` (checked by the caller).
fn target_for(conn: &ConnArgs, key: String) -> Result<Target, UsageError> {
    if conn.connect_timeout.is_zero() {
        return Err(usage("--connect-timeout must be more than 0"));
    }
    if conn.connect_timeout > LONGEST {
        return Err(usage("--connect-timeout is longer than 10 years"));
    }
    let urls = redis_urls(&conn.redis);
    let redis_shown = urls
        .iter()
        .map(|u| target::redact(u))
        .collect::<Vec<_>>()
        .join(" ");
    let mut endpoint = Endpoint::parse(&urls, conn.quorum)?;
    if conn.quorum.is_some() && !matches!(endpoint, Endpoint::Quorum(_)) {
        return Err(usage(
            "--quorum needs several --redis (Redlock); with one server there is nothing \
             to count",
        ));
    }
    if let Some(path) = &conn.password_file {
        endpoint = endpoint.with_password(&read_password(path)?);
    }
    let tls = Tls::read(
        conn.tls_ca_cert.as_deref(),
        conn.tls_cert.as_deref(),
        conn.tls_key.as_deref(),
    )?;
    if tls.is_set() && !endpoint.uses_tls() {
        // The user expects an encrypted, authenticated connection: never fall back to
        // plain text silently.
        return Err(usage(format!(
            "--tls-* options given, but --redis {redis_shown} does not use TLS (use rediss://)"
        )));
    }
    Ok(Target {
        endpoint,
        redis_shown,
        key,
        timeout: conn.connect_timeout,
        tls,
        limit: 1,
        shared: false,
    })
}

/// The `--redis` URLs. `REDLOCK_REDIS` may hold several, separated by whitespace; a value
/// typed on the command line is taken whole (a password could hold a space). The variable is
/// split only when every piece is a URL of its own (`scheme://...`): a password with a space
/// in one URL then stays whole, and no piece of it reaches a message as a URL of its own.
fn redis_urls(given: &[String]) -> Vec<String> {
    match given {
        [one]
            if one.split_whitespace().nth(1).is_some()
                && std::env::var("REDLOCK_REDIS").is_ok_and(|env| env == *one)
                && one.split_whitespace().all(target::has_scheme) =>
        {
            one.split_whitespace().map(str::to_owned).collect()
        }
        _ => given.to_vec(),
    }
}

/// The password in `--password-file`, without its trailing newline.
fn read_password(path: &std::path::Path) -> Result<String, UsageError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        usage(format!(
            "cannot read --password-file {}: {e}",
            path.display()
        ))
    })?;
    let password = text.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        return Err(usage(format!(
            "--password-file {} is empty",
            path.display()
        )));
    }
    Ok(password.to_owned())
}

impl RunConfig {
    pub fn from_args(conn: &ConnArgs, run: &RunArgs) -> Result<Self, UsageError> {
        let command = command_from_args(run)?;
        let ttl = run.ttl;
        for (flag, value) in [
            ("--ttl", Some(ttl)),
            ("--hold-at-least", run.hold_at_least),
            ("--max-runtime", run.max_runtime),
        ] {
            if value.is_some_and(|v| v > LONGEST) {
                return Err(usage(format!("{flag} is longer than 10 years")));
            }
        }
        if ttl < Duration::from_millis(10) {
            return Err(usage(format!(
                "--ttl {} is too short: use at least 10ms",
                show(ttl)
            )));
        }
        // Redis takes PX in whole milliseconds; refuse what it would round.
        if !ttl.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(usage("--ttl must be a whole number of milliseconds"));
        }
        let heartbeat = run.heartbeat.unwrap_or(ttl / 3);
        if heartbeat < SHORTEST_HEARTBEAT {
            return Err(usage(format!(
                "--heartbeat {} is too short: use at least 1ms",
                show(heartbeat)
            )));
        }
        if heartbeat >= ttl {
            return Err(usage(format!(
                "--heartbeat {} must be more than 0 and shorter than --ttl {}",
                show(heartbeat),
                show(ttl)
            )));
        }
        let grace = match run.grace {
            Some(g) if g >= ttl => {
                return Err(usage(format!(
                    "--grace {} must be shorter than --ttl {}",
                    show(g),
                    show(ttl)
                )));
            }
            Some(g) => g,
            None => (ttl / 3).min(Duration::from_secs(10)),
        };
        // A renewal sent after one --heartbeat must have its answer (and, with
        // --min-replicas, its acknowledgements) before the command would be told to stop:
        // keep a tenth of the ttl for the round trip.
        let answer_time = ttl / 10
            + if run.min_replicas > 0 {
                run.replica_timeout
            } else {
                Duration::ZERO
            };
        let room = ttl
            .checked_sub(lease::drift(ttl))
            .and_then(|d| d.checked_sub(grace));
        if room.is_none_or(|room| heartbeat + answer_time > room) {
            return Err(usage(format!(
                "--heartbeat {} and --grace {} leave too little time to renew within --ttl {}: \
                 heartbeat + grace + ttl/10{} must stay under the ttl",
                show(heartbeat),
                show(grace),
                show(ttl),
                if run.min_replicas > 0 {
                    " + --replica-timeout"
                } else {
                    ""
                }
            )));
        }
        if run.max_runtime.is_some_and(|d| d.is_zero()) {
            return Err(usage("--max-runtime must be more than 0"));
        }
        if run.min_replicas > 0 && run.replica_timeout.is_zero() {
            return Err(usage("--replica-timeout must be more than 0"));
        }
        if run.min_replicas > 0 && run.replica_timeout >= ttl - grace {
            return Err(usage(format!(
                "--replica-timeout {} must be shorter than --ttl minus --grace",
                show(run.replica_timeout)
            )));
        }
        if run.limit == 0 || run.limit > LARGEST_LIMIT {
            return Err(usage(format!(
                "--limit {} is out of range: use 1 (one holder at a time) to {LARGEST_LIMIT}",
                run.limit
            )));
        }
        if run.timezone.is_some() && run.once_per.is_none() {
            return Err(usage(
                "--timezone applies only to --once-per's calendar periods; give --once-per too",
            ));
        }
        if run.done_exit_code.is_some() && run.once_per.is_none() {
            return Err(usage(
                "--done-exit-code applies only to runs that --once-per skips; give --once-per too",
            ));
        }
        let zone = crate::period::zone(run.timezone.as_deref()).map_err(usage)?;
        let once_per = run.once_per.map(|period| OncePer { period, zone });
        let observe = crate::observe::Settings::from_args(run).map_err(usage)?;
        let mut target = target_from_args(conn)?;
        target.limit = run.limit;
        target.shared = run.shared;
        if run.shared && run.limit > 1 {
            // A --limit lock is a set of permits and a shared one a mutex with a set of
            // shared holders beside it: one key cannot be both (docs/reference.md).
            return Err(usage(
                "--shared cannot be combined with --limit in this version: --limit N already \
                 lets N runs hold the lock at once, and a lock is either shared or limited",
            ));
        }
        if matches!(target.endpoint, Endpoint::Quorum(_)) {
            if run.min_replicas > 0 {
                return Err(usage(
                    "--min-replicas is not supported with Redlock (several --redis) in this version",
                ));
            }
            if run.limit > 1 {
                return Err(usage(
                    "--limit is not supported with Redlock (several --redis) in this version",
                ));
            }
            if run.shared {
                return Err(usage(
                    "--shared is not supported with Redlock (several --redis) in this version",
                ));
            }
        }
        if let Some(name) = &conn.key {
            check_nesting(name, &target.key)?;
        }
        Ok(RunConfig {
            target,
            ttl,
            heartbeat,
            grace,
            wait: run.wait,
            conflict_exit_code: run.conflict_exit_code,
            max_runtime: run.max_runtime,
            hold_at_least: run.hold_at_least.filter(|d| !d.is_zero()),
            replicas: (run.min_replicas > 0).then_some(ReplicaAck {
                replicas: run.min_replicas,
                timeout: run.replica_timeout,
            }),
            command,
            once_per,
            done_exit_code: run.done_exit_code.unwrap_or(0),
            observe,
            note: match &run.note {
                Some(note) => Some(one_line_text("--note", note)?.to_owned()),
                None => None,
            },
        })
    }
}

/// `acquire`: the lock as a run takes it, and how long and where the hold goes.
#[derive(Debug, Clone)]
pub struct AcquireConfig {
    /// The run's settings (no command: `command.display` names the keeper in `status`).
    pub run: RunConfig,
    pub max_hold: Duration,
    pub github: Option<GithubFiles>,
    pub dotenv: Option<std::path::PathBuf>,
}

/// The holder info's command of a keeper (`acquire`), up to its --max-hold: `status` reads
/// the --max-hold back to show the hold's deadline.
pub const KEEPER_COMMAND: &str = "redlock-run acquire (keeper, --max-hold ";

/// `--github`: the files of `$GITHUB_OUTPUT` and `$GITHUB_ENV`.
#[derive(Debug, Clone)]
pub struct GithubFiles {
    pub output: std::path::PathBuf,
    pub env: std::path::PathBuf,
}

impl AcquireConfig {
    pub fn from_args(conn: &ConnArgs, args: &AcquireArgs) -> Result<Self, UsageError> {
        if args.max_hold.is_zero() {
            return Err(usage("--max-hold must be more than 0"));
        }
        if args.max_hold > LONGEST {
            return Err(usage("--max-hold is longer than 10 years"));
        }
        // A hold no longer than one lease would end about when its first lease does, right
        // after `acquire` said it holds the lock (`--max-hold 1ms` ended at once).
        if args.max_hold <= args.ttl {
            return Err(usage(format!(
                "--max-hold {} must be longer than --ttl {}: the hold would end before its \
                 first lease; give the longest the steps may take",
                show(args.max_hold),
                show(args.ttl)
            )));
        }
        let github = if args.github {
            let file = |name: &str| match std::env::var_os(name) {
                Some(path) if !path.is_empty() => Ok(std::path::PathBuf::from(path)),
                _ => Err(usage(format!(
                    "--github: ${name} is not set (it is set in a GitHub Actions step)"
                ))),
            };
            Some(GithubFiles {
                output: file("GITHUB_OUTPUT")?,
                env: file("GITHUB_ENV")?,
            })
        } else {
            None
        };
        if args
            .dotenv
            .as_ref()
            .is_some_and(|p| p.as_os_str().is_empty())
        {
            return Err(usage("--dotenv is empty: give the file to write"));
        }
        // The run's checks (ttl, heartbeat, grace, limit, replicas, key) apply as they are.
        let run = RunArgs {
            ttl: args.ttl,
            heartbeat: args.heartbeat,
            wait: args.wait,
            limit: args.limit,
            conflict_exit_code: args.conflict_exit_code,
            grace: args.grace,
            max_runtime: None,
            hold_at_least: None,
            once_per: None,
            timezone: None,
            done_exit_code: None,
            min_replicas: args.min_replicas,
            replica_timeout: args.replica_timeout,
            shell: None,
            record_args: false,
            note: args.note.clone(),
            shared: false,
            metrics_file: None,
            ping: None,
            ping_output: None,
            command: vec!["redlock-run".into()],
        };
        let mut run = RunConfig::from_args(conn, &run)?;
        run.command.display = format!("{KEEPER_COMMAND}{})", show(args.max_hold));
        Ok(AcquireConfig {
            run,
            max_hold: args.max_hold,
            github,
            dotenv: args.dotenv.clone(),
        })
    }
}

/// `release`: the lock and the hold's token.
#[derive(Debug, Clone)]
pub struct ReleaseConfig {
    pub target: Target,
    pub token: String,
}

impl ReleaseConfig {
    pub fn from_args(conn: &ConnArgs, args: &ReleaseArgs) -> Result<Self, UsageError> {
        let token = args.token.clone().unwrap_or_default();
        if token.trim().is_empty() {
            return Err(usage(
                "release needs the hold's token: --token TOKEN, or REDLOCK_TOKEN as acquire \
                 printed it",
            ));
        }
        let target = target_from_args(conn)?;
        Ok(ReleaseConfig { target, token })
    }
}

/// Line and paragraph separators, bidirectional marks, embeddings, overrides and isolates,
/// and what Unicode calls default-ignorable (drawn as nothing: zero-width characters, fillers,
/// variation selectors, tags) or a format character (general category Cf), as of Unicode 15.
fn is_invisible_or_reordering(c: char) -> bool {
    matches!(
        c,
        '\u{00AD}'
            | '\u{034F}'
            | '\u{0600}'..='\u{0605}'
            | '\u{061C}'
            | '\u{06DD}'
            | '\u{070F}'
            | '\u{0890}'..='\u{0891}'
            | '\u{08E2}'
            | '\u{115F}'..='\u{1160}'
            | '\u{17B4}'..='\u{17B5}'
            | '\u{180B}'..='\u{180F}'
            | '\u{200B}'..='\u{200F}'
            | '\u{2028}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}'
            | '\u{3164}'
            | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}'
            | '\u{FFA0}'
            | '\u{FFF0}'..='\u{FFFB}'
            | '\u{110BD}'
            | '\u{110CD}'
            | '\u{13430}'..='\u{1343F}'
            | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}'
            | '\u{E0000}'..='\u{E0FFF}'
    )
}

/// The longest `--note` or `pause --reason`, in characters.
pub const TEXT_MOST: usize = 200;

/// A free text stored in Redis and shown by `status` (`--note`, `pause --reason`): one line
/// of printable characters, at most [`TEXT_MOST`], leading and trailing blanks trimmed.
pub fn one_line_text<'a>(flag: &str, text: &'a str) -> Result<&'a str, UsageError> {
    let text = text.trim();
    if text.chars().any(char::is_control) {
        return Err(usage(format!(
            "{flag} must be one line of printable text (it holds a control character)"
        )));
    }
    // Shown to others by `status` and `list`: no character that breaks a line, reorders
    // what follows it (bidirectional overrides) or cannot be seen.
    if let Some(c) = text.chars().find(|c| is_invisible_or_reordering(*c)) {
        return Err(usage(format!(
            "{flag} must be one line of plain text (it holds U+{:04X}, a character that is \
             invisible, breaks the line or reorders the text)",
            u32::from(c)
        )));
    }
    let n = text.chars().count();
    if n > TEXT_MOST {
        return Err(usage(format!(
            "{flag} is {n} characters long; at most {TEXT_MOST} are kept"
        )));
    }
    Ok(text)
}

/// A run started by the command of another run (a nested run), or in a step after `acquire`
/// (its `eval`, `--github` or `--dotenv` output). Either has `REDLOCK_KEY` (the full key of the
/// lock held, prefix included) and `REDLOCK_TOKEN`; the first would be read back here as
/// `--key` and lock `redlock:redlock:k`, and a nested run of the very lock held would wait for
/// that hold (for ever, with `--wait forever`). Both are refused with a message saying so.
/// Decided from the environment alone, before Redis is asked: the variables stay after the
/// hold was released (a shell that ran `release`, a later job given the dotenv file), so the
/// message names what the environment says and how to clear it, not that the hold is still
/// there.
fn check_nesting(name: &str, key: &str) -> Result<(), UsageError> {
    if std::env::var_os("REDLOCK_TOKEN").is_none() {
        return Ok(());
    }
    let Some(held) = std::env::var_os("REDLOCK_KEY") else {
        return Ok(());
    };
    let held = held.to_string_lossy();
    if key == held {
        return Err(usage(format!(
            "REDLOCK_KEY and REDLOCK_TOKEN in the environment name a hold of the lock {key:?} \
             (set for a command run under it, and by acquire for the steps after it): a run of \
             the same lock here would wait for that hold; if it was released, unset \
             REDLOCK_TOKEN REDLOCK_KEY first"
        )));
    }
    if name == held {
        return Err(usage(format!(
            "--key {name:?} is the REDLOCK_KEY set by the redlock-run that started this command \
             (the lock it holds, prefix included), not a lock name; give --key for a nested lock"
        )));
    }
    Ok(())
}

fn command_from_args(run: &RunArgs) -> Result<Command, UsageError> {
    match (&run.shell, run.command.split_first()) {
        (Some(_), Some(_)) => Err(usage(
            "give either -c SHELL_STRING or a command after --, not both",
        )),
        (Some(script), None) => {
            if script.trim().is_empty() {
                return Err(usage("-c is empty: give the shell command to run"));
            }
            Ok(Command {
                program: "/bin/sh".into(),
                args: vec!["-c".into(), shell_script(script).into()],
                via_shell: true,
                display: if run.record_args {
                    truncate(script, 200)
                } else {
                    shown_script(script)
                },
            })
        }
        (None, Some((program, args))) => {
            if program.is_empty() {
                return Err(usage("the command after -- is empty"));
            }
            let display = if run.record_args {
                std::iter::once(program)
                    .chain(args)
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(" ")
            } else if args.is_empty() {
                program.to_string_lossy().into_owned()
            } else {
                format!("{} ...", program.to_string_lossy())
            };
            Ok(Command {
                program: program.clone(),
                args: args.to_vec(),
                via_shell: false,
                display: truncate(&display, 200),
            })
        }
        (None, None) => Err(usage(
            "no command: give one after -- (redlock-run --key K -- CMD ARGS) or use -c 'SHELL STRING'",
        )),
    }
}

/// How a `-c` script is shown without `--record-args`: its first word, unless that is an
/// assignment (`PGPASSWORD=...`) or holds anything but a plain program name.
fn shown_script(script: &str) -> String {
    let first = script.split_whitespace().next().unwrap_or_default();
    let plain = !first.is_empty()
        && first
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./+".contains(c));
    if plain && script.trim() == first {
        format!("sh -c '{first}'")
    } else if plain {
        format!("sh -c '{first} ...'")
    } else {
        "sh -c '...'".to_owned()
    }
}

/// For a single simple command, prefix `exec` so the shell is replaced by the command: signals
/// to the child then reach the program itself, and no shell lingers between them.
fn shell_script(script: &str) -> String {
    let simple = !script.is_empty()
        && script
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || " \t_-./=:,+@%".contains(c))
        && script
            .split_whitespace()
            .next()
            .is_some_and(|w| !w.contains('=') && !SHELL_WORDS.contains(&w));
    if simple {
        format!("exec {script}")
    } else {
        script.to_owned()
    }
}

/// Reserved words and builtins that `exec` cannot run.
const SHELL_WORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "while", "until", "do", "done",
    "in", "function", "select", "time", "cd", "export", "set", "unset", "trap", "alias", "read",
    "source", ".", "eval", "exec", "exit", "return", "shift", "wait", "ulimit", "umask", "test",
    "true", "false", ":", "echo", "printf", "kill", "type", "command", "local", "readonly",
];

fn truncate(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_owned(),
    }
}

fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn execs_simple_shell_commands_only() {
        assert_eq!(shell_script("sleep 10"), "exec sleep 10");
        assert_eq!(
            shell_script("./batch.sh --month 2024-05"),
            "exec ./batch.sh --month 2024-05"
        );
        assert_eq!(shell_script("a && b"), "a && b");
        assert_eq!(shell_script("echo $HOME"), "echo $HOME");
        assert_eq!(shell_script("X=1 cmd"), "X=1 cmd");
        assert_eq!(shell_script("exec cmd"), "exec cmd");
        assert_eq!(shell_script("cd /tmp"), "cd /tmp");
        assert_eq!(shell_script("if true then"), "if true then");
        assert_eq!(
            shell_script("trap 'x' TERM; sleep 1"),
            "trap 'x' TERM; sleep 1"
        );
    }

    #[test]
    fn truncates_on_char_boundaries() {
        assert_eq!(truncate("abc", 5), "abc");
        assert_eq!(truncate("ééééé", 2), "éé...");
    }
}
