//! Issue 25: holds that span several CI steps: `acquire` leaves a detached keeper that renews
//! the lock, `release` releases it by token. Across three ttls, busy and queued acquires, a
//! keeper SIGKILLed (the lock expires, release says lost), the lock deleted under the keeper,
//! --max-hold (and one not longer than --ttl, refused), a release with another token, two
//! releases at once, a release after `break`, the eval / GitHub / dotenv output, a step's shell
//! that exits while the keeper holds on, a run in the hold's environment after its release,
//! no password on the keeper's command line, and on Sentinel, Cluster and Redlock.

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::common::cluster::Cluster;
use crate::common::quorum::Nodes;
use crate::common::sentinel::SentinelSet;
use crate::common::*;

/// The lease of these tests: short, so that "three ttls" and "expired within the ttl" are
/// seconds, long enough for a loaded machine's renewals.
const TTL: &str = "2s";
const TTL_MS: u64 = 2000;

/// A hold as `acquire` printed it, and its keeper (killed on drop if still there).
struct Hold {
    token: String,
    fence: u64,
    key: String,
    keeper: PidGuard,
}

/// The `export NAME='value'` lines of `acquire`, as a shell's eval would read them.
fn exported(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .map(|line| {
            let rest = line.strip_prefix("export ").expect("export NAME=...");
            let (name, value) = rest.split_once('=').expect("NAME=value");
            let value = value
                .strip_prefix('\'')
                .and_then(|v| v.strip_suffix('\''))
                .expect("single-quoted")
                .replace(r"'\''", "'");
            (name.to_owned(), value)
        })
        .collect()
}

/// `acquire` through `w` (which names the server and key): expects exit 0 and finds the keeper
/// by `status --json` (the holder's pid).
fn acquire(w: &Wrapper, args: &[&str]) -> Hold {
    let out = w.clone().arg("acquire").args(args).run();
    out.expect_code(0);
    hold_from(w, &out.stdout)
}

fn hold_from(w: &Wrapper, stdout: &str) -> Hold {
    let vars = exported(stdout);
    let get = |name: &str| {
        vars.iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_else(|| panic!("{name} missing from {stdout:?}"))
    };
    let token = get("REDLOCK_TOKEN");
    let fence: u64 = get("REDLOCK_FENCE").parse().expect("fence");
    let key = get("REDLOCK_KEY");
    let status = status_json(w);
    // The keeper is the holder (with --limit, the holder of this fence).
    let holder = match status["holders"].as_array() {
        Some(holders) => holders
            .iter()
            .find(|h| h["fence"] == fence)
            .cloned()
            .unwrap_or_else(|| panic!("no holder with fence {fence}: {status}")),
        None => status.clone(),
    };
    let pid = holder["pid"].as_i64().expect("holder pid") as i32;
    Hold {
        token,
        fence,
        key,
        keeper: PidGuard::new(pid),
    }
}

fn status_json(w: &Wrapper) -> serde_json::Value {
    let out = w.clone().args(["status", "--json"]).run();
    out.expect_code(0);
    parse_json(&out.stdout)
}

fn release(w: &Wrapper, token: &str) -> Outcome {
    w.clone().args(["release", "--token", token]).run()
}

/// /proc/PID/stat fields 6 (session) and 7 (controlling terminal).
fn session_and_tty(pid: i32) -> (i32, i32) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    (fields[3].parse().unwrap(), fields[4].parse().unwrap())
}

#[test]
fn acquire_status_across_three_ttls_then_release() {
    let redis = RedisServer::start();
    let w = Wrapper::on(&redis, "deploy");
    let hold = acquire(&w, &["--ttl", TTL]);
    assert_eq!(hold.key, "redlock:deploy");
    assert_eq!(
        redis.get("redlock:deploy").as_deref(),
        Some(hold.token.as_str())
    );
    let keeper = hold.keeper.pid();
    // Detached: a session of its own, no controlling terminal, stdio on /dev/null.
    assert_eq!(session_and_tty(keeper), (keeper, 0));
    for fd in 0..=2 {
        let target = std::fs::read_link(format!("/proc/{keeper}/fd/{fd}")).unwrap();
        assert_eq!(target, std::path::Path::new("/dev/null"), "fd {fd}");
    }
    // The token is in no argument list.
    let cmdline = std::fs::read(format!("/proc/{keeper}/cmdline")).unwrap();
    assert!(!String::from_utf8_lossy(&cmdline).contains(&hold.token));

    std::thread::sleep(Duration::from_millis(3 * TTL_MS + 500));
    assert_eq!(
        redis.get("redlock:deploy").as_deref(),
        Some(hold.token.as_str())
    );
    let status = status_json(&w);
    assert_eq!(status["pid"], keeper, "{status}");
    assert!(
        status["command"]
            .as_str()
            .unwrap()
            .contains("keeper, --max-hold 1h"),
        "{status}"
    );
    let text = w.clone().arg("status").run();
    assert!(text.stdout.contains("max-hold deadline"), "{text}");

    let out = release(&w, &hold.token);
    out.expect_code(0)
        .expect_stderr_contains("released redlock:deploy");
    assert!(!redis.exists("redlock:deploy"));
    wait_until(secs(20), "the keeper ends after the release", || {
        !pid_alive(keeper)
    });
    // Recorded like a run.
    let status = status_json(&w);
    assert_eq!(status["last_run"]["outcome"], "succeeded", "{status}");
    assert_eq!(status["last_run"]["fence"], hold.fence, "{status}");
    // A second release finds nothing to release.
    release(&w, &hold.token).expect_code(3);
}

