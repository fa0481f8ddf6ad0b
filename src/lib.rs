//! redlock-run: run a command while holding a Redis lock.
//!
//! # Layout
//!
//! From the top layer down: each entry at the left margin imports only entries below it, and
//! no two files import each other, directly or in a circle.
//!
//! ```text
//! main.rs, lib.rs  parse, run, exit (by the command's own signal when it died by one)
//! supervise/       the supervisor: acquire and wait, hold, lease keeper, stopper, outcome,
//!                  backoff, messages; every change of the lock's state happens there
//!   steps/         holds across CI steps: `acquire` (start.rs) leaves a keeper (keep.rs)
//!                  until `release` (release.rs); output.rs: eval, GitHub, dotenv
//! list.rs          the `list` subcommand (every lock under a prefix, a row each)
//! status.rs        the `status` and `forget` subcommands (the lock and its run record)
//! operator.rs      the `break`, `pause` and `resume` subcommands (an operator's hands)
//! process/         the command as processes: group, cgroup, whole tree, signals, terminal
//! config/          flags, environment and the config file -> checked settings, before
//!                  anything runs
//! observe/         --metrics-file (Prometheus textfile), --ping (cron monitors, with its
//!                  HTTP/1.1 client) and --ping-output's capture of the command's output
//! period.rs        --once-per: where the current period began (calendar or rolling, in a
//!                  time zone, on the server's clock)
//! report/          stderr messages, text or JSON, from a writer thread of their own
//! lock/            the contract the supervisor drives (contract.rs), Redis failures, token
//!   target/        what --redis names: URL forms, TLS files, Target/Endpoint
//!   protocol/      what a lock is in Redis: mutex, --limit semaphore, --shared holds, keys,
//!                  status, Lua
//!   topology/      how calls reach servers: one Lock over a route (one server, Sentinel,
//!                  Cluster), and the Redlock quorum (quorum/: the lock path, the operator's
//!                  and record calls, votes, tallies, nodes)
//! cli.rs           the clap definition and nothing else (also feeds completions, man page)
//! exit.rs          how a run ends, and each ending's exit code
//! lease.rs         the lease clock (CLOCK_BOOTTIME deadlines, drift)
//! timestamp.rs     server-clock milliseconds as RFC 3339 text
//! ```
//!
//! Modules are private, so the compiler reports what nothing uses.

pub mod cli;
mod config;
mod exit;
mod lease;
mod list;
mod lock;
mod observe;
mod operator;
mod period;
mod process;
mod report;
mod status;
mod supervise;
mod timestamp;

use cli::{Cli, Sub};
use exit::Ending;
use report::Reporter;

/// How the process ends: an exit code, or (a run whose command was killed by signal N, or
/// whose wait a signal N ended) death by that same signal.
struct End {
    code: u8,
    by_signal: Option<i32>,
    /// The signal is owed to the wrapper's whole process group (see `die_by`).
    to_group: bool,
}

impl From<u8> for End {
    fn from(code: u8) -> End {
        End {
            code,
            by_signal: None,
            to_group: false,
        }
    }
}

/// Parse the arguments, do the work, and return the process exit code; or end the process by
/// the command's own signal.
pub fn main_exit_code() -> u8 {
    let end = parse_and_run();
    // Messages still queued for a slow stderr get a moment; a blocked one does not hold up
    // the exit (the lock is released already, and the exit code tells the outcome).
    report::drain(std::time::Duration::from_secs(1));
    if let Some(sig) = end.by_signal {
        die_by(sig, end.to_group);
    }
    end.code
}

