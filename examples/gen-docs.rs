//! Writes the shell completions and the man page from the clap definition.
//! Run through `scripts/gen-docs`; CI runs it with `--check` to catch stale files.
//!
//! Usage: gen-docs OUT_DIR   (writes OUT_DIR/completions/* and OUT_DIR/man/redlock-run.1)
//!
//! - bash: written here from the clap definition. clap_complete's script names the function
//!   of a subcommand wrongly for a binary with `-` in its name (`redlock-run status --<TAB>`
//!   offered nothing) and offers the wrapper's own options after `--`.
//! - zsh: clap_complete. fish: clap_complete, with a guard so that nothing of the wrapper is
//!   offered after `--`.
//! - man page: title, NAME, DESCRIPTION and VERSION from clap_mangen; SYNOPSIS from
//!   `cli::USAGE`; OPTIONS (grouped by help heading, each with its variable and default) and
//!   STATUS written here from the clap definition; EXAMPLES, EXIT STATUS and ENVIRONMENT from
//!   the tables in `cli`; two README sections converted from markdown.

#[path = "../src/cli.rs"]
#[allow(dead_code)]
mod cli;

use std::fs;
use std::io::Write;
use std::path::Path;

use clap::{Arg, ArgAction, Command, CommandFactory, ValueHint};
use clap_complete::{generate_to, Shell};
use clap_mangen::Man;

const BIN: &str = "redlock-run";

/// README sections copied into the man page: (README heading, man page section).
const README_SECTIONS: &[(&str, &str)] = &[
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

/// Write the completions and man page under `out`, reading `out/README.md`.
pub fn generate(out: &Path) -> std::io::Result<()> {
    let completions = out.join("completions");
    let man_dir = out.join("man");
    fs::create_dir_all(&completions)?;
    fs::create_dir_all(&man_dir)?;
    fs::write(completions.join("redlock-run.bash"), bash_completion())?;
    generate_to(Shell::Zsh, &mut cli::Cli::command(), BIN, &completions)?;
    fs::write(completions.join("redlock-run.fish"), fish_completion()?)?;
    let readme = fs::read_to_string(out.join("README.md")).unwrap_or_default();
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
// fish
// ---------------------------------------------------------------------------------------------

/// clap_complete's fish script, except that nothing of the wrapper is offered after `--`: the
/// words there are the command's. (Its `argparse -s` stops at `--` and, with nothing after it,
/// took the line for one that still needs a subcommand, offering `status` and the options.)
fn fish_completion() -> std::io::Result<String> {
    let mut script = Vec::new();
    clap_complete::generate(Shell::Fish, &mut cli::Cli::command(), BIN, &mut script);
    let script = String::from_utf8(script).map_err(std::io::Error::other)?;
    let anchor = "    set -l cmd (commandline -opc)\n    set -e cmd[1]\n";
    if !script.contains(anchor) {
        return Err(std::io::Error::other(
            "clap_complete's fish script changed: review the `--` guard in gen-docs",
        ));
    }
    let guard = "    # After `--` the words are the command's, not redlock-run's.\n\
                 \x20   contains -- -- $cmd; and return 1\n";
    Ok(script.replacen(anchor, &format!("{anchor}{guard}"), 1))
}

// ---------------------------------------------------------------------------------------------
// bash
// ---------------------------------------------------------------------------------------------

/// The bash completion script. The template is plain bash; the `@NAME@` slots are filled from
/// the clap definition so that new options reach the completion without editing it.
pub fn bash_completion() -> String {
    let cmd = built_command();
    let subcommands: Vec<&Command> = cmd.get_subcommands().filter(|s| !s.is_hide_set()).collect();
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
        if !arg.get_action().takes_values() || seen.contains(&arg.get_id()) {
            continue;
        }
        seen.push(arg.get_id());
        let pattern = option_spellings(arg).join("|");
        let possible: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| v.get_name().to_owned())
            .collect();
        if !possible.is_empty() {
            values.push_str(&format!(
                "        {pattern}) _redlock_run_reply -W '{}' -- \"$cur\" ;;\n",
                possible.join(" ")
            ));
        } else if matches!(
            arg.get_value_hint(),
            ValueHint::AnyPath | ValueHint::FilePath | ValueHint::DirPath
        ) {
            values.push_str(&format!(
                "        {pattern}) ;; # file names (complete -o default)\n"
            ));
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

    let status = cmd
        .find_subcommand("status")
        .expect("the status subcommand");
    writeln!(w, ".SH STATUS")?;
    writeln!(w, "{}", synopsis_form(cli::STATUS_USAGE))?;
    if let Some(about) = status.get_long_about().or(status.get_about()) {
        for paragraph in about.to_string().split("\n\n") {
            writeln!(w, ".PP\n{}", line_guard(&escape(&sentence(paragraph))))?;
        }
    }
    let (shared, own): (Vec<&Arg>, Vec<&Arg>) = visible_options(status)
        .filter(|a| a.get_id() != "help")
        .partition(|a| cmd.get_arguments().any(|r| r.get_id() == a.get_id()));
    let shared: Vec<String> = shared
        .iter()
        .filter_map(|a| a.get_long())
        .map(|l| format!("\\fB\\-\\-{}\\fR", escape(l)))
        .collect();
    writeln!(
        w,
        ".PP\nIt takes these options as described under OPTIONS: {}; and its own:",
        shared.join(", ")
    )?;
    write_option_entries(w, &own)?;

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
    for (heading, section) in README_SECTIONS {
        if let Some(text) = markdown_section(readme, &format!("## {heading}")) {
            writeln!(w, ".SH \"{}\"", escape(section))?;
            write_markdown(w, &text)?;
        }
    }
    man.render_version_section(w)
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
         shown with it under OPTIONS and STATUS; a flag on the command line wins. The switches \
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

/// The text of a README section, from its heading to the next `## ` heading.
fn markdown_section(readme: &str, heading: &str) -> Option<String> {
    let start = readme.find(&format!("{heading}\n"))? + heading.len();
    let rest = &readme[start..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    Some(rest[..end].to_owned())
}

/// Paragraphs, `- ` bullets and fenced code blocks of markdown as roff.
fn write_markdown(w: &mut dyn Write, text: &str) -> std::io::Result<()> {
    enum Block {
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
/// italic, links as their text (a link to a README section not in the page says so).
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
                let in_page = README_SECTIONS
                    .iter()
                    .any(|(h, _)| github_anchor(h) == anchor);
                out.push_str(&format!("\\fI{text}\\fR"));
                if !in_page {
                    out.push_str(" in the README");
                }
            } else {
                out.push_str(&format!("{text} ({})", escape(target)));
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