#[test]
fn a_second_acquire_is_busy_and_waiting_ones_are_served_in_order() {
    let redis = RedisServer::start();
    let w = Wrapper::on(&redis, "deploy");
    let first = acquire(&w, &["--ttl", TTL]);
    w.clone()
        .args(["acquire", "--ttl", TTL])
        .run()
        .expect_code(75);

    let a = w
        .clone()
        .args(["acquire", "--ttl", TTL, "--wait", "120s"])
        .spawn();
    wait_until(secs(30), "A queued", || status_json(&w)["queued"] == 1);
    let b = w
        .clone()
        .args(["acquire", "--ttl", TTL, "--wait", "120s"])
        .spawn();
    wait_until(secs(30), "B queued", || status_json(&w)["queued"] == 2);

    release(&w, &first.token).expect_code(0);
    let a = a.wait(secs(60));
    a.expect_code(0);
    let hold_a = hold_from(&w, &a.stdout);
    assert!(hold_a.fence > first.fence);
    std::thread::sleep(Duration::from_millis(TTL_MS));
    let mut b = b;
    assert!(b.is_running(), "B must still wait while A holds");

    release(&w, &hold_a.token).expect_code(0);
    let b = b.wait(secs(60));
    b.expect_code(0);
    let hold_b = hold_from(&w, &b.stdout);
    assert!(hold_b.fence > hold_a.fence);
    release(&w, &hold_b.token).expect_code(0);
}

/// A run's options that acquire takes too, given before `acquire` (an alias such as
/// `alias rl='redlock-run --redis R --wait 10m'`), are acquire's: `--wait` waits, `--ttl` is
/// the lease; given on both sides, the one after `acquire` wins.
#[test]
fn run_options_before_acquire_are_acquires() {
    let redis = RedisServer::start();
    let w = Wrapper::on(&redis, "deploy");
    let first = acquire(&w, &["--ttl", TTL]);
    let waiter = w
        .clone()
        .args(["--wait", "120s", "--ttl", "7s", "acquire"])
        .spawn();
    wait_until(secs(30), "the waiter queued", || {
        status_json(&w)["queued"] == 1
    });
    release(&w, &first.token).expect_code(0);
    let out = waiter.wait(secs(60));
    out.expect_code(0);
    let hold = hold_from(&w, &out.stdout);
    let pttl = redis.pttl("redlock:deploy");
    assert!(pttl > 0 && pttl <= 7000, "the lease is --ttl 7s: {pttl}");
    // Both sides: the one after acquire wins (--wait 0 after it: busy at once).
    w.clone()
        .args(["--wait", "120s", "acquire", "--wait", "0"])
        .run()
        .expect_code(75);
    release(&w, &hold.token).expect_code(0);
}

#[test]
fn a_killed_keeper_lets_the_lock_expire_and_release_says_lost() {
    let redis = RedisServer::start();
    let w = Wrapper::on(&redis, "deploy");
    let hold = acquire(&w, &["--ttl", TTL]);
    kill(Pid::from_raw(hold.keeper.pid()), Signal::SIGKILL).unwrap();
    let took = wait_until(secs(30), "the lock expires", || {
        !redis.exists("redlock:deploy")
    });
    assert!(took < secs(20), "{took:?}");
    let out = release(&w, &hold.token);
    out.expect_code(74)
        .expect_stderr_contains("was lost while held")
        .expect_stderr_contains("expired or been deleted before the release");
    // Lost is final.
    release(&w, &hold.token).expect_code(74);
}

