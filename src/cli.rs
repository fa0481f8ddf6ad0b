//! The command line, and nothing else.
//!
//! This module imports only clap and std so that the completion and man page generator
//! (`examples/gen-docs.rs`) can build it without tokio or redis. Checks that need more than
//! one flag (heartbeat against ttl, ...) live in `config.rs`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};

/// Exit code when the lock stays busy (sysexits EX_TEMPFAIL).
pub const EXIT_BUSY: u8 = 75;

/// The usage line of `--help`, one form a line (the man page's SYNOPSIS is made from it too):
/// a command after `--`, a shell string, and `status`. Lines after the first are indented
/// under clap's `Usage: `.
pub const USAGE: &str = "\
redlock-run [OPTIONS] --key <KEY> -- <COMMAND> [ARGS]...
       redlock-run [OPTIONS] --key <KEY> -c <SHELL_STRING>
       redlock-run status [OPTIONS] --key <KEY> [--json]
       redlock-run forget [OPTIONS] --key <KEY>
       redlock-run acquire [OPTIONS] --key <KEY> [--max-hold <DUR>] [--github] [--dotenv <FILE>]
       redlock-run release [OPTIONS] --key <KEY> [--token <TOKEN>]
       redlock-run list [OPTIONS] [--name-prefix <NAME>] [--json]
       redlock-run break [OPTIONS] --key <KEY> [--holder <TOKEN> | --host <HOST>] [--yes]
       redlock-run pause [OPTIONS] --key <KEY> --for <DUR> --reason <TEXT>
       redlock-run resume [OPTIONS] --key <KEY>";

/// The usage line of `acquire --help`.
pub const ACQUIRE_USAGE: &str = "redlock-run acquire [OPTIONS] --key <KEY> [--max-hold <DUR>] \
                                 [--github] [--dotenv <FILE>]";

/// The usage line of `release --help`.
pub const RELEASE_USAGE: &str = "redlock-run release [OPTIONS] --key <KEY> [--token <TOKEN>]";

/// Exit code of `release` when the lock is held by another token and no hold record says it
/// was this token's: nothing was changed. The same code as `break`'s for a holder not named.
pub const EXIT_NOT_YOURS: u8 = EXIT_NOT_THAT_HOLDER;

/// `--max-hold`'s default: a keeper never renews a lock longer than this.
pub const DEFAULT_MAX_HOLD: &str = "1h";

/// The usage line of `status --help`.
pub const STATUS_USAGE: &str = "redlock-run status [OPTIONS] --key <KEY> [--json]";

/// The usage line of `forget --help`.
pub const FORGET_USAGE: &str = "redlock-run forget [OPTIONS] --key <KEY>";

/// The usage line of `list --help`.
pub const LIST_USAGE: &str = "redlock-run list [OPTIONS] [--name-prefix <NAME>] [--json]";

/// The usage line of `break --help`.
pub const BREAK_USAGE: &str =
    "redlock-run break [OPTIONS] --key <KEY> [--holder <TOKEN> | --host <HOST>] [--yes]";

/// The usage line of `pause --help`.
pub const PAUSE_USAGE: &str = "redlock-run pause [OPTIONS] --key <KEY> --for <DUR> --reason <TEXT>";

/// The usage line of `resume --help`.
pub const RESUME_USAGE: &str = "redlock-run resume [OPTIONS] --key <KEY>";

/// Exit code of an operator's command that found nothing to act on (a free lock, no pause,
/// no hold to release).
pub const EXIT_NOTHING: u8 = 3;

/// Exit code of `break` when the lock is held, but not by the holder named.
pub const EXIT_NOT_THAT_HOLDER: u8 = 4;

