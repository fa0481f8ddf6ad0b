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
    let mut cmd = script_command();
    cmd.args(["-qefc", &cmdline, "/dev/null"])
        .env("REDLOCK_CONFIG", "")
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
    let mut cmd = script_command();
    // bash with job control runs the wrapper as its own job, so its group is not orphaned and
    // a background write really gets SIGTTOU.
    cmd.args(["-qefc", &format!("bash -c '{inner}'"), "/dev/null"])
        .env("REDLOCK_CONFIG", "")
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

/// An interactive bash on a pseudo-terminal (script(1)), typed into and read from as a
/// person would: control characters go through the terminal's line discipline, so Ctrl-C,
/// Ctrl-Z and Ctrl-\ become signals to its foreground group.
struct Shell {
    child: std::process::Child,
    input: std::process::ChildStdin,
    output: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    dir: tempfile::TempDir,
    _guard: PidGuard,
}

/// The prompt; not something a command here prints or a typed line contains.
const PROMPT: &str = "PROMPT> ";

impl Shell {
    fn start(redis: &RedisServer) -> Shell {
        let dir = scratch();
        let rc = dir.path().join("bashrc");
        std::fs::write(&rc, format!("PS1='{PROMPT}'\n")).unwrap();
        let mut child = script_command()
            .args([
                "-qfc",
                &format!("bash --noprofile --rcfile {} -i", rc.display()),
                "/dev/null",
            ])
            .env("TERM", "dumb")
            .env("REDLOCK_REDIS", redis.url())
            .env("REDLOCK_CONFIG", "")
            .env("RR", wrapper_bin())
            .current_dir(dir.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("script(1) from util-linux");
        let guard = PidGuard::new(child.id() as i32);
        let input = child.stdin.take().unwrap();
        let mut stdout = child.stdout.take().unwrap();
        let output = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = std::sync::Arc::clone(&output);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut stdout, &mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        let shell = Shell {
            child,
            input,
            output,
            dir,
            _guard: guard,
        };
        shell.wait_for_prompts(1);
        shell
    }

    fn path(&self, name: &str) -> std::path::PathBuf {
        self.dir.path().join(name)
    }

    fn send(&mut self, text: &str) {
        self.input.write_all(text.as_bytes()).unwrap();
        self.input.flush().unwrap();
    }

    fn output(&self) -> String {
        String::from_utf8_lossy(&self.output.lock().unwrap()).into_owned()
    }

    fn count(&self, needle: &str) -> usize {
        self.output().matches(needle).count()
    }

    fn wait_for(&self, needle: &str, times: usize) {
        let ok = poll_until(secs(20), || self.count(needle) >= times);
        assert!(
            ok,
            "no {needle:?} (x{times}) on the terminal:\n{}",
            self.output()
        );
    }

    fn wait_for_prompts(&self, n: usize) {
        self.wait_for(PROMPT, n);
    }

    /// Type `line` and wait for the prompt after it.
    fn run(&mut self, line: &str) {
        let n = self.count(PROMPT);
        self.send(&format!("{line}\n"));
        self.wait_for_prompts(n + 1);
    }
}

impl Drop for Shell {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `pid` is asleep (in a read) and its group is its terminal's foreground group: fields 5
/// (process group) and 8 (the terminal's foreground group) of /proc/PID/stat.
fn reads_in_the_foreground(pid: i32) -> bool {
    proc_stat_fields(pid).is_some_and(|f| f.len() > 5 && f[0] == "S" && f[2] == f[5])
}

fn state(pid: i32) -> char {
    process_state(pid).unwrap_or('-')
}

/// Ctrl-Z with the command's stdin not the terminal (`</dev/null`): the command must stop
/// with the wrapper, not run on unlocked; `fg` continues both; Ctrl-C then ends the run as
/// it would the bare command ($? 130). Once only the wrapper stopped, and after one TTL a
/// second run got the lock while the first command still ran.
#[test]
fn ctrl_z_suspends_the_command_with_the_wrapper_and_fg_resumes_it() {
    let redis = RedisServer::start();
    let mut sh = Shell::start(&redis);
    let prompts = sh.count(PROMPT);
    sh.send("$RR --key k -- sh -c 'echo $$ > pid; exec sleep 60' </dev/null\n");
    let child = read_pid_file(&sh.path("pid"), secs(10));
    let _child_guard = PidGuard::new(child);
    sh.send("\x1a");
    sh.wait_for_prompts(prompts + 1);
    assert!(
        poll_until(secs(5), || state(child) == 'T'),
        "the command runs on (state {}) while the job is suspended:\n{}",
        state(child),
        sh.output()
    );
    assert!(
        redis.exists("redlock:k"),
        "the lock of a suspended job is still held"
    );
    sh.send("fg\n");
    assert!(
        poll_until(secs(5), || matches!(state(child), 'S' | 'R')),
        "fg did not continue the command (state {}):\n{}",
        state(child),
        sh.output()
    );
    let prompts = sh.count(PROMPT);
    sh.send("\x03");
    sh.wait_for_prompts(prompts + 1);
    sh.run("echo rc=$?");
    assert!(sh.output().contains("rc=130"), "{}", sh.output());
    assert!(!pid_alive(child));
    assert!(!redis.exists("redlock:k"), "released after Ctrl-C");
}

/// A job suspended longer than its lease: the lock expires while both are stopped (the
/// wrapper renews nothing), and `fg` must not let the command run on: it is stopped and the
/// run exits 74.
#[test]
fn a_job_suspended_past_its_lease_is_stopped_on_fg() {
    let redis = RedisServer::start();
    let mut sh = Shell::start(&redis);
    let prompts = sh.count(PROMPT);
    sh.send("$RR --key k --ttl 2s -- sh -c 'echo $$ > pid; exec sleep 60'\n");
    let child = read_pid_file(&sh.path("pid"), secs(10));
    let _child_guard = PidGuard::new(child);
    sh.send("\x1a");
    sh.wait_for_prompts(prompts + 1);
    assert!(
        poll_until(secs(5), || state(child) == 'T'),
        "{}",
        sh.output()
    );
    wait_until(secs(10), "the suspended job's lock to expire", || {
        !redis.exists("redlock:k")
    });
    sh.run("fg");
    sh.run("echo rc=$?");
    assert!(sh.output().contains("rc=74"), "{}", sh.output());
    assert!(
        !pid_alive(child),
        "the command ran on after fg:\n{}",
        sh.output()
    );
}

/// A background job whose command reads the terminal is stopped by SIGTTIN; the wrapper
/// follows, so the shell shows the job stopped and `fg` gives the command the terminal.
#[test]
fn a_background_job_reading_the_terminal_stops_and_fg_feeds_it() {
    let redis = RedisServer::start();
    let mut sh = Shell::start(&redis);
    sh.run("set -b");
    sh.send("$RR --key k -c 'echo $$ > pid; read x; echo got-$x-ok' &\n");
    sh.wait_for("Stopped", 1);
    let command = read_pid_file(&sh.path("pid"), secs(10));
    let _guard = PidGuard::new(command);
    let prompts = sh.count(PROMPT);
    sh.send("fg\n");
    // Typed once the command has the terminal and waits in its read.
    assert!(
        poll_until(secs(10), || reads_in_the_foreground(command)),
        "{}",
        sh.output()
    );
    sh.send("hello\n");
    sh.wait_for("got-hello-ok", 1);
    sh.wait_for_prompts(prompts + 1);
    sh.run("echo rc=$?");
    assert!(sh.output().contains("rc=0"), "{}", sh.output());
    assert!(!redis.exists("redlock:k"));
}

/// Ctrl-C in a shell loop ends the loop, as with the bare command: the wrapper ends by the
/// command's SIGINT, which bash takes as the user's interrupt. Both in the interactive shell
/// and in a script it runs.
#[test]
fn ctrl_c_ends_a_shell_loop_of_runs() {
    let redis = RedisServer::start();
    let mut sh = Shell::start(&redis);
    for (n, runner) in [("1", ""), ("2", "bash -c ")].iter() {
        let pidfile = format!("pid{n}");
        let body = format!(
            "for i in 1 2 3; do $RR --key k -- sh -c 'echo $$ > {pidfile}; exec sleep 30'; \
             echo next-$((i*{n}0)); done; echo LOOP$((4*{n}))END"
        );
        let line = if runner.is_empty() {
            body
        } else {
            format!("{runner}\"{}\"", body.replace('$', "\\$"))
        };
        let prompts = sh.count(PROMPT);
        sh.send(&format!("{line}\n"));
        let child = read_pid_file(&sh.path(&pidfile), secs(10));
        let _child_guard = PidGuard::new(child);
        sh.send("\x03");
        sh.wait_for_prompts(prompts + 1);
        let shown = sh.output();
        let ten = format!("next-{n}0");
        let end = format!("LOOP{}END", 4 * n.parse::<i32>().unwrap());
        assert!(
            !shown.contains(&ten) && !shown.contains(&end),
            "Ctrl-C did not end the loop ({runner:?}):\n{shown}"
        );
        assert!(!pid_alive(child));
    }
    assert!(!redis.exists("redlock:k"));
}

/// Ctrl-\ reaches the command (it dies by SIGQUIT) and the wrapper ends the same way: $? 131.
#[test]
fn ctrl_backslash_quits_like_the_bare_command() {
    let redis = RedisServer::start();
    let mut sh = Shell::start(&redis);
    let prompts = sh.count(PROMPT);
    sh.send("$RR --key k -- sh -c 'echo $$ > pid; exec sleep 30'\n");
    let child = read_pid_file(&sh.path("pid"), secs(10));
    let _child_guard = PidGuard::new(child);
    sh.send("\x1c");
    sh.wait_for_prompts(prompts + 1);
    sh.run("echo rc=$?");
    assert!(sh.output().contains("rc=131"), "{}", sh.output());
    assert!(!redis.exists("redlock:k"));
}

/// Ctrl-Z while a script runs the wrapper: the script, the wrapper and the command all stop
/// (the shell gets its prompt back), and `fg` continues them all, as with the bare command.
#[test]
fn ctrl_z_stops_a_script_that_runs_the_wrapper() {
    let redis = RedisServer::start();
    let mut sh = Shell::start(&redis);
    let prompts = sh.count(PROMPT);
    sh.send(
        "bash -c \"\\$RR --key k -- sh -c 'echo \\$\\$ > pid; exec sleep 60'; echo after-\\$((1+1))\"\n",
    );
    let child = read_pid_file(&sh.path("pid"), secs(10));
    let _child_guard = PidGuard::new(child);
    sh.send("\x1a");
    sh.wait_for_prompts(prompts + 1);
    assert!(
        poll_until(secs(5), || state(child) == 'T'),
        "{}",
        sh.output()
    );
    sh.send("fg\n");
    assert!(
        poll_until(secs(5), || matches!(state(child), 'S' | 'R')),
        "{}",
        sh.output()
    );
    let prompts = sh.count(PROMPT);
    sh.send("\x03");
    sh.wait_for_prompts(prompts + 1);
    assert!(!sh.output().contains("after-2"), "{}", sh.output());
    assert!(!redis.exists("redlock:k"));
}

/// Another member of the wrapper's job reading the terminal (`(…; cat) | redlock-run …`)
/// gets SIGTTIN to the whole background group. The wrapper must not stop with it: a stopped
/// wrapper renews nothing while the command runs on.
#[test]
fn a_pipeline_neighbour_reading_the_terminal_does_not_stop_the_wrapper() {
    let redis = RedisServer::start();
    let mut sh = Shell::start(&redis);
    sh.send(
        "(sleep 0.5; cat >/dev/null) | $RR --key k --ttl 2s -- sh -c 'echo $$ > pid; sleep 5; echo done-$((2+2))'\n",
    );
    let child = read_pid_file(&sh.path("pid"), secs(10));
    let _child_guard = PidGuard::new(child);
    let wrapper = parent_of(child);
    std::thread::sleep(secs(3));
    assert_ne!(
        state(wrapper),
        'T',
        "the wrapper was stopped by its neighbour's SIGTTIN:\n{}",
        sh.output()
    );
    assert!(
        redis.exists("redlock:k"),
        "the lease was not kept:\n{}",
        sh.output()
    );
    sh.wait_for("done-4", 1);
}

/// A job suspended past its lease whose command traps SIGTERM: on `fg` it must not run
/// again at all (not even its trap for --grace), as another run may hold the lock by then.
/// (The command is dash running `sleep` by vfork: the Ctrl-Z comes inside a vfork now and
/// then, see `ctrl_z_while_the_command_is_in_a_vfork_suspends_the_job`.)
#[test]
fn a_command_suspended_past_its_lease_never_runs_again() {
    let redis = RedisServer::start();
    let mut sh = Shell::start(&redis);
    let prompts = sh.count(PROMPT);
    sh.send(
        "$RR --key k --ttl 2s --grace 1s -- sh -c 'trap \"echo x > ran-after\" TERM; echo $$ > pid; while :; do sleep 0.1; done'\n",
    );
    let child = read_pid_file(&sh.path("pid"), secs(10));
    let _child_guard = PidGuard::new(child);
    sh.send("\x1a");
    sh.wait_for_prompts(prompts + 1);
    wait_until(secs(10), "the lock to expire", || {
        !redis.exists("redlock:k")
    });
    sh.run("fg");
    sh.run("echo rc=$?");
    assert!(sh.output().contains("rc=74"), "{}", sh.output());
    assert!(
        !sh.path("ran-after").exists(),
        "the command ran its TERM trap after its lease was gone:\n{}",
        sh.output()
    );
}

/// A program that runs a child the way dash runs every command, by vfork, but whose child
/// waits (`pause`) where it would exec; it writes its pid to `./pid` first. So a Ctrl-Z comes
/// between the vfork and the exec every time, where with dash it comes there now and then.
const VFORK_WAIT_C: &str = r#"
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    pid_t child = vfork();
    if (child == 0) {
        /* Shares the parent's memory until exec or _exit: system calls and the stack only. */
        char text[24];
        int at = sizeof text;
        text[--at] = '\n';
        for (pid_t pid = getpid(); pid > 0; pid /= 10)
            text[--at] = '0' + pid % 10;
        int fd = open("pid", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        write(fd, text + at, sizeof text - at);
        close(fd);
        pause();
        _exit(0);
    }
    int status;
    waitpid(child, &status, 0);
    return 0;
}
"#;

/// [`VFORK_WAIT_C`] built into `dir` with cc (the C compiler that links Rust here).
fn build_vfork_wait(dir: &std::path::Path) -> std::path::PathBuf {
    let source = dir.join("vfork-wait.c");
    let program = dir.join("vfork-wait");
    std::fs::write(&source, VFORK_WAIT_C).unwrap();
    let out = Command::new("cc")
        .arg("-o")
        .arg(&program)
        .arg(&source)
        .output()
        .expect("cc, to build a test program");
    assert!(
        out.status.success(),
        "cc failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    program
}

/// Ctrl-Z while the command is in a vfork: the child is stopped before it execs, and the
/// command, its parent, waits in the kernel for that exec with the SIGTSTP pending: it never
/// stops, so waitpid reports no stop. The bare command leaves the shell without a prompt;
/// the wrapper must follow the stop all the same (it waited for ever, renewing the lock), and
/// `fg` must continue the job. In both tracking modes.
#[test]
fn ctrl_z_while_the_command_is_in_a_vfork_suspends_the_job() {
    let redis = RedisServer::start();
    let mut sh = Shell::start(&redis);
    let vfork_wait = build_vfork_wait(sh.dir.path());
    for (n, mode) in ["", "REDLOCK_NO_CGROUP=1 "].iter().enumerate() {
        let _ = std::fs::remove_file(sh.path("pid"));
        let prompts = sh.count(PROMPT);
        sh.send(&format!("{mode}$RR --key k -- {}\n", vfork_wait.display()));
        let child = read_pid_file(&sh.path("pid"), secs(10));
        let _child_guard = PidGuard::new(child);
        let command = parent_of(child);
        let _command_guard = PidGuard::new(command);
        sh.send("\x1a");
        sh.wait_for_prompts(prompts + 1);
        assert_eq!(state(child), 'T', "{mode}: {}", sh.output());
        assert!(
            redis.exists("redlock:k"),
            "{mode}: the lock of a suspended job is held"
        );
        sh.send("fg\n");
        assert!(
            poll_until(secs(5), || state(child) == 'S'),
            "{mode}: fg did not continue the command (state {}):\n{}",
            state(child),
            sh.output()
        );
        let prompts = sh.count(PROMPT);
        sh.send("\x03");
        sh.wait_for_prompts(prompts + 1);
        sh.run("echo rc=$?");
        assert_eq!(
            sh.output().matches("rc=130").count(),
            n + 1,
            "{mode}: {}",
            sh.output()
        );
        assert!(
            !pid_alive(command) && !pid_alive(child),
            "{mode}: {}",
            sh.output()
        );
        assert!(!redis.exists("redlock:k"), "{mode}: released after Ctrl-C");
    }
}

/// SIGINT sent to the wrapper by someone (not Ctrl-C at the terminal) ends the run, but is
/// not passed on to the script that runs it: the script goes on, as with the bare command.
#[test]
fn a_sigint_from_kill_does_not_end_the_calling_script() {
    let redis = RedisServer::start();
    let mut sh = Shell::start(&redis);
    let prompts = sh.count(PROMPT);
    sh.send(
        "bash -c \"\\$RR --key k -- sh -c 'echo \\$\\$ > pid; exec sleep 30'; echo after-\\$((1+1))\"\n",
    );
    let child = read_pid_file(&sh.path("pid"), secs(10));
    let _child_guard = PidGuard::new(child);
    let wrapper = parent_of(child);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(wrapper),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    sh.wait_for_prompts(prompts + 1);
    assert!(sh.output().contains("after-2"), "{}", sh.output());
}

/// A wrapper whose process group is orphaned (started from a subshell that exited) cannot
/// be stopped by job control. When its command is stopped reading the terminal, the wrapper
/// must not spin following it for ever with the lock held: the command is ended.
#[test]
fn an_orphaned_wrapper_ends_a_command_stopped_by_the_terminal() {
    let redis = RedisServer::start();
    let mut sh = Shell::start(&redis);
    sh.run("bash -c \"(sleep 0.3; exec \\$RR --key k -- sh -c 'echo \\$\\$ > pid; exec cat /dev/tty') &\"");
    let child = read_pid_file(&sh.path("pid"), secs(10));
    let _child_guard = PidGuard::new(child);
    assert!(
        poll_until(secs(15), || !pid_alive(child)),
        "the command stopped by SIGTTIN still exists:\n{}",
        sh.output()
    );
    wait_until(secs(15), "the lock to be released", || {
        !redis.exists("redlock:k")
    });
}

fn parent_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let rest = &stat[stat.rfind(')').unwrap() + 1..];
    rest.split_whitespace().nth(1).unwrap().parse().unwrap()
}
