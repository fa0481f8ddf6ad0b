//! Real processes under a real `Tree`. The cgroup mode runs in this process (skipped, with
//! a message, where no cgroup can be made). The /proc mode needs a subreaper with no other
//! children, which a test binary running tests in parallel is not: those tests run this
//! binary again as a helper process (`helper_process`, a no-op unless
//! `REDLOCK_TREE_TEST_HELPER` names a scenario) that reports on stdout in `@@ key value`
//! lines. Every process a test starts is killed at the end even when it fails: the `Tree`
//! itself kills on drop, `Cleanup` kills what was reported (checked by start time).

use super::cgroup::Cgroup;
use super::proc::{is_dead_state, is_live, is_stopped, scan, wait_until};
use super::*;
use std::cell::RefCell;
use std::collections::HashMap;
use std::fs;
use std::io::Read;
use std::path::PathBuf;
use std::time::Instant;

use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::getpid;
use std::io::{BufRead, BufReader};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Mutex};

const HELPER_ENV: &str = "REDLOCK_TREE_TEST_HELPER";
/// The bound of every wait in these tests.
const BOUND: Duration = Duration::from_secs(10);

/// Three ways out of the process group: a new session, `timeout(1)`'s own group, and a
/// double fork whose middle process exits. Each prints its pid; the leader stays.
const ESCAPES: &str = r#"
setsid sleep 60 </dev/null >/dev/null 2>&1 &
echo "setsid $!"
sh -c 'sleep 60 </dev/null >/dev/null 2>&1 & echo "double $! $$"'
timeout 60 sleep 60 </dev/null >/dev/null 2>&1 &
echo "timeout $!"
echo ready
exec sleep 60 >/dev/null 2>&1
"#;

/// Forks while it is being killed: 300 double-forked sleeps.
const FORKER: &str = r#"
i=0
while [ $i -lt 300 ]; do
  (sleep 60 </dev/null >/dev/null 2>&1 &)
  i=$((i+1))
done
exec sleep 60
"#;

/// A process, by pid and start time (pids are reused).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Proc {
    pid: i32,
    start: u64,
}

impl Proc {
    fn of(pid: i32) -> Option<Proc> {
        read_stat(pid).map(|s| Proc {
            pid,
            start: s.start,
        })
    }

    fn parse(word: &str) -> Proc {
        let (pid, start) = word.split_once(':').expect("pid:start");
        Proc {
            pid: pid.parse().unwrap(),
            start: start.parse().unwrap(),
        }
    }

    fn running(self) -> bool {
        read_stat(self.pid).is_some_and(|s| s.start == self.start && is_live(&s))
    }

    /// Parent, process group, session.
    fn ids(self) -> Option<(i32, i32, i32)> {
        read_stat(self.pid).map(|s| (s.ppid, s.pgrp, s.session))
    }
}

impl fmt::Display for Proc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.pid, self.start)
    }
}

/// SIGKILL, at drop, to every listed process still running.
#[derive(Default)]
struct Cleanup(RefCell<Vec<Proc>>);

impl Cleanup {
    fn add(&self, p: Proc) {
        self.0.borrow_mut().push(p);
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        for p in self.0.borrow().iter() {
            if p.running() {
                let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
            }
        }
    }
}

/// A child that is killed and reaped at drop unless it was waited for.
struct Kid(Option<Child>);

impl Kid {
    fn new(child: Child) -> Kid {
        Kid(Some(child))
    }

    fn pid(&self) -> i32 {
        self.0.as_ref().unwrap().id() as i32
    }

    /// Wait, bounded; panics if it does not end.
    fn wait(&mut self) -> ExitStatus {
        let child = self.0.as_mut().unwrap();
        let mut status = None;
        let ended = wait_until(BOUND, || {
            status = child.try_wait().unwrap();
            status.is_some()
        });
        assert!(ended, "pid {} did not end", child.id());
        self.0 = None;
        status.unwrap()
    }
}