/// Usage examples, shared by `--help` and the man page: (comment, command).
pub const EXAMPLES: &[(&str, &str)] = &[
    (
        "cron on several hosts: the batch runs once a day; a failed run is retried by the next",
        "redlock-run --key settle --once-per day --wait 10m -- ./batch.sh",
    ),
    (
        "CI: wait up to 10 minutes for the deploy lock, then deploy",
        "redlock-run --key deploy:prod --wait 10m -c './deploy.sh && ./smoke.sh'",
    ),
    (
        "watched: node_exporter textfile metrics (alert when no host succeeded in 26 hours: \
         time() - redlock_run_last_success_timestamp_seconds > 26*3600) and a healthchecks.io \
         check (/start, success or /<exit code>; busy hosts send only /log)",
        "redlock-run --key settle --once-per day --wait 10m \
         --metrics-file /var/lib/node_exporter/textfile/redlock.prom \
         --ping https://hc-ping.com/YOUR-UUID -- ./batch.sh",
    ),
    (
        "CI: hold the lock across several steps (a keeper renews it until release, at most \
         --max-hold)",
        "eval \"$(redlock-run acquire --key deploy:prod --wait 10m)\" && ./deploy.sh; \
         redlock-run release --key deploy:prod",
    ),
    (
        "the same cron job with its settings in a [lock.\"settle\"] section of \
         /etc/redlock-run.toml (or --config FILE)",
        "redlock-run --key settle -- ./batch.sh",
    ),
    (
        "who holds it, and how did its last run end?",
        "redlock-run status --key deploy:prod",
    ),
    (
        "every lock in use under the prefix redlock:deploy: (holder, age, queue, last run)",
        "redlock-run list --name-prefix deploy:",
    ),
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
        "lock lost while the command ran; the command was stopped (release: the hold was lost \
         while held)",
    ),
    (
        "69",
        "Redis unreachable or refusing, or too few --min-replicas acknowledged",
    ),
    (
        "78",
        "--limit differs from the lock's other users (with or without one)",
    ),
    ("124", "--max-runtime reached; the command was stopped"),
    ("126 / 127", "command not executable / not found"),
    (
        "3",
        "nothing there to act on (break: lock free; resume: not paused; release: no hold \
         under that token, or released already)",
    ),
    (
        "4",
        "break, release: held, but not by the holder or token named, or (release) under the \
         token with no hold of it recorded (nothing changed)",
    ),
    (
        "2",
        "bad usage (flags, durations, URL, key, missing command, config file)",
    ),
    (
        "70",
        "internal error; acquire: the hold could not be handed on (stdout or a --github or \
         --dotenv file not writable; the lock was released)",
    ),
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

/// Built on every run (clap's derive evaluates it with the command), though only `--help`
/// shows it: written into one buffer sized once, not through a `format!` per line.
fn after_long_help() -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(4096);
    out.push_str("Examples:\n");
    for (comment, command) in EXAMPLES {
        let _ = write!(out, "  # {comment}\n  {command}\n\n");
    }
    out.push_str("Exit codes:\n");
    for (code, meaning) in EXIT_CODES {
        let _ = writeln!(out, "  {code:<13} {meaning}");
    }
    out.push_str("\nThe command's environment also has:\n");
    for (name, meaning) in CHILD_ENV {
        let _ = writeln!(out, "  {name:<15} {meaning}");
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
    override_usage = USAGE,
    after_long_help = after_long_help(),
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
    ///
    /// Only reads. Exits 0 whether the lock is held or free, and 69 when Redis cannot be
    /// reached.
    #[command(override_usage = STATUS_USAGE)]
    Status(StatusArgs),
    /// Clear a lock's run record (last run, last success), so that --once-per runs the
    /// command again in this period.
    ///
    /// The lock itself is left alone. Exits 0 whether there was a record or not, 69 when
    /// Redis (on Redlock: any of the masters) cannot be reached.
    #[command(override_usage = FORGET_USAGE)]
    Forget(ForgetArgs),
    /// Take the lock for several CI steps: a keeper process renews it until release, at most
    /// --max-hold.
    ///
    /// Prints the hold as shell assignments, safe to eval (REDLOCK_TOKEN, REDLOCK_FENCE,
    /// REDLOCK_KEY, exported). The keeper is detached (its own session, no terminal, stdio on
    /// /dev/null) so the step can end; it gives the lock up when renewal cannot be confirmed
    /// before the lease ends, at --max-hold, or on SIGTERM, SIGINT, SIGHUP or SIGQUIT, and records
    /// when and why for release. Exits 0 once the keeper holds the lock, 75 busy, 69 unreachable.
    #[command(override_usage = ACQUIRE_USAGE)]
    Acquire(AcquireArgs),
    /// Release a hold taken by acquire, by its token, and stop its keeper.
    ///
    /// Exits 0 when this hold was released, 74 when it was lost while held (says when and
    /// why), 3 when there is nothing to release, 4 when another token holds the lock and no
    /// hold of this token is recorded (or it is held under this token without one), 69 when Redis
    /// cannot be reached. A release with another token never touches the lock.
    #[command(override_usage = RELEASE_USAGE)]
    Release(ReleaseArgs),
    /// List the locks under --prefix: holder, age, TTL left, queue, --limit permits, last run.
    ///
    /// Only reads, with SCAN (never KEYS): every master of a Cluster, every node of Redlock
    /// (a quorum view), the current master under Sentinel. --key is not used. A lock is
    /// listed while it is held, runs wait for it, or it has a run record. Exits 0 (also when
    /// none is found, or the listing was cut: a warning says so), 69 when Redis cannot be
    /// reached.
    #[command(override_usage = LIST_USAGE)]
    List(ListArgs),
    /// Take a lock away from its holder: only from the holder named (--holder, --host), or
    /// shown and confirmed at a terminal (--yes without one).
    ///
    /// Atomic: the holder's token is compared and deleted in one step, so a holder that took
    /// the lock in between is never touched. Raises the fence (the next grant's is above the
    /// one printed), marks the token broken and records the run as broken; the old holder's
    /// wrapper stops its command at its next renewal (exit 74). With --limit locks, breaks
    /// one permit; with --shared holders, one shared holder. Exits 0 broken, 3 the lock is
    /// free, 4 not held by the holder named, 2 usage (no terminal and no --yes, or several
    /// holders match), 69 Redis unreachable.
    #[command(name = "break", override_usage = BREAK_USAGE)]
    Break(BreakArgs),
    /// Hold off new runs for a while: they are busy (exit 75) until resume or until the
    /// pause expires; waiters keep their place; a running holder is not touched.
    #[command(override_usage = PAUSE_USAGE)]
    Pause(PauseArgs),
    /// End a pause now and wake the first waiter. Exits 0, or 3 when the lock was not
    /// paused.
    #[command(override_usage = RESUME_USAGE)]
    Resume(ResumeArgs),
}

