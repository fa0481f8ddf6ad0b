//! Writes the shell completions and the man page from the clap definition.
//! Run through `scripts/gen-docs`; CI runs it with `--check` to catch stale files.
//!
//! Usage: gen-docs OUT_DIR   (writes OUT_DIR/completions/* and OUT_DIR/man/redlock-run.1)
//!
//! - completions: bash, zsh and fish scripts written here, each a template whose option lists
//!   are filled from the clap definition, so that the three offer the same things: the options
//!   of a run before the command, only the subcommand's own after `status`, the values of an
//!   option (a fixed set, file names, or nothing for free text), and after `--` (or the first
//!   word that is no option) a command name, then that command's own completion, as for
//!   `sudo`. clap_complete is not used: none of its scripts completes a command after `--`
//!   (they offered files); its zsh script took `status` for the run's command and offered the
//!   run's options after it; its zsh and fish scripts broke on a `"` in a value's help (fish
//!   then lost `--log-format`); its bash script names a subcommand's function wrongly for a
//!   binary with `-` in its name.
//! - man page: title, NAME, DESCRIPTION and VERSION from clap_mangen; SYNOPSIS from
//!   `cli::USAGE`; OPTIONS (grouped by help heading, each with its variable and default) and
//!   STATUS written here from the clap definition; EXAMPLES, EXIT STATUS and ENVIRONMENT from
//!   the tables in `cli`; two sections of `docs/guarantees.md` converted from markdown.

#[path = "../src/cli.rs"]
#[allow(dead_code)]
mod cli;

use std::fs;
use std::io::Write;
use std::path::Path;

use clap::{Arg, ArgAction, Command, CommandFactory, ValueHint};
use clap_mangen::Man;

/// Sections of `docs/guarantees.md` copied into the man page: (heading, man page section).
const DOC_SECTIONS: &[(&str, &str)] = &[
    ("Guarantees and limits", "GUARANTEES AND LIMITS"),
    (
        "Choosing --ttl, --heartbeat and --grace",
        "CHOOSING --TTL, --HEARTBEAT AND --GRACE",
    ),
];

fn main() -> std::io::Result<()> {
    let out = std::env::args().nth(1).unwrap_or_else(|| ".".to_owned());
    generate(Path::new(&out))
}

/// Write the completions and man page under `out`, reading `out/docs/guarantees.md`.
pub fn generate(out: &Path) -> std::io::Result<()> {
    let completions = out.join("completions");
    let man_dir = out.join("man");
    fs::create_dir_all(&completions)?;
    fs::create_dir_all(&man_dir)?;
    check_completable(&built_command())?;
    fs::write(completions.join("redlock-run.bash"), bash_completion())?;
    fs::write(completions.join("_redlock-run"), zsh_completion())?;
    fs::write(completions.join("redlock-run.fish"), fish_completion())?;
    let readme = fs::read_to_string(out.join("docs/guarantees.md")).unwrap_or_default();
    let mut page = Vec::new();
    write_man(&mut page, &readme)?;
    fs::write(man_dir.join("redlock-run.1"), page)
}

/// The command with its generated parts (help, version, global options in subcommands).
pub fn built_command() -> Command {
    let mut cmd = cli::Cli::command();
    cmd.build();
    cmd
}

fn visible_options(cmd: &Command) -> impl Iterator<Item = &Arg> {
    cmd.get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
}

// ---------------------------------------------------------------------------------------------
// what the completions complete, for all three shells
// ---------------------------------------------------------------------------------------------

/// What completes the value of an option.
enum OptionValue {
    /// A switch: it takes no value.
    None,
    /// One of a fixed set: (value, its help).
    OneOf(Vec<(String, String)>),
    /// A file name.
    File,
    /// Free text (a key, a URL, a duration): nothing to offer.
    Text,
}

fn option_value(arg: &Arg) -> OptionValue {
    if !arg.get_action().takes_values() {
        return OptionValue::None;
    }
    let possible: Vec<(String, String)> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| {
            let help = v.get_help().map(|h| h.to_string()).unwrap_or_default();
            (v.get_name().to_owned(), help)
        })
        .collect();
    if !possible.is_empty() {
        OptionValue::OneOf(possible)
    } else if matches!(
        arg.get_value_hint(),
        ValueHint::AnyPath | ValueHint::FilePath | ValueHint::DirPath
    ) {
        OptionValue::File
    } else {
        OptionValue::Text
    }
}

