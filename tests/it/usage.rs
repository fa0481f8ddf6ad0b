//! Bad command lines: exit 2 with one line, without running the command or touching Redis.

use std::fs;

use crate::common::*;

#[test]
fn bad_input_exits_2_with_one_line_without_running_or_touching_redis() {
    let redis = RedisServer::start();
    let dir = scratch();
    let url = redis.url();
    let http = format!("http://127.0.0.1:{}", redis.port());
    let cmd: &[&str] = &["-c", "touch marker"];
    // Accepted before (a little longer and the command failed with E2BIG on REDLOCK_KEY).
    let long_key = "k".repeat(120 * 1024);
    let cases: Vec<(&str, Vec<&str>)> = vec![
        (
            "bad duration",
            vec!["--redis", &url, "--key", "k", "--ttl", "abc"],
        ),
        (
            "negative duration",
            vec!["--redis", &url, "--key", "k", "--ttl", "-1s"],
        ),
        (
            "zero ttl",
            vec!["--redis", &url, "--key", "k", "--ttl", "0"],
        ),
        (
            "bad wait",
            vec!["--redis", &url, "--key", "k", "--wait", "soon"],
        ),
        ("newline in the key", vec!["--redis", &url, "--key", "a\nb"]),
        (
            "tab in the prefix",
            vec!["--redis", &url, "--key", "k", "--prefix", "p\t"],
        ),
        (
            "bidirectional override in the key",
            vec!["--redis", &url, "--key", "a\u{202E}b"],
        ),
        (
            "tag character in the key",
            vec!["--redis", &url, "--key", "a\u{E0041}b"],
        ),
        (
            "variation selector in the key",
            vec!["--redis", &url, "--key", "a\u{FE0F}b"],
        ),
        (
            "Hangul filler in the key",
            vec!["--redis", &url, "--key", "a\u{3164}b"],
        ),
        (
            "heartbeat > ttl",
            vec![
                "--redis",
                &url,
                "--key",
                "k",
                "--heartbeat",
                "2s",
                "--ttl",
                "1s",
            ],
        ),
        (
            "heartbeat = ttl",
            vec![
                "--redis",
                &url,
                "--key",
                "k",
                "--heartbeat",
                "1s",
                "--ttl",
                "1s",
            ],
        ),
        (
            "grace = ttl",
            vec![
                "--redis", &url, "--key", "k", "--grace", "1s", "--ttl", "1s",
            ],
        ),
        (
            "heartbeat + grace leave no time to renew",
            vec![
                "--redis",
                &url,
                "--key",
                "k",
                "--ttl",
                "1s",
                "--grace",
                "300ms",
                "--heartbeat",
                "686ms",
            ],
        ),
        (
            "ttl beyond what Redis can hold",
            vec!["--redis", &url, "--key", "k", "--ttl", "500000000000y"],
        ),
        (
            "max-runtime that overflows the clock",
            vec![
                "--redis",
                &url,
                "--key",
                "k",
                "--max-runtime",
                "500000000000y",
            ],
        ),
        ("empty key", vec!["--redis", &url, "--key", ""]),
        (
            "connect timeout that overflows the clock",
            vec![
                "--redis",
                &url,
                "--key",
                "k",
                "--connect-timeout",
                "500000000000y",
            ],
        ),
        (
            "heartbeat of 1ns (thousands of renewals a second)",
            vec!["--redis", &url, "--key", "k", "--heartbeat", "1ns"],
        ),
        (
            "key too long for the command's environment",
            vec!["--redis", &url, "--key", &long_key],
        ),
        // Names that are another lock's companion key, or whose companions could not share
        // their cluster slot (keys.rs).
        (
            "key that is the fence of lock 'a'",
            vec!["--redis", &url, "--prefix", "", "--key", "{a}:fence"],
        ),
        (
            "key that is the holder hash of a tagged lock",
            vec!["--redis", &url, "--key", "{x}:j::holder"],
        ),
        (
            "key with a stray brace",
            vec!["--redis", &url, "--key", "a}b"],
        ),
        (
            "bad key with a newline (the message stays one line)",
            vec!["--redis", &url, "--key", "a}\nb"],
        ),
        ("missing key", vec!["--redis", &url]),
        (
            "conflict code 256",
            vec!["--redis", &url, "--key", "k", "-E", "256"],
        ),
        (
            "bad --once-per period",
            vec!["--redis", &url, "--key", "k", "--once-per", "fortnight"],
        ),
        (
            "--once-per longer than the record is kept",
            vec!["--redis", &url, "--key", "k", "--once-per", "40 days"],
        ),
        (
            "unknown --timezone",
            vec![
                "--redis",
                &url,
                "--key",
                "k",
                "--once-per",
                "day",
                "--timezone",
                "Mars/Olympus_Mons",
            ],
        ),
        (
            "--timezone without --once-per",
            vec!["--redis", &url, "--key", "k", "--timezone", "UTC"],
        ),
        (
            "--done-exit-code without --once-per",
            vec!["--redis", &url, "--key", "k", "--done-exit-code", "3"],
        ),
        (
            "done exit code 256",
            vec![
                "--redis",
                &url,
                "--key",
                "k",
                "--once-per",
                "day",
                "--done-exit-code",
                "256",
            ],
        ),
        (
            "unparsable url",
            vec!["--redis", "::not a url::", "--key", "k"],
        ),
        (
            "bad port in url",
            vec!["--redis", "redis://127.0.0.1:99999", "--key", "k"],
        ),
        ("unknown scheme", vec!["--redis", &http, "--key", "k"]),
        (
            "unknown option",
            vec!["--redis", &url, "--key", "k", "--no-such-option"],
        ),
    ];
    let mut all: Vec<(String, Vec<String>)> = cases
        .into_iter()
        .map(|(name, mut args)| {
            args.extend_from_slice(cmd);
            (
                name.to_string(),
                args.iter().map(|s| s.to_string()).collect(),
            )
        })
        .collect();
    all.push((
        "no command".into(),
        ["--redis", &url, "--key", "k"].map(String::from).to_vec(),
    ));
    all.push((
        "both -c and a command".into(),
        [
            "--redis",
            &url,
            "--key",
            "k",
            "-c",
            "touch marker",
            "--",
            "touch",
            "marker",
        ]
        .map(String::from)
        .to_vec(),
    ));
    all.push((
        "nothing after --".into(),
        ["--redis", &url, "--key", "k", "--"]
            .map(String::from)
            .to_vec(),
    ));

    let mut failures = Vec::new();
    for (name, args) in &all {
        let conns_before = redis.info_field("total_connections_received");
        let out = Wrapper::new().args(args).current_dir(dir.path()).run();
        // This INFO is one connection of its own.
        let conns_after = redis.info_field("total_connections_received");
        let lines: Vec<&str> = out.stderr.lines().collect();
        let mut why = Vec::new();
        if out.code() != Some(2) {
            why.push(format!("exit {:?}, not 2", out.code()));
        }
        if lines.len() != 1 || !lines[0].starts_with(MSG_PREFIX) {
            why.push(format!(
                "stderr must be one '{MSG_PREFIX}...' line, got {}",
                lines.len()
            ));
        }
        if dir.path().join("marker").exists() {
            why.push("the command ran".into());
            let _ = fs::remove_file(dir.path().join("marker"));
        }
        if conns_after != conns_before + 1 {
            why.push(format!(
                "connected to Redis ({} connections)",
                conns_after - conns_before - 1
            ));
        }
        if redis.dbsize() != 0 {
            why.push("wrote to Redis".into());
            redis.cli(&["FLUSHALL"]);
        }
        if !why.is_empty() {
            failures.push(format!("[{name}] {}\n{out}", why.join("; ")));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} bad inputs mishandled:\n\n{}",
        failures.len(),
        all.len(),
        failures.join("\n\n")
    );
}

