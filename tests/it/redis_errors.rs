//! Redis that cannot be used: unreachable or frozen at start, a wrong or missing password,
//! a key of the wrong type, a read-only replica and an ACL user without EVAL or without the
//! lock's companion keys (each exit 69 with one line), and a flushed script cache that is
//! survived, falling back to EVAL rather than SCRIPT LOAD (as on a fresh server).

use std::fs;

use crate::common::*;

#[test]
fn redis_unreachable_at_start_exits_69() {
    let dir = scratch();
    let url = format!("redis://127.0.0.1:{}", free_port());
    let out = Wrapper::new()
        .args(["--redis", &url, "--key", "k", "-c", "touch marker"])
        .current_dir(dir.path())
        .spawn()
        .wait(secs(20));
    out.expect_code(69);
    out.expect_one_line();
    assert!(out.elapsed < secs(15), "took too long\n{out}");
    assert!(
        !dir.path().join("marker").exists(),
        "command must not run\n{out}"
    );
}

#[test]
fn redis_frozen_at_start_exits_69_after_connect_timeout() {
    let redis = RedisServer::start();
    let dir = scratch();
    redis.pause();
    let out = Wrapper::on(&redis, "k")
        .args(["--connect-timeout", "1s", "-c", "touch marker"])
        .current_dir(dir.path())
        .spawn()
        .wait(secs(30));
    redis.resume();
    out.expect_code(69);
    out.expect_one_line();
    assert!(out.elapsed < secs(15), "took too long\n{out}");
    assert!(
        !dir.path().join("marker").exists(),
        "command must not run\n{out}"
    );
    // Nothing but the cancelled token of the unanswered attempt (so that it cannot land
    // if it arrives late): no lock, no holder info, no fence.
    assert!(!redis.exists("redlock:k"), "a lock was left\n{out}");
    let keys = redis.cli(&["KEYS", "*"]);
    assert!(
        keys.is_empty() || keys == "{redlock:k}:cancelled",
        "unexpected keys {keys:?}\n{out}"
    );
}

/// A server that accepts connections but never answers: --connect-timeout bounds the whole
/// start, the take-back of the unanswered acquire included (it once took two timeouts).
#[test]
fn a_silent_server_ends_the_run_within_one_connect_timeout() {
    let redis = RedisServer::start();
    redis.pause();
    let out = Wrapper::on(&redis, "k")
        .args(["--connect-timeout", "3s", "--", "true"])
        .spawn()
        .wait(secs(30));
    redis.resume();
    out.expect_code(69);
    out.expect_one_line();
    // 3 s plus start-up and scheduling; two timeouts would be 6 s.
    assert!(
        out.elapsed < ms(4500),
        "took more than one --connect-timeout\n{out}"
    );
}

#[test]
fn wrong_or_missing_password_exits_69_without_leaking_it() {
    let redis = RedisServer::start_with(&["--requirepass", "secret"]);
    let dir = scratch();
    let wrong_pw = "n0t-the-pa55word";
    let with_wrong = format!("redis://:{wrong_pw}@127.0.0.1:{}", redis.port());
    let out = Wrapper::new()
        .args(["--redis", &with_wrong, "--key", "k", "-c", "touch marker"])
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    expect_mentions_auth(out.expect_one_line(), &out);
    assert!(!out.stderr.contains(wrong_pw), "password leaked\n{out}");
    assert!(
        !dir.path().join("marker").exists(),
        "command must not run\n{out}"
    );

    // No password at all: the connection works, every command is refused (NOAUTH, or a
    // protocol error for a long command). Nothing was refused: a password is missing, and the
    // line says how to give one.
    let out = Wrapper::on(&redis, "k")
        .args(["-c", "touch marker"])
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    let line = out.expect_one_line();
    for needle in [
        "requires a password and none was given",
        "NOAUTH",
        "--password-file",
    ] {
        assert!(line.contains(needle), "missing {needle:?}\n{out}");
    }
    for misleading in ["refused", "Protocol error"] {
        assert!(!line.contains(misleading), "says {misleading:?}\n{out}");
    }
    assert!(
        !dir.path().join("marker").exists(),
        "command must not run\n{out}"
    );
    assert_eq!(redis.dbsize(), 0);
}

