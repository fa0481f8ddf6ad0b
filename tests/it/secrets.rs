//! Passwords never reach a message: every URL shape (with or without a scheme, passwords
//! holding `/`, `#`, `?`, `@`, `:`) against every output path (usage error, unreachable
//! server, refused authentication, a run with `-v`), in text and in JSON.

use crate::common::*;

/// Passwords built from characters that appear in no message of the tool, so that any three
/// of them in a row in stderr can only come from the password.
const PASSWORDS: &[&str] = &[
    "Zq9Xw7Jm",
    "Zq9/Xw7J",
    "Zq9#Xw7J",
    "Zq9?Xw7J",
    "Zq:9Xw7J",
    "Zq@9/Xw#7?Jm@Pq",
];

fn leaks(stderr: &str, password: &str) -> Option<String> {
    let chars: Vec<char> = password.chars().collect();
    chars
        .windows(3)
        .map(|w| w.iter().collect::<String>())
        .find(|piece| stderr.contains(piece.as_str()))
}

#[test]
fn no_message_shows_any_part_of_a_password() {
    let redis = RedisServer::start_with(&["--requirepass", "the-real-one"]);
    let closed = free_port();
    let mut failures = Vec::new();
    for password in PASSWORDS {
        let urls = [
            // No scheme: a usage error that suggests redis://.
            format!("user:{password}@127.0.0.1:{}", redis.port()),
            // Nothing listening: unreachable (or, where the password breaks the URL, a
            // usage error).
            format!("redis://:{password}@127.0.0.1:{closed}"),
            format!("redis://user:{password}@127.0.0.1:{closed}/0"),
            // A live server with another password: refused authentication.
            format!("redis://:{password}@127.0.0.1:{}", redis.port()),
            format!("redis://default:{password}@127.0.0.1:{}", redis.port()),
            format!(
                "REDIS://:{password}@127.0.0.1:{}/0?protocol=resp2",
                redis.port()
            ),
        ];
        for url in &urls {
            for format in ["text", "json"] {
                let out = Wrapper::new()
                    .args(["--redis", url, "--key", "k", "-v", "--log-format", format])
                    .args(["--connect-timeout", "2s", "--", "true"])
                    .run();
                let mut why = Vec::new();
                if out.code() == Some(0) {
                    why.push("the run succeeded".to_owned());
                }
                if let Some(piece) = leaks(&out.stderr, password) {
                    why.push(format!("stderr shows {piece:?}"));
                }
                if !why.is_empty() {
                    failures.push(format!("[{url} {format}] {}\n{out}", why.join("; ")));
                }
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} runs leaked or misbehaved:\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

/// The holder record is readable by anyone who can read Redis: by default it names the
/// program only, never an argument (`--password=hunter2`), for a command after `--` and for
/// `-c`; `--record-args` (REDLOCK_RECORD_ARGS) opts in to the whole command line.
#[test]
fn the_holder_record_names_the_program_without_its_arguments() {
    let redis = RedisServer::start();
    let dir = scratch();
    let status = |key: &str| {
        Wrapper::new()
            .args(["status", "--redis", &redis.url(), "--key", key, "--json"])
            .run()
    };
    let forms: &[(&[&str], &str, &str)] = &[
        (
            &[
                "--",
                "sh",
                "-c",
                "touch held; sleep 30",
                "--password=hunter2",
            ],
            "a",
            "sh ...",
        ),
        (
            &["-c", "touch held; sleep 30 # --password=hunter2"],
            "b",
            "sh -c 'touch ...'",
        ),
        (
            &["-c", "PGPASSWORD=hunter2 sh -c 'touch held; sleep 30'"],
            "c",
            "sh -c '...'",
        ),
    ];
    for (args, key, shown) in forms {
        let mut holder = Wrapper::on(&redis, key)
            .args(*args)
            .current_dir(dir.path())
            .spawn();
        holder.wait_for_file(&dir.path().join("held"), secs(10));
        std::fs::remove_file(dir.path().join("held")).unwrap();
        let out = status(key);
        out.expect_code(0);
        let record = redis.cli(&["HGETALL", &format!("{{redlock:{key}}}:holder")]);
        assert!(
            !out.stdout.contains("hunter2") && !record.contains("hunter2"),
            "{args:?}: an argument reached Redis:\n{record}\n{out}"
        );
        assert_eq!(parse_json(&out.stdout)["command"], *shown, "{out}");
        holder.signal(nix::sys::signal::Signal::SIGTERM);
        holder.wait(secs(10));
    }
    let mut holder = Wrapper::on(&redis, "d")
        .args([
            "--record-args",
            "--",
            "sh",
            "-c",
            "touch held; sleep 30",
            "x",
        ])
        .current_dir(dir.path())
        .spawn();
    holder.wait_for_file(&dir.path().join("held"), secs(10));
    let out = status("d");
    assert!(out.stdout.contains("touch held; sleep 30 x"), "{out}");
    holder.signal(nix::sys::signal::Signal::SIGTERM);
}

/// A URL that a password with `/`, `#`, `?` or `@` breaks says how to write it, without
/// showing the password.
#[test]
fn a_url_broken_by_its_password_hints_at_percent_encoding() {
    for url in [
        "redis://:Zq9/Xw7J@127.0.0.1:1",
        "redis://user:Zq9#Xw7J@127.0.0.1:1",
    ] {
        let out = Wrapper::new()
            .args(["--redis", url, "--key", "k", "--", "true"])
            .run();
        if out.code() == Some(2) && out.stderr.contains("cannot parse URL") {
            out.expect_one_line();
            out.expect_stderr_contains("percent-encoded");
            out.expect_stderr_contains("--password-file");
            assert!(
                leaks(&out.stderr, "Zq9/Xw7J").is_none()
                    && leaks(&out.stderr, "Zq9#Xw7J").is_none(),
                "{out}"
            );
        }
    }
    let out = Wrapper::new()
        .args([
            "--redis",
            "redis://:Zq9/Xw7J@127.0.0.1:1",
            "--key",
            "k",
            "--",
            "true",
        ])
        .run();
    out.expect_code(2);
    out.expect_stderr_contains("percent-encoded");
}

/// A URL bad for another reason than its password names that reason (a bad port, database,
/// bracket, socket path or protocol) and says nothing of percent-encoding: that hint is for a
/// user part holding / # or ?, the one way a password breaks a URL.
#[test]
fn a_url_bad_for_another_reason_names_it() {
    for (url, says) in [
        ("redis://127.0.0.1:99999", "bad port '99999'"),
        ("redis://127.0.0.1/notadb", "bad database number 'notadb'"),
        ("redis://[::1", "'[' of an IPv6 address is not closed"),
        ("redis://[::1]:6379x", "bad port '6379x'"),
        ("unix://", "no socket path"),
        ("unix://tmp/redis.sock", "must be absolute"),
        (
            "redis://127.0.0.1:6379/0?protocol=9",
            "unknown protocol '9'",
        ),
        ("redis://:Zq9Xw7Jm@127.0.0.1:99999", "bad port '99999'"),
        ("redis://u:Zq9Xw7Jm@127.0.0.1/notadb", "bad database number"),
        ("redis://u@[::1", "'[' of an IPv6 address is not closed"),
        (
            "redis+cluster://:Zq9Xw7Jm@127.0.0.1:99999",
            "bad port '99999'",
        ),
    ] {
        let out = Wrapper::new()
            .args(["--redis", url, "--key", "k", "--", "true"])
            .run();
        out.expect_code(2);
        let line = out.expect_one_line();
        assert!(line.contains(says), "{url}: no {says:?}\n{out}");
        assert!(!line.contains("percent"), "{url}: percent hint\n{out}");
        assert!(!out.stderr.contains("Xw7"), "{url}: password shown\n{out}");
    }
}

/// Several URLs in one `--redis` value are not blamed on the password's encoding: the line
/// says the URL has a space and another URL in it, and how several masters are given. A
/// `unix://` URL with a user part says that a socket's login goes in its query (the redis
/// crate reads nothing else: `unix://:PW@localhost/path` dropped the password unsaid).
#[test]
fn several_urls_and_a_unix_user_part_say_what_to_write() {
    for (url, says) in [
        (
            "redis://:Zq9Xw7Jm@127.0.0.1:1 redis://:Zq9Xw7Jm@127.0.0.1:2",
            &[
                "has a space in it",
                "--redis option of its own",
                "REDLOCK_REDIS",
            ][..],
        ),
        (
            "redis://127.0.0.1:1 redis://127.0.0.1:2 redis://127.0.0.1:3",
            &["has a space in it", "--redis option of its own"],
        ),
        (
            "redis://127.0.0.1:1,127.0.0.1:2",
            &["redis+cluster://", "--redis option of its own"],
        ),
        (
            "unix://:Zq9Xw7Jm@/tmp/x.sock",
            &["unix:///tmp/x.sock?pass=PASSWORD", "--password-file"],
        ),
        (
            "unix://:Zq9Xw7Jm@localhost/tmp/x.sock",
            &[
                "unix:///tmp/x.sock?pass=PASSWORD",
                "user=USER&pass=PASSWORD",
            ],
        ),
    ] {
        let dir = scratch();
        let out = Wrapper::new()
            .args(["--redis", url, "--key", "k"])
            .sh("touch ran")
            .current_dir(dir.path())
            .run();
        out.expect_code(2);
        let line = out.expect_one_line();
        for what in says {
            assert!(line.contains(what), "{url}: no {what:?}\n{out}");
        }
        assert!(
            !line.contains("percent-encoded"),
            "{url}: percent hint\n{out}"
        );
        assert!(!line.contains("IPv6"), "{url}: IPv6 hint\n{out}");
        assert!(!out.stderr.contains("Xw7"), "{url}: password shown\n{out}");
        assert!(!dir.path().join("ran").exists());
    }
}
