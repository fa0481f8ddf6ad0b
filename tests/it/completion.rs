//! The committed completions, run by the real shells; each check holds in bash, zsh and fish.
//!
//! - bash: the test sources `completions/redlock-run.bash`, sets `COMP_WORDS`, `COMP_CWORD`,
//!   `COMP_LINE` and `COMP_POINT` as readline would for a command line, calls the function
//!   that `complete -p redlock-run` names, and reads `COMPREPLY`. When that is empty and the
//!   function left `complete -o default` on, readline would complete file names: the test
//!   stands in for it with `compgen -f`. bash-completion is not loaded unless a test says so.
//! - zsh: `completion_capture.zsh` types the line and a TAB into an interactive zsh on a
//!   pseudo-terminal (zsh/zpty), with compinit loading `completions/_redlock-run`, and records
//!   every match the completion adds.
//! - fish: `fish -c 'complete -C LINE'`, with `completions/` first in `fish_complete_path`
//!   (fish loads `redlock-run.fish` from there, as from an installed copy).
//!
//! Every shell runs in a scratch directory holding `ca.pem`, `notes.txt`, an executable
//! `job.sh` and a directory `certs`, with a scratch HOME and PATH set to the wrapper's
//! directory and the system's. `scripts/test` installs zsh, fish and bash-completion; where a
//! shell is missing its checks are skipped with a SKIPPED line.

use std::cell::RefCell;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::common::wrapper_bin;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shell {
    Bash,
    Zsh,
    Fish,
}

const SHELLS: [Shell; 3] = [Shell::Bash, Shell::Zsh, Shell::Fish];

/// The wrapper's options that no command's own completion may be offered with.
const WRAPPER_ONLY: [&str; 7] = [
    "--key",
    "--wait",
    "--ttl",
    "--redis",
    "--json",
    "--log-format",
    "--hold-at-least",
];

impl Shell {
    fn name(self) -> &'static str {
        match self {
            Shell::Bash => "bash",
            Shell::Zsh => "zsh",
            Shell::Fish => "fish",
        }
    }

    /// Whether the shell can run here; if not, says SKIPPED (once a test, on the test run's own
    /// stderr, which the harness does not capture).
    fn available(self) -> bool {
        static FOUND: [OnceLock<bool>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
        thread_local! {
            static SAID: RefCell<Vec<Shell>> = const { RefCell::new(Vec::new()) };
        }
        let found = *FOUND[self as usize].get_or_init(|| {
            let probe = match self {
                Shell::Zsh => "zmodload zsh/zpty",
                Shell::Bash | Shell::Fish => "true",
            };
            Command::new(self.name())
                .args(["-c", probe])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        });
        if !found && !SAID.with(|said| said.borrow().contains(&self)) {
            SAID.with(|said| said.borrow_mut().push(self));
            let what = match self {
                Shell::Zsh => "zsh (with its zsh/zpty module)",
                other => other.name(),
            };
            let line = format!(
                "SKIPPED {} in {}: {what} is not installed; scripts/test installs it\n",
                std::thread::current().name().unwrap_or("?"),
                self.name(),
            );
            let _ = std::io::stderr().write_all(line.as_bytes());
        }
        found
    }
}

/// Scratch directories: the one the shell runs in (files to complete), a HOME, and a PATH
/// directory holding `redlock-run`.
struct Scene {
    cwd: TempDir,
    home: TempDir,
}

impl Scene {
    fn new() -> Scene {
        let cwd = tempfile::Builder::new()
            .prefix("redlock-compl-")
            .tempdir()
            .unwrap();
        std::fs::write(cwd.path().join("ca.pem"), "").unwrap();
        std::fs::write(cwd.path().join("notes.txt"), "").unwrap();
        let job = cwd.path().join("job.sh");
        std::fs::write(&job, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&job, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::create_dir(cwd.path().join("certs")).unwrap();
        let home = tempfile::Builder::new()
            .prefix("redlock-compl-home-")
            .tempdir()
            .unwrap();
        let bin = home.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(wrapper_bin(), bin.join("redlock-run")).unwrap();
        Scene { cwd, home }
    }

    fn path_var(&self) -> String {
        format!(
            "{}:/usr/local/bin:/usr/bin:/bin",
            self.home.path().join("bin").display()
        )
    }

    /// A shell command run in the scene, with the scene's HOME and PATH.
    fn command(&self, program: &str) -> Command {
        let home = self.home.path();
        let mut cmd = Command::new(program);
        cmd.current_dir(self.cwd.path())
            .env("PATH", self.path_var())
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_DATA_HOME", home.join(".local/share"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env_remove("XDG_DATA_DIRS")
            .stdin(Stdio::null());
        cmd
    }
}

fn completions_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("completions")
}