impl Drop for Kid {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Lines of `out`, read on a thread so that every read can be bounded.
fn line_channel(out: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

fn assert_all_gone(procs: &[Proc], what: &str) {
    let gone = wait_until(BOUND, || procs.iter().all(|p| !p.running()));
    let left: Vec<_> = procs.iter().filter(|p| p.running()).collect();
    assert!(gone, "{what}: still running after {BOUND:?}: {left:?}");
}

/// The processes of `ESCAPES`, once each has really left the leader's group or parent.
struct Escapes {
    leader: Kid,
    setsid: Proc,
    double: Proc,
    timeout: Proc,
}

impl Escapes {
    fn procs(&self) -> Vec<Proc> {
        vec![
            Proc::of(self.leader.pid()).unwrap(),
            self.setsid,
            self.double,
            self.timeout,
        ]
    }
}

fn spawn_joined(tree: &Tree, script: &str, env: &[(&str, &Path)]) -> (Kid, ChildStdout) {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .envs(env.iter().map(|(k, v)| (k, v)));
    let join = tree.pre_exec_join().unwrap();
    // SAFETY: the closure makes one write(2) on a descriptor it owns.
    unsafe {
        cmd.pre_exec(join);
    }
    let mut child = cmd.spawn().expect("spawn sh");
    let out = child.stdout.take().unwrap();
    (Kid(Some(child)), out)
}

fn start_escapes(tree: &Tree, cleanup: &Cleanup) -> Escapes {
    let (leader, out) = spawn_joined(tree, ESCAPES, &[]);
    let lead = Proc::of(leader.pid()).expect("leader in /proc");
    cleanup.add(lead);
    let lines = line_channel(out);
    let mut pid_of = HashMap::new();
    let mut inner_sh = 0;
    let start = Instant::now();
    loop {
        let left = BOUND.saturating_sub(start.elapsed());
        let line = lines.recv_timeout(left).expect("the script says ready");
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["ready"] => break,
            [name, pid, rest @ ..] => {
                let p = Proc::of(pid.parse().unwrap()).expect("escape in /proc");
                cleanup.add(p);
                pid_of.insert(name.to_string(), p);
                if let [sh] = rest {
                    inner_sh = sh.parse().unwrap();
                }
            }
            _ => panic!("unexpected line {line:?}"),
        }
    }
    let esc = Escapes {
        leader,
        setsid: pid_of["setsid"],
        double: pid_of["double"],
        timeout: pid_of["timeout"],
    };
    let (_, lead_pgrp, lead_sid) = lead.ids().unwrap();
    // Each has done what makes it an escape (they run concurrently with the script).
    let escaped = wait_until(BOUND, || {
        let ids = |p: Proc| p.ids().unwrap_or_default();
        ids(esc.setsid).2 != lead_sid
            && ids(esc.timeout).1 != lead_pgrp
            && ids(esc.double).0 != inner_sh
    });
    assert!(escaped, "the escapes did not happen");
    // timeout's own child: in the tree too.
    let has_timeout_child = wait_until(BOUND, || {
        scan()
            .iter()
            .any(|s| s.ppid == esc.timeout.pid && !is_dead_state(s.state))
    });
    assert!(has_timeout_child, "timeout started no child");
    for pid in tree.pids() {
        if let Some(p) = Proc::of(pid.as_raw()) {
            cleanup.add(p);
        }
    }
    esc
}

/// Every escape is a member, then gone after `kill_all`.
fn kill_escapes(tree: &Tree, cleanup: &Cleanup) -> (Vec<Proc>, Escapes) {
    let mut esc = start_escapes(tree, cleanup);
    let members: Vec<Proc> = tree
        .pids()
        .iter()
        .filter_map(|p| Proc::of(p.as_raw()))
        .collect();
    for p in esc.procs() {
        assert!(members.contains(&p), "{p} not in the tree: {members:?}");
    }
    assert!(members.len() >= 5, "leader, 3 escapes, timeout's child");
    assert!(!tree.is_empty());
    tree.kill_all().expect("kill_all");
    assert_all_gone(&members, "after kill_all");
    assert!(tree.wait_empty(BOUND), "the tree is empty");
    assert!(tree.pids().is_empty());
    let status = esc.leader.wait();
    assert_eq!(status.signal(), Some(libc::SIGKILL), "{status:?}");
    (members, esc)
}

fn cgroup_tree(test: &str) -> Option<Tree> {
    match Tree::with_cgroup() {
        Ok(tree) => Some(tree),
        Err(e) => {
            eprintln!("{test}: skipped, no cgroup mode here: {e}");
            None
        }
    }
}

// -- cgroup mode, in this process -------------------------------------------------------

#[test]
fn cgroup_kill_all_stops_every_escape() {
    let Some(tree) = cgroup_tree("cgroup_kill_all_stops_every_escape") else {
        return;
    };
    assert_eq!(tree.mode(), Mode::Cgroup);
    assert_eq!(tree.fallback_reason(), None);
    let dir = tree.cgroup_dir().unwrap().to_path_buf();
    assert!(dir.join("cgroup.kill").exists());
    let cleanup = Cleanup::default();
    kill_escapes(&tree, &cleanup);
    let guard = tree.guard_pid().expect("a guard");
    let guard = Proc::of(guard.as_raw()).expect("the guard runs");
    assert!(guard.running());
    tree.remove().expect("remove");
    assert!(!dir.exists(), "{} removed", dir.display());
    assert_all_gone(&[guard], "the guard after remove");
}

#[test]
fn cgroup_freeze_thaw_and_signal_all() {
    let Some(tree) = cgroup_tree("cgroup_freeze_thaw_and_signal_all") else {
        return;
    };
    let cleanup = Cleanup::default();
    let mut esc = start_escapes(&tree, &cleanup);
    tree.freeze().expect("frozen");
    assert_eq!(tree.cgroup_events(), (true, true));
    tree.thaw().unwrap();
    assert!(tree_cgroup(&tree).wait_events(BOUND, |(_, frozen)| !frozen));
    let members = tree.pids().len();
    assert!(members >= 5, "{members}");
    // SIGTERM reaches the other session and timeout's group (which passes it on).
    assert_eq!(tree.signal_all(Signal::SIGTERM), members);
    assert_all_gone(&esc.procs(), "after SIGTERM");
    assert!(tree.wait_empty(BOUND));
    assert_eq!(esc.leader.wait().signal(), Some(libc::SIGTERM));
}

#[test]
fn cgroup_kill_all_kills_a_frozen_tree() {
    let Some(tree) = cgroup_tree("cgroup_kill_all_kills_a_frozen_tree") else {
        return;
    };
    let cleanup = Cleanup::default();
    let mut esc = start_escapes(&tree, &cleanup);
    tree.freeze().expect("frozen");
    tree.kill_all().unwrap();
    assert_all_gone(&esc.procs(), "frozen, then cgroup.kill");
    assert!(tree.wait_empty(BOUND));
    assert_eq!(esc.leader.wait().signal(), Some(libc::SIGKILL));
    let dir = tree.cgroup_dir().unwrap().to_path_buf();
    tree.remove().expect("a frozen empty cgroup can be removed");
    assert!(!dir.exists());
}

/// A join that fails makes the spawn fail with its errno, before exec.
#[test]
fn cgroup_failed_join_fails_the_spawn() {
    let Some(tree) = cgroup_tree("cgroup_failed_join_fails_the_spawn") else {
        return;
    };
    fs::remove_dir(tree.cgroup_dir().unwrap()).unwrap();
    let mut cmd = Command::new("true");
    let join = tree.pre_exec_join().unwrap();
    // SAFETY: the closure makes one write(2) on a descriptor it owns.
    unsafe {
        cmd.pre_exec(join);
    }
    let err = cmd.spawn().map(Kid::new).err().expect("the spawn fails");
    assert_eq!(err.raw_os_error(), Some(libc::ENODEV), "{err}");
    assert!(tree.is_empty());
    tree.remove().expect("already gone is fine");
}

#[test]
fn cgroup_nested_cgroups_are_counted_killed_and_removed() {
    let Some(tree) = cgroup_tree("cgroup_nested_cgroups_are_counted_killed_and_removed") else {
        return;
    };
    let cleanup = Cleanup::default();
    let dir = tree.cgroup_dir().unwrap().to_path_buf();
    // What a nested redlock-run does: a cgroup inside ours, and moves into it.
    let script = r#"mkdir "$CG/inner" && echo 0 > "$CG/inner/cgroup.procs" && echo ready &&
        exec sleep 60 >/dev/null"#;
    let (mut leader, out) = spawn_joined(&tree, script, &[("CG", &dir)]);
    cleanup.add(Proc::of(leader.pid()).unwrap());
    let line = line_channel(out).recv_timeout(BOUND).expect("ready");
    assert_eq!(line, "ready");
    assert!(
        fs::read_to_string(dir.join("inner/cgroup.procs"))
            .unwrap()
            .contains(&leader.pid().to_string())
    );
    assert_eq!(tree.pids(), vec![Pid::from_raw(leader.pid())]);
    assert!(!tree.is_empty());
    tree.kill_all().unwrap();
    assert!(tree.wait_empty(BOUND));
    assert_eq!(leader.wait().signal(), Some(libc::SIGKILL));
    tree.remove().expect("remove, inner cgroup first");
    assert!(!dir.exists());
}

#[test]
fn cgroup_kill_all_catches_a_forking_loop() {
    let Some(tree) = cgroup_tree("cgroup_kill_all_catches_a_forking_loop") else {
        return;
    };
    let (mut leader, _out) = spawn_joined(&tree, FORKER, &[]);
    assert!(wait_until(BOUND, || tree.pids().len() >= 10));
    tree.kill_all().unwrap();
    assert!(tree.wait_empty(BOUND), "left: {:?}", tree.pids());
    assert_eq!(leader.wait().signal(), Some(libc::SIGKILL));
}

/// The wrapper killed by SIGKILL: the guard kills the cgroup. The cgroup mode only.
#[test]
fn cgroup_guard_kills_the_tree_when_the_wrapper_is_killed() {
    let mut helper = Helper::start("cgroup-wrapper", false);
    let first = helper.expect_any(&["skip", "dir"]);
    if first[0] == "skip" {
        eprintln!("cgroup guard test: skipped, no cgroup mode here: {first:?}");
        return;
    }
    let dir = PathBuf::from(&first[1]);
    let procs = helper.procs("procs");
    let guard = helper.procs("guard");
    assert!(procs.len() >= 5, "{procs:?}");
    assert!(dir.is_dir());
    let helper_pid = helper.kid.pid();
    kill(Pid::from_raw(helper_pid), Signal::SIGKILL).unwrap();
    assert_eq!(helper.kid.wait().signal(), Some(libc::SIGKILL));
    assert_all_gone(&procs, "after the wrapper's SIGKILL");
    assert!(
        wait_until(BOUND, || !dir.exists()),
        "{} removed",
        dir.display()
    );
    assert_all_gone(&guard, "the guard, its work done");
}

// -- /proc mode, in helper processes ----------------------------------------------------

#[test]
fn proc_kill_all_stops_every_escape() {
    let mut helper = Helper::start("proc-escapes", true);
    let procs = helper.procs("procs");
    assert!(procs.len() >= 5, "{procs:?}");
    helper.expect("ok");
    helper.finish();
    assert_all_gone(&procs, "after kill_all");
}

#[test]
fn proc_kill_all_catches_a_forking_loop() {
    let mut helper = Helper::start("proc-forker", true);
    helper.expect("ok");
    helper.finish();
}

#[test]
fn proc_freeze_thaw_and_signal_all() {
    let mut helper = Helper::start("proc-freeze", true);
    let procs = helper.procs("procs");
    helper.expect("ok");
    helper.finish();
    assert_all_gone(&procs, "after SIGTERM");
}

/// A descendant of another user (what `sudo` makes) cannot be stopped from the /proc
/// mode: reported at once, not waited for.
#[test]
fn proc_kill_all_reports_processes_it_may_not_signal() {
    let mut helper = Helper::start("proc-denied", true);
    let first = helper.expect_any(&["skip", "procs"]);
    if first[0] == "skip" {
        eprintln!("proc_kill_all_reports_processes_it_may_not_signal: skipped, not root");
        return;
    }
    let procs: Vec<Proc> = first[1..].iter().map(|w| Proc::parse(w)).collect();
    for p in &procs {
        helper.cleanup.add(*p);
    }
    // The helper checked right after kill_all that root's process still ran. Not checked
    // again here: once the helper exits, the process is re-parented, and another test of
    // this binary that made this process a subreaper may legitimately clean it up.
    helper.expect("ok");
    helper.finish();
}

#[test]
fn new_honours_redlock_no_cgroup() {
    let mut forced = Helper::start("mode", true);
    assert_eq!(forced.expect("mode"), ["proc"]);
    let reason = forced.expect("reason");
    assert_eq!(reason, ["REDLOCK_NO_CGROUP", "is", "set"]);
    forced.finish();
    let mut auto = Helper::start("mode", false);
    let expected = if Tree::with_cgroup().is_ok() {
        "cgroup"
    } else {
        "proc"
    };
    assert_eq!(auto.expect("mode"), [expected]);
    auto.finish();
}

// -- helper processes --------------------------------------------------------------------

/// This test binary again, running `helper_process` for one scenario.
struct Helper {
    kid: Kid,
    lines: Receiver<String>,
    stderr: Arc<Mutex<String>>,
    cleanup: Cleanup,
}

impl Helper {
    fn start(scenario: &str, no_cgroup: bool) -> Helper {
        let mut cmd = Command::new(std::env::current_exe().unwrap());
        cmd.args([
            "--exact",
            "process::tree::tests::helper_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HELPER_ENV, scenario)
        .env_remove(NO_CGROUP_ENV)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        if no_cgroup {
            cmd.env(NO_CGROUP_ENV, "1");
        }
        let mut child = cmd.spawn().expect("spawn the helper");
        let lines = line_channel(child.stdout.take().unwrap());
        let stderr = Arc::new(Mutex::new(String::new()));
        let errs = line_channel(child.stderr.take().unwrap());
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in errs {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        Helper {
            kid: Kid(Some(child)),
            lines,
            stderr,
            cleanup: Cleanup::default(),
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The words after `@@ KEY` on the next `@@` line whose key is one of `keys`.
    fn expect_any(&mut self, keys: &[&str]) -> Vec<String> {
        let start = Instant::now();
        loop {
            let left = BOUND.saturating_sub(start.elapsed());
            let Ok(line) = self.lines.recv_timeout(left) else {
                // Give the stderr reader a moment to collect the panic message.
                let _ = wait_until(Duration::from_millis(200), || false);
                panic!("helper: no `@@ {keys:?}` line\n{}", self.stderr());
            };
            let Some(at) = line.find("@@ ") else { continue };
            let words: Vec<String> = line[at + 3..]
                .split_whitespace()
                .map(String::from)
                .collect();
            if words.first().is_some_and(|k| keys.contains(&k.as_str())) {
                return words;
            }
        }
    }

    fn expect(&mut self, key: &str) -> Vec<String> {
        self.expect_any(&[key]).split_off(1)
    }

    /// A `@@ KEY pid:start ...` line; the processes are killed at drop if still running.
    fn procs(&mut self, key: &str) -> Vec<Proc> {
        let procs: Vec<Proc> = self.expect(key).iter().map(|w| Proc::parse(w)).collect();
        for p in &procs {
            self.cleanup.add(*p);
        }
        procs
    }

    fn finish(mut self) {
        // Closing stdin ends a helper that waits for it.
        drop(self.kid.0.as_mut().unwrap().stdin.take());
        let status = self.kid.wait();
        assert!(status.success(), "helper {status:?}\n{}", self.stderr());
    }
}

fn say(key: &str, value: impl fmt::Display) {
    println!("@@ {key} {value}");
}

fn list(procs: &[Proc]) -> String {
    procs
        .iter()
        .map(|p| p.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The helper process's side: nothing unless `REDLOCK_TREE_TEST_HELPER` names a scenario.
#[test]
fn helper_process() {
    let Ok(scenario) = std::env::var(HELPER_ENV) else {
        return;
    };
    match scenario.as_str() {
        "mode" => {
            let tree = Tree::new();
            say("mode", tree.mode());
            say("reason", tree.fallback_reason().unwrap_or("-"));
        }
        "proc-escapes" => helper_proc_escapes(),
        "proc-forker" => helper_proc_forker(),
        "proc-freeze" => helper_proc_freeze(),
        "cgroup-wrapper" => helper_cgroup_wrapper(),
        "proc-denied" => helper_proc_denied(),
        other => panic!("unknown scenario {other}"),
    }
    say("ok", "");
}

fn proc_tree() -> Tree {
    let tree = Tree::new();
    assert_eq!(tree.mode(), Mode::Proc, "{NO_CGROUP_ENV} is set");
    assert_eq!(tree.cgroup_dir(), None);
    tree
}

/// Zombie children of this process, except `skip`.
fn zombie_children(skip: i32) -> Vec<i32> {
    let me = getpid().as_raw();
    scan()
        .iter()
        .filter(|s| s.ppid == me && is_dead_state(s.state) && s.pid != skip)
        .map(|s| s.pid)
        .collect()
}

fn helper_proc_escapes() {
    // A child this process had before the tree: not the command's, left alone.
    let mut bystander = Kid(Some(Command::new("sleep").arg("60").spawn().unwrap()));
    let tree = proc_tree();
    let cleanup = Cleanup::default();
    let (members, esc) = {
        let mut esc = start_escapes(&tree, &cleanup);
        // The double-forked sleep was re-parented to this subreaper, not to init.
        assert_eq!(esc.double.ids().unwrap().0, getpid().as_raw());
        let members: Vec<Proc> = tree
            .pids()
            .iter()
            .filter_map(|p| Proc::of(p.as_raw()))
            .collect();
        assert!(!members.iter().any(|p| p.pid == bystander.pid()));
        say("procs", list(&members));
        let leader = esc.leader.pid();
        tree.kill_all().expect("kill_all");
        assert_all_gone(&members, "after kill_all");
        assert!(tree.wait_empty(BOUND));
        // The orphans' zombies are reaped, the leader's status is left for its waiter.
        assert!(tree.reap(Some(Pid::from_raw(leader))) >= 3);
        assert_eq!(zombie_children(leader), Vec::<i32>::new());
        assert_eq!(esc.leader.wait().signal(), Some(libc::SIGKILL));
        (members, esc)
    };
    drop(esc);
    assert!(members.len() >= 5);
    assert!(
        Proc::of(bystander.pid()).unwrap().running(),
        "bystander alive"
    );
    assert!(tree.is_empty());
    drop(tree);
    assert!(bystander.0.as_mut().unwrap().try_wait().unwrap().is_none());
}

fn helper_proc_forker() {
    let tree = proc_tree();
    let (mut leader, _out) = spawn_joined(&tree, FORKER, &[]);
    assert!(wait_until(BOUND, || tree.pids().len() >= 10));
    tree.kill_all()
        .expect("kill_all converges while the loop forks");
    assert!(tree.wait_empty(BOUND), "left: {:?}", tree.pids());
    tree.reap(Some(Pid::from_raw(leader.pid())));
    assert_eq!(leader.wait().signal(), Some(libc::SIGKILL));
    assert_eq!(tree.reap(None), 0);
}

fn helper_proc_freeze() {
    let tree = proc_tree();
    let cleanup = Cleanup::default();
    let mut esc = start_escapes(&tree, &cleanup);
    let members = tree.pids();
    say("procs", list(&esc.procs()));
    tree.freeze().expect("freeze");
    for pid in &members {
        assert!(is_stopped(pid.as_raw()), "{pid} stopped");
    }
    tree.thaw().unwrap();
    let running = wait_until(BOUND, || members.iter().all(|p| !is_stopped(p.as_raw())));
    assert!(running, "thawed");
    assert_eq!(tree.signal_all(Signal::SIGTERM), members.len());
    assert!(tree.wait_empty(BOUND), "left: {:?}", tree.pids());
    assert_eq!(esc.leader.wait().signal(), Some(libc::SIGTERM));
}

fn helper_proc_denied() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        say("skip", "not root");
        return;
    }
    let tree = proc_tree();
    let child = Command::new("sleep").arg("60").spawn().unwrap();
    let sleeper = Proc::of(child.id() as i32).unwrap();
    // Left to the test (root) to kill and to init to reap: this process cannot.
    std::mem::forget(child);
    say("procs", sleeper);
    // SAFETY: plain system call; this helper process is all this scenario's.
    assert_eq!(unsafe { libc::setresuid(65534, 65534, 65534) }, 0);
    let start = Instant::now();
    let err = tree.kill_all().expect_err("cannot signal root's process");
    assert_eq!(err.kind(), io::ErrorKind::PermissionDenied, "{err}");
    assert!(
        start.elapsed() < STOP_WITHIN,
        "not waited for: {:?}",
        start.elapsed()
    );
    assert!(sleeper.running());
    // Nothing left that it could kill: its Drop must not wait either.
    std::mem::forget(tree);
}

fn helper_cgroup_wrapper() {
    let tree = match Tree::with_cgroup() {
        Ok(tree) => tree,
        Err(e) => {
            say("skip", e);
            return;
        }
    };
    let cleanup = Cleanup::default();
    let esc = start_escapes(&tree, &cleanup);
    say("dir", tree.cgroup_dir().unwrap().display());
    let members: Vec<Proc> = tree
        .pids()
        .iter()
        .filter_map(|p| Proc::of(p.as_raw()))
        .collect();
    say("procs", list(&members));
    say(
        "guard",
        Proc::of(tree.guard_pid().unwrap().as_raw()).unwrap(),
    );
    // Wait for the SIGKILL; if the test goes away instead, stdin ends and the tree is
    // dropped, which kills it.
    let mut sink = Vec::new();
    let _ = io::stdin().read_to_end(&mut sink);
    drop(esc);
}

/// The cgroup side of a tree, for tests that look at its events.
fn tree_cgroup(tree: &Tree) -> &Cgroup {
    match &tree.inner {
        Inner::Cgroup(cg) => cg,
        Inner::Proc(_) => panic!("not a cgroup tree"),
    }
}

/// What only these tests ask of a tree.
impl Tree {
    /// The cgroup mode, or why it is not available here.
    fn with_cgroup() -> io::Result<Tree> {
        Ok(Tree {
            inner: Inner::Cgroup(Cgroup::create(true)?),
            fallback: None,
        })
    }

    /// The guard's pid, in the cgroup mode: a child of this process that is not the command's.
    fn guard_pid(&self) -> Option<Pid> {
        match &self.inner {
            Inner::Cgroup(cg) => cg.guard_pid(),
            Inner::Proc(_) => None,
        }
    }

    fn cgroup_events(&self) -> (bool, bool) {
        tree_cgroup(self).events().unwrap()
    }

    /// Block until [`Tree::is_empty`] or `within` has passed; returns whether it is empty.
    /// The cgroup mode sleeps on `cgroup.events` notifications, the /proc mode polls.
    fn wait_empty(&self, within: Duration) -> bool {
        match &self.inner {
            Inner::Cgroup(cg) => cg.wait_empty(within),
            Inner::Proc(p) => wait_until(within, || p.live().is_empty()),
        }
    }

    /// Reap the zombie children of this process (orphans of the tree re-parented to it),
    /// except `skip` and the guard; returns how many. Pass the leader's pid while something
    /// else (the test's `Child`) may still wait for it: a `waitpid(-1)` would steal its
    /// status.
    fn reap(&self, skip: Option<Pid>) -> usize {
        let me = getpid().as_raw();
        let guard = self.guard_pid();
        let mut reaped = 0;
        for s in scan() {
            let pid = Pid::from_raw(s.pid);
            if s.ppid != me || !is_dead_state(s.state) || Some(pid) == skip || Some(pid) == guard {
                continue;
            }
            if let Ok(status) = waitpid(pid, Some(WaitPidFlag::WNOHANG))
                && status != WaitStatus::StillAlive
            {
                reaped += 1;
            }
        }
        reaped
    }
}

// -- parsing -----------------------------------------------------------------------------

#[test]
fn no_cgroup_values() {
    assert!(!no_cgroup_requested(None));
    assert!(!no_cgroup_requested(Some("".into())));
    assert!(!no_cgroup_requested(Some("0".into())));
    assert!(no_cgroup_requested(Some("1".into())));
    assert!(no_cgroup_requested(Some("yes".into())));
}
