//! The config file (issue 24): `--config FILE`, `REDLOCK_CONFIG`, TOML with the long option
//! names, defaults at the top and `[lock."NAME"]` sections; precedence flag > environment >
//! the key's section > the file's defaults > the built-in default; errors naming file, line
//! and name (exit 2, nothing run, Redis untouched); passwords only by file; a file anyone may
//! write refused; `status` reading the file; a TOML array of `redis` URLs making a Redlock.
//!
//! The harness runs every other test with `REDLOCK_CONFIG=` (no file), so a
//! /etc/redlock-run.toml on the machine changes nothing there.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::common::*;

/// Writes `text` to `dir/name` (mode 0644 in a directory only its owner may write) and
/// returns its path.
fn config_in(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, text).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    path
}

/// A run of `sh -c 'echo $REDLOCK_TTL_MS > NAME'` in `dir`; returns the exit and what the
/// command saw.
fn ttl_seen(w: Wrapper, dir: &Path, name: &str) -> (Outcome, Option<String>) {
    let out = w
        .args(["-c", &format!("echo $REDLOCK_TTL_MS > {name}")])
        .current_dir(dir)
        .run();
    let seen = fs::read_to_string(dir.join(name))
        .ok()
        .map(|s| s.trim().to_owned());
    (out, seen)
}

/// The crontab line shrinks to `--key settle:monthly -- ...`: the Redis and the ttl come from
/// the lock's section (the top level names a server nobody listens on, so a run that reached
/// Redis read the section).
#[test]
fn a_key_section_reaches_the_run() {
    let redis = RedisServer::start();
    let dir = scratch();
    let config = config_in(
        dir.path(),
        "redlock-run.toml",
        &format!(
            "# defaults for every lock\n\
             redis = \"redis://127.0.0.1:1\"\n\
             ttl = \"20s\"\n\
             \n\
             [lock.\"settle:monthly\"]\n\
             redis = [\"{}\"]\n\
             ttl = \"15s\"\n\
             wait = \"30s\"\n",
            redis.url()
        ),
    );
    let (out, seen) = ttl_seen(
        Wrapper::new()
            .env("REDLOCK_CONFIG", &config)
            .args(["--key", "settle:monthly"]),
        dir.path(),
        "seen",
    );
    out.expect_code(0);
    assert_eq!(seen.as_deref(), Some("15000"), "{out}");
    assert!(
        redis.exists("{redlock:settle:monthly}:fence"),
        "the lock was taken on the server the section names\n{out}"
    );

    // Another lock gets the defaults: the server named at the top, unreachable.
    let other = Wrapper::new()
        .env("REDLOCK_CONFIG", &config)
        .args(["--key", "other", "--", "true"])
        .run();
    other.expect_code(69);
    other.expect_stderr_contains("127.0.0.1:1");
}

/// Each level beats the one below it: flag > environment > the key's section > the file's
/// defaults > the built-in default (30s).
#[test]
fn precedence_flag_env_section_defaults_builtin() {
    let redis = RedisServer::start();
    let dir = scratch();
    let config = config_in(
        dir.path(),
        "c.toml",
        &format!(
            "redis = \"{}\"\nttl = \"20s\"\n\n[lock.\"sec\"]\nttl = \"15s\"\n",
            redis.url()
        ),
    );
    let conf = config.to_str().unwrap();

    let (out, builtin) = ttl_seen(Wrapper::on(&redis, "plain"), dir.path(), "builtin");
    out.expect_code(0);
    assert_eq!(builtin.as_deref(), Some("30000"), "built-in\n{out}");

    let (out, defaults) = ttl_seen(
        Wrapper::new().args(["--config", conf, "--key", "plain"]),
        dir.path(),
        "defaults",
    );
    out.expect_code(0);
    assert_eq!(defaults.as_deref(), Some("20000"), "file defaults\n{out}");

    let (out, section) = ttl_seen(
        Wrapper::new().args(["--config", conf, "--key", "sec"]),
        dir.path(),
        "section",
    );
    out.expect_code(0);
    assert_eq!(
        section.as_deref(),
        Some("15000"),
        "the key's section\n{out}"
    );

    let (out, env) = ttl_seen(
        Wrapper::new()
            .env("REDLOCK_TTL", "12s")
            .args(["--config", conf, "--key", "sec"]),
        dir.path(),
        "env",
    );
    out.expect_code(0);
    assert_eq!(env.as_deref(), Some("12000"), "environment\n{out}");

    let (out, flag) = ttl_seen(
        Wrapper::new()
            .env("REDLOCK_TTL", "12s")
            .args(["--config", conf, "--key", "sec", "--ttl", "11s"]),
        dir.path(),
        "flag",
    );
    out.expect_code(0);
    assert_eq!(flag.as_deref(), Some("11000"), "flag\n{out}");

    // The same for the server: a flag's --redis beats the file's.
    let dead = config_in(dir.path(), "dead.toml", "redis = \"redis://127.0.0.1:1\"\n");
    let out = Wrapper::on(&redis, "plain")
        .arg("--config")
        .arg(&dead)
        .args(["--", "true"])
        .run();
    out.expect_code(0);
}