/// End by signal `sig`, as the command did, after the lock is released: a shell then sees
/// what it would have seen from the bare command (`$?` is 128+N either way), as timeout(1)
/// and sudo do. No core file: the command made its own if it was going to.
///
/// `to_group`: the command held the terminal and died by its Ctrl-C or Ctrl-\. The
/// terminal would have sent that signal to the wrapper's whole process group too (a script
/// that runs the wrapper, a pipeline it is part of); it went to the command's group alone, so
/// it is delivered to the wrapper's group now. A script in a loop then stops as it would with
/// the bare command.
fn die_by(sig: i32, to_group: bool) {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    use nix::sys::signal::{Signal, killpg};
    if let Ok((_, hard)) = getrlimit(Resource::RLIMIT_CORE) {
        let _ = setrlimit(Resource::RLIMIT_CORE, 0, hard);
    }
    let terminal_signal = matches!(Signal::try_from(sig), Ok(Signal::SIGINT | Signal::SIGQUIT));
    if to_group && terminal_signal {
        // SAFETY: installing SIG_DFL runs no code of ours; the process ends right after.
        let _ = unsafe {
            nix::sys::signal::signal(
                Signal::try_from(sig).expect("checked above"),
                nix::sys::signal::SigHandler::SigDfl,
            )
        };
        let _ = killpg(nix::unistd::getpgrp(), Signal::try_from(sig).ok());
    }
    // Returns only for signals whose default is to be ignored; the exit code covers those.
    let _ = signal_hook::low_level::emulate_default_handler(sig);
}

fn parse_and_run() -> End {
    if let Err(msg) = enough_file_descriptors() {
        early_reporter().error("internal", msg);
        return exit::SOFTWARE.into();
    }
    // A keeper has `acquire`'s arguments in its environment, not on its command line.
    let args = supervise::arguments();
    if args.len() <= 1 && std::env::var_os("REDLOCK_KEY").is_none() {
        return bare_usage().into();
    }
    let cli = match config::parse_cli(args) {
        Ok(cli) => cli,
        Err(config::CliError::Clap(err)) => return clap_error(&err).into(),
        Err(config::CliError::File(err)) => {
            return usage_error(&early_reporter(), &err).code().into();
        }
    };
    let output = &cli.output;
    if output.quiet && output.verbose {
        let report = Reporter::new(output.format.log_format, false, false);
        report.error(
            "usage",
            "error: --quiet and --verbose (or REDLOCK_QUIET and REDLOCK_VERBOSE) are both on; \
             choose one",
        );
        return exit::USAGE.into();
    }
    let report = Reporter::new(output.format.log_format, output.quiet, output.verbose);
    // A current-thread runtime on the main thread: the command is forked from this thread,
    // which lives as long as the process, so PR_SET_PDEATHSIG fires only when the wrapper dies.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            report.error("internal", format_args!("cannot start the runtime: {e}"));
            return Ending::Software.code().into();
        }
    };
    // A subcommand runs no command of its own: one given with it is a usage error (a program
    // that is named like a subcommand is run after `--`).
    if let Some(sub) = &cli.subcommand
        && (cli.run.shell.is_some() || !cli.run.command.is_empty())
    {
        match sub {
            Sub::Acquire(_) | Sub::Release(_) => report.error(
                "usage",
                "error: acquire and release run no command: the steps between them are the \
                 work (drop -c or the command)",
            ),
            _ => report.error(
                "usage",
                format_args!(
                    "error: {name} runs no command: drop -c, or put -- before a program named \
                     {name}",
                    name = sub.name()
                ),
            ),
        }
        return exit::USAGE.into();
    }
    match &cli.subcommand {
        Some(Sub::Acquire(args)) => match config::AcquireConfig::from_args(&cli.conn, args) {
            Ok(cfg) => {
                let report = report.with_key(&cfg.run.target.key);
                warn_about(&cfg.run.target, &report);
                let code = match supervise::Handshake::from_env() {
                    Some(handshake) => runtime
                        .block_on(supervise::keep(&cfg, handshake, &report))
                        .code(),
                    None => runtime.block_on(supervise::start(&cfg, &report)),
                };
                code.into()
            }
            Err(e) => usage_error(&report, &e).code().into(),
        },
        Some(Sub::Release(args)) => match config::ReleaseConfig::from_args(&cli.conn, args) {
            Ok(cfg) => {
                let report = report.with_key(&cfg.target.key);
                warn_about(&cfg.target, &report);
                runtime.block_on(supervise::release(&cfg, &report)).into()
            }
            Err(e) => usage_error(&report, &e).code().into(),
        },
        Some(Sub::List(args)) => match config::list_from_args(&cli.conn, args) {
            Ok((target, query)) => {
                warn_about(&target, &report);
                runtime
                    .block_on(list::list(&target, &query, args.json, &report))
                    .code()
                    .into()
            }
            Err(e) => usage_error(&report, &e).code().into(),
        },
        Some(sub @ (Sub::Break(_) | Sub::Pause(_) | Sub::Resume(_))) => {
            match config::target_from_args(&cli.conn) {
                Ok(target) => {
                    let report = report.with_key(&target.key);
                    warn_about(&target, &report);
                    runtime
                        .block_on(async {
                            match sub {
                                Sub::Break(args) => {
                                    operator::break_lock(&target, args, &report).await
                                }
                                Sub::Pause(args) => operator::pause(&target, args, &report).await,
                                _ => operator::resume(&target, &report).await,
                            }
                        })
                        .into()
                }
                Err(e) => usage_error(&report, &e).code().into(),
            }
        }
        Some(Sub::Forget(_)) => match config::target_from_args(&cli.conn) {
            Ok(target) => {
                let report = report.with_key(&target.key);
                warn_about(&target, &report);
                runtime
                    .block_on(status::forget(&target, &report))
                    .code()
                    .into()
            }
            Err(e) => usage_error(&report, &e).code().into(),
        },
        Some(Sub::Status(args)) => match config::target_from_args(&cli.conn) {
            Ok(target) => {
                let report = report.with_key(&target.key);
                warn_about(&target, &report);
                runtime
                    .block_on(status::status(&target, args.json, &report))
                    .code()
                    .into()
            }
            Err(e) => usage_error(&report, &e).code().into(),
        },
        None => match config::RunConfig::from_args(&cli.conn, &cli.run) {
            Ok(cfg) => {
                let report = report.with_key(&cfg.target.key);
                warn_about(&cfg.target, &report);
                let end = runtime.block_on(supervise::run(&cfg, &report));
                // The runtime's threads and handlers go before the process ends by a signal.
                // An exit takes everything down at once: tearing the runtime down first (its
                // drivers, the signal pipe, the Redis connection's task) would only add about
                // 0.1 ms to every run.
                if end.ending.signal().is_some() {
                    drop(runtime);
                } else {
                    std::mem::forget(runtime);
                }
                End {
                    code: end.ending.code(),
                    by_signal: end.ending.signal(),
                    to_group: end.at_terminal,
                }
            }
            Err(e) => usage_error(&report, &e).code().into(),
        },
    }
}