/// `acquire`'s options: the lease and busy-lock options of a run, and where the hold goes.
#[derive(Debug, Args)]
pub struct AcquireArgs {
    /// Lease length: a keeper that dies frees the lock within it.
    #[arg(short, long, env = "REDLOCK_TTL", value_name = "DUR", default_value = "30s",
          value_parser = parse_duration, help_heading = "Lease")]
    pub ttl: Duration,

    /// Renewal interval [default: ttl/3].
    #[arg(long, env = "REDLOCK_HEARTBEAT", value_name = "DUR", value_parser = parse_duration,
          help_heading = "Lease")]
    pub heartbeat: Option<Duration>,

    /// The keeper gives the lock up this long before its lease would end unconfirmed
    /// [default: 10s, at most ttl/3].
    #[arg(long, env = "REDLOCK_GRACE", value_name = "DUR", value_parser = parse_duration,
          help_heading = "Lease")]
    pub grace: Option<Duration>,

    /// The longest the keeper holds the lock: at DUR it releases it and records why, so a
    /// cancelled pipeline never leaves a lock renewed for ever. Longer than --ttl.
    #[arg(long, env = "REDLOCK_MAX_HOLD", value_name = "DUR", default_value = DEFAULT_MAX_HOLD,
          value_parser = parse_duration, help_heading = "Lease")]
    pub max_hold: Duration,

    /// Wait up to DUR for a busy lock, served in arrival order (not with Redlock): 0 tries
    /// once, forever (or inf) has no limit.
    #[arg(short, long, env = "REDLOCK_WAIT", value_name = "DUR|forever", default_value = "0",
          value_parser = parse_wait, help_heading = "Busy lock")]
    pub wait: Wait,

    /// Let up to N holds have the lock at once (a counting semaphore); 1 is a mutex.
    #[arg(
        long,
        env = "REDLOCK_LIMIT",
        value_name = "N",
        default_value_t = 1,
        help_heading = "Busy lock"
    )]
    pub limit: u32,

    /// Exit code for a busy lock.
    #[arg(short = 'E', long, env = "REDLOCK_CONFLICT_EXIT_CODE", value_name = "N",
          default_value_t = EXIT_BUSY, help_heading = "Busy lock")]
    pub conflict_exit_code: u8,

    /// Replicas that must acknowledge the acquire and each renewal (Redis WAIT).
    #[arg(
        long,
        env = "REDLOCK_MIN_REPLICAS",
        value_name = "N",
        default_value_t = 0,
        help_heading = "Lease"
    )]
    pub min_replicas: u32,

    /// How long to wait for --min-replicas acknowledgements.
    #[arg(long, env = "REDLOCK_REPLICA_TIMEOUT", value_name = "DUR", default_value = "1s",
          value_parser = parse_duration, help_heading = "Lease")]
    pub replica_timeout: Duration,

    /// Also append the hold to $GITHUB_OUTPUT (token, fence, key) and $GITHUB_ENV
    /// (REDLOCK_TOKEN, REDLOCK_FENCE, REDLOCK_KEY), for the job's later steps.
    #[arg(long, env = "REDLOCK_GITHUB", action = ArgAction::SetTrue,
          value_parser = parse_switch, help_heading = "Output")]
    pub github: bool,

    /// A note on the hold's holder record, shown by status (a ticket, a CI run URL): one line
    /// of printable text, up to 200 characters.
    #[arg(
        long,
        env = "REDLOCK_NOTE",
        value_name = "TEXT",
        help_heading = "Output"
    )]
    pub note: Option<String>,

    /// Also write the hold to FILE as a dotenv file (GitLab: artifacts:reports:dotenv).
    #[arg(
        long,
        env = "REDLOCK_DOTENV",
        value_name = "FILE",
        help_heading = "Output"
    )]
    pub dotenv: Option<PathBuf>,
}