/// The one-line help of an option or subcommand, as the shells show it beside the name.
fn short_help(help: Option<&clap::builder::StyledStr>) -> String {
    let help = help.map(|h| h.to_string()).unwrap_or_default();
    help.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The subcommands a user may type (clap's `help` included).
fn visible_subcommands(cmd: &Command) -> Vec<&Command> {
    cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect()
}

/// The completions know a subcommand's options only, and clap's `help` by name: a subcommand
/// that takes arguments or subcommands of its own must be taught to them first.
fn check_completable(cmd: &Command) -> std::io::Result<()> {
    for sub in visible_subcommands(cmd) {
        if sub.get_name() == "help" {
            continue;
        }
        if sub.get_arguments().any(Arg::is_positional) || sub.has_subcommands() {
            return Err(std::io::Error::other(format!(
                "the `{}` subcommand takes arguments that the completions in gen-docs do not \
                 complete yet",
                sub.get_name()
            )));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// zsh
// ---------------------------------------------------------------------------------------------

/// The zsh completion script: the template is plain zsh; `@NAME@` slots are filled from the
/// clap definition.
pub fn zsh_completion() -> String {
    let cmd = built_command();
    let subcommands = visible_subcommands(&cmd);
    let items: Vec<String> = subcommands
        .iter()
        .map(|s| {
            let item = format!(
                "{}:{}",
                s.get_name(),
                zsh_escape(&short_help(s.get_about()), ":")
            );
            format!("        {}\n", zsh_quote(&item))
        })
        .collect();
    let mut modes = String::new();
    for sub in subcommands.iter().filter(|s| s.get_name() != "help") {
        modes.push_str(&format!(
            "        ({name})\n\
             \x20           shift words\n\
             \x20           (( CURRENT-- ))\n\
             \x20           curcontext=${{curcontext%:*:*}}:redlock-run-{name}:\n\
             \x20           _arguments -s -S : \\\n{specs}\
             \x20           return\n\
             \x20           ;;\n",
            name = sub.get_name(),
            specs = zsh_specs(sub, "                ", false),
        ));
    }
    ZSH_TEMPLATE
        .replace("@SUBCOMMAND_ITEMS@", &items.concat())
        .replace("@MODES@", &modes)
        .replace("@RUN_SPECS@", &zsh_specs(&cmd, "        ", true))
}

/// The `_arguments` specs of a mode's options, one a line, each ending in ` \`.
fn zsh_specs(cmd: &Command, indent: &str, more_follow: bool) -> String {
    let mut lines: Vec<String> = Vec::new();
    for arg in visible_options(cmd) {
        let mut spellings = option_spellings(arg);
        spellings.reverse(); // -k before --key
        let value = option_value(arg);
        let takes_value = !matches!(value, OptionValue::None);
        // `-k+`: the value attached or the next word; `--key=`: after `=` or the next word.
        let forms: Vec<String> = spellings
            .iter()
            .map(|s| match (takes_value, s.starts_with("--")) {
                (false, _) => s.clone(),
                (true, true) => format!("{s}="),
                (true, false) => format!("{s}+"),
            })
            .collect();
        // Offered once (both spellings gone when one is on the line), or again (`*`).
        let repeatable = matches!(arg.get_action(), ArgAction::Append | ArgAction::Count);
        let exclusion = if repeatable {
            "*".to_owned()
        } else if spellings.len() > 1 {
            format!("({})", spellings.join(" "))
        } else {
            String::new()
        };
        let mut rest = format!("[{}]", zsh_escape(&short_help(arg.get_help()), "[]:"));
        let message = arg
            .get_value_names()
            .and_then(|n| n.first())
            .map(|n| zsh_escape(n, ":"))
            .unwrap_or_else(|| "VALUE".to_owned());
        match value {
            OptionValue::None => {}
            // A single space: the message is shown and nothing is completed.
            OptionValue::Text => rest.push_str(&format!(":{message}: ")),
            OptionValue::File => rest.push_str(&format!(":{message}:_files")),
            OptionValue::OneOf(values) => {
                let values: Vec<String> = values
                    .iter()
                    .map(|(v, help)| {
                        format!(
                            "{}\\:\"{}\"",
                            zsh_escape(v, ": \"\\$`()"),
                            zsh_escape(help, ":\"\\$`")
                        )
                    })
                    .collect();
                rest.push_str(&format!(":{message}:(({}))", values.join(" ")));
            }
        }
        // Two spellings share one spec through a brace expansion: '(-k --key)'{-k+,--key=}'…'.
        let spec = if forms.len() > 1 {
            format!(
                "{}{{{}}}{}",
                zsh_quote(&exclusion),
                forms.join(","),
                zsh_quote(&rest)
            )
        } else {
            zsh_quote(&format!("{exclusion}{}{rest}", forms[0]))
        };
        lines.push(format!("{indent}{spec}"));
    }
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate() {
        out.push_str(line);
        if more_follow || i + 1 < lines.len() {
            out.push_str(" \\");
        }
        out.push('\n');
    }
    out
}

/// `s` with a backslash before each of `special` (and before a backslash).
fn zsh_escape(s: &str, special: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if c == '\\' || special.contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// `s` single-quoted for zsh.
fn zsh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

const ZSH_TEMPLATE: &str = r#"#compdef redlock-run
# zsh completion for redlock-run
# Generated by scripts/gen-docs from the clap definition in src/cli.rs; do not edit by hand.
#
# Offers the options of a run and of each subcommand, the values of options that have a fixed
# set (file names for file options), and after `--`, or the first word that is neither an
# option nor an option's value, the name of the command to run; that command's own arguments
# are completed by its own completion (_normal), as for sudo.

_redlock-run() {
    local curcontext=$curcontext
    local -a subcommands=(
@SUBCOMMAND_ITEMS@    )

    # A subcommand is the first word, and only its own options follow it.
    if (( CURRENT > 2 )); then
        case $words[2] in
@MODES@        (help)
            (( CURRENT == 3 )) && _describe -t subcommands 'redlock-run subcommand' subcommands
            return
            ;;
        esac
    fi

    # A run: options, then the command (after `--` or as the first other word) and its
    # arguments, which are the command's: no option of redlock-run is offered there.
    _arguments -s -S : \
@RUN_SPECS@        '(-)1: :_redlock-run_command_or_subcommand' \
        '(-)*:: :_redlock-run_arguments'
}

(( $+functions[_redlock-run_command_or_subcommand] )) ||
_redlock-run_command_or_subcommand() {
    # The first word may be a subcommand; when none starts with it, it is a command.
    if (( CURRENT == 2 )); then
        _describe -t subcommands 'redlock-run subcommand' subcommands && return 0
    fi
    _command_names -e
}

(( $+functions[_redlock-run_arguments] )) ||
_redlock-run_arguments() {
    # $words is the command and its arguments, except that _arguments leaves in a `--` that
    # comes right after redlock-run.
    if [[ $words[1] == -- ]]; then
        shift words
        (( CURRENT-- ))
    fi
    _normal
}

if [[ $funcstack[1] == _redlock-run ]]; then
    _redlock-run "$@"
else
    compdef _redlock-run redlock-run
fi
"#;

// ---------------------------------------------------------------------------------------------
// fish
// ---------------------------------------------------------------------------------------------

/// The fish completion script: the template is plain fish; `@NAME@` slots are filled from the
/// clap definition.
pub fn fish_completion() -> String {
    let cmd = built_command();
    let subcommands = visible_subcommands(&cmd);
    let names: Vec<&str> = subcommands.iter().map(|s| s.get_name()).collect();
    let items: Vec<String> = subcommands
        .iter()
        .map(|s| {
            format!(
                "{}\\t{}",
                s.get_name(),
                fish_quote(&short_help(s.get_about()))
            )
        })
        .collect();
    let mut long_values = Vec::new();
    let mut short_values = Vec::new();
    for arg in visible_options(&cmd) {
        if arg.get_action().takes_values() {
            long_values.extend(arg.get_long().map(|l| format!("--{l}")));
            short_values.extend(arg.get_short().map(String::from));
        }
    }

    let mut entries = String::new();
    entries.push_str(&fish_options(&cmd, "options value"));
    for sub in subcommands.iter().filter(|s| s.get_name() != "help") {
        entries.push_str(&fish_options(sub, sub.get_name()));
    }
    let others: Vec<&str> = names.iter().copied().filter(|n| *n != "help").collect();
    FISH_TEMPLATE
        .replace("@SUBCOMMANDS@", &others.join(" "))
        .replace("@SUBCOMMAND_NAMES@", &names.join(" "))
        .replace("@SUBCOMMAND_ITEMS@", &items.join(" "))
        .replace("@HELP_ITEMS@", &fish_quote(&items.join(" ")))
        .replace("@LONG_VALUES@", &long_values.join(" "))
        .replace("@SHORT_VALUES@", &short_values.join(" "))
        .replace("@OPTIONS@", &entries)
}

/// One `complete` line for each option of a mode, offered in the given states.
fn fish_options(cmd: &Command, states: &str) -> String {
    let mut out = String::new();
    for arg in visible_options(cmd) {
        let mut line = format!(
            "complete -c redlock-run -n {}",
            fish_quote(&format!("__fish_redlock_run_in {states}"))
        );
        if let Some(short) = arg.get_short() {
            line.push_str(&format!(" -s {short}"));
        }
        if let Some(long) = arg.get_long() {
            line.push_str(&format!(" -l {long}"));
        }
        match option_value(arg) {
            OptionValue::None => {}
            OptionValue::Text => line.push_str(" -x"),
            OptionValue::File => line.push_str(" -r -F"),
            OptionValue::OneOf(values) => {
                // Each candidate a fish word: the value, a tab, its help; the list itself is
                // one single-quoted argument that fish splits into those words.
                let words: Vec<String> = values
                    .iter()
                    .map(|(v, help)| format!("{}\\t{}", fish_word(v), fish_quote(help)))
                    .collect();
                line.push_str(&format!(" -x -a {}", fish_quote(&words.join(" "))));
            }
        }
        line.push_str(&format!(
            " -d {}\n",
            fish_quote(&short_help(arg.get_help()))
        ));
        out.push_str(&line);
    }
    out
}

/// `s` as one fish word: as it is when plain, else quoted.
fn fish_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '+');
    if !s.is_empty() && s.chars().all(plain) {
        s.to_owned()
    } else {
        fish_quote(s)
    }
}

/// `s` single-quoted for fish (where `\` escapes only `'` and `\`).
fn fish_quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', r"\\").replace('\'', r"\'"))
}

const FISH_TEMPLATE: &str = r#"# fish completion for redlock-run
# Generated by scripts/gen-docs from the clap definition in src/cli.rs; do not edit by hand.
#
# Offers the options of a run and of each subcommand, the values of options that have a fixed
# set (file names for file options), and after `--`, or the first word that is neither an
# option nor an option's value, the name of the command to run; that command's own arguments
# are completed as fish completes the command when typed on its own, as for sudo.

# Where the word being completed stands, from the words before it: `first` (a subcommand or the
# command), `options` (an option of a run), `value` (the value of a run's option), `command`
# and the index of the command's first word among the words after redlock-run, or in a
# subcommand its name (`help` for the word right after it, then `done`).
function __fish_redlock_run_state
    set -l words (commandline -opc)
    set -e words[1]
    set -l n (count $words)
    switch "$words[1]"
        case @SUBCOMMANDS@
            echo $words[1]
            return
        case help
            test $n -eq 1; and echo help; or echo done
            return
    end
    set -l i 1
    while test $i -le $n
        set -l w $words[$i]
        switch $w
            case --
                printf '%s\n' command (math $i + 1)
                return
            case '--*=*'
            case '--*'
                if contains -- $w @LONG_VALUES@
                    test $i -eq $n; and echo value; and return
                    set i (math $i + 1)
                end
            case '-?*'
                # Short options, bundled (-qk KEY) or with the value attached (-kKEY).
                set -l rest (string sub -s 2 -- $w)
                while test -n "$rest"
                    set -l c (string sub -l 1 -- $rest)
                    set rest (string sub -s 2 -- $rest)
                    if contains -- $c @SHORT_VALUES@
                        if test -z "$rest"
                            test $i -eq $n; and echo value; and return
                            set i (math $i + 1)
                        end
                        break
                    end
                end
            case '*'
                # Without `--`, the first word that is no option starts the command.
                printf '%s\n' command $i
                return
        end
        set i (math $i + 1)
    end
    if string match -q -- '-*' (commandline -ct)
        echo options
    else if test $n -eq 0
        echo first
    else
        printf '%s\n' command (math $n + 1)
    end
end

# Succeeds when the word being completed stands in one of the states given.
function __fish_redlock_run_in
    contains -- (__fish_redlock_run_state)[1] $argv
end

# The first word: the subcommands when one starts with it, else command names.
function __fish_redlock_run_complete_first
    set -l word (string escape --style=regex -- (commandline -ct))
    if string match -qr -- "^$word" @SUBCOMMAND_NAMES@
        printf '%s\n' @SUBCOMMAND_ITEMS@
    else
        __fish_redlock_run_complete_command 1
    end
end

# The command and its arguments. $argv[1]: the index of the command's first word among the
# words after redlock-run.
function __fish_redlock_run_complete_command
    set -l words (commandline -opc)
    set -e words[1]
    set -l word (commandline -ct)
    if test $argv[1] -gt (count $words)
        # The command's name: a program, or a path to one. (Only programs can be run: fish's
        # builtins and functions are left out, and so are directories, bar in a path.)
        for candidate in (complete -C "$word")
            set -l name (string split -m 1 \t -- $candidate)[1]
            if string match -q -- '*/*' $word; or command -q -- $name
                echo $candidate
            end
        end
        return
    end
    # Its arguments: as fish completes the command's own line (like __fish_complete_subcommand,
    # but the words keep their quoting).
    set -l line (string escape -- $words[$argv[1]..-1]) "$word"
    complete -C (string join ' ' -- $line)
end

complete -c redlock-run -n '__fish_redlock_run_in first' -x -a '(__fish_redlock_run_complete_first)'
complete -c redlock-run -n '__fish_redlock_run_in command' -x -a '(__fish_redlock_run_complete_command (__fish_redlock_run_state)[2])'
complete -c redlock-run -n '__fish_redlock_run_in help' -x -a @HELP_ITEMS@
complete -c redlock-run -n '__fish_redlock_run_in @SUBCOMMANDS@ done' -f
@OPTIONS@"#;

// ---------------------------------------------------------------------------------------------
// bash
// ---------------------------------------------------------------------------------------------

/// The bash completion script. The template is plain bash; the `@NAME@` slots are filled from
/// the clap definition so that new options reach the completion without editing it.
pub fn bash_completion() -> String {
    let cmd = built_command();
    let subcommands = visible_subcommands(&cmd);
    let names: Vec<&str> = subcommands.iter().map(|s| s.get_name()).collect();

    // Per mode (a run, or a subcommand): the options offered, and those taking a value.
    let mut modes = String::new();
    for sub in subcommands
        .iter()
        .filter(|s| s.get_arguments().next().is_some())
    {
        modes.push_str(&format!(
            "    {})\n{}        ;;\n",
            sub.get_name(),
            bash_mode(sub, false)
        ));
    }
    modes.push_str(&format!("    *)\n{}        ;;\n", bash_mode(&cmd, true)));

    // Values of options, across all modes: a fixed set, file names, or free text.
    let mut values = String::new();
    let mut seen = Vec::new();
    let all = std::iter::once(&cmd).chain(subcommands.iter().copied());
    for arg in all.flat_map(visible_options) {
        if seen.contains(&arg.get_id()) {
            continue;
        }
        seen.push(arg.get_id());
        let pattern = option_spellings(arg).join("|");
        match option_value(arg) {
            OptionValue::OneOf(possible) => {
                let possible: Vec<&str> = possible.iter().map(|(v, _)| v.as_str()).collect();
                values.push_str(&format!(
                    "        {pattern}) _redlock_run_reply -W '{}' -- \"$cur\" ;;\n",
                    possible.join(" ")
                ));
            }
            OptionValue::File => values.push_str(&format!(
                "        {pattern}) ;; # file names (complete -o default)\n"
            )),
            OptionValue::None | OptionValue::Text => {}
        }
    }

    BASH_TEMPLATE
        .replace("@SUBCOMMANDS@", &names.join(" "))
        .replace("@SUBCOMMAND_PATTERN@", &names.join("|"))
        .replace("@MODES@", &modes)
        .replace("@VALUES@", &values)
}

/// `-k|--key` for an option.
fn option_spellings(arg: &Arg) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(long) = arg.get_long() {
        out.push(format!("--{long}"));
    }
    if let Some(short) = arg.get_short() {
        out.push(format!("-{short}"));
    }
    out
}

