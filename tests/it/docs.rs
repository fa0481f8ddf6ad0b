//! The committed completions and man page must match what the clap definition generates now,
//! and the man page must document what the program does.

#[path = "../../examples/gen-docs.rs"]
#[allow(dead_code)]
mod gen_docs;

use std::fs;
use std::path::Path;

const GENERATED: [&str; 4] = [
    "completions/redlock-run.bash",
    "completions/_redlock-run",
    "completions/redlock-run.fish",
    "man/redlock-run.1",
];

#[test]
fn completions_and_man_page_are_fresh() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    fs::create_dir_all(tmp.path().join("docs")).unwrap();
    fs::copy(
        root.join("docs/guarantees.md"),
        tmp.path().join("docs/guarantees.md"),
    )
    .unwrap();
    gen_docs::generate(tmp.path()).unwrap();
    let stale: Vec<&str> = GENERATED
        .into_iter()
        .filter(|f| fs::read(root.join(f)).ok() != fs::read(tmp.path().join(f)).ok())
        .collect();
    assert!(
        stale.is_empty(),
        "stale generated files {stale:?}: run scripts/gen-docs and commit the result"
    );
}

#[test]
fn man_page_has_the_sections_an_operator_needs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = fs::read_to_string(root.join("man/redlock-run.1")).unwrap();
    for needle in [
        ".SH EXAMPLES",
        ".SH \"EXIT STATUS\"",
        ".SH ENVIRONMENT",
        ".SH \"GUARANTEES AND LIMITS\"",
        r#".SH "CHOOSING \-\-TTL, \-\-HEARTBEAT AND \-\-GRACE""#,
        "REDLOCK_FENCE",
        "REDLOCK_TTL",
        "PR_SET_PDEATHSIG",
        ".SS \"Redlock\"",
        ".SS \"Sentinel\"",
        "What holds across a failover",
    ] {
        assert!(page.contains(needle), "man page lacks {needle:?}");
    }
}

/// SYNOPSIS shows the three forms with their values and `--`; `status` has its own section,
/// and no page that does not exist (`redlock-run-status(1)`) is referred to.
#[test]
fn man_page_shows_the_usage_forms_and_documents_status() {
    let page = man_page();
    let synopsis = section(&page, ".SH SYNOPSIS");
    for form in [
        concat!(
            r"\fBredlock\-run\fR [\fIOPTIONS\fR] \fB\-\-key\fR \fIKEY\fR ",
            r"\fB\-\-\fR \fICOMMAND\fR [\fIARGS\fR]..."
        ),
        r"\fB\-c\fR \fISHELL_STRING\fR",
        r"\fBredlock\-run\fR \fBstatus\fR",
    ] {
        assert!(
            synopsis.contains(form),
            "SYNOPSIS lacks {form:?}:\n{synopsis}"
        );
    }
    assert!(
        !page.contains("redlock-run-status") && !page.contains(r"redlock\-run\-status"),
        "the page refers to a redlock-run-status page that does not exist"
    );
    assert!(!page.contains(".SH SUBCOMMANDS"), "{page}");
    let status = section(&page, ".SH STATUS");
    assert!(
        status.contains(r"\fB\-\-json\fR") && status.contains("REDLOCK_STATUS_JSON"),
        "STATUS does not document --json:\n{status}"
    );
}