/// Runs `cmd` for at most 60 s.
fn run_bounded(mut cmd: Command, what: &str) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{what} did not finish in 60 s: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Shell code run before the completion: bash, zsh and fish code (one per shell).
#[derive(Clone, Copy, Default)]
struct Prelude<'a> {
    bash: &'a str,
    zsh: &'a str,
    fish: &'a str,
}

/// What `shell` offers for `line` (the cursor at its end), each as it would stand on the line:
/// without descriptions, a directory without its trailing `/`, and a value written as
/// `--opt=VALUE` as VALUE alone.
fn complete(shell: Shell, line: &str) -> Vec<String> {
    complete_after(shell, Prelude::default(), line)
}

fn complete_after(shell: Shell, prelude: Prelude, line: &str) -> Vec<String> {
    let scene = Scene::new();
    let raw = match shell {
        Shell::Bash => bash_complete(&scene, prelude.bash, line),
        Shell::Zsh => zsh_complete(&scene, prelude.zsh, line),
        Shell::Fish => fish_complete(&scene, prelude.fish, line),
    };
    let word = line.rsplit(' ').next().unwrap_or("");
    let option_prefix = match word.find('=') {
        Some(eq) if word.starts_with('-') => &word[..=eq],
        _ => "",
    };
    let mut got: Vec<String> = raw
        .iter()
        .map(|r| r.split('\t').next().unwrap_or(""))
        .filter(|m| !m.is_empty())
        .map(|m| m.strip_prefix(option_prefix).unwrap_or(m))
        .map(|m| m.strip_suffix('/').unwrap_or(m).to_owned())
        .collect();
    got.sort();
    got.dedup();
    got
}

/// The matches zsh or fish offer for `line`, each with its description.
fn complete_described(shell: Shell, line: &str) -> Vec<String> {
    let scene = Scene::new();
    match shell {
        Shell::Bash => unreachable!("bash shows no descriptions"),
        Shell::Zsh => zsh_complete(&scene, "", line),
        Shell::Fish => fish_complete(&scene, "", line),
    }
}

