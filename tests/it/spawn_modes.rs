//! The command sees the same start whether it is born in its cgroup (`clone3`) or forked and
//! joining it (`REDLOCK_NO_CLONE3=1`, std's spawn): signal mask, PATH search, environment.
//! Each test runs both ways and compares what the command saw.

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use crate::common::*;

/// Whether this machine gives the command a cgroup (else both modes are the same path).
fn has_cgroup(redis: &RedisServer) -> bool {
    let probe = Wrapper::on(redis, "probe").args(["-v", "--", "true"]).run();
    let yes = probe.stderr.contains("tracked by a cgroup");
    if !yes {
        eprintln!("no writable cgroup v2 here: clone3 is not used, nothing to compare");
    }
    yes
}

/// (exit code, stdout) of a run of `w` with clone3 and with REDLOCK_NO_CLONE3=1.
fn both(w: Wrapper) -> [(Option<i32>, String); 2] {
    ["0", "1"].map(|knob| {
        let out = w.clone().env("REDLOCK_NO_CLONE3", knob).run();
        (out.code(), out.stdout)
    })
}

/// Run the wrapper with exactly `envp` (duplicates kept) and, if given, `block` blocked.
fn raw_run(
    redis: &RedisServer,
    key: &str,
    envp: &[&[u8]],
    block: Option<libc::c_int>,
    cmd: &[&str],
) -> (Option<i32>, String) {
    unsafe extern "C" {
        static mut environ: *const *const libc::c_char;
    }
    let owned: Vec<CString> = envp.iter().map(|e| CString::new(*e).unwrap()).collect();
    let mut ptrs: Vec<*const libc::c_char> = owned.iter().map(|e| e.as_ptr()).collect();
    ptrs.push(std::ptr::null());
    let ptrs_addr = ptrs.as_ptr() as usize;
    let mut c = Command::new(wrapper_bin());
    c.args(["--config", "", "--redis", &redis.url(), "--key", key, "--"])
        .args(cmd)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    // SAFETY: only a pointer store and sigprocmask between fork and exec. The Command's own
    // environment is left untouched, so execvp passes `environ` as set here.
    unsafe {
        c.pre_exec(move || {
            environ = ptrs_addr as *const *const libc::c_char;
            if let Some(sig) = block {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, sig);
                libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
            Ok(())
        });
    }
    let out = c.output().expect("run the wrapper");
    drop((owned, ptrs));
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

fn raw_both(
    redis: &RedisServer,
    envp: &[&[u8]],
    block: Option<libc::c_int>,
    cmd: &[&str],
) -> [(Option<i32>, String); 2] {
    [&b"REDLOCK_NO_CLONE3=0"[..], &b"REDLOCK_NO_CLONE3=1"[..]].map(|knob| {
        let mut env = envp.to_vec();
        env.push(knob);
        raw_run(redis, "k", &env, block, cmd)
    })
}

/// A signal blocked when the wrapper starts is blocked in the command as with std's spawn
/// (Rust's std inherits the mask), not unblocked by the clone3 path only.
#[test]
fn the_command_starts_with_the_same_signal_mask() {
    let redis = RedisServer::start();
    if !has_cgroup(&redis) {
        return;
    }
    let [clone3, forked] = raw_both(
        &redis,
        &[b"PATH=/usr/bin:/bin"],
        Some(libc::SIGUSR1),
        &["grep", "SigBlk", "/proc/self/status"],
    );
    assert_eq!(clone3, forked, "clone3 vs REDLOCK_NO_CLONE3=1");
}

/// Duplicate variables in the wrapper's environment: the command sees what std passes (one
/// of each, the last), and the PATH search uses the same PATH the command gets.
#[test]
fn duplicate_variables_reach_the_command_as_with_std() {
    let redis = RedisServer::start();
    if !has_cgroup(&redis) {
        return;
    }
    let [clone3, forked] = raw_both(
        &redis,
        &[b"PATH=/usr/bin:/bin", b"FOO=first", b"FOO=second"],
        None,
        &["printenv", "FOO"],
    );
    assert_eq!(clone3, forked, "clone3 vs REDLOCK_NO_CLONE3=1");
}

/// A script without `#!` found through an empty PATH entry (the current directory) gets the
/// same `$0` as with execvp: the bare name, not `./name`.
#[test]
fn a_script_found_through_an_empty_path_entry_gets_the_same_name() {
    let redis = RedisServer::start();
    if !has_cgroup(&redis) {
        return;
    }
    let dir = scratch();
    let script = dir.path().join("noshebang");
    std::fs::write(&script, "echo \"$0\"\n").unwrap();
    std::process::Command::new("chmod")
        .args(["+x", script.to_str().unwrap()])
        .status()
        .unwrap();
    let w = Wrapper::on(&redis, "k")
        .env("PATH", ":/usr/bin:/bin")
        .current_dir(dir.path())
        .args(["--", "noshebang"]);
    let [clone3, forked] = both(w);
    assert_eq!(clone3, forked, "clone3 vs REDLOCK_NO_CLONE3=1");
}

/// A PATH entry longer than PATH_MAX is skipped by execvp; the search goes on.
#[test]
fn a_path_entry_longer_than_path_max_is_skipped() {
    let redis = RedisServer::start();
    if !has_cgroup(&redis) {
        return;
    }
    let long = format!("/{}", "a".repeat(5000));
    let w = Wrapper::on(&redis, "k")
        .env("PATH", format!("{long}:/usr/bin:/bin"))
        .args(["--", "echo", "ran"]);
    let [clone3, forked] = both(w);
    assert_eq!(clone3, forked, "clone3 vs REDLOCK_NO_CLONE3=1");
}