/// ENVIRONMENT says every option shows its variable: each option's entry (run and `status`)
/// names the `REDLOCK_*` variable of the clap definition.
#[test]
fn man_page_entry_of_every_option_names_its_variable() {
    let page = man_page();
    let cmd = gen_docs::built_command();
    let mut checked = 0;
    for c in std::iter::once(&cmd).chain(cmd.get_subcommands()) {
        // A subcommand's own options are in its section (`status --json`, `list --json`).
        let scope = if c.get_name() == cmd.get_name() {
            page.as_str()
        } else {
            let heading = format!(".SH {}", c.get_name().to_uppercase());
            if page.contains(&format!("{heading}\n")) {
                section(&page, &heading)
            } else {
                page.as_str()
            }
        };
        for arg in c.get_arguments() {
            let (Some(env), Some(long)) = (arg.get_env(), arg.get_long()) else {
                continue;
            };
            let env = env.to_string_lossy();
            let spelled = format!(r"\fB\-\-{}\fR", long.replace('-', r"\-"));
            // The .TP entry whose tag line has the option: up to the next request that
            // starts another entry or section.
            // The global options' entries are under OPTIONS.
            let find = |text: &'_ str| -> Option<String> {
                text.split(".TP\n")
                    .find(|e| e.lines().next().is_some_and(|tag| tag.contains(&spelled)))
                    .map(str::to_owned)
            };
            let entry = find(scope)
                .or_else(|| find(&page))
                .unwrap_or_else(|| panic!("no man page entry for --{long}"));
            let entry: String = entry
                .lines()
                .take_while(|l| !l.starts_with(".SH") && !l.starts_with(".SS"))
                .collect::<Vec<_>>()
                .join("\n");
            assert!(
                entry.contains(&format!(r"\fB{}\fR", env.replace('-', r"\-"))),
                "the entry of --{long} does not show {env}:\n{entry}"
            );
            checked += 1;
        }
    }
    assert!(
        checked >= 18,
        "only {checked} options with a variable found"
    );
}

/// Text taken from docs/guarantees.md is converted: no backtick, `**` or `*word*` reaches the
/// page, and its emphasis is roff's (`*sent*` in italic).
#[test]
fn man_page_has_no_markdown_left() {
    let page = man_page();
    for (n, line) in page.lines().enumerate() {
        let n = n + 1;
        assert!(!line.contains('`'), "line {n} has a backtick: {line}");
        assert!(!line.contains("**"), "line {n} has **: {line}");
        let chars: Vec<char> = line.chars().collect();
        for (i, &c) in chars.iter().enumerate() {
            // `*word...word*`, not roff's own `\*(Aq` string calls.
            let opens = c == '*'
                && (i == 0 || chars[i - 1] != '\\')
                && chars.get(i + 1).is_some_and(|c| c.is_alphanumeric());
            if opens {
                let closes = chars[i + 1..]
                    .windows(2)
                    .any(|w| w[0].is_alphanumeric() && w[1] == '*');
                assert!(!closes, "line {n} has markdown emphasis: {line}");
            }
        }
    }
    assert!(
        page.contains(r"\fIsent\fR the last successful SET"),
        "*sent* from docs/guarantees.md is not in italic"
    );
}

fn man_page() -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    fs::read_to_string(root.join("man/redlock-run.1")).unwrap()
}

/// A section of the page, from its `.SH` line to the next one.
fn section<'a>(page: &'a str, heading: &str) -> &'a str {
    let start = page
        .find(&format!("{heading}\n"))
        .unwrap_or_else(|| panic!("the man page has no {heading}"));
    let rest = &page[start + heading.len()..];
    &rest[..rest.find("\n.SH ").unwrap_or(rest.len())]
}