/// `release`'s options.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The hold's token, as acquire printed it.
    #[arg(
        long,
        env = "REDLOCK_TOKEN",
        value_name = "TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
}

/// `list`'s own options; the servers and the key prefix are the global ones ([`ConnArgs`]).
#[derive(Debug, Args)]
pub struct ListArgs {
    /// List only the locks whose name (what --key would be) starts with NAME [default: every
    /// lock under --prefix].
    #[arg(
        long,
        env = "REDLOCK_LIST_NAME_PREFIX",
        value_name = "NAME",
        default_value = "",
        hide_default_value = true
    )]
    pub name_prefix: String,

    /// Print one JSON array (an object a lock, as status --json prints it) instead of a
    /// table.
    #[arg(long, env = "REDLOCK_LIST_JSON", action = ArgAction::SetTrue,
          value_parser = parse_switch)]
    pub json: bool,

    /// Show at most N locks, the first N by name; a warning says when there were more.
    #[arg(long, env = "REDLOCK_LIST_MAX_LOCKS", value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_locks: u32,

    /// Keys SCAN looks at per call (its COUNT): more is fewer round trips, each one longer.
    #[arg(long, env = "REDLOCK_LIST_SCAN_COUNT", value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub scan_count: u32,

    /// Start no SCAN call after DUR; a warning says the listing may miss locks.
    #[arg(long, env = "REDLOCK_LIST_SCAN_TIME", value_name = "DUR", default_value = "30s",
          value_parser = parse_duration)]
    pub scan_time: Duration,
}

/// `break`'s own options.
#[derive(Debug, Args)]
pub struct BreakArgs {
    /// Break only the holder with this token (its REDLOCK_TOKEN; status --json shows it).
    #[arg(
        long,
        env = "REDLOCK_BREAK_HOLDER",
        value_name = "TOKEN",
        conflicts_with = "host"
    )]
    pub holder: Option<String>,

    /// Break only a holder on this host (as status shows it).
    #[arg(long, env = "REDLOCK_BREAK_HOST", value_name = "HOST")]
    pub host: Option<String>,

    /// Break without asking (needed without --holder/--host when stdin is no terminal).
    #[arg(short, long, env = "REDLOCK_BREAK_YES", action = ArgAction::SetTrue,
          value_parser = parse_switch)]
    pub yes: bool,
}

/// `pause`'s own options.
#[derive(Debug, Args)]
pub struct PauseArgs {
    /// How long the pause lasts at most (it always expires; resume ends it earlier).
    #[arg(long = "for", env = "REDLOCK_PAUSE_FOR", value_name = "DUR", required = true,
          value_parser = parse_duration)]
    pub length: Duration,

    /// Why: shown in the busy message of every run held off, and by status (one line, up to
    /// 200 characters).
    #[arg(
        long,
        env = "REDLOCK_PAUSE_REASON",
        value_name = "TEXT",
        required = true
    )]
    pub reason: String,
}

/// `resume` has no options of its own.
#[derive(Debug, Args)]
pub struct ResumeArgs {}

impl Sub {
    /// The subcommand's name on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Sub::Status(_) => "status",
            Sub::Forget(_) => "forget",
            Sub::Acquire(_) => "acquire",
            Sub::Release(_) => "release",
            Sub::List(_) => "list",
            Sub::Break(_) => "break",
            Sub::Pause(_) => "pause",
            Sub::Resume(_) => "resume",
        }
    }
}