/// Defaults that need another option, or clash with a flag, step aside: a `timezone` for
/// `--once-per` runs does not break a run without it, and `-q` beats `verbose = true`.
#[test]
fn file_defaults_never_turn_a_good_command_line_into_an_error() {
    let redis = RedisServer::start();
    let dir = scratch();
    let config = config_in(
        dir.path(),
        "c.toml",
        &format!(
            "redis = \"{}\"\ntimezone = \"Europe/Berlin\"\ndone-exit-code = 3\nverbose = true\n",
            redis.url()
        ),
    );
    let out = Wrapper::new()
        .arg("--config")
        .arg(&config)
        .args(["--key", "k", "-q", "--", "true"])
        .run();
    out.expect_code(0);
    assert_eq!(out.stderr, "", "-q wins over the file's verbose\n{out}");

    let out = Wrapper::new()
        .arg("--config")
        .arg(&config)
        .args(["--key", "k", "--", "true"])
        .run();
    out.expect_code(0);
    out.expect_stderr_contains("acquired");
}

/// An unknown name, a wrong type and a bad value: one line naming the file, the line and the
/// name, exit 2; nothing runs and Redis is not touched.
#[test]
fn errors_name_the_file_line_and_name() {
    let redis = RedisServer::start();
    let dir = scratch();
    let cases = [
        (
            "unknown",
            "ttl = \"1m\"\n\n[lock.\"job\"]\nwiat = \"5s\"\n",
            4,
            "wiat",
            "unknown name",
        ),
        (
            "type",
            "redis = \"R\"\n[lock.\"job\"]\nttl = true\n",
            3,
            "ttl",
            "found a boolean",
        ),
        (
            "value",
            "\nwait = \"soon\"\n",
            2,
            "wait",
            "invalid value 'soon'",
        ),
        (
            "switch",
            "verbose = \"yes\"\n",
            1,
            "verbose",
            "expected true or false",
        ),
        (
            "array",
            "ttl = [\"1s\", \"2s\"]\n",
            1,
            "ttl",
            "found an array",
        ),
        ("key", "key = \"job\"\n", 1, "key", "[lock.\"NAME\"]"),
        // A standing `break --yes` (or holder, host, token) would act without anyone naming
        // what it acts on.
        (
            "yes",
            "[lock.\"job\"]\nyes = true\n",
            2,
            "yes",
            "never a default",
        ),
        (
            "holder",
            "\nholder = \"t\"\n",
            2,
            "holder",
            "never a default",
        ),
        ("url", "\n\nredis = \"http://h\"\n", 3, "redis", "http://h"),
    ];
    for (name, text, line, setting, what) in cases {
        let text = text.replace('R', &redis.url());
        let config = config_in(dir.path(), &format!("{name}.toml"), &text);
        let out = Wrapper::new()
            .arg("--config")
            .arg(&config)
            .args(["--key", "job", "-c", "touch ran"])
            .current_dir(dir.path())
            .run();
        out.expect_code(2);
        let line_text = out.expect_one_line();
        let at = format!("{}:{line}: {setting}", config.display());
        assert!(line_text.contains(&at), "{name}: expected {at:?}\n{out}");
        assert!(line_text.contains(what), "{name}: expected {what:?}\n{out}");
        assert!(
            !dir.path().join("ran").exists(),
            "{name}: the command ran\n{out}"
        );
    }
    assert_eq!(redis.dbsize(), 0, "Redis untouched");
}

