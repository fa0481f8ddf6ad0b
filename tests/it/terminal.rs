//! Behaviour on a terminal: the command gets the terminal's foreground (or it would be stopped
//! by SIGTTIN when it reads), and a live status line is drawn while waiting for a busy lock.
//! `script(1)` (util-linux) gives the wrapper a pseudo-terminal.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;

/// Run `redlock-run ARGS` on a pseudo-terminal with `input` typed into it. Returns the exit
/// code of script (which is the wrapper's with -e) and everything the terminal showed.
fn on_terminal(args: &str, input: &str, env: &[(&str, &str)]) -> (Option<i32>, String) {
    let cmdline = format!("{} {args}", wrapper_bin());
    let mut cmd = Command::new("script");
    cmd.args(["-qefc", &cmdline, "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("script(1) from util-linux");
    let pid = child.id() as i32;
    let _guard = PidGuard::new(pid);
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let out = child.wait_with_output().unwrap();
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            return (status.code(), text);
        }
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{cmdline} on a terminal did not finish in 20 s (stopped by SIGTTIN?); \
                 terminal showed:\n{}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn command_can_read_from_the_terminal() {
    let redis = RedisServer::start();
    let args = format!(
        "--redis {} --key tty -c 'read line; echo \"got:$line\"'",
        redis.url()
    );
    let (code, shown) = on_terminal(&args, "hello\n", &[]);
    assert_eq!(code, Some(0), "terminal showed:\n{shown}");
    assert!(shown.contains("got:hello"), "terminal showed:\n{shown}");
    assert!(!redis.exists("redlock:tty"));
}

#[test]
fn waiting_on_a_terminal_shows_one_live_line_without_colour_under_no_color() {
    let redis = RedisServer::start();
    redis.cli(&["set", "redlock:w", "other", "px", "1500"]);
    let args = format!("--redis {} --key w --wait 10s -- echo done", redis.url());
    let (code, shown) = on_terminal(&args, "", &[("NO_COLOR", "1")]);
    assert_eq!(code, Some(0), "terminal showed:\n{shown:?}");
    assert!(
        shown.contains("redlock-run: waiting for redlock:w"),
        "{shown:?}"
    );
    assert!(shown.contains("elapsed"), "{shown:?}");
    // Redrawn in place and cleared before the command's output, never scrolled.
    assert!(shown.contains("\r\x1b[2K"), "{shown:?}");
    assert!(
        !shown.contains("\x1b[2m"),
        "NO_COLOR: no styling: {shown:?}"
    );
    let before_done = shown.split("done").next().unwrap();
    assert!(
        !before_done.contains('\n'),
        "live line must not scroll: {shown:?}"
    );

    redis.cli(&["set", "redlock:w", "other", "px", "1500"]);
    let (_, coloured) = on_terminal(&args, "", &[]);
    assert!(
        coloured.contains("\x1b[2m"),
        "dim without NO_COLOR: {coloured:?}"
    );
}

/// With `stty tostop`, a background process that writes to the terminal is stopped by
/// SIGTTOU. The wrapper is in the background while the command has the terminal; its -v
/// messages must not freeze it (a frozen wrapper renews nothing while the command runs on).
#[test]
fn verbose_messages_do_not_stop_the_wrapper_under_tostop() {
    let redis = RedisServer::start();
    let inner = format!(
        "set -m; stty tostop; {} -v --redis {} --key tostop --ttl 1s -- sleep 2; echo exit=$?",
        wrapper_bin(),
        redis.url()
    );
    let mut cmd = Command::new("script");
    // bash with job control runs the wrapper as its own job, so its group is not orphaned and
    // a background write really gets SIGTTOU.
    cmd.args(["-qefc", &format!("bash -c '{inner}'"), "/dev/null"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let _guard = PidGuard::new(child.id() as i32);
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("wrapper stopped by SIGTTOU (still running after 20 s)");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(shown.contains("exit=0"), "terminal showed:\n{shown}");
    assert!(
        shown.contains("released redlock:tostop"),
        "terminal showed:\n{shown}"
    );
}