/// `forget` has no options of its own: the lock is named by the global ones.
#[derive(Debug, Args)]
pub struct ForgetArgs {}

/// `status`'s own options. Those of [`ConnArgs`] are global: given before `status` (as
/// `alias rl='redlock-run --redis R'` does) or after it, and `Cli::conn` has them either way.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print one JSON object instead of text.
    #[arg(long, env = "REDLOCK_STATUS_JSON", action = ArgAction::SetTrue,
          value_parser = parse_switch)]
    pub json: bool,
}

/// Where the lock lives. Shared by the run and `status`: global options, so that they may come
/// before or after `status` (one given on both sides: the one after it wins).
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Lock and Redis")]
pub struct ConnArgs {
    /// Read settings from FILE (TOML: the long option names; defaults at the top, a lock's
    /// own in a [lock."KEY"] section); flags and REDLOCK_* variables win over it. An empty
    /// FILE reads none [default: /etc/redlock-run.toml if it exists].
    // An OsString, not a PathBuf: clap refuses an empty path, and empty means "no file".
    #[arg(
        long,
        global = true,
        env = "REDLOCK_CONFIG",
        value_name = "FILE",
        value_parser = clap::value_parser!(OsString),
        value_hint = clap::ValueHint::FilePath,
        help_heading = "Config file"
    )]
    pub config: Option<OsString>,

    /// Lock name; the Redis key is PREFIX + KEY.
    #[arg(short, long, global = true, env = "REDLOCK_KEY", value_name = "KEY")]
    pub key: Option<String>,

    /// Redis URL: redis://[user:password@]host[:port][/db], rediss:// (TLS), valkey://,
    /// unix:///path[?pass=PASSWORD];
    /// redis+sentinel://[user:password@]host1:26379,host2/MASTER_NAME[/db];
    /// redis+cluster://[user:password@]host1:6379,host2:6379 (seed nodes).
    /// Given 3 or more times (or several URLs separated by spaces in REDLOCK_REDIS):
    /// Redlock, one lock over independent masters.
    #[arg(
        short,
        long,
        global = true,
        env = "REDLOCK_REDIS",
        value_name = "URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true,
        action = ArgAction::Append
    )]
    pub redis: Vec<String>,

    /// Redlock: how many of the --redis masters must grant and renew the lock
    /// [default: more than half].
    #[arg(long, global = true, env = "REDLOCK_QUORUM", value_name = "Q")]
    pub quorum: Option<usize>,

    /// Read the Redis password from FILE (keeps it out of ps); wins over the URL's.
    #[arg(
        long,
        global = true,
        env = "REDLOCK_PASSWORD_FILE",
        value_name = "FILE"
    )]
    pub password_file: Option<PathBuf>,

    /// Prefix of the Redis key; '' uses KEY as it is (to share a lock with other SET NX
    /// clients).
    #[arg(
        long,
        global = true,
        env = "REDLOCK_PREFIX",
        value_name = "P",
        default_value = "redlock:"
    )]
    pub prefix: String,

    /// Bound on connecting to Redis (the whole start) and on each reply.
    #[arg(long, global = true, env = "REDLOCK_CONNECT_TIMEOUT", value_name = "DUR", default_value = "5s",
          value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// TLS: trust the CA certificates in FILE (PEM) instead of the system's.
    #[arg(
        long,
        global = true,
        env = "REDLOCK_TLS_CA_CERT",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub tls_ca_cert: Option<PathBuf>,

    /// TLS: present the client certificate in FILE (PEM); needs --tls-key.
    #[arg(
        long,
        global = true,
        env = "REDLOCK_TLS_CERT",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub tls_cert: Option<PathBuf>,

    /// TLS: the private key (PEM) of --tls-cert.
    #[arg(
        long,
        global = true,
        env = "REDLOCK_TLS_KEY",
        value_name = "FILE",
        help_heading = "TLS"
    )]
    pub tls_key: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Lease length: a holder that dies frees the lock within it.
    #[arg(short, long, env = "REDLOCK_TTL", value_name = "DUR", default_value = "30s",
          value_parser = parse_duration, help_heading = "Lease")]
    pub ttl: Duration,

    /// Renewal interval [default: ttl/3].
    #[arg(long, env = "REDLOCK_HEARTBEAT", value_name = "DUR", value_parser = parse_duration,
          help_heading = "Lease")]
    pub heartbeat: Option<Duration>,

    /// Wait up to DUR for a busy lock, served in arrival order (not with Redlock): 0 tries
    /// once, forever (or inf) has no limit.
    #[arg(short, long, env = "REDLOCK_WAIT", value_name = "DUR|forever", default_value = "0",
          value_parser = parse_wait, help_heading = "Busy lock")]
    pub wait: Wait,

    /// Let up to N runs hold the lock at once (a counting semaphore); 1 is a mutex.
    #[arg(
        long,
        env = "REDLOCK_LIMIT",
        value_name = "N",
        default_value_t = 1,
        help_heading = "Busy lock"
    )]
    pub limit: u32,

    /// Hold the lock shared, as flock -s: shared runs hold it together, a run without
    /// --shared holds it alone (not with --limit or Redlock).
    #[arg(short = 's', long, env = "REDLOCK_SHARED", action = ArgAction::SetTrue,
          value_parser = parse_switch, help_heading = "Busy lock")]
    pub shared: bool,

    /// Exit code for a busy lock.
    #[arg(short = 'E', long, env = "REDLOCK_CONFLICT_EXIT_CODE", value_name = "N",
          default_value_t = EXIT_BUSY, help_heading = "Busy lock")]
    pub conflict_exit_code: u8,

    /// SIGTERM to SIGKILL when the command must stop [default: 10s, at most ttl/3].
    #[arg(long, env = "REDLOCK_GRACE", value_name = "DUR", value_parser = parse_duration,
          help_heading = "Lease")]
    pub grace: Option<Duration>,

    /// Stop the command after DUR (SIGTERM, SIGKILL after --grace) and exit 124.
    #[arg(long, env = "REDLOCK_MAX_RUNTIME", value_name = "DUR", value_parser = parse_duration,
          help_heading = "Command")]
    pub max_runtime: Option<Duration>,

    /// Keep the lock DUR after the acquire even if the command ends sooner (cron on hosts
    /// with skewed clocks).
    #[arg(long, env = "REDLOCK_HOLD_AT_LEAST", value_name = "DUR", value_parser = parse_duration,
          help_heading = "Lease")]
    pub hold_at_least: Option<Duration>,

    /// Run the command at most once per PERIOD: after acquiring, skip it (exit 0, or
    /// --done-exit-code) if the last success started in the current period. PERIOD: hour,
    /// day, week (ISO, from Monday), month (calendar, on the server's clock, in --timezone),
    /// or a rolling duration (6h, 90m; at most 31 days). Failed runs do not count.
    #[arg(long, env = "REDLOCK_ONCE_PER", value_name = "PERIOD", value_parser = parse_period,
          help_heading = "Run record")]
    pub once_per: Option<Period>,

    /// Time zone of --once-per's calendar periods: an IANA name such as Europe/Berlin
    /// [default: UTC].
    #[arg(
        long,
        env = "REDLOCK_TIMEZONE",
        value_name = "TZ",
        help_heading = "Run record"
    )]
    pub timezone: Option<String>,

    /// Exit code of a run that --once-per skipped (only with --once-per) [default: 0].
    #[arg(
        long,
        env = "REDLOCK_DONE_EXIT_CODE",
        value_name = "N",
        help_heading = "Run record"
    )]
    pub done_exit_code: Option<u8>,

    /// Replicas that must acknowledge the acquire and each renewal (Redis WAIT); with Sentinel
    /// also every replica the sentinels could promote.
    #[arg(
        long,
        help_heading = "Lease",
        env = "REDLOCK_MIN_REPLICAS",
        value_name = "N",
        default_value_t = 0
    )]
    pub min_replicas: u32,

    /// How long to wait for --min-replicas acknowledgements.
    #[arg(long, env = "REDLOCK_REPLICA_TIMEOUT", value_name = "DUR", default_value = "1s",
          value_parser = parse_duration, help_heading = "Lease")]
    pub replica_timeout: Duration,

    /// Run SHELL_STRING with /bin/sh -c instead of a COMMAND after --.
    // No environment variable: the command is not a setting, and one inherited by a job that
    // itself calls redlock-run would clash with that call's own command.
    #[arg(
        short = 'c',
        long = "command",
        help_heading = "Command",
        value_name = "SHELL_STRING",
        conflicts_with = "command"
    )]
    pub shell: Option<String>,

    /// Show the command's arguments in the holder record (see status) and in messages. Off:
    /// the program name only, as anyone who can read Redis can read the record.
    #[arg(long, env = "REDLOCK_RECORD_ARGS", action = ArgAction::SetTrue,
          value_parser = parse_switch, help_heading = "Command")]
    pub record_args: bool,

    /// A note on the holder record, shown by status (a ticket, a CI run URL): one line of
    /// printable text, up to 200 characters.
    #[arg(
        long,
        env = "REDLOCK_NOTE",
        value_name = "TEXT",
        help_heading = "Command"
    )]
    pub note: Option<String>,

    /// After every run, write its metrics for Prometheus to FILE (node_exporter textfile
    /// format, replaced atomically; several keys may share one file).
    #[arg(
        long,
        env = "REDLOCK_METRICS_FILE",
        value_name = "FILE",
        help_heading = "Monitoring"
    )]
    pub metrics_file: Option<PathBuf>,

    /// Ping a cron monitor (healthchecks.io protocol): URL/start when the command starts, URL
    /// on success, URL/<exit code> on failure, URL/log for a busy or skipped run. HTTPS trusts
    /// the system's CAs, or those in SSL_CERT_FILE; proxies come from https_proxy, http_proxy
    /// and no_proxy.
    #[arg(
        long,
        env = "REDLOCK_PING",
        value_name = "URL",
        hide_env_values = true,
        help_heading = "Monitoring"
    )]
    pub ping: Option<String>,

    /// Send the last N lines of the command's output (stdout and stderr) with the final ping
    /// [default: none].
    #[arg(
        long,
        env = "REDLOCK_PING_OUTPUT",
        value_name = "N",
        help_heading = "Monitoring"
    )]
    pub ping_output: Option<u32>,

    /// The command to run and its arguments, after --.
    #[arg(value_name = "COMMAND", trailing_var_arg = true, help_heading = "Command",
          action = ArgAction::Append)]
    pub command: Vec<OsString>,
}