/// Every subcommand says a missing password as a run does, in the same words: `list` once
/// printed the raw `Pipeline failure: ... NOAUTH` of its SCAN.
#[test]
fn a_missing_password_is_said_the_same_way_by_every_subcommand() {
    let redis = RedisServer::start_with(&["--requirepass", "secret"]);
    let token = "570ed3d9-562f-4552-a97f-7bae52de515c";
    let forms: &[&[&str]] = &[
        &["--key", "k", "--", "true"],
        &["status", "--key", "k"],
        &["list"],
        &["forget", "--key", "k"],
        &["break", "--key", "k", "--yes"],
        &["pause", "--key", "k", "--for", "1m", "--reason", "r"],
        &["resume", "--key", "k"],
        &["release", "--key", "k", "--token", token],
        &["acquire", "--key", "k"],
    ];
    let mut lines: Vec<(String, &[&str])> = Vec::new();
    for args in forms {
        let out = Wrapper::new()
            .args(["--redis", &redis.url()])
            .args(*args)
            .run();
        out.expect_code(69);
        let line = out.expect_one_line().to_owned();
        for needle in [
            "requires a password and none was given (NOAUTH)",
            "--password-file",
        ] {
            assert!(line.contains(needle), "{args:?}: no {needle:?}\n{out}");
        }
        assert!(!line.contains("Pipeline"), "{args:?}\n{out}");
        lines.push((line, args));
    }
    let (first, first_args) = &lines[0];
    for (line, args) in &lines[1..] {
        assert_eq!(line, first, "{args:?} words it unlike {first_args:?}");
    }
    assert_eq!(redis.dbsize(), 0);
}

/// With a lone name in the URL (`redis://NAME@host:port`), the way to give the missing
/// password names a user (not `redis://:PASSWORD@host:port`, which logs in as the default
/// user), and the name is never shown: redis-cli reads a lone name there as a password.
#[test]
fn a_missing_password_with_a_lone_name_in_the_url() {
    let redis = RedisServer::start_with(&["--requirepass", "secret"]);
    let port = redis.port();
    // A lone name before '@' is hidden (other clients read it as a password) and the hint
    // says it is a user name; the user is kept in the hint where the URL has user:password.
    let url = format!("redis://Sekr3tPw@127.0.0.1:{port}");
    let with_user = format!("redis://USER:PASSWORD@127.0.0.1:{port}");
    let forms: &[&[&str]] = &[
        &["--key", "k", "--", "true"],
        &["status", "--key", "k"],
        &["list"],
    ];
    for args in forms {
        let out = Wrapper::new().args(["--redis", &url]).args(*args).run();
        out.expect_code(69);
        let line = out.expect_one_line();
        for needle in [
            "requires a password and none was given",
            "a user name and no password",
            "--password-file FILE",
            with_user.as_str(),
        ] {
            assert!(line.contains(needle), "{args:?}: no {needle:?}\n{out}");
        }
        assert!(!out.stderr.contains("Sekr3tPw"), "{args:?}\n{out}");
        assert!(!line.contains("redis://:PASSWORD"), "{args:?}\n{out}");
    }
}

/// A password given to a server that has none set (Redis 6+ refuses `AUTH <password>` then)
/// is not a wrong password: the line says the server has none and none is needed, from the
/// URL or from --password-file, and never shows it.
#[test]
fn a_password_for_a_server_without_one_says_none_is_needed() {
    let redis = RedisServer::start();
    let dir = scratch();
    let password = "Zq9Xw7Jm";
    let file = dir.path().join("pw");
    fs::write(&file, format!("{password}\n")).unwrap();
    let with_password = format!("redis://:{password}@127.0.0.1:{}", redis.port());
    let file = file.to_string_lossy().into_owned();
    let url = redis.url();
    let runs: [&[&str]; 4] = [
        &[
            "--redis",
            &with_password,
            "--key",
            "k",
            "-c",
            "touch marker",
        ],
        &["--redis", &with_password, "status", "--key", "k"],
        &["--redis", &with_password, "list"],
        &["--redis", &url, "--password-file", &file, "list"],
    ];
    for args in runs {
        let out = Wrapper::new().args(args).current_dir(dir.path()).run();
        out.expect_code(69);
        let line = out.expect_one_line();
        assert!(line.contains("has no password set"), "{args:?}\n{out}");
        assert!(line.contains("none is needed"), "{args:?}\n{out}");
        assert!(!line.contains("refused authentication"), "{args:?}\n{out}");
        assert!(!out.stderr.contains("Xw7"), "password shown\n{out}");
        assert!(!dir.path().join("marker").exists(), "command ran\n{out}");
    }
    assert_eq!(redis.dbsize(), 0);
}