/// Settings that work but deserve a word (an even number of Redlock masters).
fn warn_about(target: &lock::target::Target, report: &Reporter) {
    if let lock::target::Endpoint::Quorum(nodes) = &target.endpoint
        && let Some(warning) = nodes.warning()
    {
        report.warn("config", warning);
    }
}

fn usage_error(report: &Reporter, err: &config::UsageError) -> Ending {
    report.error("usage", format_args!("error: {err}"));
    Ending::Usage
}

/// Help and version go to stdout with exit 0; a usage error becomes one line and exit 2.
fn clap_error(err: &clap::Error) -> u8 {
    use clap::error::ErrorKind;
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                exit::USAGE
            } else {
                0
            }
        }
        _ => {
            let text = err.render().to_string();
            let first = text.lines().next().unwrap_or("error: bad usage");
            let line = match not_taken_by(err) {
                Some(line) => format!("error: {line}{}", usage_of(failed_in(err))),
                None => format!("{first}{}{}", from_environment(err), hint(err)),
            };
            early_reporter().error("usage", line);
            exit::USAGE
        }
    }
}

/// The subcommand whose arguments clap refused (`None`: a run's), from the usage it quotes.
fn failed_in(err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue};
    let cmd = <Cli as clap::CommandFactory>::command();
    let Some(ContextValue::StyledStr(usage)) = err.get(ContextKind::Usage) else {
        // clap gives no usage with some errors (a value missing: `list --name-prefix`): the
        // first word of the command line, before a run's command, that names a subcommand.
        return supervise::arguments()
            .into_iter()
            .skip(1)
            .filter_map(|a| a.into_string().ok())
            .take_while(|a| a != "--" && a != "-c")
            .find_map(|a| cmd.find_subcommand(&a).map(|c| c.get_name().to_owned()));
    };
    let usage = usage.to_string();
    let word = usage.split_whitespace().nth(2)?;
    cmd.find_subcommand(word).map(|c| c.get_name().to_owned())
}

