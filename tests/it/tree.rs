//! The command is its whole process tree: processes that left its process group or session
//! (`setsid`, `timeout(1)`, double forks) are stopped when the lock is released or lost, in
//! both tracking modes (a cgroup of its own, the command born in it or, with
//! `REDLOCK_NO_CLONE3=1`, joining it; /proc as their subreaper, forced with
//! `REDLOCK_NO_CGROUP=1`), and with a cgroup also when the wrapper is SIGKILLed.

use nix::sys::signal::Signal;

use crate::common::*;

/// Every mode where this machine has a writable cgroup v2 (the command born in its cgroup by
/// clone3, or forked and then joining it); else the /proc mode alone.
fn modes(redis: &RedisServer) -> Vec<(&'static str, Option<&'static str>)> {
    let probe = Wrapper::on(redis, "probe").args(["-v", "--", "true"]).run();
    let mut modes = vec![("proc", Some("REDLOCK_NO_CGROUP"))];
    if probe.stderr.contains("tracked by a cgroup") {
        modes.push(("cgroup", None));
        modes.push(("cgroup, forked and joined", Some("REDLOCK_NO_CLONE3")));
    } else {
        eprintln!("no writable cgroup v2 here: the cgroup mode is not tested\n{probe}");
    }
    modes
}

/// `w` in the mode that setting `knob` to 1 selects (none: the default).
fn in_mode(w: Wrapper, knob: Option<&str>) -> Wrapper {
    match knob {
        Some(knob) => w.env(knob, "1"),
        None => w,
    }
}

/// `redlock-run -- setsid JOB`: setsid forks, its parent (the command) exits at once, and the
/// job runs on in a session of its own. It must not outlive the run. (Here the command waits
/// until the job has written its pid, so that the job surely started before the command
/// ended.)
#[test]
fn a_setsid_job_is_stopped_when_the_command_exits() {
    let redis = RedisServer::start();
    for (mode, knob) in modes(&redis) {
        let dir = scratch();
        let pidfile = dir.path().join("pid");
        let p = pidfile.display();
        let out = in_mode(Wrapper::on(&redis, "k"), knob)
            .args(["--grace", "1s"])
            .sh(&format!(
                "setsid -f sh -c 'echo $$ > {p}; exec sleep 60'; \
                 while ! [ -s {p} ]; do sleep 0.01; done"
            ))
            .run();
        let job = read_pid_file(&pidfile, secs(10));
        let _guard = PidGuard::new(job);
        out.expect_code(0);
        assert!(
            poll_until(secs(5), || !pid_alive(job)),
            "[{mode}] the setsid job runs on after the run ended\n{out}"
        );
    }
}

/// `timeout(1)` inside `-c` moves the job to a process group of its own. When the lock is
/// lost, that job must be stopped with the rest of the command.
#[test]
fn a_job_in_another_process_group_is_stopped_when_the_lock_is_lost() {
    let redis = RedisServer::start();
    for (mode, knob) in modes(&redis) {
        let dir = scratch();
        let pidfile = dir.path().join("pid");
        let run = in_mode(Wrapper::on(&redis, "k"), knob)
            .args(["--ttl", "2s", "--grace", "500ms"])
            .sh(&format!(
                "timeout 60 sh -c 'echo $$ > {}; exec sleep 60'; sleep 60",
                pidfile.display()
            ))
            .spawn();
        // Not `run.child_pid`: its guard would kill the job when `run` is consumed.
        let job = read_pid_file(&pidfile, secs(10));
        let _guard = PidGuard::new(job);
        redis.cli(&["SET", "redlock:k", "someone-else"]);
        let out = run.wait(secs(20));
        out.expect_code(74);
        assert!(
            poll_until(secs(5), || !pid_alive(job)),
            "[{mode}] the job in its own group runs on after the lock was lost\n{out}"
        );
        redis.cli(&["DEL", "redlock:k"]);
    }
}

/// The wrapper SIGKILLed: the command dies by PR_SET_PDEATHSIG, and with a cgroup the
/// processes it started (a double-forked daemon here) die too. The /proc mode cannot cover
/// this (nothing of the wrapper runs after SIGKILL); the README says so.
#[test]
fn a_double_forked_job_dies_with_a_sigkilled_wrapper_in_a_cgroup() {
    let redis = RedisServer::start();
    if !modes(&redis).iter().any(|(mode, _)| *mode == "cgroup") {
        eprintln!("skipped: no writable cgroup v2 on this machine");
        return;
    }
    let dir = scratch();
    let pidfile = dir.path().join("pid");
    let run = Wrapper::on(&redis, "k")
        .sh(&format!(
            "(setsid sh -c 'echo $$ > {}; exec sleep 60' &); exec sleep 60",
            pidfile.display()
        ))
        .spawn();
    // Not `run.child_pid`: its guard would kill the job when `run` is consumed.
    let job = read_pid_file(&pidfile, secs(10));
    let _guard = PidGuard::new(job);
    run.signal(Signal::SIGKILL);
    let _ = run.wait(secs(10));
    assert!(
        poll_until(secs(5), || !pid_alive(job)),
        "a double-forked job runs on after the wrapper was SIGKILLed"
    );
}