/// `rust-version` in Cargo.toml must be true: no dependency built for Linux may need a newer
/// compiler (redis 1.8.1 needs 1.88, uuid 1.29 needs 1.89).
#[test]
fn rust_version_covers_every_dependency() {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--locked", "--offline"])
        .args(["--filter-platform", "x86_64-unknown-linux-gnu"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON");
    let ours = parse_version(env!("CARGO_PKG_RUST_VERSION"));
    let mut needs: Vec<((u32, u32, u32), String)> = Vec::new();
    for package in metadata["packages"].as_array().expect("packages") {
        let name = package["name"].as_str().unwrap_or_default();
        if let Some(version) = package["rust_version"].as_str() {
            needs.push((parse_version(version), format!("{name} {version}")));
        }
    }
    assert!(
        needs.len() > 5,
        "found too few rust_version fields: {needs:?}"
    );
    let too_new: Vec<&String> = needs
        .iter()
        .filter(|(v, _)| *v > ours)
        .map(|(_, n)| n)
        .collect();
    assert!(
        too_new.is_empty(),
        "rust-version {} in Cargo.toml is older than these dependencies need: {too_new:?}",
        env!("CARGO_PKG_RUST_VERSION")
    );
}

fn parse_version(v: &str) -> (u32, u32, u32) {
    let mut parts = v.split('.').map(|p| p.parse().unwrap_or(0));
    (
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

// ---------------------------------------------------------------------------------------------
// the README and docs/ as a new user reads them
// ---------------------------------------------------------------------------------------------

fn read(path: &str) -> String {
    fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The fenced code blocks of a markdown text: (info string, lines).
fn code_blocks(md: &str) -> Vec<(String, Vec<String>)> {
    let mut blocks = Vec::new();
    let mut current: Option<(String, Vec<String>)> = None;
    for line in md.lines() {
        if let Some(info) = line.trim_start().strip_prefix("```") {
            match current.take() {
                Some(block) => blocks.push(block),
                None => current = Some((info.trim().to_owned(), Vec::new())),
            }
        } else if let Some((_, lines)) = current.as_mut() {
            lines.push(line.to_owned());
        }
    }
    blocks
}

/// Shell words of `line` (quotes, backslashes, a `#` comment); None while a quote is open.
fn shell_words(line: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => w.push(c),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '"' => break,
                        '\\' => w.push(chars.next()?),
                        c => w.push(c),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).push(chars.next()?),
            '#' if word.is_none() => break,
            c if c.is_whitespace() => words.extend(word.take()),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    Some(words)
}

/// Every call of redlock-run in the README's and docs' code blocks, as argument lists (after
/// the program name), with the block's first line (where cron and systemd name the file).
fn calls(md: &str) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    for (_, lines) in code_blocks(md) {
        let title = lines.first().cloned().unwrap_or_default();
        let mut pending = String::new();
        for line in &lines {
            // A JSON array (a Kubernetes `command:`).
            if let Some(array) = line.trim().strip_prefix("command: ") {
                let words: Vec<String> = array
                    .trim_matches(|c| c == '[' || c == ']')
                    .split(", ")
                    .map(|w| w.trim_matches('"').to_owned())
                    .collect();
                if words[0].ends_with("redlock-run") {
                    found.push((title.clone(), words));
                }
                continue;
            }
            pending.push_str(line);
            pending.push('\n');
            let Some(words) = shell_words(&pending) else {
                continue; // a quote spans lines
            };
            pending.clear();
            // `ExecStart=/usr/local/bin/redlock-run ...`: the program after the `=`.
            let words: Vec<String> = words
                .into_iter()
                .map(|w| match w.split_once('=') {
                    Some((_, p)) if p.ends_with("redlock-run") => p.to_owned(),
                    _ => w,
                })
                .skip_while(|w| !w.ends_with("redlock-run"))
                // The shell's, not the command's: a redirection or the next command.
                .take_while(|w| {
                    !(matches!(w.as_str(), "|" | "||" | "&&" | ";")
                        || w.starts_with('>')
                        || w.starts_with("1>")
                        || w.starts_with("2>"))
                })
                .collect();
            // A synopsis (`--key <KEY>`) is no command line.
            let synopsis = words.iter().any(|w| w.starts_with('<'));
            if words.first().is_some_and(|w| w.ends_with("redlock-run")) && !synopsis {
                found.push((title.clone(), words));
            }
        }
    }
    found
}

/// Every redlock-run command line in the README and docs/ parses as written, a cron line or
/// systemd unit names the binary by its full path (cron's PATH is /usr/bin:/bin), and the
/// Kubernetes Job does not fail on a busy lock.
#[test]
fn readme_examples_are_correct_as_written() {
    use clap::Parser;
    let mut checked = 0;
    for page in [
        "README.md",
        "docs/reference.md",
        "docs/guarantees.md",
        "docs/install.md",
        "docs/ci.md",
    ] {
        for (title, words) in calls(&read(page)) {
            let parsed = redlock_run::cli::Cli::try_parse_from(&words);
            assert!(
                parsed.is_ok(),
                "{page}: `{}` does not parse: {}",
                words.join(" "),
                parsed.unwrap_err()
            );
            if title.contains("/etc/cron.d/") || title.contains("/etc/systemd/") {
                assert!(
                    words[0].starts_with('/'),
                    "{page}: {title}: call redlock-run by its full path: {}",
                    words.join(" ")
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 15, "only {checked} command lines found");

    let readme = read("README.md");
    let k8s: Vec<Vec<String>> = calls(&readme)
        .into_iter()
        .filter(|(t, _)| t.starts_with("apiVersion"))
        .map(|(_, w)| w)
        .collect();
    assert_eq!(k8s.len(), 1, "one Kubernetes example");
    let cmd = k8s[0].join(" ");
    assert!(
        cmd.starts_with('/') && (cmd.contains(" -E 0 ") || cmd.contains("--conflict-exit-code 0")),
        "the CronJob must exit 0 on a busy lock, by the binary's full path: {cmd}"
    );
    // The GitHub Actions job installs the binary before it uses it.
    let actions = code_blocks(&readme)
        .into_iter()
        .find(|(_, l)| l.iter().any(|l| l.contains("runs-on:")))
        .expect("a GitHub Actions example")
        .1
        .join("\n");
    let install = actions.find("cargo install").expect("an install step");
    assert!(
        install < actions.find("run: redlock-run").unwrap(),
        "{actions}"
    );
    // The container recipe: a Dockerfile around the static build, named in the README.
    let dockerfile = read("Dockerfile");
    assert!(
        dockerfile.contains("scripts/build-static")
            && (dockerfile.contains("FROM scratch") || dockerfile.contains("distroless")),
        "{dockerfile}"
    );
    assert!(readme.contains("](Dockerfile)") && readme.contains("static build"));
}

/// What `scripts/test` may install with apt-get is what the README's set-up comment and
/// docs/install.md say, package by package, and the README says the shells are optional.
#[test]
fn scripts_test_installs_what_the_readme_says() {
    let script = read("scripts/test");
    let packages: Vec<&str> = script
        .split("+=(")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .collect();
    assert!(
        packages.len() >= 6,
        "the packages of scripts/test not found: {packages:?}"
    );
    let readme = read("README.md");
    let setup = code_blocks(&readme)[0].1.join("\n");
    let install = read("docs/install.md");
    for package in &packages {
        assert!(
            setup.contains(package),
            "the README's set-up comment does not say scripts/test installs {package}:\n{setup}"
        );
        assert!(
            install.contains(&format!("`{package}`")),
            "docs/install.md does not say scripts/test installs {package}"
        );
    }
    assert!(
        setup.contains("apt-get update") && setup.contains("skipped"),
        "the README's set-up comment says when apt-get runs and that the shells are optional:\n\
         {setup}"
    );
}

/// The two set-up commands open the README; the reference material lives in docs/ pages
/// linked from it, every relative link (and its #anchor) resolves, and no page tells the
/// project's own history.
#[test]
fn readme_starts_with_the_two_commands_and_links_resolve() {
    let readme = read("README.md");
    let first = &code_blocks(&readme)[0].1;
    assert!(
        first[1].starts_with("cargo run --release -- --key demo -- echo")
            && first.iter().any(|l| l == "scripts/test"),
        "{first:?}"
    );
    assert!(
        readme.lines().count() < 400,
        "the README is for users; reference material goes to docs/"
    );
    let guarantees = read("docs/guarantees.md");
    assert!(guarantees.contains("What holds across a failover"));
    let pages = [
        "README.md",
        "docs/reference.md",
        "docs/guarantees.md",
        "docs/install.md",
        "docs/performance.md",
        "docs/ci.md",
    ];
    for page in pages {
        let text = read(page);
        for needle in ["this session", "issue 1", "issue 2", "issue #"] {
            assert!(
                !text.to_lowercase().contains(needle),
                "{page} tells history: {needle:?}"
            );
        }
        let dir = Path::new(page).parent().unwrap();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let target = &rest[..rest.find(')').unwrap()];
            if target.starts_with("http") {
                continue;
            }
            let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
            let file = if file.is_empty() {
                Path::new(page).to_path_buf()
            } else {
                dir.join(file)
            };
            let file = file.to_string_lossy().replace("docs/../", "");
            let linked = read(&file);
            if !anchor.is_empty() {
                let anchors: Vec<String> = linked
                    .lines()
                    .filter(|l| l.starts_with('#'))
                    .map(|l| gh_anchor(l.trim_start_matches('#').trim()))
                    .collect();
                assert!(
                    anchors.iter().any(|a| a == anchor),
                    "{page}: link {target}: no such heading in {file}"
                );
            }
        }
    }
}

fn gh_anchor(heading: &str) -> String {
    heading
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}
