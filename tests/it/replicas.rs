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
