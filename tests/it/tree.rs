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

/// The cgroup directories `redlock-run.<pid>*` of wrapper `pid`: it makes them inside its own
/// cgroup, which is the test's (the wrapper inherits it).
fn cgroups_of(pid: i32) -> Vec<std::path::PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let Some(path) = own.lines().find_map(|l| l.strip_prefix("0::")) else {
        return Vec::new();
    };
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut dirs = Vec::new();
    for line in mountinfo.lines() {
        let Some((left, right)) = line.split_once(" - ") else {
            continue;
        };
        if !right.starts_with("cgroup2 ") {
            continue;
        }
        let fields: Vec<&str> = left.split(' ').collect();
        let (root, mount) = (fields[3], fields[4]);
        let Some(rel) = path.strip_prefix(root) else {
            continue;
        };
        let dir = std::path::Path::new(mount).join(rel.trim_start_matches('/'));
        let prefix = format!("redlock-run.{pid}");
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name == prefix || name.starts_with(&format!("{prefix}.")) {
                dirs.push(entry.path());
            }
        }
    }
    dirs
}

/// The guard of wrapper `pid` (its child named `redlock-guard`), if it has one.
fn guard_of(pid: i32) -> Option<i32> {
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    children
        .split_whitespace()
        .filter_map(|c| c.parse::<i32>().ok())
        .find(|c| {
            std::fs::read_to_string(format!("/proc/{c}/comm"))
                .is_ok_and(|comm| comm.trim() == "redlock-guard")
        })
}

/// A run that waits has the command's cgroup and guard made while its first attempt is on its
/// way (ready when the lock is handed over), keeps them while it waits, and, killed there,
/// its guard removes the cgroup. A run that does not wait makes none before the grant: one
/// that finds the lock busy leaves no cgroup behind and forks no guard.
#[test]
fn runs_that_never_hold_the_lock_leave_no_cgroup_and_no_guard() {
    let redis = RedisServer::start();
    if !modes(&redis).iter().any(|(mode, _)| *mode == "cgroup") {
        eprintln!("skipped: no writable cgroup v2 on this machine");
        return;
    }
    redis.cli(&["SET", "redlock:k", "someone-else", "PX", "60000"]);

    let busy = Wrapper::on(&redis, "k").args(["--", "true"]).spawn();
    let pid = busy.pid;
    let out = busy.wait(secs(20));
    out.expect_code(75);
    // Under strace where it is installed: no mkdir (a cgroup) and no fork (a guard) at all.
    let trace_dir = scratch();
    let trace = trace_dir.path().join("trace");
    let traced = std::process::Command::new("timeout")
        .args([
            "20",
            "strace",
            "-f",
            "-e",
            "trace=clone,clone3,fork,vfork,mkdir",
            "-o",
        ])
        .arg(&trace)
        .arg(wrapper_bin())
        .args(["--redis", &redis.url(), "--key", "k", "--", "true"])
        .env("REDLOCK_CONFIG", "")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status();
    match traced {
        Ok(status) if status.code() == Some(75) => {
            let trace = std::fs::read_to_string(&trace).unwrap_or_default();
            let forked = trace.lines().any(|l| {
                (l.contains("clone(") || l.contains("clone3(")) && !l.contains("CLONE_THREAD")
            });
            assert!(
                !trace.contains("mkdir(") && !forked,
                "a run without --wait that found the lock busy made a cgroup or forked:\n{trace}"
            );
        }
        other => eprintln!("SKIPPED the strace check (strace missing or failed: {other:?})"),
    }
    assert!(
        cgroups_of(pid).is_empty(),
        "a busy run left its cgroup behind: {:?}\n{out}",
        cgroups_of(pid)
    );

    let waiter = Wrapper::on(&redis, "k")
        .args(["--wait", "60s", "--", "true"])
        .spawn();
    let pid = waiter.pid;
    assert!(
        poll_until(secs(20), || waiter.stderr_so_far().contains("waiting")),
        "the waiter never said it waits\n{}",
        waiter.describe()
    );
    let made = cgroups_of(pid);
    assert_eq!(
        made.len(),
        1,
        "a waiter has its command's cgroup ready: {made:?}\n{}",
        waiter.describe()
    );
    let guard = guard_of(pid).unwrap_or_else(|| panic!("no guard\n{}", waiter.describe()));
    let _guard = PidGuard::new(guard);
    waiter.signal(Signal::SIGKILL);
    let _ = waiter.wait(secs(10));
    assert!(
        poll_until(secs(10), || !pid_alive(guard) && !made[0].exists()),
        "after the waiter was SIGKILLed its guard ran on ({}) or its cgroup stayed ({})",
        pid_alive(guard),
        made[0].exists()
    );

    // SIGTERM ends the wait: the wrapper removes the cgroup itself and lets the guard go.
    // Either way the guard has finished (`pid_alive` counts a zombie as dead: an exited
    // guard stays in `ps` as <defunct> until PID 1 reaps it, which some inits do late;
    // docs/guarantees.md, "Wrapper killed").
    let waiter = Wrapper::on(&redis, "k")
        .args(["--wait", "60s", "--", "true"])
        .spawn();
    let pid = waiter.pid;
    assert!(
        poll_until(secs(20), || waiter.stderr_so_far().contains("waiting")),
        "the waiter never said it waits\n{}",
        waiter.describe()
    );
    let made = cgroups_of(pid);
    assert_eq!(made.len(), 1, "{made:?}\n{}", waiter.describe());
    let guard = guard_of(pid).unwrap_or_else(|| panic!("no guard\n{}", waiter.describe()));
    let _guard = PidGuard::new(guard);
    waiter.signal(Signal::SIGTERM);
    let out = waiter.wait(secs(20));
    out.expect_code(143);
    assert!(
        poll_until(secs(10), || !pid_alive(guard) && !made[0].exists()),
        "after the waiter was SIGTERMed its guard ran on ({}) or its cgroup stayed ({})\n{out}",
        pid_alive(guard),
        made[0].exists()
    );
}

/// The parent of `pid`, from /proc.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The /proc mode leaves out the children the wrapper already had when its tree was made
/// (`sh -c 'job & exec redlock-run ...'`) and their subtrees (process/tree/proc.rs). A
/// process of such a subtree that is orphaned while the wrapper waits for the lock is not the
/// command's: the wrapper must not adopt it then (it is not the command's subreaper yet) nor
/// stop it as a leftover of the command. Since the tree (and with it the child subreaper) is
/// made beside the first attempt (36f68cd), such an orphan is re-parented to the waiting
/// wrapper, counts as a member of the command's tree, and is sent SIGTERM when the command
/// exits.
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
    std::fs::write(dir.path().join("go"), "").unwrap();
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
