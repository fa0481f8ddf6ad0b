//! Configuration and output: `--prefix`, `--password-file` and a password in the URL, every
//! setting from `REDLOCK_*`, silence on success and `-q`, `--log-format json`.

use std::fs;

use crate::common::*;

#[test]
fn prefix_sets_the_redis_key() {
    let redis = RedisServer::start();
    let out = Wrapper::on(&redis, "job")
        .args([
            "--prefix",
            "app:",
            "-c",
            "echo \"$REDLOCK_KEY\"; redis-cli -p \"$PORT\" EXISTS app:job",
        ])
        .env("PORT", redis.port().to_string())
        .run();
    out.expect_code(0);
    assert_eq!(out.stdout, "app:job\n1\n", "{out}");

    // An empty prefix locks the raw key, interoperating with plain SET NX users.
    redis.cli(&["SET", "rawjob", "someone", "PX", "60000"]);
    let out = Wrapper::on(&redis, "rawjob")
        .args(["--prefix", "", "--", "true"])
        .run();
    out.expect_code(75);
    assert_eq!(redis.get("rawjob").as_deref(), Some("someone"));
}

#[test]
fn password_file_and_url_password_work() {
    let redis = RedisServer::start_with(&["--requirepass", "secret"]);
    let dir = scratch();
    let pw_file = dir.path().join("pw");
    fs::write(&pw_file, "secret\n").unwrap();
    let out = Wrapper::on(&redis, "k")
        .arg("--password-file")
        .arg(&pw_file)
        .args(["-c", "touch marker"])
        .current_dir(dir.path())
        .run();
    out.expect_code(0);
    assert!(dir.path().join("marker").exists(), "command ran\n{out}");
    assert!(!out.stderr.contains("secret"), "password leaked\n{out}");
    assert!(!redis.exists("redlock:k"), "released\n{out}");

    let url = format!("redis://:secret@127.0.0.1:{}", redis.port());
    let out = Wrapper::new()
        .args(["--redis", &url, "--key", "k", "--", "true"])
        .run();
    out.expect_code(0);
}

#[test]
fn every_setting_can_come_from_the_environment() {
    let redis = RedisServer::start();
    let dir = scratch();
    let out = Wrapper::new()
        .env("REDLOCK_REDIS", redis.url())
        .env("REDLOCK_KEY", "from-env")
        .env("REDLOCK_PREFIX", "p:")
        .env("REDLOCK_TTL", "2s")
        .env("REDLOCK_HEARTBEAT", "500ms")
        .env("REDLOCK_GRACE", "200ms")
        .args(["-c", "echo \"$REDLOCK_KEY $REDLOCK_TTL_MS\" > seen"])
        .current_dir(dir.path())
        .run();
    out.expect_code(0);
    assert_eq!(
        fs::read_to_string(dir.path().join("seen")).unwrap().trim(),
        "p:from-env 2000"
    );

    redis.cli(&["set", "p:from-env", "other", "px", "60000"]);
    let busy = Wrapper::new()
        .env("REDLOCK_REDIS", redis.url())
        .env("REDLOCK_KEY", "from-env")
        .env("REDLOCK_PREFIX", "p:")
        .env("REDLOCK_CONFLICT_EXIT_CODE", "9")
        .env("REDLOCK_WAIT", "200ms")
        .env("REDLOCK_QUIET", "true")
        .args(["--", "true"])
        .run();
    busy.expect_code(9);
    assert_eq!(busy.stderr, "", "REDLOCK_QUIET silences the busy line");

    // A flag wins over its variable.
    let flag = Wrapper::new()
        .env("REDLOCK_REDIS", redis.url())
        .env("REDLOCK_KEY", "from-env")
        .env("REDLOCK_PREFIX", "p:")
        .env("REDLOCK_CONFLICT_EXIT_CODE", "9")
        .args(["-E", "11", "--", "true"])
        .run();
    flag.expect_code(11);

    // Bad values from the environment are usage errors too.
    let bad = Wrapper::new()
        .env("REDLOCK_REDIS", redis.url())
        .env("REDLOCK_KEY", "x")
        .env("REDLOCK_TTL", "soon")
        .args(["--", "true"])
        .run();
    bad.expect_code(2);
    bad.expect_one_line();
}