/// The one line must point the user at the password, not at a protocol detail.
fn expect_mentions_auth(line: &str, out: &Outcome) {
    let l = line.to_lowercase();
    assert!(
        l.contains("authentication") || l.contains("password") || l.contains("noauth"),
        "message should say authentication failed / a password is needed\n{out}"
    );
}

#[test]
fn key_holding_a_hash_exits_69_and_leaves_it_alone() {
    let redis = RedisServer::start();
    let dir = scratch();
    redis.cli(&["HSET", "redlock:k", "a", "b"]);
    let out = Wrapper::on(&redis, "k")
        .args(["-c", "touch marker"])
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    out.expect_one_line();
    assert!(
        !dir.path().join("marker").exists(),
        "command must not run\n{out}"
    );
    assert_eq!(redis.cli(&["TYPE", "redlock:k"]), "hash");
    assert_eq!(redis.cli(&["HGETALL", "redlock:k"]), "a\nb");
    assert_eq!(redis.pttl("redlock:k"), -1, "hash got a TTL");
}

#[test]
fn read_only_replica_exits_69_and_says_so() {
    let (primary, replica) = start_primary_and_replica();
    let dir = scratch();
    let out = Wrapper::on(&replica, "ro")
        .sh("touch ran")
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    let line = out.expect_one_line();
    // Before Redis 7.0 the READONLY of the script's write comes wrapped in "ERR Error running
    // script"; it is recognised there too.
    assert!(line.contains("read-only replica"), "{out}");
    assert!(!dir.path().join("ran").exists());
    assert!(!primary.exists("redlock:ro"));
}

#[test]
fn acl_user_without_scripting_exits_69_and_says_so() {
    let redis = RedisServer::start();
    redis.cli(&[
        "acl", "setuser", "cron", "on", ">cronpw", "~*", "&*", "+@all", "-eval", "-evalsha",
    ]);
    let dir = scratch();
    let url = format!("redis://cron:cronpw@127.0.0.1:{}", redis.port());
    let out = Wrapper::new()
        .args(["--redis", &url, "--key", "acl"])
        .args(["-c", "touch ran"])
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    let line = out.expect_one_line();
    assert!(line.contains("denied") && line.contains("EVAL"), "{out}");
    assert!(!line.contains("cronpw"), "password leaked: {line}");
    assert!(!dir.path().join("ran").exists());
    assert_eq!(redis.dbsize(), 0, "nothing written\n{out}");
}

/// An ACL that allows the lock key but not its companions (`{redlock:k}:fence`, ...): the
/// scripts find out as they touch them, and the run says the ACL refused, as it does for a
/// refused EVAL.
#[test]
fn acl_user_without_the_companion_keys_exits_69_and_says_so() {
    let redis = RedisServer::start();
    redis.cli(&[
        "acl",
        "setuser",
        "cron",
        "on",
        ">cronpw",
        "~redlock:*",
        "&*",
        "+@all",
    ]);
    let dir = scratch();
    let url = format!("redis://cron:cronpw@127.0.0.1:{}", redis.port());
    let out = Wrapper::new()
        .args(["--redis", &url, "--key", "acl"])
        .args(["-c", "touch ran"])
        .current_dir(dir.path())
        .run();
    out.expect_code(69);
    let line = out.expect_one_line();
    assert!(
        line.contains("denied a command to this user") && line.contains("the lock keys"),
        "{out}"
    );
    assert!(!dir.path().join("ran").exists());
    assert_eq!(redis.dbsize(), 0, "nothing written\n{out}");
}

#[test]
fn script_flush_between_and_during_runs_is_survived() {
    let redis = RedisServer::start();
    let dir = scratch();
    Wrapper::on(&redis, "k")
        .args(["--", "true"])
        .run()
        .expect_code(0);
    redis.cli(&["SCRIPT", "FLUSH"]);
    Wrapper::on(&redis, "k")
        .args(["--", "true"])
        .run()
        .expect_code(0);

    // Flush while running: renewals and the release must reload their scripts.
    let mut run = Wrapper::on(&redis, "k")
        .args(["--ttl", "1s"])
        .sh("echo $$ > started; sleep 1.5; echo > almost; sleep 0.3")
        .current_dir(dir.path())
        .spawn();
    run.child_pid(&dir.path().join("started"), secs(10));
    redis.cli(&["SCRIPT", "FLUSH"]);
    run.wait_for_file(&dir.path().join("almost"), secs(10));
    redis.cli(&["SCRIPT", "FLUSH"]);
    let out = run.wait(secs(15));
    out.expect_code(0);
    assert!(!redis.exists("redlock:k"), "released\n{out}");
}