/// The hold record gone (evicted, deleted) while the lock still holds the hold's token, or a
/// run's own token (REDLOCK_TOKEN inside its command, mutex or --limit): release leaves the
/// lock alone (4) and says it is held under this token, never "another token"; the hold is
/// then ended by `break --holder`. (Nothing a run cannot forge tells a keeper's lock from a
/// run's without the record: a run with --record-args can write the keeper's command text.)
#[test]
fn release_under_the_holders_own_token_without_a_record_is_refused_truthfully() {
    let redis = RedisServer::start();
    let w = Wrapper::on(&redis, "deploy");
    let hold = acquire(&w, &["--ttl", TTL]);
    redis.cli(&["DEL", "{redlock:deploy}:holds"]);
    release(&w, &hold.token)
        .expect_code(4)
        .expect_stderr_contains("is held under this token, but no hold of it is recorded");
    assert_eq!(
        redis.get("redlock:deploy").as_deref(),
        Some(hold.token.as_str())
    );
    w.clone()
        .args(["break", "--holder", &hold.token, "--yes"])
        .run()
        .expect_code(0);
    wait_until(secs(30), "the keeper ends", || {
        !pid_alive(hold.keeper.pid())
    });

    for limit in ["1", "2"] {
        let dir = scratch();
        let run = Wrapper::on(&redis, "nested")
            .args(["--limit", limit])
            .sh(&format!(
                "{} release --redis {} --key nested; echo $? > rc",
                wrapper_bin(),
                redis.url()
            ))
            .current_dir(dir.path())
            .run();
        run.expect_code(0)
            .expect_stderr_contains("is held under this token, but no hold of it is recorded");
        assert!(!run.stderr.contains("another token"), "{run}");
        assert!(
            !run.stderr.contains("  "),
            "one line, no runs of spaces: {run}"
        );
        assert_eq!(read_trimmed(&dir.path().join("rc")), "4", "--limit {limit}");
    }
}

/// A hold record this tool did not write (not JSON; JSON without its fields) under the
/// token: release refuses it (69) with its own words, never a Lua error, and leaves it and
/// the lock as they were.
#[test]
fn a_corrupt_hold_record_is_refused_and_left_alone() {
    let redis = RedisServer::start();
    let w = Wrapper::on(&redis, "cj");
    let token = "00000000-0000-4000-8000-000000000001";
    redis.cli(&["SET", "redlock:cj", token, "PX", "60000"]);
    for stored in ["notjson", r#"{"state":"held"}"#] {
        redis.cli(&["HSET", "{redlock:cj}:holds", token, stored]);
        let out = release(&w, token);
        out.expect_code(69)
            .expect_stderr_contains("unexpected reply to the hold record");
        assert!(!out.stderr.contains("user_script"), "{out}");
        assert_eq!(
            redis.cli(&["HGET", "{redlock:cj}:holds", token]).trim(),
            stored
        );
        assert_eq!(redis.get("redlock:cj").as_deref(), Some(token));
    }
}

#[test]
fn a_lock_deleted_under_the_keeper_ends_the_hold_and_release_says_why() {
    let redis = RedisServer::start();
    let w = Wrapper::on(&redis, "deploy");
    let hold = acquire(&w, &["--ttl", TTL]);
    redis.cli(&["DEL", "redlock:deploy"]);
    wait_until(secs(30), "the keeper ends", || {
        !pid_alive(hold.keeper.pid())
    });
    let out = release(&w, &hold.token);
    out.expect_code(74)
        .expect_stderr_contains("a renewal found the lock deleted");
}

#[test]
fn max_hold_releases_at_the_bound() {
    let redis = RedisServer::start();
    let w = Wrapper::on(&redis, "deploy");
    let hold = acquire(&w, &["--ttl", TTL, "--max-hold", "3s"]);
    wait_until(secs(30), "released at --max-hold", || {
        !redis.exists("redlock:deploy")
    });
    wait_until(secs(10), "the keeper ends", || {
        !pid_alive(hold.keeper.pid())
    });
    let out = release(&w, &hold.token);
    out.expect_code(74)
        .expect_stderr_contains("ended at its --max-hold")
        .expect_stderr_contains("--max-hold 3s reached");
    assert_eq!(status_json(&w)["last_run"]["outcome"], "timed-out");
}

#[test]
fn release_with_another_token_is_refused_and_leaves_the_lock() {
    let redis = RedisServer::start();
    let w = Wrapper::on(&redis, "deploy");
    let hold = acquire(&w, &["--ttl", TTL]);
    let other = "3f1c8f3e-0000-4000-8000-000000000000";
    release(&w, other)
        .expect_code(4)
        .expect_stderr_contains("held by another token");
    release(&w, "not-a-token").expect_code(2);
    w.clone().arg("release").run().expect_code(2);
    assert_eq!(
        redis.get("redlock:deploy").as_deref(),
        Some(hold.token.as_str())
    );
    assert!(pid_alive(hold.keeper.pid()));
    release(&w, &hold.token).expect_code(0);
    // Free, and an unknown token: nothing to release.
    release(&w, other).expect_code(3);
}