#[test]
fn a_successful_run_prints_nothing_and_quiet_silences_busy() {
    let redis = RedisServer::start();
    let ok = Wrapper::on(&redis, "cron").args(["--", "true"]).run();
    ok.expect_code(0);
    assert_eq!(ok.stderr, "", "nothing on stderr on success: {ok}");
    assert_eq!(ok.stdout, "");

    let quiet_ok = Wrapper::on(&redis, "cron").args(["-q", "--", "true"]).run();
    quiet_ok.expect_code(0);
    assert_eq!(quiet_ok.stderr, "");

    redis.cli(&["set", "redlock:cron", "other", "px", "60000"]);
    let busy = Wrapper::on(&redis, "cron").args(["-q", "--", "true"]).run();
    busy.expect_code(75);
    assert_eq!(busy.stderr, "", "-q: nothing for a busy lock: {busy}");
    // Without -q the busy lock is one line; real problems are printed even with -q.
    let loud = Wrapper::on(&redis, "cron").args(["--", "true"]).run();
    loud.expect_code(75);
    loud.expect_one_line();
    let port = free_port();
    let down = Wrapper::new()
        .args([
            "-q",
            "--key",
            "k",
            "--redis",
            &format!("redis://127.0.0.1:{port}"),
        ])
        .args(["--", "true"])
        .run();
    down.expect_code(69);
    down.expect_one_line();
}

#[test]
fn json_log_format_is_one_object_per_line() {
    let redis = RedisServer::start();
    let out = Wrapper::on(&redis, "j")
        .args(["-v", "--log-format", "json", "--", "true"])
        .run();
    out.expect_code(0);
    let lines: Vec<&str> = out.stderr.lines().collect();
    assert!(lines.len() >= 3, "acquired, spawned, released: {out}");
    let objects: Vec<serde_json::Value> = lines.iter().map(|l| parse_json(l)).collect();
    for (line, object) in lines.iter().zip(&objects) {
        // The time first, for a reader of the raw lines.
        assert!(
            line.starts_with("{\"time\":") && object["time"].is_string(),
            "{line}"
        );
        assert_eq!(object["key"], "redlock:j", "{line}");
    }
    for event in ["acquired", "released"] {
        assert!(
            objects.iter().any(|o| o["event"] == event),
            "no {event}: {out}"
        );
    }
}