/// An option that the command at fault does not take but another does (`status --limit`):
/// the line that says so, in place of clap's "unexpected argument".
fn not_taken_by(err: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if err.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(typed)) = err.get(ContextKind::InvalidArg) else {
        return None;
    };
    not_taken(failed_in(err).as_deref(), typed)
}

/// `sub` (`None`: a run) given `typed` (`--name`, `--name=VALUE` or `-n`), which it does not
/// take: one line that says who does, and why `sub` does not where that is not obvious.
/// `None` when no command takes it (a typo: clap's words stand). A run's options before a
/// subcommand's name are accepted there (an alias's), and never come here.
fn not_taken(sub: Option<&str>, typed: &str) -> Option<String> {
    let name = typed.split('=').next()?;
    let mut cmd = <Cli as clap::CommandFactory>::command();
    cmd.build();
    let is_it = |arg: &clap::Arg| match name.strip_prefix("--") {
        Some(long) => arg.get_long() == Some(long),
        None => {
            let mut short = name.strip_prefix('-').unwrap_or_default().chars();
            match (short.next(), short.next()) {
                (Some(c), None) => arg.get_short() == Some(c),
                _ => false,
            }
        }
    };
    let mut long = None;
    let mut owners: Vec<&str> = Vec::new();
    let top = std::iter::once((None, &cmd));
    for (owner, c) in top.chain(cmd.get_subcommands().map(|c| (Some(c.get_name()), c))) {
        let Some(arg) = c.get_arguments().find(|a| !a.is_global_set() && is_it(a)) else {
            continue;
        };
        long = arg.get_long().or(long);
        if owner != sub {
            owners.push(owner.unwrap_or("a run"));
        }
    }
    let long = format!("--{}", long?);
    let shown = if name == long {
        long.clone()
    } else {
        format!("{name} ({long})")
    };
    let who = sub.unwrap_or("a run");
    let owners = match owners.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
        None => return None,
    };
    let why = match (sub, long.as_str()) {
        (None, _) => None,
        (_, "--limit") => Some("the limit is read from the lock"),
        (_, "--wait" | "--conflict-exit-code") => Some("it never waits for the lock"),
        (_, "--ttl" | "--heartbeat" | "--grace" | "--max-runtime") => Some("it holds no lease"),
        _ => None,
    };
    let why = why.map(|w| format!(": {w}")).unwrap_or_default();
    Some(format!(
        "{who} takes no {shown}{why}; {long} is for {owners}"
    ))
}

/// The usage of `sub` (`None`: a run's first form), and where more is, for the end of a
/// usage error.
fn usage_of(sub: Option<String>) -> String {
    let cmd = <Cli as clap::CommandFactory>::command();
    match sub.as_deref().and_then(|s| cmd.find_subcommand(s)) {
        Some(c) => {
            let usage = c.clone().render_usage().to_string();
            let usage = usage.strip_prefix("Usage: ").unwrap_or(&usage).trim();
            format!(
                " (Usage: {usage}; more: redlock-run {} --help)",
                c.get_name()
            )
        }
        None => {
            let usage = cli::USAGE.lines().next().unwrap_or_default();
            format!(" (Usage: {usage}; more: redlock-run --help)")
        }
    }
}