/// A password is never written in the file: neither as `password` nor inside a URL; the
/// message says to use password-file and shows no part of the password. password-file works,
/// a relative one taken from the file's directory (not from where the run starts).
#[test]
fn passwords_only_by_file_reference() {
    let redis = RedisServer::start_with(&["--requirepass", "hunter2secret"]);
    let dir = scratch();
    let url_with_password = format!("redis://:hunter2secret@127.0.0.1:{}", redis.port());
    for (name, text) in [
        (
            "named",
            format!(
                "redis = \"{}\"\npassword = \"hunter2secret\"\n",
                redis.url()
            ),
        ),
        (
            "url",
            format!("[lock.\"job\"]\nredis = \"{url_with_password}\"\n"),
        ),
    ] {
        let config = config_in(dir.path(), &format!("{name}.toml"), &text);
        let out = Wrapper::new()
            .arg("--config")
            .arg(&config)
            .args(["--key", "job", "-c", "touch ran"])
            .current_dir(dir.path())
            .run();
        out.expect_code(2);
        let line = out.expect_one_line();
        assert!(line.contains("password-file"), "{name}\n{out}");
        assert!(
            line.contains(&config.display().to_string()),
            "{name}\n{out}"
        );
        assert!(
            !out.stderr.contains("hunter2"),
            "{name}: password shown\n{out}"
        );
        assert!(!dir.path().join("ran").exists(), "{name}\n{out}");
    }

    let pw = dir.path().join("pw");
    fs::write(&pw, "hunter2secret\n").unwrap();
    fs::set_permissions(&pw, fs::Permissions::from_mode(0o600)).unwrap();
    let config = config_in(
        dir.path(),
        "ok.toml",
        &format!("redis = \"{}\"\npassword-file = \"pw\"\n", redis.url()),
    );
    let elsewhere = dir.path().join("elsewhere");
    fs::create_dir(&elsewhere).unwrap();
    let out = Wrapper::new()
        .arg("--config")
        .arg(&config)
        .args(["--key", "job", "-c", "touch ran"])
        .current_dir(&elsewhere)
        .run();
    out.expect_code(0);
    assert!(elsewhere.join("ran").exists(), "{out}");
}

/// A file every user may write, or one in a directory every user may write without the sticky
/// bit, is refused (exit 2); the same file, made private, is read.
#[test]
fn a_world_writable_file_is_refused() {
    let redis = RedisServer::start();
    let dir = scratch();
    let text = format!("redis = \"{}\"\n", redis.url());
    let config = config_in(dir.path(), "c.toml", &text);
    fs::set_permissions(&config, fs::Permissions::from_mode(0o666)).unwrap();
    let run = |config: &Path| {
        Wrapper::new()
            .arg("--config")
            .arg(config)
            .args(["--key", "job", "-c", "touch ran"])
            .current_dir(dir.path())
            .run()
    };
    let out = run(&config);
    out.expect_code(2);
    assert!(
        out.expect_one_line().contains("writable by every user"),
        "{out}"
    );
    assert!(!dir.path().join("ran").exists(), "{out}");

    let open_dir = dir.path().join("open");
    fs::create_dir(&open_dir).unwrap();
    fs::set_permissions(&open_dir, fs::Permissions::from_mode(0o777)).unwrap();
    let in_open_dir = config_in(&open_dir, "c.toml", &text);
    let out = run(&in_open_dir);
    out.expect_code(2);
    assert!(
        out.expect_one_line()
            .contains("a directory every user may write to"),
        "{out}"
    );
    assert!(!dir.path().join("ran").exists(), "{out}");

    // Nor under it (a private directory inside), nor reached by a link from elsewhere.
    let inner = open_dir.join("inner");
    fs::create_dir(&inner).unwrap();
    fs::set_permissions(&inner, fs::Permissions::from_mode(0o755)).unwrap();
    let deep = config_in(&inner, "c.toml", &text);
    let link = dir.path().join("link.toml");
    std::os::unix::fs::symlink(&in_open_dir, &link).unwrap();
    for path in [&deep, &link] {
        let out = run(path);
        out.expect_code(2);
        assert!(
            out.expect_one_line()
                .contains("a directory every user may write to"),
            "{out}"
        );
        assert!(!dir.path().join("ran").exists(), "{out}");
    }

    // With the sticky bit (as /tmp), nobody else can replace the file: accepted.
    fs::set_permissions(&open_dir, fs::Permissions::from_mode(0o1777)).unwrap();
    run(&in_open_dir).expect_code(0);
    fs::remove_file(dir.path().join("ran")).unwrap();

    fs::set_permissions(&config, fs::Permissions::from_mode(0o644)).unwrap();
    let out = run(&config);
    out.expect_code(0);
    assert!(dir.path().join("ran").exists(), "{out}");
}