/// A run inside a locked command inherits `REDLOCK_KEY` (the outer lock's full key) and
/// `REDLOCK_TOKEN`. Without `--key` it must not lock `redlock:redlock:k`, and a nested run of
/// the lock the outer run holds must not wait for itself: both are refused with exit 2.
#[test]
fn nested_runs_are_refused_clearly_unless_they_name_another_lock() {
    let redis = RedisServer::start();
    let dir = scratch();
    let script = format!(
        "B={bin}; U={url}; \
         $B -r $U -- true; echo \"implicit $?\" >> log; \
         $B -r $U --key k -- true; echo \"same $?\" >> log; \
         $B -r $U --key other -- true; echo \"other $?\" >> log",
        bin = wrapper_bin(),
        url = redis.url()
    );
    let out = Wrapper::on(&redis, "k")
        .sh(&script)
        .current_dir(dir.path())
        .run();
    out.expect_code(0);
    let log = fs::read_to_string(dir.path().join("log")).expect("log written");
    assert_eq!(log, "implicit 2\nsame 2\nother 0\n", "{out}");
    // Without --key the outer run's REDLOCK_KEY (beside its REDLOCK_TOKEN) is taken as the
    // full key it is: the same lock, refused as such.
    assert_eq!(
        out.stderr
            .matches("a run of the same lock here would wait for that hold")
            .count(),
        2,
        "{out}"
    );
    assert!(
        !redis.exists("redlock:redlock:k"),
        "a doubly prefixed lock was taken"
    );
}