/// Messages on stderr. `--log-format` applies to `status` too; `-q` and `-v` only to a run.
#[derive(Debug, Args)]
#[command(next_help_heading = "Messages")]
pub struct OutputArgs {
    /// Print nothing for a busy lock.
    #[arg(short, long, env = "REDLOCK_QUIET", action = ArgAction::SetTrue,
          value_parser = parse_switch)]
    pub quiet: bool,

    /// Report the acquire, renewals and the release.
    #[arg(short, long, env = "REDLOCK_VERBOSE", action = ArgAction::SetTrue,
          value_parser = parse_switch)]
    pub verbose: bool,

    #[command(flatten)]
    pub format: FormatArgs,
}

#[derive(Debug, Args)]
#[command(next_help_heading = "Messages")]
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
    /// One "redlock-run: ..." line a message.
    Text,
    /// One JSON object a line.
    Json,
}

/// `--once-per`: a calendar period on the server's clock, or a rolling duration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Hour,
    Day,
    /// ISO week: from Monday 00:00.
    Week,
    Month,
    /// The last DUR up to now.
    Rolling(Duration),
}

/// The longest rolling `--once-per` duration: a run record is kept 40 days (record.rs).
pub const LONGEST_ROLLING_PERIOD: Duration = Duration::from_secs(31 * 24 * 3600);