/// The variables of one mode: `opts` (offered), `long_values` and `short_values` (options whose
/// next word is their value).
fn bash_mode(cmd: &Command, takes_command: bool) -> String {
    let mut longs = Vec::new();
    let mut shorts = Vec::new();
    let mut long_values = Vec::new();
    let mut short_values = String::new();
    for arg in visible_options(cmd) {
        let takes_value = arg.get_action().takes_values();
        if let Some(long) = arg.get_long() {
            longs.push(format!("--{long}"));
            if takes_value {
                long_values.push(format!("--{long}"));
            }
        }
        if let Some(short) = arg.get_short() {
            shorts.push(format!("-{short}"));
            if takes_value {
                short_values.push(short);
            }
        }
    }
    let mut opts = longs;
    opts.extend(shorts);
    if takes_command {
        opts.push("--".to_owned());
    }
    format!(
        "        opts='{}'\n        long_values=' {} '\n        short_values='{}'\n",
        opts.join(" "),
        long_values.join(" "),
        short_values
    )
}

const BASH_TEMPLATE: &str = r#"# bash completion for redlock-run
# Generated by scripts/gen-docs from the clap definition in src/cli.rs; do not edit by hand.
#
# Offers the options of a run and of each subcommand, the values of options that have a fixed
# set (file names for file options), and after `--`, or the first word that is neither an
# option nor an option's value, the name of the command to run. That command's own arguments
# are completed by bash-completion's _comp_command_offset (or _command_offset) when it is
# loaded, as for sudo; without it, by file names.