/// What clap prints on the lines after its first, folded into the one line: the flag or value
/// meant (`did you mean '--key'?`), the values allowed, and the usage line.
fn hint(err: &clap::error::Error) -> String {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    let mut out = String::new();
    // A suggestion is never what was typed: that one is refused here (see `not_taken`).
    let typed = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(typed)) => typed.split('=').next().unwrap_or_default(),
        _ => "",
    };
    for kind in [ContextKind::SuggestedArg, ContextKind::SuggestedValue] {
        let suggested: Vec<&str> = match err.get(kind) {
            Some(ContextValue::String(s)) => vec![s.as_str()],
            Some(ContextValue::Strings(v)) => v.iter().map(String::as_str).collect(),
            _ => Vec::new(),
        };
        let suggested: Vec<&str> = suggested.into_iter().filter(|s| *s != typed).collect();
        if !suggested.is_empty() {
            out.push_str(&format!("; did you mean '{}'?", suggested.join("' or '")));
        }
    }
    if out.is_empty()
        && err.kind() == ErrorKind::UnknownArgument
        && let Some(meant) = similar_option(typed, failed_in(err).as_deref())
    {
        out.push_str(&format!("; did you mean '{meant}'?"));
    }
    // `the following required arguments were not provided:` ends the first line; what is
    // missing, and the command's usage, are on the next ones.
    if err.kind() == ErrorKind::MissingRequiredArgument {
        if let Some(ContextValue::Strings(missing)) = err.get(ContextKind::InvalidArg) {
            out.push_str(&format!(" {}", missing.join(", ")));
        }
        if let Some(ContextValue::StyledStr(usage)) = err.get(ContextKind::Usage) {
            let usage = usage.to_string();
            let usage = usage.split_whitespace().collect::<Vec<_>>().join(" ");
            out.push_str(&format!(" ({usage})"));
        }
    }
    if let Some(ContextValue::Strings(valid)) = err.get(ContextKind::ValidValue)
        && !valid.is_empty()
    {
        out.push_str(&format!(" (possible values: {})", valid.join(", ")));
    }
    if matches!(
        err.kind(),
        ErrorKind::UnknownArgument | ErrorKind::InvalidValue | ErrorKind::InvalidSubcommand
    ) {
        out.push_str(&usage_of(failed_in(err)));
    }
    out
}

/// The long option closest to a mistyped `--flag` (at most two letters added, dropped,
/// changed or swapped) among those of `sub` (`None`: a run), never the one typed: an option
/// of another command is no suggestion for this one (see `not_taken`). clap finds none while
/// a trailing command may follow.
fn similar_option(typed: &str, sub: Option<&str>) -> Option<String> {
    let typed = typed.split('=').next()?.strip_prefix("--")?;
    let mut cmd = <Cli as clap::CommandFactory>::command();
    cmd.build();
    let cmd = match sub {
        Some(sub) => cmd.find_subcommand(sub)?,
        None => &cmd,
    };
    cmd.get_arguments()
        .filter_map(|a| a.get_long())
        .map(|l| (edit_distance(typed, l), l))
        .filter(|(d, l)| (1..=2.min(l.len() / 2)).contains(d))
        .min_by_key(|(d, _)| *d)
        .map(|(_, l)| format!("--{l}"))
}

/// Edit distance with adjacent swaps (optimal string alignment).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    let mut d = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for (i, row) in d.iter_mut().enumerate() {
        row[0] = i;
    }
    d[0] = (0..=b.len()).collect();
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[i - 1][j] + 1)
                .min(d[i][j - 1] + 1)
                .min(d[i - 1][j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[i - 2][j - 2] + 1);
            }
            d[i][j] = best;
        }
    }
    d[a.len()][b.len()]
}

/// A bare `redlock-run`: the usage forms, not an error about a missing flag.
fn bare_usage() -> u8 {
    let report = early_reporter();
    if report.is_json() {
        report.error(
            "usage",
            "error: no arguments: give --key KEY -- COMMAND (see --help)",
        );
    } else {
        eprintln!(
            "Usage: {}

Run a command while holding a Redis lock. More: redlock-run --help",
            cli::USAGE
        );
    }
    exit::USAGE
}

/// A reporter for errors found before the arguments could be parsed: JSON if the command
/// line or the environment asks for it (every message is then one JSON object), else text.
fn early_reporter() -> Reporter {
    // args_os: an argument that is not UTF-8 must not panic here (nor be printed).
    let args: Vec<String> = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let from_args = args.iter().enumerate().find_map(|(i, a)| {
        if a == "--" {
            return Some(None);
        }
        if let Some(v) = a.strip_prefix("--log-format=") {
            return Some(Some(v.to_owned()));
        }
        (a == "--log-format").then(|| args.get(i + 1).cloned())
    });
    let format = match from_args.flatten() {
        Some(v) => v,
        None => std::env::var("REDLOCK_LOG_FORMAT").unwrap_or_default(),
    };
    let format = if format.trim().eq_ignore_ascii_case("json") {
        cli::LogFormat::Json
    } else {
        cli::LogFormat::Text
    };
    Reporter::new(format, false, false)
}

