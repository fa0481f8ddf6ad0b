//! Writes the shell completions and the man page from the clap definition.
//! Run through `scripts/gen-docs`; CI runs it with `--check` to catch stale files.
//!
//! Usage: gen-docs OUT_DIR   (writes OUT_DIR/completions/* and OUT_DIR/man/redlock-run.1)

#[path = "../src/cli.rs"]
#[allow(dead_code)]
mod cli;

use std::fs;
use std::io::Write;
use std::path::Path;

use clap::CommandFactory;
use clap_complete::{generate_to, Shell};
use clap_mangen::Man;

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
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        generate_to(shell, &mut cli::Cli::command(), "redlock-run", &completions)?;
    }
    let readme = fs::read_to_string(out.join("README.md")).unwrap_or_default();
    let mut page = Vec::new();
    write_man(&mut page, &readme)?;
    fs::write(man_dir.join("redlock-run.1"), page)
}

fn write_man(w: &mut dyn Write, readme: &str) -> std::io::Result<()> {
    // No date in the page: it would make the committed file stale every day.
    let man = Man::new(cli::Cli::command()).date("");
    man.render_title(w)?;
    man.render_name_section(w)?;
    man.render_synopsis_section(w)?;
    man.render_description_section(w)?;
    man.render_options_section(w)?;
    man.render_subcommands_section(w)?;

    writeln!(w, ".SH EXAMPLES")?;
    for (comment, command) in cli::EXAMPLES {
        writeln!(
            w,
            ".PP\n{}\n.PP\n.RS 4\n.nf\n{}\n.fi\n.RE",
            roff(comment),
            roff(command)
        )?;
    }
    writeln!(w, ".SH \"EXIT STATUS\"")?;
    for (code, meaning) in cli::EXIT_CODES {
        writeln!(w, ".TP\n\\fB{}\\fR\n{}", roff(code), roff(meaning))?;
    }
    writeln!(w, ".SH ENVIRONMENT")?;
    writeln!(
        w,
        ".PP\nEvery option can be set by the environment variable shown beside it above \
         (REDLOCK_*); a flag on the command line wins.\n.PP\nThe command runs with the \
         environment of redlock-run plus:"
    )?;
    for (name, meaning) in cli::CHILD_ENV {
        writeln!(w, ".TP\n\\fB{name}\\fR\n{}", roff(meaning))?;
    }
    if let Some(section) = markdown_section(readme, "## Guarantees and limits") {
        writeln!(w, ".SH \"GUARANTEES AND LIMITS\"")?;
        write_markdown(w, &section)?;
    }
    man.render_version_section(w)
}

/// The text of a README section, from its heading to the next `## ` heading.
fn markdown_section(readme: &str, heading: &str) -> Option<String> {
    let start = readme.find(heading)? + heading.len();
    let rest = &readme[start..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    Some(rest[..end].to_owned())
}

/// Paragraphs and `- ` bullets of plain markdown as roff.
fn write_markdown(w: &mut dyn Write, text: &str) -> std::io::Result<()> {
    let mut blocks: Vec<(bool, String)> = Vec::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.is_empty() {
            blocks.push((false, String::new()));
        } else if let Some(item) = trimmed.strip_prefix("- ") {
            blocks.push((true, item.to_owned()));
        } else if let Some((_, last)) = blocks.last_mut().filter(|(_, t)| !t.is_empty()) {
            last.push(' ');
            last.push_str(trimmed);
        } else {
            blocks.push((false, trimmed.to_owned()));
        }
    }
    for (bullet, block) in blocks.iter().filter(|(_, t)| !t.is_empty()) {
        let text = roff(&plain(block));
        if *bullet {
            writeln!(w, ".IP \\(bu 2\n{text}")?;
        } else {
            writeln!(w, ".PP\n{text}")?;
        }
    }
    Ok(())
}

/// Markdown emphasis, code and links reduced to their text.
fn plain(s: &str) -> String {
    let s = s.replace("**", "").replace('`', "");
    // [text](#anchor) -> text
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        out.push_str(&rest[..open]);
        out.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    out.push_str(rest);
    out
}

/// Escape text for roff: backslashes, and a leading dot or quote that would start a request.
fn roff(s: &str) -> String {
    let s = s.replace('\\', "\\e").replace('-', "\\-");
    if s.starts_with('.') || s.starts_with('\'') {
        format!("\\&{s}")
    } else {
        s
    }
}