#[test]
fn the_step_shell_exits_and_the_outputs_carry_the_hold() {
    let redis = RedisServer::start();
    let dir = scratch();
    let (gh_out, gh_env, dotenv) = (
        dir.path().join("gh_output"),
        dir.path().join("gh_env"),
        dir.path().join("hold.env"),
    );
    // A CI step: eval the output in a shell that then ends; the keeper holds on.
    let script = format!(
        "eval \"$(\"$BIN\" acquire --redis {} --key 'it'\\''s' --ttl {TTL} --github --dotenv {})\" \
         && echo \"$REDLOCK_TOKEN $REDLOCK_FENCE $REDLOCK_KEY\" > vars",
        redis.url(),
        dotenv.display()
    );
    let step = Wrapper::new()
        .env("BIN", wrapper_bin())
        .env("GITHUB_OUTPUT", &gh_out)
        .env("GITHUB_ENV", &gh_env)
        .current_dir(dir.path())
        .run_via_shell(&script);
    step.expect_code(0);
    let vars = read_trimmed(&dir.path().join("vars"));
    let mut words = vars.splitn(3, ' ');
    let (token, fence, key) = (
        words.next().unwrap().to_owned(),
        words.next().unwrap().to_owned(),
        words.next().unwrap().to_owned(),
    );
    assert_eq!(key, "redlock:it's");
    let w = Wrapper::on(&redis, "it's");
    let hold = hold_from(
        &w,
        &format!(
            "export REDLOCK_TOKEN='{token}'\nexport REDLOCK_FENCE='{fence}'\nexport REDLOCK_KEY='redlock:it'\\''s'\n"
        ),
    );
    std::thread::sleep(Duration::from_millis(2 * TTL_MS));
    assert_eq!(redis.get("redlock:it's").as_deref(), Some(token.as_str()));

    let output = std::fs::read_to_string(&gh_out).unwrap();
    assert_eq!(output, format!("token={token}\nfence={fence}\nkey={key}\n"));
    let env = std::fs::read_to_string(&gh_env).unwrap();
    assert_eq!(
        env,
        format!("REDLOCK_TOKEN={token}\nREDLOCK_FENCE={fence}\nREDLOCK_KEY={key}\n")
    );
    assert_eq!(std::fs::read_to_string(&dotenv).unwrap(), env);

    // A later step with the GitHub environment: REDLOCK_KEY (the full key) and REDLOCK_TOKEN.
    let later = Wrapper::new()
        .args(["release", "--redis", &redis.url()])
        .env("REDLOCK_KEY", &key)
        .env("REDLOCK_TOKEN", &token)
        .run();
    later.expect_code(0);
    assert!(!redis.exists("redlock:it's"));
    wait_until(secs(20), "the keeper ends", || {
        !pid_alive(hold.keeper.pid())
    });

    // --github outside GitHub Actions: a usage error before anything is taken.
    Wrapper::on(&redis, "x")
        .args(["acquire", "--github"])
        .run()
        .expect_code(2)
        .expect_stderr_contains("GITHUB_OUTPUT is not set");
    assert!(!redis.exists("redlock:x"));
}

/// Acquire, three ttls, release, on another topology.
fn across_steps_on(w: &Wrapper, holds: impl Fn(&str) -> bool) {
    let hold = acquire(w, &["--ttl", TTL]);
    std::thread::sleep(Duration::from_millis(3 * TTL_MS + 500));
    assert!(holds(&hold.token), "still held after three ttls");
    release(w, "3f1c8f3e-0000-4000-8000-000000000000").expect_code(4);
    release(w, &hold.token).expect_code(0);
    assert!(!holds(&hold.token));
    wait_until(secs(20), "the keeper ends", || {
        !pid_alive(hold.keeper.pid())
    });
    kill_and_release_lost(w);
}

/// A keeper SIGKILLed: release says lost once the lease ran out.
fn kill_and_release_lost(w: &Wrapper) {
    let hold = acquire(w, &["--ttl", TTL]);
    kill(Pid::from_raw(hold.keeper.pid()), Signal::SIGKILL).unwrap();
    wait_until(secs(30), "the lock expires", || {
        status_json(w)["held"] == false
    });
    release(w, &hold.token).expect_code(74);
}

#[test]
fn sentinel_holds_across_steps() {
    let set = SentinelSet::start(1);
    let w = set.wrapper("deploy");
    across_steps_on(&w, |token| {
        status_json(&w)["held"] == true && token.len() == 36
    });
}

#[test]
fn cluster_holds_across_steps_in_the_lock_slot() {
    let cluster = Cluster::start(3, 0);
    let w = cluster.wrapper("deploy");
    let owner = cluster.owner_of("redlock:deploy");
    across_steps_on(&w, |token| {
        cluster.nodes[owner].get("redlock:deploy").as_deref() == Some(token)
    });
}

#[test]
fn redlock_holds_across_steps() {
    let nodes = Nodes::start(3);
    let w = nodes.wrapper("deploy");
    across_steps_on(&w, |token| {
        nodes
            .servers
            .iter()
            .filter(|s| s.get("redlock:deploy").as_deref() == Some(token))
            .count()
            >= 2
    });
}

/// The YAML blocks of docs/ci.md: (GitHub Actions, GitLab CI).
fn ci_examples() -> (String, String) {
    let page = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/ci.md"),
    )
    .unwrap();
    let mut blocks = page
        .split("```yaml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap().to_owned());
    (blocks.next().unwrap(), blocks.next().unwrap())
}