/// `ulimit -n 6` once made the runtime's signal set-up panic (exit 134, many lines): too few
/// file descriptors is one line and exit 70, before Redis is touched.
#[test]
fn too_few_file_descriptors_is_one_line() {
    let redis = RedisServer::start();
    for limit in [6, 9, 12] {
        let out = Wrapper::on(&redis, "k")
            .nofile(limit)
            .args(["--", "true"])
            .run();
        out.expect_code(70);
        out.expect_one_line();
        out.expect_stderr_contains("file descriptors");
        assert!(!redis.exists("redlock:k"), "{out}");
    }
}

/// Arguments that are not UTF-8 (a byte in a password, a file name): a usage error is one
/// line, without a panic and without the argument's bytes.
#[test]
fn arguments_that_are_not_utf8_do_not_panic() {
    use std::os::unix::ffi::OsStringExt;
    let redis = RedisServer::start();
    let url = std::ffi::OsString::from_vec(b"redis://:S3C\xffRET@h".to_vec());
    let file = std::ffi::OsString::from_vec(b"caf\xe9.txt".to_vec());
    for json in [false, true] {
        let mut w = Wrapper::new()
            .arg("--redis")
            .arg(&url)
            .args(["--key", "k", "--ttl", "abc"]);
        if json {
            w = w.env("REDLOCK_LOG_FORMAT", "json");
        }
        let out = w.arg("--").arg("cat").arg(&file).run();
        out.expect_code(2);
        assert_eq!(out.stderr_lines().len(), 1, "{out}");
        assert!(
            !out.stderr.contains("panicked") && !out.stderr.contains("S3C"),
            "{out}"
        );
    }
    drop(redis);
}

/// A mistyped flag or value gets a hint: the flag meant, the values allowed, the usage line;
/// a bare `redlock-run` prints the short usage. Still one line (or the usage block) and exit 2.
#[test]
fn typos_get_a_hint_and_the_usage() {
    let redis = RedisServer::start();
    let url = redis.url();
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--kye", "k", "--", "true"],
            &["'--key'", "Usage: redlock-run"],
        ),
        (
            &["--key", "k", "--log-format", "jsn", "--", "true"],
            &["text, json", "Usage: redlock-run"],
        ),
        (
            &["--key", "k", "--wait", "infinite", "--", "true"],
            &["forever"],
        ),
        (
            &["--key", "k", "--ttl", "30x", "--", "true"],
            &["bare number is seconds"],
        ),
        // A missing required option is named, with the subcommand's usage.
        (
            &["pause", "--key", "k"],
            &["--for <DUR>, --reason <TEXT>", "Usage: redlock-run pause"],
        ),
        (
            &["pause", "--key", "k", "--for", "1m"],
            &["not provided: --reason <TEXT>", "Usage: redlock-run pause"],
        ),
    ];
    for (args, needles) in cases {
        let out = Wrapper::new().args(["--redis", &url]).args(*args).run();
        out.expect_code(2);
        out.expect_one_line();
        for needle in *needles {
            assert!(
                out.stderr.contains(needle),
                "{args:?}: no {needle:?}\n{out}"
            );
        }
    }
    let bare = Wrapper::new().run();
    bare.expect_code(2);
    assert!(
        bare.stderr
            .contains("Usage: redlock-run [OPTIONS] --key <KEY> -- <COMMAND>")
            && bare.stderr.contains("--help"),
        "{bare}"
    );
    assert_eq!(redis.dbsize(), 0);
}