/// A file named by --config or REDLOCK_CONFIG must exist (exit 2, naming it); an empty name
/// reads no file.
#[test]
fn a_named_config_file_must_exist() {
    let redis = RedisServer::start();
    let dir = scratch();
    let missing = dir.path().join("missing.toml");
    let by_flag = Wrapper::on(&redis, "job")
        .arg("--config")
        .arg(&missing)
        .args(["-c", "touch ran"])
        .current_dir(dir.path())
        .run();
    let by_env = Wrapper::on(&redis, "job")
        .env("REDLOCK_CONFIG", &missing)
        .args(["-c", "touch ran"])
        .current_dir(dir.path())
        .run();
    for out in [by_flag, by_env] {
        out.expect_code(2);
        let line = out.expect_one_line();
        assert!(line.contains(&missing.display().to_string()), "{out}");
        assert!(!dir.path().join("ran").exists(), "{out}");
    }

    // Empty: no file at all (the way to keep /etc/redlock-run.toml out of a run).
    let out = Wrapper::on(&redis, "job")
        .args(["--config", "", "-c", "touch ran"])
        .current_dir(dir.path())
        .run();
    out.expect_code(0);
    assert!(dir.path().join("ran").exists(), "{out}");
}

/// `status` (and the other subcommands) read the file too: the Redis URL of the lock's
/// section, with --config before or after `status`.
#[test]
fn status_reads_its_redis_from_the_file() {
    let redis = RedisServer::start();
    let dir = scratch();
    let config = config_in(
        dir.path(),
        "c.toml",
        &format!(
            "redis = \"redis://127.0.0.1:1\"\n[lock.\"job\"]\nredis = \"{}\"\n",
            redis.url()
        ),
    );
    let mut holder = Wrapper::on(&redis, "job")
        .sh("echo $$ > started; sleep 30")
        .current_dir(dir.path())
        .spawn();
    holder.child_pid(&dir.path().join("started"), secs(10));

    for args in [
        vec![
            "--config",
            config.to_str().unwrap(),
            "status",
            "--key",
            "job",
            "--json",
        ],
        vec![
            "status",
            "--key",
            "job",
            "--json",
            "--config",
            config.to_str().unwrap(),
        ],
    ] {
        let out = Wrapper::new().args(&args).run();
        out.expect_code(0);
        let json = parse_json(&out.stdout);
        assert_eq!(json["held"], true, "{out}");
        assert_eq!(json["key"], "redlock:job", "{out}");
    }
    // The section's `json = true` applies to status too.
    let json_config = config_in(
        dir.path(),
        "j.toml",
        &format!("[lock.\"job\"]\nredis = \"{}\"\njson = true\n", redis.url()),
    );
    let out = Wrapper::new()
        .env("REDLOCK_CONFIG", &json_config)
        .args(["status", "--key", "job"])
        .run();
    out.expect_code(0);
    assert_eq!(parse_json(&out.stdout)["held"], true, "{out}");
    holder.signal(nix::sys::signal::Signal::SIGTERM);
}

/// An option given several times on the command line takes a TOML array: three `redis` URLs
/// in a lock's section make a Redlock over three masters (the lock on every node while the
/// command runs).
#[test]
fn an_array_of_redis_urls_is_a_redlock() {
    let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let dir = scratch();
    let urls: Vec<String> = nodes.iter().map(|n| format!("\"{}\"", n.url())).collect();
    let config = config_in(
        dir.path(),
        "c.toml",
        &format!("[lock.\"k\"]\nredis = [{}]\n", urls.join(", ")),
    );
    let mut run = Wrapper::new()
        .env("REDLOCK_CONFIG", &config)
        .args(["--key", "k", "-c", "echo $$ > started; sleep 30"])
        .current_dir(dir.path())
        .spawn();
    run.child_pid(&dir.path().join("started"), secs(10));
    for (i, node) in nodes.iter().enumerate() {
        assert!(node.exists("redlock:k"), "node {i} holds no lock");
    }
    run.signal(nix::sys::signal::Signal::SIGTERM);
    run.wait(secs(30)).expect_code(143);
    for (i, node) in nodes.iter().enumerate() {
        assert!(!node.exists("redlock:k"), "node {i} kept the lock");
    }
}
