//! The command itself: its exit status passed through, 127/126 for a missing or
//! non-executable command, the `REDLOCK_*` variables it sees, stdin and stdout passed
//! through, and `--max-runtime` stopping it (exit 124), also after a forwarded INT or TERM.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Instant;

use nix::sys::signal::Signal;

use crate::common::*;

/// Exit codes pass through; a command killed by a signal makes the wrapper die by it.
#[test]
fn child_exit_status_is_passed_through() {
    let redis = RedisServer::start();
    let cases: &[(&[&str], i32)] = &[
        (&["-c", "exit 0"], 0),
        (&["-c", "exit 3"], 3),
        (&["--", "sh", "-c", "exit 3"], 3),
        (&["-c", "kill -TERM $$"], 143),
        (&["-c", "kill -KILL $$"], 137),
        (&["--", "false"], 1),
    ];
    for (args, code) in cases {
        let out = Wrapper::on(&redis, "k").args(*args).run();
        out.expect_code(*code);
        // A command killed by signal N: the wrapper ends by N too (after the release), as
        // timeout(1) and sudo do, so a calling shell sees what the bare command would give.
        let by_signal = (*code > 128).then_some(*code - 128);
        assert_eq!(out.signal(), by_signal, "{out}");
        assert!(!redis.exists("redlock:k"), "key released\n{out}");
    }
}

#[test]
fn missing_command_127_not_executable_126_lock_released() {
    let redis = RedisServer::start();
    let dir = scratch();
    let script = dir.path().join("script.sh");
    fs::write(&script, "#!/bin/sh\ntouch marker\n").unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o644)).unwrap();
    let cases: &[(&[&str], i32)] = &[
        (&["--", "no-such-command-redlock-test"], 127),
        (&["--", "./no-such-file"], 127),
        (&["--", "./script.sh"], 126),
        (&["--", "."], 126),
    ];
    for (args, code) in cases {
        let out = Wrapper::on(&redis, "k")
            .args(*args)
            .current_dir(dir.path())
            .run();
        let held_after = redis.exists("redlock:k");
        out.expect_code(*code);
        out.expect_all_lines_prefixed();
        assert!(!out.stderr_lines().is_empty(), "failure reported\n{out}");
        assert!(!held_after, "key must be released at once\n{out}");
        assert!(!dir.path().join("marker").exists(), "script ran?\n{out}");
    }
}

#[test]
fn child_sees_key_token_ttl_and_fence() {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut run = Wrapper::on(&redis, "envjob")
        .args(["--ttl", "5s"])
        .sh(
            "printf '%s\\n' \"$REDLOCK_KEY\" \"$REDLOCK_TOKEN\" \"$REDLOCK_TTL_MS\" \
             \"$REDLOCK_FENCE\" > env.tmp && mv env.tmp env; \
             i=0; while [ ! -e go ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done",
        )
        .current_dir(dir.path())
        .spawn();
    let env_file = dir.path().join("env");
    run.wait_for_file(&env_file, secs(10));
    let env = fs::read_to_string(&env_file).unwrap();
    let value = redis.get("redlock:envjob");
    fs::write(dir.path().join("go"), "").unwrap();
    let out = run.wait(secs(20));
    out.expect_code(0);

    let lines: Vec<&str> = env.lines().collect();
    assert_eq!(lines.len(), 4, "child env:\n{env}\n{out}");
    assert_eq!(lines[0], "redlock:envjob", "REDLOCK_KEY\n{out}");
    assert!(!lines[1].is_empty(), "REDLOCK_TOKEN empty\n{out}");
    assert_eq!(
        value.as_deref(),
        Some(lines[1]),
        "REDLOCK_TOKEN must equal the key's value during the run\n{out}"
    );
    assert_eq!(lines[2], "5000", "REDLOCK_TTL_MS\n{out}");
    assert!(
        lines[3].parse::<i64>().is_ok(),
        "REDLOCK_FENCE {:?} not an integer\n{out}",
        lines[3]
    );
    assert!(!redis.exists("redlock:envjob"), "released\n{out}");
}