_redlock_run_reply() {
    mapfile -t COMPREPLY < <(compgen "$@")
}

_redlock_run() {
    local cur=${2-${COMP_WORDS[COMP_CWORD]}}
    [[ $cur == [=:] ]] && cur=

    # COMP_WORDS is split at = and : too (COMP_WORDBREAKS): join the pieces that were one word
    # on the line (--key=deploy:prod), and note where each word starts in COMP_WORDS.
    local -a words=() starts=()
    local i piece glued line=${COMP_LINE-} track=${COMP_LINE+yes}
    for ((i = 0; i <= COMP_CWORD; i++)); do
        piece=${COMP_WORDS[i]}
        glued=
        if [[ -n $track ]]; then
            ((i > 0)) && [[ $line != [[:space:]]* ]] && glued=yes
            line=${line#"${line%%[![:space:]]*}"}
            if [[ $line == "$piece"* ]]; then
                line=${line#"$piece"}
            else
                track=
            fi
        fi
        if [[ -n $glued ]]; then
            words[${#words[@]} - 1]+=$piece
        else
            words+=("$piece")
            starts+=("$i")
        fi
    done
    local cword=$((${#words[@]} - 1))

    local sub=
    if ((cword > 1)); then
        case ${words[1]} in
        @SUBCOMMAND_PATTERN@) sub=${words[1]} ;;
        esac
    fi
    if [[ $sub == help ]]; then
        ((cword == 2)) && _redlock_run_reply -W '@SUBCOMMANDS@' -- "$cur"
        return 0
    fi

    local opts long_values short_values
    case $sub in
@MODES@    esac

    # The words before the cursor: options, their values, then (in a run) the command.
    local k=1 start= value_of= w s c
    [[ -n $sub ]] && k=2
    while ((k < cword)); do
        w=${words[k]}
        case $w in
        --)
            [[ -n $sub ]] && return 0
            start=$((k + 1))
            break
            ;;
        --*=*) ;;
        --*)
            if [[ $long_values == *" $w "* ]]; then
                if ((k + 1 == cword)); then
                    value_of=$w
                    break
                fi
                ((k++))
            fi
            ;;
        -?*)
            # Short options, bundled (-qk KEY) or with the value attached (-kKEY).
            s=${w:1}
            while [[ -n $s ]]; do
                c=${s:0:1}
                s=${s:1}
                if [[ $short_values == *"$c"* ]]; then
                    if [[ -z $s ]]; then
                        if ((k + 1 == cword)); then
                            value_of=-$c
                            break 2
                        fi
                        ((k++))
                    fi
                    break
                fi
            done
            ;;
        *)
            if [[ -z $sub ]]; then
                start=$k
                break
            fi
            ;;
        esac
        ((k++))
    done

    # The command to run, and its own arguments.
    if [[ -n $start ]]; then
        if declare -F _comp_command_offset >/dev/null; then
            _comp_command_offset "${starts[start]}"
        elif declare -F _command_offset >/dev/null; then
            _command_offset "${starts[start]}"
        elif ((cword == start)); then
            _redlock_run_reply -c -- "$cur"
        fi
        return 0
    fi

    # The value of an option: --opt VALUE, -o VALUE or --opt=VALUE.
    if [[ -z $value_of && ${words[cword]} == --*=* ]]; then
        value_of=${words[cword]%%=*}
    fi
    if [[ -n $value_of ]]; then
        case $value_of in
@VALUES@        *) compopt +o default +o bashdefault 2>/dev/null ;; # free text
        esac
        return 0
    fi

    if [[ $cur == -* ]]; then
        _redlock_run_reply -W "$opts" -- "$cur"
    elif [[ -n $sub ]]; then
        compopt +o default +o bashdefault 2>/dev/null
    elif ((cword == 1)); then
        if [[ -z $cur ]]; then
            _redlock_run_reply -W "@SUBCOMMANDS@ $opts" -- "$cur"
        else
            _redlock_run_reply -W '@SUBCOMMANDS@' -- "$cur"
            ((${#COMPREPLY[@]})) || _redlock_run_reply -c -- "$cur"
        fi
    elif [[ -n $cur ]]; then
        # Without `--`, the first word that is not an option starts the command.
        _redlock_run_reply -c -- "$cur"
    else
        _redlock_run_reply -W "$opts" -- "$cur"
    fi
    return 0
}

complete -F _redlock_run -o bashdefault -o default redlock-run
"#;

// ---------------------------------------------------------------------------------------------
// man page
// ---------------------------------------------------------------------------------------------

fn write_man(w: &mut dyn Write, readme: &str) -> std::io::Result<()> {
    let cmd = built_command();
    // No date in the page: it would make the committed file stale every day.
    let man = Man::new(cli::Cli::command()).date("");
    man.render_title(w)?;
    man.render_name_section(w)?;
    writeln!(w, ".SH SYNOPSIS")?;
    for (i, form) in cli::USAGE.lines().map(str::trim).enumerate() {
        if i > 0 {
            writeln!(w, ".br")?;
        }
        writeln!(w, "{}", synopsis_form(form))?;
    }
    man.render_description_section(w)?;

    writeln!(w, ".SH OPTIONS")?;
    let options: Vec<&Arg> = cmd.get_arguments().filter(|a| !a.is_hide_set()).collect();
    write_options(w, &options)?;

    write_subcommand_section(w, &cmd, "status", cli::STATUS_USAGE)?;

    let forget = cmd
        .find_subcommand("forget")
        .expect("the forget subcommand");
    writeln!(w, ".SH FORGET")?;
    writeln!(w, "{}", synopsis_form(cli::FORGET_USAGE))?;
    if let Some(about) = forget.get_long_about().or(forget.get_about()) {
        for paragraph in about.to_string().split("\n\n") {
            writeln!(w, ".PP\n{}", line_guard(&escape(&sentence(paragraph))))?;
        }
    }
    writeln!(
        w,
        ".PP\nIt takes the options of STATUS that name the lock (\\fB\\-\\-key\\fR, \\fB\\-\\-redis\\fR, \\fB\\-\\-prefix\\fR, ...), and no others."
    )?;

    // The other commands: the options they share with the run (as described under
    // OPTIONS), and their own.
    for (name, usage) in [
        ("acquire", cli::ACQUIRE_USAGE),
        ("release", cli::RELEASE_USAGE),
        ("break", cli::BREAK_USAGE),
        ("pause", cli::PAUSE_USAGE),
        ("resume", cli::RESUME_USAGE),
    ] {
        write_subcommand_section(w, &cmd, name, usage)?;
    }
    write_subcommand_section(w, &cmd, "list", cli::LIST_USAGE)?;

    writeln!(w, ".SH EXAMPLES")?;
    for (comment, command) in cli::EXAMPLES {
        writeln!(
            w,
            ".PP\n{}\n.PP\n.RS 4\n.nf\n{}\n.fi\n.RE",
            line_guard(&escape(comment)),
            line_guard(&escape(command))
        )?;
    }
    writeln!(w, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in cli::EXIT_CODES {
        writeln!(
            w,
            ".TP\n\\fB{}\\fR\n{}",
            escape(code),
            line_guard(&escape(meaning))
        )?;
    }
    write_environment(w, &cmd)?;
    for (heading, section) in DOC_SECTIONS {
        if let Some(text) = markdown_section(readme, &format!("## {heading}")) {
            writeln!(w, ".SH \"{}\"", escape(section))?;
            write_markdown(w, &text)?;
        }
    }
    man.render_version_section(w)
}

/// The section of a subcommand: its usage, its help, the global options it takes, and its own
/// options in full (or that it has none).
fn write_subcommand_section(
    w: &mut dyn Write,
    cmd: &Command,
    name: &str,
    usage: &str,
) -> std::io::Result<()> {
    let sub = cmd
        .find_subcommand(name)
        .unwrap_or_else(|| panic!("the {name} subcommand"));
    writeln!(w, ".SH {}", name.to_uppercase())?;
    writeln!(w, "{}", synopsis_form(usage))?;
    if let Some(about) = sub.get_long_about().or(sub.get_about()) {
        for paragraph in about.to_string().split("\n\n") {
            writeln!(w, ".PP\n{}", line_guard(&escape(&sentence(paragraph))))?;
        }
    }
    let (shared, own): (Vec<&Arg>, Vec<&Arg>) = visible_options(sub)
        .filter(|a| a.get_id() != "help")
        .partition(|a| cmd.get_arguments().any(|r| r.get_id() == a.get_id()));
    let shared: Vec<String> = shared
        .iter()
        .filter_map(|a| a.get_long())
        .map(|l| format!("\\fB\\-\\-{}\\fR", escape(l)))
        .collect();
    if own.is_empty() {
        return writeln!(
            w,
            ".PP\nIt takes these options as described under OPTIONS: {}; and no others.",
            shared.join(", ")
        );
    }
    writeln!(
        w,
        ".PP\nIt takes these options as described under OPTIONS: {}; and its own:",
        shared.join(", ")
    )?;
    write_option_entries(w, &own)
}

/// One usage form in roff: options and literal words in bold, placeholders in italic.
fn synopsis_form(form: &str) -> String {
    let mut out = Vec::new();
    for (i, token) in form.split_whitespace().enumerate() {
        let core_start = token.find(|c| c != '[').unwrap_or(token.len());
        let core_end = token
            .rfind(|c| !matches!(c, ']' | '.'))
            .map_or(core_start, |e| e + 1);
        let (open, core, close) = (
            &token[..core_start],
            &token[core_start..core_end],
            &token[core_end..],
        );
        let core = if let Some(name) = core.strip_prefix('<').and_then(|c| c.strip_suffix('>')) {
            format!("\\fI{}\\fR", escape(name))
        } else if core.starts_with('-') || i == 0 || core.chars().any(|c| c.is_lowercase()) {
            format!("\\fB{}\\fR", escape(core))
        } else {
            format!("\\fI{}\\fR", escape(core))
        };
        out.push(format!("{open}{core}{}", escape(close)));
    }
    out.join(" ")
}

/// The options grouped by help heading (in order of first appearance), those without one
/// (help, version) last.
fn write_options(w: &mut dyn Write, args: &[&Arg]) -> std::io::Result<()> {
    let mut headings: Vec<Option<&str>> = Vec::new();
    for arg in args {
        if !headings.contains(&arg.get_help_heading()) {
            headings.push(arg.get_help_heading());
        }
    }
    headings.sort_by_key(|h| h.is_none());
    for heading in headings {
        writeln!(
            w,
            ".SS \"{}\"",
            escape(heading.unwrap_or("Help and version"))
        )?;
        let group: Vec<&Arg> = args
            .iter()
            .copied()
            .filter(|a| a.get_help_heading() == heading)
            .collect();
        write_option_entries(w, &group)?;
    }
    Ok(())
}

/// One `.TP` entry an option: its spellings and value, its help, its possible values, and
/// its default and environment variable.
fn write_option_entries(w: &mut dyn Write, args: &[&Arg]) -> std::io::Result<()> {
    for arg in args {
        writeln!(w, ".TP\n{}", option_header(arg))?;
        let help = arg
            .get_long_help()
            .or(arg.get_help())
            .map(|h| h.to_string())
            .unwrap_or_default();
        writeln!(w, "{}", line_guard(&escape(&sentence(&help))))?;
        let possible: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set() && arg.get_action().takes_values())
            .map(|v| match v.get_help() {
                Some(help) => format!(
                    "\\fB{}\\fR ({})",
                    escape(v.get_name()),
                    escape(&help.to_string())
                ),
                None => format!("\\fB{}\\fR", escape(v.get_name())),
            })
            .collect();
        if !possible.is_empty() {
            writeln!(w, ".br\nValues: {}.", possible.join(", "))?;
        }
        let mut notes = Vec::new();
        let defaults: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let shows_default = arg.get_action().takes_values() && !arg.is_hide_default_value_set();
        if !defaults.is_empty() && shows_default {
            notes.push(format!("Default: \\fB{}\\fR.", escape(&defaults.join(","))));
        }
        if let Some(env) = arg.get_env() {
            notes.push(format!(
                "Environment: \\fB{}\\fR.",
                escape(&env.to_string_lossy())
            ));
        }
        if !notes.is_empty() {
            writeln!(w, ".br\n{}", notes.join(" "))?;
        }
    }
    Ok(())
}

fn option_header(arg: &Arg) -> String {
    let value = arg
        .get_value_names()
        .map(|names| {
            names
                .iter()
                .map(|n| format!("\\fI{}\\fR", escape(n)))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| format!("\\fI{}\\fR", escape(arg.get_id().as_str())));
    if arg.is_positional() {
        if arg.is_trailing_var_arg_set() {
            return format!("{value} [\\fIARGS\\fR]...");
        }
        return value;
    }
    let names: Vec<String> = option_spellings(arg)
        .iter()
        .rev()
        .map(|s| format!("\\fB{}\\fR", escape(s)))
        .collect();
    let mut header = names.join(", ");
    if arg.get_action().takes_values() {
        header.push(' ');
        header.push_str(&value);
    }
    header
}

fn write_environment(w: &mut dyn Write, cmd: &Command) -> std::io::Result<()> {
    // Every variable of the definition, with the option(s) it stands for.
    let mut vars: Vec<(String, String, bool)> = Vec::new();
    for c in std::iter::once(cmd).chain(cmd.get_subcommands()) {
        for arg in c.get_arguments() {
            let Some(env) = arg.get_env() else { continue };
            let env = env.to_string_lossy().into_owned();
            let name = match (c.get_name() == cmd.get_name(), arg.get_long()) {
                (true, Some(long)) => format!("\\-\\-{}", escape(long)),
                (false, Some(long)) => format!("{} \\-\\-{}", c.get_name(), escape(long)),
                _ => continue,
            };
            // An option shared with a subcommand is named once, as the run's.
            if !vars.iter().any(|(e, _, _)| *e == env) {
                let switch = matches!(arg.get_action(), ArgAction::SetTrue);
                vars.push((env, name, switch));
            }
        }
    }
    let switches: Vec<String> = vars
        .iter()
        .filter(|(_, _, s)| *s)
        .map(|(e, _, _)| format!("\\fB{}\\fR", escape(e)))
        .collect();
    writeln!(w, ".SH ENVIRONMENT")?;
    writeln!(
        w,
        ".PP\nEvery option except \\fB\\-c\\fR can also be set by the environment variable \
         shown with it under OPTIONS, STATUS and LIST; a flag on the command line wins. The switches \
         ({}) take 1/0, true/false, yes/no or on/off; empty means off. A bad value in a \
         variable is reported with the variable's name.",
        switches.join(", ")
    )?;
    let width = vars.iter().map(|(e, _, _)| e.len()).max().unwrap_or(0) + 2;
    writeln!(w, ".PP\n.RS 4\n.nf")?;
    for (env, name, _) in &vars {
        writeln!(
            w,
            "\\fB{}\\fR{}{name}",
            escape(env),
            " ".repeat(width - env.len())
        )?;
    }
    writeln!(w, ".fi\n.RE")?;
    writeln!(
        w,
        ".PP\nThe command runs with the environment of redlock\\-run plus:"
    )?;
    for (name, meaning) in cli::CHILD_ENV {
        writeln!(
            w,
            ".TP\n\\fB{}\\fR\n{}",
            escape(name),
            line_guard(&escape(meaning))
        )?;
    }
    Ok(())
}

/// Help text as a sentence: capitalised as written, ending with a period.
fn sentence(s: &str) -> String {
    let s = s.trim().replace('\n', " ");
    if s.is_empty() || s.ends_with('.') {
        s
    } else {
        format!("{s}.")
    }
}

// ---------------------------------------------------------------------------------------------
// markdown to roff
// ---------------------------------------------------------------------------------------------

/// The text of a markdown section, from its heading to the next `## ` heading.
fn markdown_section(readme: &str, heading: &str) -> Option<String> {
    let start = readme.find(&format!("{heading}\n"))? + heading.len();
    let rest = &readme[start..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    Some(rest[..end].to_owned())
}

/// Paragraphs, `- ` bullets and fenced code blocks of markdown as roff.
fn write_markdown(w: &mut dyn Write, text: &str) -> std::io::Result<()> {
    enum Block {
        Heading(String),
        Para(String),
        Bullet(String),
        Code(Vec<String>),
    }
    let mut blocks: Vec<Block> = Vec::new();
    let mut in_code = false;
    let mut open = false; // the last paragraph or bullet takes continuation lines
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("```") {
            if in_code {
                in_code = false;
            } else {
                in_code = true;
                blocks.push(Block::Code(Vec::new()));
            }
            open = false;
            continue;
        }
        if in_code {
            if let Some(Block::Code(lines)) = blocks.last_mut() {
                lines.push(line.to_owned());
            }
            continue;
        }
        if trimmed.is_empty() {
            open = false;
        } else if let Some(heading) = trimmed.strip_prefix("### ") {
            blocks.push(Block::Heading(heading.to_owned()));
            open = false;
        } else if let Some(item) = trimmed.strip_prefix("- ") {
            blocks.push(Block::Bullet(item.to_owned()));
            open = true;
        } else if open {
            if let Some(Block::Para(t) | Block::Bullet(t)) = blocks.last_mut() {
                t.push(' ');
                t.push_str(trimmed);
            }
        } else {
            blocks.push(Block::Para(trimmed.to_owned()));
            open = true;
        }
    }
    for block in &blocks {
        match block {
            Block::Heading(t) => writeln!(w, ".SS \"{}\"", escape(t))?,
            Block::Para(t) => writeln!(w, ".PP\n{}", line_guard(&inline(t)))?,
            Block::Bullet(t) => writeln!(w, ".IP \\(bu 2\n{}", line_guard(&inline(t)))?,
            Block::Code(lines) => {
                writeln!(w, ".PP\n.RS 4\n.nf")?;
                for l in lines {
                    writeln!(w, "{}", line_guard(&escape(l)))?;
                }
                writeln!(w, ".fi\n.RE")?;
            }
        }
    }
    Ok(())
}

/// Markdown inline markup as roff: `**strong**` and `` `code` `` in bold, `*emphasis*` in
/// italic, links as their text (a link to a section or page not in the man page says where).
fn inline(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if let Some((inner, after)) = delimited(rest, "**") {
            out.push_str(&format!("\\fB{}\\fR", escape(&inner.replace('`', ""))));
            rest = after;
        } else if let Some((inner, after)) = delimited(rest, "`") {
            out.push_str(&format!("\\fB{}\\fR", escape(inner)));
            rest = after;
        } else if let Some((inner, after)) = delimited(rest, "*") {
            out.push_str(&format!("\\fI{}\\fR", escape(inner)));
            rest = after;
        } else if let Some((text, target, after)) = link(rest) {
            let text = escape(&text.replace('`', ""));
            if let Some(anchor) = target.strip_prefix('#') {
                let in_page = DOC_SECTIONS.iter().any(|(h, _)| github_anchor(h) == anchor);
                out.push_str(&format!("\\fI{text}\\fR"));
                if !in_page {
                    out.push_str(" in docs/guarantees.md");
                }
            } else if target.starts_with("http") {
                out.push_str(&format!("{text} ({})", escape(target)));
            } else {
                // Another page of the repository: where to find it.
                let page = target.split('#').next().unwrap_or(target);
                let page = page.trim_start_matches("../");
                out.push_str(&format!("\\fI{text}\\fR (see {})", escape(page)));
            }
            rest = after;
        } else {
            out.push_str(&escape(&c.to_string()));
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

/// `rest` starts with `mark`, text that neither starts nor ends with a space, and `mark`.
fn delimited<'a>(rest: &'a str, mark: &str) -> Option<(&'a str, &'a str)> {
    let body = rest.strip_prefix(mark)?;
    if mark == "*" && body.starts_with('*') {
        return None;
    }
    let end = body.find(mark)?;
    let inner = &body[..end];
    if inner.is_empty() || inner.starts_with(' ') || inner.ends_with(' ') {
        return None;
    }
    Some((inner, &body[end + mark.len()..]))
}

/// `[text](target)` at the start of `rest`.
fn link(rest: &str) -> Option<(&str, &str, &str)> {
    let body = rest.strip_prefix('[')?;
    let mid = body.find("](")?;
    let after_mid = &body[mid + 2..];
    let close = after_mid.find(')')?;
    Some((&body[..mid], &after_mid[..close], &after_mid[close + 1..]))
}

/// GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.
fn github_anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Escape text for roff: backslashes and hyphens.
fn escape(s: &str) -> String {
    s.replace('\\', "\\e").replace('-', "\\-")
}

/// A text line must not start with a dot or quote, which would make it a request.
fn line_guard(s: &str) -> String {
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s.to_owned()
    }
}
