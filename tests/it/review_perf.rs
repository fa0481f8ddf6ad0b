//! Adversarial review of the recent performance changes (the command's tree made beside the
//! first acquire, the release that wakes the head of the queue alone): each test here failed
//! on the commit it names when it was written, and passes on the one before.

use std::fs;

use crate::common::*;

/// The parent of `pid`, from /proc.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The /proc mode leaves out the children the wrapper already had when its tree was made
/// (`sh -c 'job & exec redlock-run ...'`) and their subtrees (tree.rs). A process of such a
/// subtree that is orphaned while the wrapper waits for the lock is not the command's: the
/// wrapper must not adopt it then (it is not the command's subreaper yet) nor stop it as a
/// leftover of the command. Since the tree (and with it the child subreaper) is made beside
/// the first attempt (36f68cd), such an orphan is re-parented to the waiting wrapper, counts
/// as a member of the command's tree, and is sent SIGTERM when the command exits.
#[test]
fn proc_mode_leaves_alone_a_job_of_an_inherited_child_orphaned_during_the_wait() {
    let redis = RedisServer::start();
    let dir = scratch();
    redis.cli(&["SET", "redlock:k", "someone-else", "PX", "60000"]);
    // The subshell (a child of the shell that execs the wrapper, so one the wrapper inherits)
    // waits for `go`, starts the job in the background and exits: the job is orphaned.
    let script = format!(
        "(while [ ! -e go ]; do sleep 0.01; done; sh -c 'echo $PPID > subshell.pid'; \
          sh -c 'echo $$ > job.pid; exec sleep 60' &) & \
         exec {} --redis {} --key k --wait 60s -v -- true",
        wrapper_bin(),
        redis.url()
    );
    let w = Wrapper::new()
        .env("REDLOCK_NO_CGROUP", "1")
        .current_dir(dir.path());
    let run = std::thread::spawn(move || w.run_via_shell(&script));
    wait_until(secs(20), "the wrapper waiting in the queue", || {
        redis.cli_int(&["ZCARD", "{redlock:k}:queue"]) == 1
    });
    fs::write(dir.path().join("go"), "").unwrap();
    let job = read_pid_file(&dir.path().join("job.pid"), secs(10));
    let _job = PidGuard::new(job);
    // Orphaned: its parent, the subshell, has exited.
    let subshell = read_pid_file(&dir.path().join("subshell.pid"), secs(10));
    wait_until(secs(10), "the job's parent to exit", || {
        parent_of(job).is_some_and(|p| p != subshell)
    });
    redis.cli(&["DEL", "redlock:k"]);
    let out = run.join().expect("the run's thread");
    out.expect_code(0);
    assert!(
        pid_alive(job),
        "a job that is not the command's (a child of the wrapper's inherited subshell, \
         orphaned while the wrapper waited) was stopped with the command\n{out}"
    );
}