/// An option that a subcommand does not take is refused saying who takes it, and why where
/// that helps, with the subcommand's usage; never with itself as the suggestion (`status
/// --limit 2` once said "did you mean '--limit'?"). Before the subcommand's name a run's
/// options are an alias's and stay accepted (status.rs).
#[test]
fn an_option_another_command_takes_is_refused_not_suggested() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["status", "--limit", "2", "--key", "k"],
            "status takes no --limit: the limit is read from the lock; --limit is for a run and acquire",
        ),
        (
            &["status", "--key", "k", "--limit=2"],
            "status takes no --limit",
        ),
        (
            &["status", "--key", "k", "--wait", "1s"],
            "status takes no --wait: it never waits",
        ),
        (
            &["status", "-w", "1", "--key", "k"],
            "status takes no -w (--wait)",
        ),
        (
            &["list", "--ttl", "1s"],
            "list takes no --ttl: it holds no lease",
        ),
        (
            &["break", "--key", "k", "--wait", "1s"],
            "break takes no --wait",
        ),
        (
            &["resume", "--key", "k", "--limit", "2"],
            "resume takes no --limit",
        ),
        (
            &["forget", "--key", "k", "--shared"],
            "--shared is for a run",
        ),
        (
            &["status", "--key", "k", "--name-prefix", "x"],
            "--name-prefix is for list",
        ),
        (
            &["--key", "k", "--json", "--", "true"],
            "a run takes no --json",
        ),
    ];
    for (args, says) in cases {
        let out = Wrapper::new()
            .args(["--redis", "redis://127.0.0.1:1"])
            .args(*args)
            .run();
        out.expect_code(2);
        let line = out.expect_one_line();
        assert!(line.contains(says), "{args:?}: no {says:?}\n{out}");
        assert!(!line.contains("did you mean"), "{args:?}\n{out}");
        let usage = match args[0] {
            "--key" => "Usage: redlock-run [OPTIONS]".to_owned(),
            sub => format!("Usage: redlock-run {sub} "),
        };
        assert!(line.contains(&usage), "{args:?}: no {usage:?}\n{out}");
    }
    // A typo of the subcommand's own option is still suggested; one of another command's
    // is not (status takes no --limit).
    let out = Wrapper::new()
        .args(["status", "--key", "k", "--jsno"])
        .run();
    out.expect_code(2);
    assert!(
        out.expect_one_line().contains("did you mean '--json'?"),
        "{out}"
    );
    let out = Wrapper::new()
        .args(["status", "--key", "k", "--limt", "2"])
        .run();
    out.expect_code(2);
    assert!(!out.expect_one_line().contains("--limit"), "{out}");
}

/// A bare number is seconds for every duration (`-w 10`, `--ttl 30`), as for flock and timeout.
#[test]
fn a_bare_number_of_seconds_is_a_duration() {
    let redis = RedisServer::start();
    let out = Wrapper::on(&redis, "k")
        .args([
            "-w",
            "10",
            "--ttl",
            "30",
            "--grace",
            "2",
            "--",
            "sh",
            "-c",
            "echo $REDLOCK_TTL_MS",
        ])
        .run();
    out.expect_code(0);
    assert_eq!(out.stdout.trim(), "30000", "{out}");
}

/// `--done-exit-code` is the code of a run that `--once-per` skips: without `--once-per` it
/// is refused like `--timezone` (one line naming `--once-per`, exit 2, nothing run).
#[test]
fn done_exit_code_without_once_per_is_refused() {
    let dir = scratch();
    let out = Wrapper::new()
        .args(["--redis", "redis://127.0.0.1:1", "--key", "k"])
        .args(["--done-exit-code", "3"])
        .sh("touch marker")
        .current_dir(dir.path())
        .run();
    out.expect_code(2);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{out}");
    assert!(lines[0].contains("--once-per"), "{out}");
    assert!(!dir.path().join("marker").exists(), "{out}");
}

/// A subcommand's option given without its value: the line ends with that subcommand's
/// usage, not a run's (clap gives no usage with this error).
#[test]
fn a_missing_value_shows_the_subcommands_usage() {
    for (args, usage) in [
        (&["list", "--name-prefix"][..], "redlock-run list"),
        (
            &["break", "--key", "k", "--yes", "--host"][..],
            "redlock-run break",
        ),
    ] {
        let out = Wrapper::new().args(args).run();
        out.expect_code(2);
        let line = out.expect_one_line();
        assert!(line.contains("a value is required"), "{line}");
        assert!(line.contains(&format!("(Usage: {usage}")), "{line}");
        assert!(!line.contains("-- <COMMAND>"), "{line}");
    }
}