fn parse_period(s: &str) -> Result<Period, String> {
    let period = match s.trim().to_ascii_lowercase().as_str() {
        "hour" | "hourly" => Period::Hour,
        "day" | "daily" => Period::Day,
        "week" | "weekly" => Period::Week,
        "month" | "monthly" => Period::Month,
        other => {
            let d = parse_duration(other).map_err(|_| {
                "use hour, day, week, month or a duration such as 6h or 90m".to_owned()
            })?;
            if d < Duration::from_secs(1) {
                return Err("a rolling period must be at least 1s".to_owned());
            }
            if d > LONGEST_ROLLING_PERIOD {
                return Err(
                    "a rolling period can be at most 31 days (use month for a calendar month)"
                        .to_owned(),
                );
            }
            Period::Rolling(d)
        }
    };
    Ok(period)
}

/// How long to wait for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    For(Duration),
    Forever,
}

/// A duration: humantime (`500ms`, `30s`, `1h 30m`), or a bare number of seconds (`10`,
/// `1.5`) as flock, timeout and sleep read it.
fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<f64>()
        && s.starts_with(|c: char| c.is_ascii_digit() || c == '.')
    {
        return Duration::try_from_secs_f64(secs)
            .map_err(|_| format!("{s} seconds is out of range"));
    }
    humantime::parse_duration(s)
        .map_err(|e| format!("{e} (examples: 500ms, 30s, 2m, 1h 30m; a bare number is seconds)"))
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
        other => parse_duration(other)
            .map(Wait::For)
            .map_err(|e| format!("{e}; for no limit use forever (or inf)")),
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

    /// The usage tells a run from `status`: `--key`, `--` before the command, the `-c` form
    /// and the subcommand, instead of one `[COMMAND]` standing for both.
    #[test]
    fn help_usage_shows_the_command_after_double_dash_and_status() {
        let long = Cli::command().render_long_help().to_string();
        let usage: Vec<&str> = long
            .lines()
            .skip_while(|l| !l.starts_with("Usage: "))
            .take_while(|l| !l.trim().is_empty())
            .collect();
        assert!(
            usage.first().is_some_and(
                |l| l.ends_with("redlock-run [OPTIONS] --key <KEY> -- <COMMAND> [ARGS]...")
            ),
            "{usage:#?}"
        );
        assert!(
            usage
                .iter()
                .any(|l| l.contains("--key <KEY> -c <SHELL_STRING>")),
            "{usage:#?}"
        );
        assert!(
            usage.iter().any(|l| l.contains("redlock-run status ")),
            "{usage:#?}"
        );
        assert!(!long.contains("[COMMAND]\n"), "{long}");
        let short = Cli::command().render_help().to_string();
        assert!(short.contains("-- <COMMAND> [ARGS]..."), "{short}");

        let mut cmd = Cli::command();
        let status = cmd.find_subcommand_mut("status").unwrap();
        let status_help = status.render_long_help().to_string();
        assert!(
            status_help.contains("Usage: redlock-run status [OPTIONS] --key <KEY> [--json]"),
            "{status_help}"
        );
    }

    /// `--help` is complete (every option, with its variable) and grouped under headings;
    /// `-h` stays the short form, one line or so an option.
    #[test]
    fn help_lists_every_option_under_a_heading() {
        let mut cmd = Cli::command();
        cmd.build();
        let long = cmd.render_long_help().to_string();
        for arg in cmd.get_arguments().filter(|a| !a.is_positional()) {
            let long_name = format!("--{}", arg.get_long().unwrap());
            assert!(long.contains(&long_name), "--help lacks {long_name}");
            if let Some(env) = arg.get_env() {
                let env = env.to_string_lossy();
                assert!(long.contains(&*env), "--help lacks {env}");
            }
        }
        for heading in [
            "Lock and Redis:",
            "Lease:",
            "Busy lock:",
            "Command:",
            "Run record:",
            "Monitoring:",
            "Messages:",
            "Config file:",
        ] {
            assert!(
                long.lines().any(|l| l == heading),
                "--help has no {heading}"
            );
        }
        let short = cmd.render_help().to_string();
        assert!(
            short.lines().count() * 2 < long.lines().count(),
            "-h is not much shorter than --help:\n{short}"
        );
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
    fn periods_are_calendar_names_or_bounded_durations() {
        assert_eq!(parse_period("day"), Ok(Period::Day));
        assert_eq!(parse_period(" Week "), Ok(Period::Week));
        assert_eq!(parse_period("hour"), Ok(Period::Hour));
        assert_eq!(parse_period("month"), Ok(Period::Month));
        assert_eq!(
            parse_period("6h"),
            Ok(Period::Rolling(Duration::from_secs(6 * 3600)))
        );
        assert_eq!(
            parse_period("90m"),
            Ok(Period::Rolling(Duration::from_secs(90 * 60)))
        );
        for bad in ["fortnight", "", "0", "500ms", "32 days", "-1h"] {
            assert!(parse_period(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn wait_parses_forever_and_durations() {
        assert_eq!(parse_wait("forever"), Ok(Wait::Forever));
        assert_eq!(parse_wait("0"), Ok(Wait::For(Duration::ZERO)));
        assert_eq!(parse_wait("1m"), Ok(Wait::For(Duration::from_secs(60))));
        assert!(parse_wait("soon").is_err());
        assert!(parse_wait("infinite").unwrap_err().contains("forever"));
    }

    /// A bare number is seconds, as for flock -w, timeout and sleep.
    #[test]
    fn a_bare_number_is_seconds() {
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration(" 30 "), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_wait("10"), Ok(Wait::For(Duration::from_secs(10))));
        for bad in ["-1", "-1s", "NaN", "inf", "1e400", "abc", "+5"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