/// The values of `key:` lines (`run:`) or the items of `key:` lists (`script:`), in order:
/// a line-based reading of the examples' simple YAML.
fn yaml_values(yaml: &str, key: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut list_indent: Option<usize> = None;
    for line in yaml.lines() {
        let indent = line.len() - line.trim_start().len();
        let text = line.trim_start().trim_start_matches("- ");
        if let Some(at) = list_indent {
            if indent > at && line.trim_start().starts_with("- ") {
                out.push(line.trim_start()[2..].to_owned());
                continue;
            }
            list_indent = None;
        }
        if let Some(value) = text.strip_prefix(&format!("{key}:")) {
            if value.trim().is_empty() {
                list_indent = Some(indent);
            } else {
                out.push(value.trim().to_owned());
            }
        }
    }
    out
}

/// The YAML parses (PyYAML, when python3 has it) and says what the line-based reading says.
fn check_yaml(yaml: &str, path: &str, lines: &[String]) {
    let probe = std::process::Command::new("python3")
        .args(["-c", "import yaml"])
        .status();
    if !probe.is_ok_and(|s| s.success()) {
        eprintln!("python3 with PyYAML not found: the YAML is read line by line only");
        return;
    }
    let script = format!(
        "import sys, json, yaml\ndoc = yaml.safe_load(sys.stdin)\nprint(json.dumps({path}))"
    );
    let mut child = std::process::Command::new("python3")
        .args(["-c", &script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(yaml.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "the YAML does not parse:\n{yaml}");
    let parsed: Vec<String> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(parsed, lines, "{yaml}");
}

/// A directory with `redlock-run` (the binary under test) and the examples' scripts.
fn ci_bin_dir(dir: &std::path::Path) {
    std::os::unix::fs::symlink(wrapper_bin(), dir.join("redlock-run")).unwrap();
    for script in ["migrate.sh", "deploy.sh"] {
        let path = dir.join(script);
        std::fs::write(&path, format!("#!/bin/sh\necho \"$1\" >> {script}.ran\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// The GitHub Actions example, step by step as a runner runs it: each `run:` a shell of its
/// own, `$GITHUB_ENV` read into the next steps' environment, `uses:` steps skipped.
#[test]
fn the_github_actions_example_runs() {
    let (github, _) = ci_examples();
    let runs = yaml_values(&github, "run");
    check_yaml(
        &github,
        "[s['run'] for s in doc['jobs']['deploy']['steps'] if 'run' in s]",
        &runs,
    );
    // The install step puts the static build on a runner; here the test's binary is on PATH.
    let runs: Vec<String> = runs
        .into_iter()
        .filter(|r| !r.contains("install -m755"))
        .collect();
    assert_eq!(runs.len(), 4, "{runs:?}");
    let redis = RedisServer::start();
    let dir = scratch();
    ci_bin_dir(dir.path());
    let (gh_out, gh_env) = (dir.path().join("output"), dir.path().join("env"));
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap()
    );
    let mut keeper = None;
    for (i, run) in runs.iter().enumerate() {
        let mut step = Wrapper::new()
            .env("PATH", &path)
            .env("REDLOCK_REDIS", redis.url())
            .env("GITHUB_OUTPUT", &gh_out)
            .env("GITHUB_ENV", &gh_env)
            .current_dir(dir.path());
        for line in std::fs::read_to_string(&gh_env).unwrap_or_default().lines() {
            let (k, v) = line.split_once('=').unwrap();
            step = step.env(k, v);
        }
        let out = step.run_via_shell(run);
        out.expect_code(0);
        // A bare `status` in a later step finds the hold by its environment.
        if run.starts_with("redlock-run status") {
            assert!(out.stdout.contains("held by"), "{out}");
        }
        if i == 0 {
            keeper = Some(PidGuard::new(
                status_json(&Wrapper::on(&redis, "deploy:prod"))["pid"]
                    .as_i64()
                    .unwrap() as i32,
            ));
            assert!(redis.exists("redlock:deploy:prod"));
        }
    }
    let fence = read_trimmed(&dir.path().join("migrate.sh.ran"));
    assert!(
        std::fs::read_to_string(&gh_out)
            .unwrap()
            .contains(&format!("fence={fence}\n"))
    );
    assert!(!redis.exists("redlock:deploy:prod"));
    let keeper = keeper.unwrap().pid();
    wait_until(secs(20), "the keeper ends", || !pid_alive(keeper));
}

/// The GitLab example: `before_script` and `script` in one shell, `after_script` in another.
#[test]
fn the_gitlab_example_runs() {
    let (_, gitlab) = ci_examples();
    let before = yaml_values(&gitlab, "before_script");
    let script = yaml_values(&gitlab, "script");
    let after = yaml_values(&gitlab, "after_script");
    check_yaml(&gitlab, "doc['deploy']['before_script']", &before);
    check_yaml(&gitlab, "doc['deploy']['script']", &script);
    check_yaml(&gitlab, "doc['deploy']['after_script']", &after);
    assert!(gitlab.contains("dotenv: redlock.env"));
    let redis = RedisServer::start();
    let dir = scratch();
    ci_bin_dir(dir.path());
    let path = format!(
        "{}:{}",
        dir.path().display(),
        std::env::var("PATH").unwrap()
    );
    let shell = |lines: &[String]| {
        Wrapper::new()
            .env("PATH", &path)
            .env("REDLOCK_REDIS", redis.url())
            .current_dir(dir.path())
            .run_via_shell(&format!("set -e\n{}", lines.join("\n")))
    };
    let main: Vec<String> = before.iter().chain(&script).cloned().collect();
    shell(&main).expect_code(0);
    let keeper = PidGuard::new(
        status_json(&Wrapper::on(&redis, "deploy:prod"))["pid"]
            .as_i64()
            .unwrap() as i32,
    );
    let fence = read_trimmed(&dir.path().join("deploy.sh.ran"));
    assert!(
        std::fs::read_to_string(dir.path().join("redlock.env"))
            .unwrap()
            .contains(&format!("REDLOCK_FENCE={fence}\n"))
    );
    shell(&after).expect_code(0);
    assert!(!redis.exists("redlock:deploy:prod"));
    wait_until(secs(20), "the keeper ends", || !pid_alive(keeper.pid()));
}

#[test]
fn limit_holds_take_permits_and_release_their_own() {
    let redis = RedisServer::start();
    let w = Wrapper::on(&redis, "backups");
    let a = acquire(&w, &["--ttl", TTL, "--limit", "2"]);
    let b = acquire(&w, &["--ttl", TTL, "--limit", "2"]);
    w.clone()
        .args(["acquire", "--ttl", TTL, "--limit", "2"])
        .run()
        .expect_code(75);
    std::thread::sleep(Duration::from_millis(2 * TTL_MS));
    release(&w, &a.token).expect_code(0);
    let c = acquire(&w, &["--ttl", TTL, "--limit", "2"]);
    release(&w, &b.token).expect_code(0);
    release(&w, &c.token).expect_code(0);
    release(&w, &a.token).expect_code(3);
}

#[test]
fn a_signal_ends_the_wait_of_acquire_and_its_keeper() {
    let redis = RedisServer::start();
    let w = Wrapper::on(&redis, "deploy");
    let first = acquire(&w, &["--ttl", TTL]);
    let waiting = w
        .clone()
        .args(["acquire", "--ttl", TTL, "--wait", "120s"])
        .spawn();
    wait_until(secs(30), "queued", || status_json(&w)["queued"] == 1);
    waiting.signal(Signal::SIGTERM);
    let out = waiting.wait(secs(30));
    out.expect_code(128 + 15);
    assert!(out.stdout.is_empty(), "{out}");
    wait_until(secs(10), "the waiter left the queue", || {
        status_json(&w)["queued"] == 0
    });
    release(&w, &first.token).expect_code(0);
    assert!(!redis.exists("redlock:deploy"));
}

#[test]
fn old_hold_records_are_dropped_by_the_next_acquire() {
    let redis = RedisServer::start();
    let w = Wrapper::on(&redis, "deploy");
    let stale = r#"{"state":"released","host":"h","pid":1,"id":"x","fence":"1","since_ms":"1000","until_ms":"2000","ended_ms":"1500","reason":""}"#;
    redis.cli(&["HSET", "{redlock:deploy}:holds", "stale-token", stale]);
    let hold = acquire(&w, &["--ttl", TTL]);
    let fields = redis.cli(&["HKEYS", "{redlock:deploy}:holds"]);
    assert_eq!(fields.trim(), hold.token, "{fields}");
    let ttl = redis.pttl("{redlock:deploy}:holds");
    assert!(ttl > 3_600_000, "kept for --max-hold and a day: {ttl}");
    release(&w, &hold.token).expect_code(0);
}

/// A later step that has only the hold's environment (REDLOCK_KEY, the full key, and
/// REDLOCK_TOKEN) and the config file finds the hold: its `status` and `release` read the
/// lock name's section (here the only place the lock's Redis is named), not a key with the
/// prefix twice.
#[test]
fn a_later_step_finds_the_hold_by_its_environment_and_config_section() {
    let redis = RedisServer::start();
    let dir = scratch();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "redis = \"redis://127.0.0.1:1\"\n[lock.\"deploy:prod\"]\nredis = \"{}\"\n",
            redis.url()
        ),
    )
    .unwrap();
    let first = Wrapper::new()
        .env("REDLOCK_CONFIG", &config)
        .args(["acquire", "--key", "deploy:prod", "--max-hold", "2m"])
        .run();
    first.expect_code(0);
    let vars = exported(&first.stdout);
    let later = || {
        let mut w = Wrapper::new().env("REDLOCK_CONFIG", &config);
        for (name, value) in &vars {
            w = w.env(name, value);
        }
        w
    };
    let status = later().args(["status", "--json"]).run();
    status.expect_code(0);
    let json = parse_json(&status.stdout);
    assert_eq!(json["held"], true, "{status}");
    assert_eq!(json["key"], "redlock:deploy:prod", "{status}");
    later().arg("release").run().expect_code(0);
    assert!(!redis.exists("redlock:deploy:prod"));
}

/// The keeper inherits none of the step's descriptors: a pipe the step passed on (here fd 9,
/// read by `cat` to its end, as a CI runner or `$(...)` reads) closes when `acquire` exits,
/// not when the keeper ends; and the keeper leaves the step's working directory.
#[test]
fn the_keeper_keeps_none_of_the_steps_descriptors() {
    let redis = RedisServer::start();
    let script = format!(
        "{{ REDLOCK_CONFIG= {} acquire --redis {} --key fds --max-hold 2m >/dev/null; }} 9>&1 | cat",
        wrapper_bin(),
        redis.url()
    );
    let started = std::time::Instant::now();
    let mut shell = std::process::Command::new("sh")
        .args(["-c", &script])
        .spawn()
        .unwrap();
    let status = loop {
        if let Some(status) = shell.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > secs(60) {
            let _ = shell.kill();
            panic!("the pipeline waited for the keeper");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let w = Wrapper::on(&redis, "fds");
    let json = status_json(&w);
    let pid = json["pid"].as_i64().expect("the keeper holds") as i32;
    let keeper = PidGuard::new(pid);
    assert_eq!(
        std::fs::read_link(format!("/proc/{pid}/cwd")).unwrap(),
        std::path::Path::new("/")
    );
    drop(keeper);
}

/// The keeper's command line (`/proc/PID/cmdline`, which every user of the host can read
/// while the hold lasts) shows no password given in a `--redis` URL: `acquire`'s arguments
/// reach the keeper in its environment. It still authenticates when it reconnects (its
/// connections killed under it, it renews on new ones), and `release` ends it.
#[test]
fn the_keepers_command_line_shows_no_password_and_it_renews_after_a_reconnect() {
    let redis = RedisServer::start_with(&["--requirepass", "Sekr3tPw"]);
    let url = format!("redis://:Sekr3tPw@127.0.0.1:{}", redis.port());
    let w = Wrapper::new().args(["--redis", &url, "--key", "deploy"]);
    let hold = acquire(&w, &["--ttl", TTL]);
    let keeper = hold.keeper.pid();
    let cmdline =
        String::from_utf8_lossy(&std::fs::read(format!("/proc/{keeper}/cmdline")).unwrap())
            .replace('\0', " ");
    assert!(!cmdline.contains("Sekr3tPw"), "{cmdline}");
    assert!(
        cmdline.contains("redlock:deploy"),
        "names the lock: {cmdline}"
    );

    // Every client connection closed: the keeper's next renewals need a new one, with AUTH.
    redis.cli(&["CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes"]);
    let mut last = redis.pttl("redlock:deploy");
    let mut renewals = 0;
    wait_until(secs(30), "two renewals after the reconnect", || {
        let now = redis.pttl("redlock:deploy");
        if now > last {
            renewals += 1;
        }
        last = now;
        renewals >= 2
    });
    assert_eq!(
        redis.get("redlock:deploy").as_deref(),
        Some(hold.token.as_str())
    );
    assert!(pid_alive(keeper));

    release(&w, &hold.token)
        .expect_code(0)
        .expect_stderr_contains("released redlock:deploy");
    assert!(!redis.exists("redlock:deploy"));
    wait_until(secs(20), "the keeper ends after the release", || {
        !pid_alive(keeper)
    });
}

/// A --max-hold that is not longer than --ttl would end the hold before its first lease
/// (`--max-hold 1ms` exited 0, "acquired", and the hold ended at once): a usage error before
/// anything is taken.
#[test]
fn a_max_hold_not_longer_than_the_ttl_is_refused() {
    let redis = RedisServer::start();
    let w = Wrapper::on(&redis, "deploy");
    for (ttl, max_hold) in [("30s", "1ms"), (TTL, "2s"), (TTL, "1s")] {
        let out = w
            .clone()
            .args(["acquire", "--ttl", ttl, "--max-hold", max_hold])
            .run();
        out.expect_code(2)
            .expect_stderr_contains("--max-hold")
            .expect_stderr_contains("longer than --ttl");
        out.expect_one_line();
        assert!(out.stdout.is_empty(), "{out}");
        assert!(!redis.exists("redlock:deploy"), "{out}");
    }
    // The default --ttl (30s) against the environment's --max-hold.
    w.clone()
        .env("REDLOCK_MAX_HOLD", "30s")
        .arg("acquire")
        .run()
        .expect_code(2)
        .expect_stderr_contains("longer than --ttl");
    assert!(!redis.exists("redlock:deploy"));
}

/// Two `release`s of one hold at the same time: the one whose compare-and-delete released the
/// lock exits 0, the other 3 (nothing to release: released already), never 74 for either, nor
/// 0 for both. Both go through a proxy that delays every request by 300 ms, so that their
/// steps (claim the record, release the lock, end the record) meet: both claim before either
/// releases, and the record's end comes after both releases. A `--limit` hold (a permit) too.
#[test]
fn two_releases_at_once_one_releases_and_the_other_finds_nothing() {
    let redis = RedisServer::start();
    let w = Wrapper::on(&redis, "deploy");
    let proxy = crate::common::proxy::FaultProxy::start(
        format!("127.0.0.1:{}", redis.port()).parse().unwrap(),
    );
    proxy.set_latency(crate::common::proxy::Dir::Up, ms(300));
    let via = Wrapper::new().args(["--redis", &proxy.url(), "--key", "deploy"]);
    let limit: &[&str] = &["--ttl", TTL, "--limit", "2"];
    for (round, args) in [&["--ttl", TTL][..], &["--ttl", TTL], limit]
        .iter()
        .enumerate()
    {
        let hold = acquire(&w, args);
        let releases: Vec<Running> = (0..2)
            .map(|_| {
                via.clone()
                    .args(["release", "--token", &hold.token])
                    .spawn()
            })
            .collect();
        let mut codes: Vec<Option<i32>> = Vec::new();
        let mut outs = Vec::new();
        for r in releases {
            let out = r.wait(secs(60));
            codes.push(out.code());
            outs.push(out);
        }
        codes.sort();
        assert_eq!(
            codes,
            [Some(0), Some(3)],
            "round {round}: {}\n{}",
            outs[0],
            outs[1]
        );
        let loser = outs.iter().find(|o| o.code() == Some(3)).unwrap();
        loser.expect_stderr_contains("nothing to release");
        assert_eq!(status_json(&w)["held"], false, "round {round}");
        wait_until(secs(20), "the keeper ends", || {
            !pid_alive(hold.keeper.pid())
        });
        release(&w, &hold.token).expect_code(3);
    }
}

/// `release` after `break` took the lock from the hold (before the keeper's next renewal
/// could notice): exit 74, saying who broke it and when, as a run's lost message does; for a
/// mutex and a `--limit` permit.
#[test]
fn release_after_a_break_says_who_broke_the_hold() {
    let redis = RedisServer::start();
    let host = nix::unistd::gethostname()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // A long heartbeat: the release comes before the keeper's next renewal.
    let lease = ["--ttl", "60s", "--heartbeat", "20s", "--grace", "5s"];
    for limit in ["1", "2"] {
        let w = Wrapper::on(&redis, "deploy");
        let hold = acquire(&w, &[&lease[..], &["--limit", limit]].concat());
        w.clone()
            .args(["break", "--holder", &hold.token])
            .run()
            .expect_code(0);
        let out = release(&w, &hold.token);
        out.expect_code(74);
        out.expect_stderr_contains("was lost while held")
            .expect_stderr_contains(&format!("broken by {host} at "))
            .expect_stderr_contains("redlock-run break");
        assert!(!out.stderr.contains("expired or been deleted"), "{out}");
        out.expect_one_line();
        // Lost is final; release stops the keeper (on this host) that had not noticed yet.
        release(&w, &hold.token)
            .expect_code(74)
            .expect_stderr_contains(&format!("broken by {host} at "));
        wait_until(secs(20), "the keeper ends", || {
            !pid_alive(hold.keeper.pid())
        });
    }
}

/// A shell that still has the hold's REDLOCK_KEY and REDLOCK_TOKEN after `release` (an
/// `eval` of acquire's output) runs `redlock-run` on the same lock: refused (exit 2) with a
/// message that is true after the release too (the environment names a hold of that lock;
/// unset the variables), not "already runs under the lock".
#[test]
fn a_run_after_the_release_in_the_holds_environment_is_told_to_unset_it() {
    let redis = RedisServer::start();
    let dir = scratch();
    let script = format!(
        "eval \"$(\"$BIN\" acquire --redis {url} --key deploy --ttl {TTL})\" || exit 9\n\
         \"$BIN\" release --redis {url} || exit 8\n\
         \"$BIN\" --redis {url} --key deploy -- true; echo \"keyed $?\" > codes\n\
         \"$BIN\" --redis {url} -- true; echo \"bare $?\" >> codes\n\
         unset REDLOCK_KEY REDLOCK_TOKEN\n\
         \"$BIN\" --redis {url} --key deploy -- true; echo \"unset $?\" >> codes",
        url = redis.url()
    );
    let out = Wrapper::new()
        .env("BIN", wrapper_bin())
        .current_dir(dir.path())
        .run_via_shell(&script);
    out.expect_code(0);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("codes")).unwrap(),
        "keyed 2\nbare 2\nunset 0\n",
        "{out}"
    );
    assert!(!out.stderr.contains("already runs under"), "{out}");
    assert_eq!(
        out.stderr.matches("unset REDLOCK_TOKEN").count(),
        2,
        "{out}"
    );
}