/// `INFO commandstats` of `redis`.
fn commandstats(redis: &RedisServer) -> String {
    redis.cli(&["INFO", "commandstats"])
}

/// Whether `stats` show a `SCRIPT LOAD`. Before Redis 7.0 all SCRIPT subcommands are counted
/// together as `cmdstat_script` (there is no `cmdstat_script|load`): there, any SCRIPT call
/// beyond the test's own `own_script_calls` (SCRIPT FLUSH) counts as one.
fn script_load_seen(redis: &RedisServer, stats: &str, own_script_calls: i64) -> bool {
    if redis.redis_compat_version() >= (7, 0, 0) {
        return stats.contains("cmdstat_script|load");
    }
    let calls = stats
        .lines()
        .find_map(|l| l.trim().strip_prefix("cmdstat_script:"))
        .and_then(|l| l.split(',').find_map(|kv| kv.strip_prefix("calls=")))
        .map_or(0, |v| v.parse::<i64>().expect("calls= in cmdstat_script"));
    calls > own_script_calls
}

/// `calls` minus `failed_calls` (a NOSCRIPT reply is a failed call) of `cmd` in `stats`.
fn successful_calls(stats: &str, cmd: &str) -> i64 {
    let prefix = format!("cmdstat_{cmd}:");
    let Some(line) = stats.lines().find_map(|l| l.trim().strip_prefix(&prefix)) else {
        return 0;
    };
    let field = |name: &str| -> i64 {
        line.split(',')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
    };
    field("calls") - field("failed_calls")
}

/// Successful EVAL plus EVALSHA calls: acquire, renewal and release are one script each.
fn script_runs(redis: &RedisServer) -> i64 {
    let stats = commandstats(redis);
    successful_calls(&stats, "eval") + successful_calls(&stats, "evalsha")
}

/// On a fresh server (empty script cache) the wrapper must send its scripts with EVAL itself,
/// never `SCRIPT LOAD` them.
///
/// Guards against leaving the NOSCRIPT fallback to redis-rs's `Script`, which answers NOSCRIPT
/// with `SCRIPT LOAD` and a second EVALSHA: one round trip more per operation, and a command
/// ACLs and proxies may refuse although EVAL is allowed.
#[test]
fn fresh_server_gets_eval_and_never_script_load() {
    let redis = RedisServer::start();
    let out = Wrapper::on(&redis, "k").args(["--", "true"]).run();
    out.expect_code(0);
    let stats = commandstats(&redis);
    assert!(
        !script_load_seen(&redis, &stats, 0),
        "the wrapper sent SCRIPT LOAD to a fresh server; it must fall back to EVAL\n\
         INFO commandstats:\n{stats}\n{out}"
    );
    assert!(
        successful_calls(&stats, "eval") > 0,
        "no successful EVAL: on a fresh server the scripts must be sent with EVAL\n\
         INFO commandstats:\n{stats}\n{out}"
    );
    assert!(!redis.exists("redlock:k"), "released\n{out}");
}

/// A `SCRIPT FLUSH` while the command runs: the renewals after it and the release must fall
/// back to EVAL, never `SCRIPT LOAD`, and the run ends normally. Stricter than
/// [`script_flush_between_and_during_runs_is_survived`], which only checks that the run
/// survives.
///
/// Guards against the EVALSHA -> NOSCRIPT -> SCRIPT LOAD -> EVALSHA dance of redis-rs's
/// `Script` on the renewal and release paths.
#[test]
fn script_flush_during_a_run_falls_back_to_eval_not_script_load() {
    let redis = RedisServer::start();
    let dir = scratch();
    // --ttl 3s: a renewal every second.
    let mut run = Wrapper::on(&redis, "k")
        .args(["--ttl", "3s"])
        .sh("echo $$ > started; \
             i=0; while [ ! -e go ] && [ $i -lt 2000 ]; do sleep 0.01; i=$((i+1)); done")
        .current_dir(dir.path())
        .spawn();
    run.child_pid(&dir.path().join("started"), secs(10));
    // Statistics from here on; then empty the script cache.
    redis.cli(&["CONFIG", "RESETSTAT"]);
    redis.cli(&["SCRIPT", "FLUSH"]);
    let before = script_runs(&redis);
    run.wait_until(secs(10), "a renewal to succeed after SCRIPT FLUSH", || {
        script_runs(&redis) > before
    });
    fs::write(dir.path().join("go"), "").unwrap();
    let out = run.wait(secs(20));
    let stats = commandstats(&redis);
    out.expect_code(0);
    assert!(
        !script_load_seen(&redis, &stats, 1),
        "after SCRIPT FLUSH the wrapper sent SCRIPT LOAD; renewals and the release must fall \
         back to EVAL\nINFO commandstats since the flush:\n{stats}\n{out}"
    );
    assert!(!redis.exists("redlock:k"), "released\n{out}");
}

