//! `--min-replicas`: runs while the replica acknowledges, refuses when it does not, and
//! unacknowledged renewals do not extend the lease.

use std::time::Instant;

use crate::common::*;

#[test]
fn min_replicas_runs_with_the_replica_up_and_refuses_with_it_frozen() {
    let (primary, replica) = start_primary_and_replica();
    let dir = scratch();
    // A generous replica timeout where the replica must acknowledge: a loaded machine can
    // take longer than 500 ms to schedule it.
    Wrapper::on(&primary, "r")
        .args(["--min-replicas", "1", "--replica-timeout", "5s"])
        .sh("touch ran-1")
        .current_dir(dir.path())
        .run()
        .expect_code(0);
    assert!(dir.path().join("ran-1").exists());

    replica.pause();
    let out = Wrapper::on(&primary, "r")
        .args(["--min-replicas", "1", "--replica-timeout", "500ms"])
        .sh("touch ran-2")
        .current_dir(dir.path())
        .run();
    replica.resume();
    out.expect_code(69);
    out.expect_stderr_contains("replicas acknowledged");
    assert!(
        !dir.path().join("ran-2").exists(),
        "command must not run\n{out}"
    );
    assert!(
        !primary.exists("redlock:r"),
        "the lock must be released\n{out}"
    );
}

/// Renewals count towards the lease only when the replicas acknowledge them: a replica that
/// stops acknowledging mid-run stops the command before the lease runs out.
#[test]
fn unacknowledged_renewals_do_not_extend_the_lease() {
    let (primary, replica) = start_primary_and_replica();
    let dir = scratch();
    let mut run = Wrapper::on(&primary, "r")
        .args([
            "--ttl",
            "1s",
            "--min-replicas",
            "1",
            "--replica-timeout",
            "200ms",
        ])
        .sh("echo $$ > started; exec sleep 30")
        .current_dir(dir.path())
        .spawn();
    let child = run.child_pid(&dir.path().join("started"), secs(10));
    let _guard = PidGuard::new(child);
    // Renewals are acknowledged while the replica runs.
    std::thread::sleep(ms(1500));
    assert!(
        run.is_running(),
        "must still run with the replica up\n{}",
        run.describe()
    );
    replica.pause();
    let frozen = Instant::now();
    let out = run.wait(secs(10));
    replica.resume();
    out.expect_code(74);
    assert!(
        frozen.elapsed() < secs(3),
        "command stopped {:?} after the replica froze (ttl 1s)",
        frozen.elapsed()
    );
    assert!(!pid_alive(child), "child must be gone\n{out}");
}

/// A waiter keeps its place while each of its attempts waits out a slow replica: the place
/// counts the replicas' wait, so the waiter's arrival (its score in the queue) never changes.
/// With a place of `--connect-timeout` plus 1 s only, every attempt that waited 3 s for the
/// replica found its place gone and queued again at the end, behind later arrivals.
#[test]
fn a_waiter_keeps_its_place_through_slow_replica_waits() {
    let (primary, replica) = start_primary_and_replica();
    let dir = scratch();
    let mut holder = Wrapper::on(&primary, "p")
        .args(["--min-replicas", "1", "--replica-timeout", "5s"])
        .sh("touch held; i=0; while [ ! -e go ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done")
        .current_dir(dir.path())
        .spawn();
    holder.wait_for_file(&dir.path().join("held"), secs(20));
    replica.pause();
    let waiter = Wrapper::on(&primary, "p")
        .args([
            "--wait",
            "60s",
            "--min-replicas",
            "1",
            "--replica-timeout",
            "3s",
        ])
        .args(["--connect-timeout", "1s"])
        .sh("true")
        .current_dir(dir.path())
        .spawn();
    let queue = "{redlock:p}:queue";
    let first = || primary.cli(&["ZRANGE", queue, "0", "0", "WITHSCORES"]);
    assert!(
        poll_until(secs(20), || !first().trim().is_empty()),
        "the waiter never queued\n{}",
        waiter.describe()
    );
    let arrived = first();
    // Three of the waiter's attempts, each waiting 3 s for the frozen replica.
    let moved = poll_until(secs(10), || first() != arrived);
    let now = first();
    replica.resume();
    std::fs::write(dir.path().join("go"), "").unwrap();
    holder.wait(secs(30));
    let _ = waiter.wait(secs(60));
    assert!(
        !moved,
        "the waiter lost its place between attempts: {arrived:?} became {now:?}"
    );
}