#[test]
fn stdin_and_stdout_pass_through() {
    let redis = RedisServer::start();
    let out = Wrapper::on(&redis, "k")
        .args(["--", "cat"])
        .stdin("hi\n")
        .run();
    out.expect_code(0);
    assert_eq!(out.stdout, "hi\n", "{out}");
}

#[test]
fn max_runtime_stops_a_job_that_ignores_sigterm_and_exits_124() {
    let redis = RedisServer::start();
    let dir = scratch();
    let started = Instant::now();
    let mut run = Wrapper::on(&redis, "slow")
        .args(["--max-runtime", "1s", "--grace", "500ms"])
        .sh("trap '' TERM; echo $$ > started; sleep 30; touch finished")
        .current_dir(dir.path())
        .spawn();
    let child = run.child_pid(&dir.path().join("started"), secs(10));
    let _guard = PidGuard::new(child);
    let out = run.wait(secs(15));
    out.expect_code(124);
    let took = started.elapsed();
    assert!(
        took >= ms(1400) && took < secs(6),
        "stopped after {took:?}; expected --max-runtime 1s + --grace 500ms"
    );
    assert!(
        !pid_alive(child),
        "child ignoring SIGTERM must be SIGKILLed\n{out}"
    );
    assert!(!dir.path().join("finished").exists());
    assert!(!redis.exists("redlock:slow"), "lock released\n{out}");
}

/// `--max-runtime` must keep counting after the wrapper forwarded an INT or TERM to the
/// command. The command here ignores the signal (`trap '' SIG`) and would sleep on for 10 s;
/// the max runtime (2 s) must still stop it (SIGTERM, then SIGKILL after `--grace` 1 s) and
/// the wrapper must exit 124, about 3 s after the start.
///
/// Guards against the forwarded signal being taken as the one reason the command is being
/// stopped, after which the max-runtime deadline is never looked at again: the command then
/// runs to its natural end and the wrapper exits with its status (0 after 10 s).
fn max_runtime_applies_after_a_forwarded(sig: Signal, name: &str) {
    let redis = RedisServer::start();
    let dir = scratch();
    let mut run = Wrapper::on(&redis, "slow")
        .args(["--max-runtime", "2s", "--grace", "1s"])
        .sh(&format!(
            "trap '' {name}; echo $$ > started; sleep 10; touch finished"
        ))
        .current_dir(dir.path())
        .spawn();
    let child = run.child_pid(&dir.path().join("started"), secs(10));
    let sent_at = run.started.elapsed();
    // The max-runtime clock starts after the wrapper spawned the command, so a signal sent
    // less than 2 s after the wrapper itself started is sure to come before that deadline.
    assert!(
        sent_at < secs(2),
        "the command took {sent_at:?} to start; the {name} must arrive before --max-runtime 2s \
         for this test to mean anything\n{}",
        run.describe()
    );
    run.signal(sig);
    let out = run.wait(secs(30));
    assert!(
        !pid_alive(child),
        "the command ignoring {name} must be SIGKILLed once --max-runtime and --grace are \
         over\n{out}"
    );
    out.expect_code(124);
    assert!(
        out.elapsed < secs(8),
        "stopped after {:?}: --max-runtime 2s + --grace 1s must still apply after one \
         forwarded {name}, long before the 10 s sleep ends\n{out}",
        out.elapsed
    );
    assert!(
        !dir.path().join("finished").exists(),
        "the command ran to its end\n{out}"
    );
    assert!(!redis.exists("redlock:slow"), "lock released\n{out}");
}

/// A forwarded TERM that the command ignores must not switch `--max-runtime` off (exit 124,
/// not the command's own 0 after it slept 10 s). See [`max_runtime_applies_after_a_forwarded`].
#[test]
fn max_runtime_still_applies_after_a_forwarded_sigterm() {
    max_runtime_applies_after_a_forwarded(Signal::SIGTERM, "TERM");
}

/// The same with INT (Ctrl-C) instead of TERM.
#[test]
fn max_runtime_still_applies_after_a_forwarded_sigint() {
    max_runtime_applies_after_a_forwarded(Signal::SIGINT, "INT");
}
