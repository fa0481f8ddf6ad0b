//! `redlock-run status` with stdout a pipe nobody reads (`status --key k | true`): the write
//! fails with EPIPE, and the wrapper must end quietly with 141 (128 + SIGPIPE), as `cat` or
//! `ls | head` do, not panic (SIGABRT, 134, under the release profile's panic=abort).

mod common;

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use common::*;

/// Runs `redlock-run status --key k --redis URL [extra]` with stdout the write end of a pipe
/// whose read end is already closed. Returns the exit status and stderr.
fn status_into_closed_pipe(server: &RedisServer, extra: &[&str]) -> (ExitStatus, String) {
    let (read_end, write_end) = nix::unistd::pipe().expect("pipe");
    // No reader from the start: the wrapper's first write to stdout fails with EPIPE.
    drop(read_end);
    let mut cmd = Command::new(wrapper_bin());
    cmd.args(["status", "--key", "k", "--redis", &server.url()])
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("REDLOCK_") {
            cmd.env_remove(&k);
        }
    }
    // `cmd` owns the write end; dropping it with `cmd` leaves the child the only writer.
    let mut child = cmd.spawn().expect("spawn redlock-run");
    drop(cmd);
    let mut status = None;
    let finished = poll_until(Duration::from_secs(30), || {
        status = child.try_wait().expect("try_wait");
        status.is_some()
    });
    if !finished {
        let _ = child.kill();
        let _ = child.wait();
        panic!("redlock-run status did not exit within 30 s");
    }
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    (status.unwrap(), stderr)
}

fn assert_quiet_141(status: ExitStatus, stderr: &str) {
    assert!(!stderr.contains("panicked"), "panicked: {stderr}");
    assert_eq!(
        (status.code(), status.signal()),
        (Some(141), None),
        "status {status:?}, stderr: {stderr}"
    );
    assert_eq!(stderr, "", "stderr must stay empty");
}

#[test]
fn status_into_a_closed_pipe_exits_141_quietly() {
    let server = RedisServer::start();
    let (status, stderr) = status_into_closed_pipe(&server, &[]);
    assert_quiet_141(status, &stderr);
    let (status, stderr) = status_into_closed_pipe(&server, &["--json"]);
    assert_quiet_141(status, &stderr);
}