/// Switches from the environment take the usual spellings, empty means off, an off switch
/// never conflicts with the other flag, and a bad value names its variable.
#[test]
fn switches_from_the_environment_take_the_usual_spellings() {
    let redis = RedisServer::start();
    let run = |var: &str, value: &str, extra: &[&str]| {
        Wrapper::on(&redis, "k")
            .env(var, value)
            .args(extra)
            .args(["--", "true"])
            .run()
    };
    let mut failures = Vec::new();
    for value in ["1", "true", "yes", "on", "YES"] {
        let out = run("REDLOCK_VERBOSE", value, &[]);
        if out.code() != Some(0) || !out.stderr.contains("acquired") {
            failures.push(format!("REDLOCK_VERBOSE={value:?} is not on\n{out}"));
        }
    }
    for value in ["0", "false", "no", "off", ""] {
        let out = run("REDLOCK_VERBOSE", value, &[]);
        if out.code() != Some(0) || !out.stderr.is_empty() {
            failures.push(format!("REDLOCK_VERBOSE={value:?} is not off\n{out}"));
        }
    }
    let out = run("REDLOCK_QUIET", "false", &["-v"]);
    if out.code() != Some(0) || !out.stderr.contains("acquired") {
        failures.push(format!("REDLOCK_QUIET=false conflicts with -v\n{out}"));
    }
    let out = run("REDLOCK_QUIET", "yes", &[]);
    if out.code() != Some(0) {
        failures.push(format!("REDLOCK_QUIET=yes refused\n{out}"));
    }
    let out = run("REDLOCK_VERBOSE", "maybe", &[]);
    if out.code() != Some(2) || !out.stderr.contains("REDLOCK_VERBOSE") {
        failures.push(format!(
            "a bad REDLOCK_VERBOSE does not name the variable\n{out}"
        ));
    }
    let out = Wrapper::new()
        .env("REDLOCK_STATUS_JSON", "1")
        .args(["status", "--redis", &redis.url(), "--key", "k"])
        .run();
    let is_free_json = serde_json::from_str::<serde_json::Value>(out.stdout.trim())
        .is_ok_and(|status| status["held"] == false);
    if out.code() != Some(0) || !is_free_json {
        failures.push(format!("REDLOCK_STATUS_JSON=1 is not JSON\n{out}"));
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// `redlock-run --key k status` is the subcommand, the options before it included; a program
/// called `status` runs after `--`, and when it is not found the message says where the
/// subcommand goes. `status --help` does not offer -q and -v, which do nothing there.
#[test]
fn the_status_subcommand_is_found_where_users_put_it() {
    let redis = RedisServer::start();
    let out = Wrapper::on(&redis, "k").arg("status").run();
    out.expect_code(0);
    assert_eq!(out.stdout.trim(), "redlock:k: free", "{out}");
    let out = Wrapper::on(&redis, "k").args(["--", "status"]).run();
    out.expect_code(127);
    out.expect_stderr_contains("put the subcommand first: redlock-run status --key K");
    let help = Wrapper::new().args(["status", "--help"]).run();
    help.expect_code(0);
    assert!(
        !help.stdout.contains("--quiet") && !help.stdout.contains("--verbose"),
        "{help}"
    );
}

/// With -v the start of the command is announced before the command can write anything (it
/// once came after the command's first line), and its end is reported with its pid and code.
#[test]
fn verbose_announces_the_command_before_its_output() {
    let redis = RedisServer::start();
    let out = Wrapper::on(&redis, "k")
        .arg("-v")
        .args(["--", "sh", "-c", "echo first-line >&2; exit 3"])
        .run();
    out.expect_code(3);
    let lines: Vec<&str> = out.stderr.lines().collect();
    let starting = lines
        .iter()
        .position(|l| l.starts_with("redlock-run: starting "));
    let first = lines.iter().position(|l| *l == "first-line");
    assert!(
        matches!((starting, first), (Some(s), Some(f)) if s < f),
        "the start must be announced before the command's output\n{out}"
    );
    out.expect_stderr_contains(") exited with 3");
}

/// Waiting with stderr not a terminal (a CI log): one line says the wait began, who holds
/// the lock and how long the wait may take, and one that it ended with the lock, after how
/// long; `-q` keeps them quiet. Once nothing was printed until the lock was acquired, even
/// with -v, and then nothing said when the wait ended without -v.
#[test]
fn a_wait_in_a_log_is_announced_once() {
    let redis = RedisServer::start();
    redis.cli(&["SET", "redlock:k", "someone", "PX", "1500"]);
    let out = Wrapper::on(&redis, "k")
        .args(["--wait", "10s", "--", "true"])
        .run();
    out.expect_code(0);
    out.expect_all_lines_prefixed();
    let lines = out.stderr_lines();
    assert!(
        lines.len() == 2
            && lines[0].contains("lock redlock:k is held")
            && lines[0].contains("waiting up to 10s")
            && lines[1].contains("acquired redlock:k after waiting ")
            && lines[1].contains("(fence "),
        "{out}"
    );
    redis.cli(&["SET", "redlock:k", "someone", "PX", "1500"]);
    let quiet = Wrapper::on(&redis, "k")
        .args(["-q", "--wait", "10s", "--", "true"])
        .run();
    quiet.expect_code(0);
    assert_eq!(quiet.stderr, "", "{quiet}");
}

/// With `--log-format json` every message is one JSON object, usage errors included; a busy
/// lock is a warning (for cron it is the expected outcome), not an error.
#[test]
fn json_mode_covers_usage_errors_and_logs_busy_as_a_warning() {
    let redis = RedisServer::start();
    let usage = Wrapper::on(&redis, "k")
        .args(["--log-format", "json", "--ttl", "abc", "--", "true"])
        .run();
    usage.expect_code(2);
    let line = only_line(&usage);
    assert!(
        serde_json::from_str::<serde_json::Value>(line).is_ok_and(|o| o["event"] == "usage"),
        "{usage}"
    );
    let env_usage = Wrapper::on(&redis, "k")
        .env("REDLOCK_LOG_FORMAT", "json")
        .arg("--no-such-flag")
        .run();
    env_usage.expect_code(2);
    assert!(
        serde_json::from_str::<serde_json::Value>(only_line(&env_usage))
            .is_ok_and(|o| o.is_object()),
        "{env_usage}"
    );

    redis.cli(&["SET", "redlock:k", "someone", "PX", "60000"]);
    let busy = Wrapper::on(&redis, "k")
        .args(["--log-format", "json", "--", "true"])
        .run();
    busy.expect_code(75);
    let line = only_line(&busy);
    let object = parse_json(line);
    assert_eq!(object["level"], "warn", "{busy}");
    assert_eq!(object["event"], "busy", "{busy}");
}

fn only_line(out: &Outcome) -> &str {
    let lines = out.stderr_lines();
    assert_eq!(lines.len(), 1, "one line expected\n{out}");
    lines[0]
}