/// When the value clap refused came from a `REDLOCK_*` variable rather than the command line,
/// say which variable, so the user does not look for a flag they never typed.
fn from_environment(err: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let Some(ContextValue::String(invalid)) = err.get(ContextKind::InvalidArg) else {
        return String::new();
    };
    let long = invalid.split_whitespace().next().unwrap_or_default();
    let typed = std::env::args_os()
        .map(|a| a.to_string_lossy().into_owned())
        .any(|a| a == long || a.starts_with(&format!("{long}=")));
    let mut commands = vec![<Cli as clap::CommandFactory>::command()];
    while let Some(cmd) = commands.pop() {
        for arg in cmd.get_arguments() {
            let named = arg.get_long().is_some_and(|l| format!("--{l}") == long);
            if let (true, Some(env)) = (named, arg.get_env())
                && !typed
                && std::env::var_os(env).is_some()
            {
                return format!(" (from the environment variable {})", env.to_string_lossy());
            }
        }
        commands.extend(cmd.get_subcommands().cloned());
    }
    String::new()
}

/// File descriptors the wrapper needs at the most: the runtime (epoll, a waker), the signal
/// pipe, two Redis connections, the spawn's status pipe, the terminal, a cgroup's files.
const FDS_NEEDED: u64 = 16;

/// Refuse to start when `ulimit -n` leaves too few free descriptors: the runtime's signal
/// set-up would otherwise panic half-way (a multi-line abort instead of one line).
fn enough_file_descriptors() -> Result<(), String> {
    use nix::sys::resource::{Resource, getrlimit};
    let Ok((soft, _)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return Ok(());
    };
    // The common case costs one system call.
    if soft >= 4 * FDS_NEEDED {
        return Ok(());
    }
    // The count includes the descriptor that reads the directory.
    let open = std::fs::read_dir("/proc/self/fd").map_or(3, |d| d.count() as u64 - 1);
    let free = soft.saturating_sub(open);
    if free < FDS_NEEDED {
        return Err(format!(
            "too few file descriptors: ulimit -n is {soft} with {open} open; redlock-run needs \
             {FDS_NEEDED} free (raise ulimit -n)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An option of another command is named as such, never suggested as itself.
    #[test]
    fn an_option_of_another_command_says_who_takes_it() {
        let said = |sub, typed| not_taken(sub, typed).unwrap_or_default();
        assert_eq!(
            said(Some("status"), "--limit"),
            "status takes no --limit: the limit is read from the lock; --limit is for a run \
             and acquire"
        );
        assert_eq!(
            said(Some("status"), "--limit=3"),
            said(Some("status"), "--limit")
        );
        assert!(said(Some("list"), "-w").starts_with("list takes no -w (--wait): it never waits"));
        assert_eq!(
            said(Some("status"), "--name-prefix"),
            "status takes no --name-prefix; --name-prefix is for list"
        );
        assert_eq!(
            said(None, "--json"),
            "a run takes no --json; --json is for status and list"
        );
        assert_eq!(not_taken(Some("status"), "--no-such-option"), None);
        assert_eq!(not_taken(Some("status"), "--limt"), None);
    }

    #[test]
    fn mistyped_options_find_the_one_meant() {
        assert_eq!(similar_option("--kye", None).as_deref(), Some("--key"));
        assert_eq!(similar_option("--wiat=5", None).as_deref(), Some("--wait"));
        assert_eq!(
            similar_option("--jsno", Some("status")).as_deref(),
            Some("--json")
        );
        assert_eq!(
            similar_option("--kye", Some("list")).as_deref(),
            Some("--key")
        );
        assert_eq!(similar_option("--nothing-like-it", None), None);
        // Never the option typed, nor one of another command.
        assert_eq!(similar_option("--limit", Some("status")), None);
        assert_eq!(similar_option("--limt", Some("status")), None);
        assert_eq!(edit_distance("ttl", "ttl"), 0);
        assert_eq!(edit_distance("kye", "key"), 1);
    }
}
