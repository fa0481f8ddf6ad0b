//! The committed bash completion, run by a real `bash`: the test sources
//! `completions/redlock-run.bash`, sets `COMP_WORDS`, `COMP_CWORD`, `COMP_LINE` and
//! `COMP_POINT` as readline would for a command line, calls the function that `complete -p
//! redlock-run` names, and reads `COMPREPLY`. Without the bash-completion package (not loaded
//! here unless a test says so) the command's own arguments are left to `-o default` (files).

use std::path::Path;
use std::process::Command;

/// What bash offers for `line`, the cursor at its end. Words are split at spaces, and at `=`
/// and `:` as bash does with the default `COMP_WORDBREAKS`; a trailing space starts an empty
/// word.
fn complete(line: &str) -> Vec<String> {
    complete_after("", line)
}

/// [`complete`], with `prelude` run before the completion file is sourced.
fn complete_after(prelude: &str, line: &str) -> Vec<String> {
    let mut words: Vec<String> = Vec::new();
    let mut current = String::new();
    let mut split = true; // the last piece ended at a space: the next starts a new word
    for c in line.chars() {
        match c {
            ' ' => {
                if !split {
                    words.push(std::mem::take(&mut current));
                }
                split = true;
            }
            '=' | ':' => {
                if !current.is_empty() {
                    words.push(std::mem::take(&mut current));
                }
                words.push(c.to_string());
                split = true;
            }
            _ => {
                current.push(c);
                split = false;
            }
        }
    }
    if !current.is_empty() {
        words.push(current);
    } else if line.ends_with(' ') {
        words.push(String::new());
    }
    // readline completes the text after a word break: right after `=` the word is still `=`,
    // but the function's $2 (the text to replace) is empty.
    let cword = words.len() - 1;
    let cur = match words[cword].as_str() {
        "=" | ":" => String::new(),
        w => w.to_owned(),
    };
    let prev = if cword > 0 {
        words[cword - 1].clone()
    } else {
        String::new()
    };
    let quoted: Vec<String> = words.iter().map(|w| quote(w)).collect();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("completions/redlock-run.bash");
    let script = format!(
        r#"{prelude}
source {file}
fn=$(complete -p redlock-run | sed -n 's/.*-F \([^ ]*\).*/\1/p')
[[ -n $fn ]] || {{ echo "no completion function for redlock-run" >&2; exit 3; }}
COMP_WORDS=({words})
COMP_CWORD={cword}
COMP_LINE={line}
COMP_POINT={point}
COMPREPLY=()
"$fn" redlock-run {cur} {prev}
printf '%s\n' "${{COMPREPLY[@]}}"
"#,
        file = quote(&file.to_string_lossy()),
        words = quoted.join(" "),
        line = quote(line),
        point = line.len(),
        cur = quote(&cur),
        prev = quote(&prev),
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &script])
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .output()
        .expect("bash runs");
    assert!(
        out.status.success(),
        "bash failed for {line:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[track_caller]
fn offers(line: &str, wanted: &[&str], unwanted: &[&str]) -> Vec<String> {
    let got = complete(line);
    for w in wanted {
        assert!(
            got.iter().any(|g| g == w),
            "`{line}<TAB>` does not offer {w}; it offers {got:?}"
        );
    }
    for u in unwanted {
        assert!(
            !got.iter().any(|g| g == u),
            "`{line}<TAB>` offers {u}: {got:?}"
        );
    }
    got
}

#[test]
fn status_options_after_the_subcommand() {
    offers(
        "redlock-run status --",
        &["--key", "--json", "--redis", "--log-format"],
        &["--wait", "--ttl", "--quiet"],
    );
    // ... also after an option that only status has, and after a value.
    offers("redlock-run status --json --", &["--key"], &["--wait"]);
    offers("redlock-run status -k deploy:prod --j", &["--json"], &[]);
}

#[test]
fn the_wrappers_options_before_the_command() {
    offers(
        "redlock-run --",
        &["--key", "--wait", "--ttl", "--command", "--log-format"],
        &["--json"],
    );
    offers("redlock-run --key k --w", &["--wait"], &["--key"]);
    offers("redlock-run ", &["status"], &[]);
    offers("redlock-run --log-format ", &["text", "json"], &["--wait"]);
    offers("redlock-run --log-format=j", &["json"], &["text"]);
}

#[test]
fn commands_after_the_double_dash() {
    let lines = [
        "redlock-run --key k -- ",
        "redlock-run -k deploy:prod --wait 10m -- ",
        "redlock-run --key=settle:monthly --redis redis://h:6379 -- ",
        "redlock-run -qk k -- ",
    ];
    for line in lines {
        let got = offers(line, &["true", "bash"], &["--wait", "--key", "status"]);
        assert!(
            got.len() > 20,
            "`{line}<TAB>` offers too few commands: {got:?}"
        );
    }
    offers("redlock-run --key k -- tr", &["true"], &["--wait"]);
    // Without `--`, the first word that is not an option or its value is the command too.
    offers("redlock-run --key k --ttl 1m tr", &["true"], &["--ttl"]);
}

#[test]
fn nothing_of_the_wrapper_once_the_command_started() {
    for line in [
        "redlock-run --key k -- ls --",
        "redlock-run --key k -- ./job.sh -",
        "redlock-run --key k true --",
    ] {
        let got = complete(line);
        assert!(
            !got.iter().any(|g| g.starts_with("--") && g != "--"),
            "`{line}<TAB>` offers the wrapper's options to the command: {got:?}"
        );
    }
}

/// With bash-completion loaded, the command's arguments are completed as the command's own
/// (through `_comp_command_offset` or `_command_offset`), as for `sudo`. Skipped where the
/// bash-completion package is not installed.
#[test]
fn the_commands_own_completion_with_bash_completion() {
    let framework = "/usr/share/bash-completion/bash_completion";
    if !Path::new(framework).exists() {
        eprintln!("skipped: {framework} is not installed");
        return;
    }
    let prelude = format!(
        "source {framework}\n\
         _fake_job() {{ COMPREPLY=(--job-option); }}\n\
         complete -F _fake_job fake-job"
    );
    for line in [
        "redlock-run --key k -- fake-job ",
        "redlock-run -k deploy:prod --wait=1m -- fake-job --x ",
        "redlock-run --key k fake-job ",
    ] {
        let got = complete_after(&prelude, line);
        assert_eq!(got, ["--job-option"], "`{line}<TAB>`");
    }
    let got = complete_after(&prelude, "redlock-run --key k -- tru");
    assert!(got.iter().any(|g| g == "true"), "{got:?}");
}