/// A key of another client where the lock, its `--shared` holders or its `--limit` holders
/// go: whatever the run's options, one line that names the key and says it is not a
/// redlock-run lock, exit 69 (a key of another type), never a limit mismatch (78: only for a
/// lock this tool made with another --limit or kind), never Redis's raw WRONGTYPE, no phrase
/// twice; the key is left as it was and the command does not run.
#[test]
fn a_foreign_key_where_the_lock_keeps_its_own_is_named_not_taken_for_a_limit_mismatch() {
    let redis = RedisServer::start();
    let dir = scratch();
    let no_options: &[&str] = &[];
    let runs: [&[&str]; 3] = [no_options, &["--limit", "2"], &["--shared"]];
    // (key given with ZADD or SET, how, which runs are refused: a key the run never reads
    // is not its concern).
    let cases: [(&str, &str, &[usize]); 5] = [
        ("redlock:k", "ZADD", &[0, 1, 2]),
        ("redlock:k", "SET", &[1]),
        ("{redlock:k}:shared", "ZADD", &[1]),
        ("{redlock:k}:holders", "ZADD", &[1, 2]),
        ("{redlock:k}:fence", "ZADD", &[0, 1, 2]),
    ];
    for (key, how, refused) in cases {
        for (i, args) in runs.iter().enumerate() {
            if !refused.contains(&i) {
                continue;
            }
            redis.cli(&["FLUSHALL"]);
            match how {
                "ZADD" => redis.cli(&["ZADD", key, "1", "x"]),
                _ => redis.cli(&["SET", key, "x"]),
            };
            let out = Wrapper::on(&redis, "k")
                .args(*args)
                .args(["-c", "touch marker"])
                .current_dir(dir.path())
                .run();
            let what = format!("{how} {key}, run with {args:?}");
            assert_eq!(out.code(), Some(69), "{what}: exit code\n{out}");
            let line = out.expect_one_line();
            assert!(line.contains(key), "{what}: the key is not named\n{out}");
            assert!(
                line.contains("is not a redlock-run lock"),
                "{what}: not said to be foreign\n{out}"
            );
            assert!(line.contains("--prefix"), "{what}: no hint\n{out}");
            assert!(!line.contains("WRONGTYPE"), "{what}: raw error\n{out}");
            assert!(
                !line.contains("--limit 2"),
                "{what}: a limit mismatch\n{out}"
            );
            for phrase in [
                "refusing to touch it",
                "not a redlock-run lock",
                "nothing was changed",
            ] {
                assert!(
                    line.matches(phrase).count() <= 1,
                    "{what}: {phrase:?} said twice\n{out}"
                );
            }
            assert!(!dir.path().join("marker").exists(), "{what}: ran\n{out}");
            let kind = redis.cli(&["TYPE", key]);
            assert_eq!(
                kind,
                if how == "ZADD" { "zset" } else { "string" },
                "{what}"
            );
            assert_eq!(redis.pttl(key), -1, "{what}: the key got a TTL");
            assert_eq!(redis.dbsize(), 1, "{what}: keys written beside it\n{out}");
        }
    }
}

/// A URL with a database number (`/9`, selected on connecting) and no password: the same
/// missing-password line, not the server's raw refusal of the SELECT.
#[test]
fn a_missing_password_with_a_database_in_the_url_is_named() {
    let redis = RedisServer::start_with(&["--requirepass", "secret"]);
    for url in [
        format!("redis://127.0.0.1:{}/9", redis.port()),
        format!("redis://Nm3Qx@127.0.0.1:{}/99", redis.port()),
    ] {
        let out = Wrapper::new()
            .args(["--redis", &url, "status", "--key", "k"])
            .run();
        out.expect_code(69);
        let line = out.expect_one_line();
        assert!(line.contains("requires a password"), "{url}: {line}");
        assert!(!line.contains("Nm3Qx"), "{line}");
    }
}