fn bash_complete(scene: &Scene, prelude: &str, line: &str) -> Vec<String> {
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
    let quoted: Vec<String> = words.iter().map(|w| sh_quote(w)).collect();
    let file = completions_dir().join("redlock-run.bash");
    let script = format!(
        r#"{prelude}
source {file}
spec=$(complete -p redlock-run)
fn=$(sed -n 's/.*-F \([^ ]*\).*/\1/p' <<<"$spec")
[[ -n $fn ]] || {{ echo "no completion function for redlock-run" >&2; exit 3; }}
# Outside a real completion compopt fails; note whether the function turned file names off.
no_default=
compopt() {{
    [[ " $* " == *" +o default "* ]] && no_default=yes
    builtin compopt "$@" 2>/dev/null
}}
COMP_WORDS=({words})
COMP_CWORD={cword}
COMP_LINE={line}
COMP_POINT={point}
COMPREPLY=()
"$fn" redlock-run {cur} {prev}
if ((${{#COMPREPLY[@]}} == 0)) && [[ -z $no_default && $spec == *"-o default"* ]]; then
    # Nothing offered: readline completes a file name (complete -o default).
    mapfile -t COMPREPLY < <(compgen -f -- {cur})
fi
printf '%s\n' "${{COMPREPLY[@]}}"
"#,
        file = sh_quote(&file.to_string_lossy()),
        words = quoted.join(" "),
        line = sh_quote(line),
        point = line.len(),
        cur = sh_quote(&cur),
        prev = sh_quote(&prev),
    );
    let mut cmd = scene.command("bash");
    cmd.args(["--norc", "--noprofile", "-c", &script]);
    let out = run_bounded(cmd, "bash");
    assert!(
        out.status.success(),
        "bash failed for {line:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    lines(&out.stdout)
}

fn zsh_complete(scene: &Scene, prelude: &str, line: &str) -> Vec<String> {
    let capture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/completion_capture.zsh");
    let out_file = scene.home.path().join("matches");
    let prelude_file = scene.home.path().join("prelude.zsh");
    std::fs::write(&prelude_file, prelude).unwrap();
    let mut cmd = scene.command("zsh");
    cmd.arg("-f")
        .arg(&capture)
        .arg(completions_dir())
        .arg(&out_file)
        .arg(line)
        .arg(&prelude_file);
    let out = run_bounded(cmd, "zsh");
    let text = std::fs::read_to_string(&out_file).unwrap_or_default();
    let mut matches = lines(text.as_bytes());
    assert!(
        out.status.success() && matches.last().is_some_and(|l| l == "<done>"),
        "zsh did not finish completing {line:?} ({}): {}\nmatches so far: {matches:?}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    matches.pop();
    matches
}

fn fish_complete(scene: &Scene, prelude: &str, line: &str) -> Vec<String> {
    let script = format!(
        "set -p fish_complete_path {}\n{prelude}\ncomplete -C {}\n",
        fish_quote(&completions_dir().to_string_lossy()),
        fish_quote(line)
    );
    let mut cmd = scene.command("fish");
    cmd.args(["-c", &script]);
    let out = run_bounded(cmd, "fish");
    // Any error message means a completion file that fish cannot read whole.
    assert!(
        out.status.success() && out.stderr.is_empty(),
        "fish failed for {line:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    lines(&out.stdout)
}

fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(str::to_owned)
        .collect()
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn fish_quote(s: &str) -> String {
    format!("'{}'", s.replace('\\', r"\\").replace('\'', r"\'"))
}

/// In every shell installed, `line<TAB>` offers each of `wanted` and none of `unwanted`.
#[track_caller]
fn offers(line: &str, wanted: &[&str], unwanted: &[&str]) {
    for shell in SHELLS {
        if shell.available() {
            check(shell, &complete(shell, line), line, wanted, unwanted);
        }
    }
}

#[track_caller]
fn check(shell: Shell, got: &[String], line: &str, wanted: &[&str], unwanted: &[&str]) {
    let shell = shell.name();
    for w in wanted {
        assert!(
            got.iter().any(|g| g == w),
            "{shell}: `{line}<TAB>` does not offer {w}; it offers {got:?}"
        );
    }
    for u in unwanted {
        assert!(
            !got.iter().any(|g| g == u),
            "{shell}: `{line}<TAB>` offers {u}: {got:?}"
        );
    }
}

/// In every shell installed, `line<TAB>` offers nothing at all.
#[track_caller]
fn offers_nothing(line: &str) {
    for shell in SHELLS {
        if shell.available() {
            let got = complete(shell, line);
            assert!(
                got.is_empty(),
                "{}: `{line}<TAB>` offers {got:?}",
                shell.name()
            );
        }
    }
}

#[test]
fn the_runs_options_before_the_command() {
    offers(
        "redlock-run --",
        &[
            "--key",
            "--wait",
            "--ttl",
            "--command",
            "--log-format",
            "--tls-ca-cert",
        ],
        &["--json"],
    );
    offers("redlock-run --key k --w", &["--wait"], &["--key"]);
}

#[test]
fn status_offers_its_own_options_only() {
    let run_only = ["--wait", "--ttl", "--quiet", "--command", "--hold-at-least"];
    offers(
        "redlock-run status --",
        &["--key", "--json", "--redis", "--log-format", "--tls-cert"],
        &run_only,
    );
    // ... also after an option that only status has, and after a value.
    offers("redlock-run status --json --", &["--key"], &run_only);
    offers("redlock-run status -k deploy:prod --j", &["--json"], &[]);
}

#[test]
fn subcommands_as_the_first_word() {
    offers("redlock-run ", &["status"], &["ca.pem", "--json"]);
    offers("redlock-run st", &["status"], &["ca.pem"]);
    offers("redlock-run help ", &["status"], &["ca.pem", "--key"]);
}

#[test]
fn values_of_options() {
    let files = ["ca.pem", "notes.txt", "certs"];
    offers(
        "redlock-run --log-format ",
        &["text", "json"],
        &["--wait", "ca.pem"],
    );
    offers("redlock-run --log-format=j", &["json"], &["text"]);
    offers("redlock-run status --log-format ", &["text", "json"], &[]);
    offers("redlock-run --tls-ca-cert ", &files, &["--wait", "true"]);
    offers("redlock-run -k k --tls-cert=", &files, &["--wait"]);
    offers("redlock-run --tls-key ", &files, &[]);
    offers("redlock-run status --password-file ", &files, &["--json"]);
}

#[test]
fn free_text_values_offer_nothing() {
    for line in [
        "redlock-run --key ",
        "redlock-run -k ",
        "redlock-run --wait ",
        "redlock-run -q --redis ",
        "redlock-run status --key ",
    ] {
        offers_nothing(line);
    }
}

/// A zsh `((value\:"help"))` list or a fish `-a` list breaks on a `"` in a value's help
/// (`One "redlock-run: ..." line a message`): the values must still come whole, with it.
#[test]
fn values_are_offered_with_their_whole_help() {
    for shell in [Shell::Zsh, Shell::Fish] {
        if !shell.available() {
            continue;
        }
        for line in [
            "redlock-run --log-format ",
            "redlock-run status --log-format ",
        ] {
            let got = complete_described(shell, line);
            let text = got.iter().find(|g| g.starts_with("text\t"));
            assert!(
                text.is_some_and(|t| t.contains(r#"One "redlock-run: ..." line a message"#)),
                "{}: `{line}<TAB>` offers {got:?}",
                shell.name()
            );
        }
    }
}

#[test]
fn commands_after_the_double_dash() {
    let lines = [
        "redlock-run --key k -- ",
        "redlock-run -k deploy:prod --wait 10m -- ",
        "redlock-run --key=settle:monthly --redis redis://h:6379 -- ",
        "redlock-run -qk k -- ",
        "redlock-run -- ",
    ];
    for line in lines {
        for shell in SHELLS {
            if !shell.available() {
                continue;
            }
            let got = complete(shell, line);
            let mut unwanted = WRAPPER_ONLY.to_vec();
            unwanted.extend(["status", "ca.pem", "notes.txt"]);
            check(shell, &got, line, &["true", "bash"], &unwanted);
            assert!(
                got.len() > 20,
                "{}: `{line}<TAB>` offers too few commands: {got:?}",
                shell.name()
            );
        }
    }
    offers("redlock-run --key k -- tr", &["true"], &["--wait"]);
    offers("redlock-run -- st", &["stat"], &["status"]);
    offers("redlock-run -k k -- ./j", &["./job.sh"], &[]);
    // Without `--`, the first word that is not an option or its value is the command too.
    offers("redlock-run --key k --ttl 1m tr", &["true"], &["--ttl"]);
    offers("redlock-run tr", &["true"], &[]);
}

#[test]
fn the_commands_arguments_are_the_commands() {
    let mut unwanted = WRAPPER_ONLY.to_vec();
    unwanted.push("status");
    offers(
        "redlock-run --key k -- cat ",
        &["ca.pem", "notes.txt"],
        &unwanted,
    );
    offers("redlock-run -- cat ca", &["ca.pem"], &unwanted);
    for line in [
        "redlock-run --key k -- ls --",
        "redlock-run --key k -- ./job.sh -",
        "redlock-run --key k true --",
        "redlock-run -- true --",
        "redlock-run --key k -- cat --k",
    ] {
        offers(line, &[], &unwanted);
    }
}

/// The command's arguments are completed by the command's own completion, as for `sudo`: here
/// that of a `fake-job` which offers `--job-option`. In bash this needs the bash-completion
/// package (its `_comp_command_offset` or `_command_offset`); without it bash completes file
/// names there.
#[test]
fn the_commands_own_completion() {
    let framework = "/usr/share/bash-completion/bash_completion";
    let bash_prelude = format!(
        "source {framework}\n\
         _fake_job() {{ COMPREPLY=(--job-option); }}\n\
         complete -F _fake_job fake-job"
    );
    let prelude = Prelude {
        bash: &bash_prelude,
        zsh: "_fake_job() { compadd -- --job-option }\ncompdef _fake_job fake-job\n",
        fish: "complete -c fake-job -f -a --job-option\n",
    };
    for shell in SHELLS {
        if !shell.available() {
            continue;
        }
        if shell == Shell::Bash && !Path::new(framework).exists() {
            let line = format!(
                "SKIPPED the_commands_own_completion in bash: {framework} (bash-completion) \
                 is not installed; scripts/test installs it\n"
            );
            let _ = std::io::stderr().write_all(line.as_bytes());
            continue;
        }
        for line in [
            "redlock-run --key k -- fake-job ",
            "redlock-run -k deploy:prod --wait=1m -- fake-job --x ",
            "redlock-run --key k fake-job ",
            "redlock-run -- fake-job ",
            "redlock-run -- fake-job --log-format ",
            "redlock-run --key k fake-job --ttl ",
        ] {
            let got = complete_after(shell, prelude, line);
            assert_eq!(got, ["--job-option"], "{}: `{line}<TAB>`", shell.name());
        }
        let got = complete_after(shell, prelude, "redlock-run --key k -- tru");
        check(shell, &got, "redlock-run --key k -- tru", &["true"], &[]);
    }
}
