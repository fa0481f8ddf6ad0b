//! The command line with the config file beneath it: flag > environment > the key's section >
//! the file's defaults > the built-in default.
//!
//! clap already ranks a flag over its environment variable over its default value. The file's
//! values therefore become the options' default values: the command line is parsed a second
//! time with them, and every value goes through the same parser as a flag (a duration, a
//! number, a format), over every option of every subcommand without a list to keep up.
//! `ArgMatches::value_source` then tells which values the file gave.

use std::ffi::OsString;

use clap::builder::ValueParser;
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command, CommandFactory, FromArgMatches};

use super::UsageError;
use super::file::{self, ConfigFile, Kind, Setting};
use crate::cli::{Cli, Sub};
use crate::lock::target::Endpoint;

/// Why the command line could not be read.
#[derive(Debug)]
pub enum CliError {
    /// clap's own: help, version, or a bad flag or variable.
    Clap(clap::Error),
    /// The config file: unreadable, untrusted, or a bad name, type or value in it.
    File(UsageError),
}

/// Options that are not settings: the lock name picks the section, the file cannot name
/// itself, a command is not a default, and what one `break` or `release` acts on (its
/// confirmation, holder, host, token) is named at the time, never by a file. (`help` and `version` are not in an unbuilt
/// command.)
const NOT_IN_FILE: &[&str] = &["key", "config", "command", "yes", "holder", "host", "token"];

/// Parse `args` (the first is the program name) with the config file beneath them.
pub fn parse(args: Vec<OsString>) -> Result<Cli, CliError> {
    let first = Cli::command()
        .try_get_matches_from(&args)
        .map_err(CliError::Clap)?;
    let mut cli = Cli::from_arg_matches(&first).map_err(CliError::Clap)?;
    let Some((path, named)) = file::locate(cli.conn.config.as_deref()) else {
        take_run_options_before_acquire(&mut cli, &first);
        return Ok(cli);
    };
    let Some(text) = file::read(&path, named).map_err(CliError::File)? else {
        take_run_options_before_acquire(&mut cli, &first);
        return Ok(cli);
    };
    let options = Options::of(&Cli::command());
    let config = file::parse(&path, &text, |name| options.kind(name)).map_err(CliError::File)?;
    for setting in config.all() {
        options.check(&config, setting).map_err(CliError::File)?;
    }
    let mut cmd = Cli::command();
    // A hold's REDLOCK_KEY (the full key) picks the section of its lock name.
    let name = cli
        .conn
        .key
        .as_deref()
        .map(|k| super::held_name(k, &cli.conn.prefix).unwrap_or(k));
    for setting in config.settings_for(name) {
        cmd = options.set_default(cmd, &config, setting);
    }
    let matches = cmd.try_get_matches_from(&args).map_err(CliError::Clap)?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(CliError::Clap)?;
    drop_what_does_not_apply(&mut cli, &matches);
    take_run_options_before_acquire(&mut cli, &matches);
    Ok(cli)
}

/// `redlock-run --wait 10m acquire --key k`: a run's option that `acquire` takes too, given on
/// the command line before `acquire` and not after it, is `acquire`'s (as a lock or Redis
/// option before any subcommand is). Left at acquire's own value, it would wait 0 where the
/// user asked for 10 minutes. Given on both sides, the one after `acquire` wins.
fn take_run_options_before_acquire(cli: &mut Cli, matches: &ArgMatches) {
    let (Some(Sub::Acquire(acquire)), Some(("acquire", sub))) =
        (&mut cli.subcommand, matches.subcommand())
    else {
        return;
    };
    let before = |id: &str| {
        matches.value_source(id) == Some(ValueSource::CommandLine)
            && sub.value_source(id) != Some(ValueSource::CommandLine)
    };
    let run = &cli.run;
    // Each field by its name, which is also its clap id.
    macro_rules! take {
        ($($field:ident),*) => {$(
            if before(stringify!($field)) {
                acquire.$field.clone_from(&run.$field);
            }
        )*};
    }
    take!(
        ttl,
        heartbeat,
        grace,
        wait,
        limit,
        conflict_exit_code,
        min_replicas,
        replica_timeout,
        note
    );
}

/// A default of the file that makes sense only with another option, where that option is
/// absent, or that clashes with a flag or variable: left out, so that a file's defaults never
/// make a command line an error that would be fine without it.
fn drop_what_does_not_apply(cli: &mut Cli, matches: &ArgMatches) {
    let from_file = |id: &str| matches.value_source(id) == Some(ValueSource::DefaultValue);
    // --timezone and --done-exit-code have no built-in default: a default is the file's.
    if cli.run.once_per.is_none() {
        if from_file("timezone") {
            cli.run.timezone = None;
        }
        if from_file("done_exit_code") {
            cli.run.done_exit_code = None;
        }
    }
    // -q on the command line against `verbose = true` in the file (or the other way round):
    // the command line wins.
    let output = &mut cli.output;
    if output.quiet && output.verbose {
        if from_file("verbose") {
            output.verbose = false;
        } else if from_file("quiet") {
            output.quiet = false;
        }
    }
}

/// One option the file may set, where it is in the command line.
struct Flag {
    /// The subcommands down to the one that has it (empty: the top).
    path: Vec<String>,
    id: String,
    long: String,
    kind: Kind,
    arg: Arg,
}

/// Every option of the command line, by long name.
struct Options(Vec<Flag>);

impl Options {
    fn of(cmd: &Command) -> Options {
        fn walk(cmd: &Command, path: &[String], out: &mut Vec<Flag>) {
            for arg in cmd.get_arguments() {
                let Some(long) = arg.get_long() else { continue };
                if NOT_IN_FILE.contains(&long) {
                    continue;
                }
                let kind = match arg.get_action() {
                    ArgAction::SetTrue | ArgAction::SetFalse => Kind::Switch,
                    ArgAction::Append => Kind::Many,
                    _ => Kind::One,
                };
                out.push(Flag {
                    path: path.to_vec(),
                    id: arg.get_id().to_string(),
                    long: long.to_owned(),
                    kind,
                    arg: arg.clone(),
                });
            }
            for sub in cmd.get_subcommands() {
                let mut deeper = path.to_vec();
                deeper.push(sub.get_name().to_owned());
                walk(sub, &deeper, out);
            }
        }
        let mut out = Vec::new();
        walk(cmd, &[], &mut out);
        Options(out)
    }

    fn kind(&self, name: &str) -> Option<Kind> {
        self.0.iter().find(|o| o.long == name).map(|o| o.kind)
    }

    /// The setting's values through its option's own parser: a bad value is reported with
    /// the file, line and name instead of as a flag the user never typed.
    fn check(&self, config: &ConfigFile, setting: &Setting) -> Result<(), UsageError> {
        for option in self.0.iter().filter(|o| o.long == setting.name) {
            if option.kind == Kind::Switch {
                // Read from a TOML boolean: true or false already.
                continue;
            }
            let probe = Command::new("redlock-run").no_binary_name(true).arg(
                Arg::new("value")
                    .num_args(1..)
                    .action(ArgAction::Append)
                    .allow_hyphen_values(true)
                    .value_parser(option.arg.get_value_parser().clone()),
            );
            let argv = std::iter::once("--").chain(setting.values.iter().map(String::as_str));
            if let Err(err) = probe.try_get_matches_from(argv) {
                return Err(UsageError(format!(
                    "{}: {}: {}",
                    config.at(setting),
                    setting.name,
                    why(&err)
                )));
            }
        }
        // A URL is a plain string to clap; its form is checked when the target is made, which
        // would name --redis only. Each one on its own here, to name the file and line.
        if setting.name == "redis" {
            for url in &setting.values {
                if let Err(err) = Endpoint::parse(std::slice::from_ref(url), None) {
                    return Err(UsageError(format!("{}: redis: {err}", config.at(setting))));
                }
            }
        }
        Ok(())
    }

    /// `cmd` with the setting as the default value of its option, wherever the option is. A
    /// relative path is taken from the file's directory, not from wherever cron or a shell
    /// happens to start the run.
    fn set_default(&self, mut cmd: Command, config: &ConfigFile, setting: &Setting) -> Command {
        fn set(cmd: Command, path: &[String], id: &str, values: &[String]) -> Command {
            match path.split_first() {
                // clap keeps default values as &'static str; a process parses its command
                // line once, so the few bytes leaked here live as long as it would anyway.
                None => cmd.mut_arg(id, |a| {
                    a.default_values(
                        values
                            .iter()
                            .map(|v| &*Box::leak(v.clone().into_boxed_str())),
                    )
                }),
                Some((sub, rest)) => cmd.mut_subcommand(sub, |s| set(s, rest, id, values)),
            }
        }
        for option in self.0.iter().filter(|o| o.long == setting.name) {
            let takes_path =
                option.arg.get_value_parser().type_id() == ValueParser::path_buf().type_id();
            let values: Vec<String> = match config.path.parent() {
                Some(dir) if takes_path => setting
                    .values
                    .iter()
                    .map(|v| dir.join(v).to_string_lossy().into_owned())
                    .collect(),
                _ => setting.values.clone(),
            };
            cmd = set(cmd, &option.path, &option.id, &values);
        }
        cmd
    }
}

/// What the parser said of a value, without clap's framing (which names a placeholder
/// argument of the probe).
fn why(err: &clap::Error) -> String {
    use clap::error::{ContextKind, ContextValue};
    let value = match err.get(ContextKind::InvalidValue) {
        Some(ContextValue::String(v)) => format!("invalid value '{v}'"),
        _ => "invalid value".to_owned(),
    };
    if let Some(source) = std::error::Error::source(err) {
        return format!("{value}: {source}");
    }
    match err.get(ContextKind::ValidValue) {
        Some(ContextValue::Strings(valid)) if !valid.is_empty() => {
            format!("{value} (possible values: {})", valid.join(", "))
        }
        _ => value,
    }
}
