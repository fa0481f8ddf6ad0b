//! The /proc mode: the descendants of this process (a child subreaper) found through
//! `/proc`, and the one parser of `/proc/PID/stat`.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::{Pid, getpid};

/// Walks of the freeze before it gives up on a tree that keeps growing.
const MAX_ROUNDS: usize = 100;

/// Pause between two looks at processes that have not stopped yet.
const POLL: Duration = Duration::from_millis(1);

pub(super) struct ProcTree {
    root: i32,
    /// Children the process had already when the tree was made, and their subtrees.
    excluded: HashSet<(i32, u64)>,
}

impl ProcTree {
    pub(super) fn create() -> (ProcTree, nix::Result<()>) {
        let subreaper = nix::sys::prctl::set_child_subreaper(true);
        let mut tree = ProcTree {
            root: getpid().as_raw(),
            excluded: HashSet::new(),
        };
        tree.excluded = tree.members().iter().map(|s| (s.pid, s.start)).collect();
        (tree, subreaper)
    }

    /// Every descendant, zombies included.
    fn members(&self) -> Vec<Stat> {
        self.members_by_children()
            .unwrap_or_else(|| self.members_by_scan())
    }

    /// Down the `children` lists of each thread (`/proc/PID/task/TID/children`), reading only
    /// the tree's own processes: a walk costs the size of the tree, not of the whole system.
    /// `None` where the kernel has no such lists (CONFIG_PROC_CHILDREN off).
    fn members_by_children(&self) -> Option<Vec<Stat>> {
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut queue = vec![self.root];
        while let Some(parent) = queue.pop() {
            let tasks = match fs::read_dir(format!("/proc/{parent}/task")) {
                Ok(tasks) => tasks,
                Err(_) if parent == self.root => return None,
                Err(_) => continue, // gone meanwhile
            };
            for task in tasks.flatten() {
                let Ok(list) = fs::read_to_string(task.path().join("children")) else {
                    if parent == self.root {
                        return None;
                    }
                    continue;
                };
                for pid in list
                    .split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok())
                {
                    let Some(stat) = read_stat(pid) else { continue };
                    if self.excluded.contains(&(stat.pid, stat.start)) || !seen.insert(stat.pid) {
                        continue;
                    }
                    out.push(stat);
                    queue.push(stat.pid);
                }
            }
        }
        Some(out)
    }

    /// The same by reading every process in /proc, for kernels without `children` lists.
    fn members_by_scan(&self) -> Vec<Stat> {
        let all = scan();
        let mut children: HashMap<i32, Vec<&Stat>> = HashMap::new();
        for s in &all {
            children.entry(s.ppid).or_default().push(s);
        }
        let mut out = Vec::new();
        let mut seen = HashSet::new();
        let mut queue = vec![self.root];
        while let Some(parent) = queue.pop() {
            for s in children.get(&parent).into_iter().flatten() {
                if self.excluded.contains(&(s.pid, s.start)) || !seen.insert(s.pid) {
                    continue;
                }
                out.push(**s);
                queue.push(s.pid);
            }
        }
        out
    }

    /// Descendants still running.
    pub(super) fn live(&self) -> Vec<Stat> {
        self.members().into_iter().filter(is_live).collect()
    }

    /// SIGSTOP until a walk, made after every process found so far was seen stopped, finds
    /// no new one: from then on nothing in the tree can fork or send a signal. Returns the
    /// processes found, `(pid, start time)`, and whether that point was reached in `within`.
    pub(super) fn stop_all(&self, within: Duration) -> (HashMap<i32, u64>, io::Result<()>) {
        let start = Instant::now();
        let mut known: HashMap<i32, u64> = HashMap::new();
        // Processes this one may not signal (another user's: a setuid program, sudo): they
        // cannot be stopped from here, so they are not waited for, and reported.
        let mut denied: HashSet<i32> = HashSet::new();
        let mut verified = false;
        for _ in 0..MAX_ROUNDS {
            let mut fresh = false;
            for s in self.live() {
                if known.get(&s.pid) != Some(&s.start) {
                    if signal_if_same(s.pid, s.start, Signal::SIGSTOP) == Err(Errno::EPERM) {
                        denied.insert(s.pid);
                    }
                    known.insert(s.pid, s.start);
                    fresh = true;
                }
            }
            if verified && !fresh {
                let result = if denied.is_empty() {
                    Ok(())
                } else {
                    Err(io::Error::new(
                        io::ErrorKind::PermissionDenied,
                        format!(
                            "{} process(es) of the tree belong to another user and cannot be \
                             signalled: {denied:?}",
                            denied.len()
                        ),
                    ))
                };
                return (known, result);
            }
            // A process in fork() when the signal came may show its child only once the
            // fork is done; a stopped process is done forking.
            let all_stopped = wait_until(within.saturating_sub(start.elapsed()), || {
                let mut all = true;
                for (&pid, &st) in &known {
                    if !denied.contains(&pid) && !is_stopped(pid) {
                        all = false;
                        // Again: a process of the tree may have sent a SIGCONT.
                        let _ = signal_if_same(pid, st, Signal::SIGSTOP);
                    }
                }
                all
            });
            if !all_stopped {
                let running = known.keys().filter(|&&p| !is_stopped(p)).count();
                return (
                    known,
                    Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("{running} process(es) of the tree did not stop in {within:?}"),
                    )),
                );
            }
            verified = true;
        }
        (
            known,
            Err(io::Error::other(format!(
                "the tree was still growing after {MAX_ROUNDS} walks"
            ))),
        )
    }

    /// Freeze ([`ProcTree::stop_all`], bounded by `within`), then SIGKILL everything found.
    pub(super) fn kill_all(&self, within: Duration) -> io::Result<()> {
        let (known, result) = self.stop_all(within);
        for (pid, start) in known {
            let _ = signal_if_same(pid, start, Signal::SIGKILL);
        }
        // After a timeout something may have appeared since: one more pass.
        if result.is_err() {
            for s in self.live() {
                let _ = signal_if_same(s.pid, s.start, Signal::SIGKILL);
            }
        }
        result
    }
}

/// What the wrapper needs of `/proc/PID/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub pid: i32,
    pub ppid: i32,
    /// Process group.
    pub pgrp: i32,
    pub session: i32,
    /// The state letter: `R`, `S`, `D`, `T` (stopped), `Z` (zombie)...
    pub state: u8,
    /// Start time in clock ticks since boot: with the pid, identifies a process.
    pub start: u64,
}

fn parse_stat(text: &str) -> Option<Stat> {
    // The command name is in parentheses and may contain anything, parentheses included:
    // the fields after it follow the last ')'.
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let pid = text[..open].trim().parse().ok()?;
    let rest: Vec<&str> = text.get(close + 1..)?.split_whitespace().collect();
    // `rest[0]` is field 3 (state) of proc(5).
    Some(Stat {
        pid,
        state: *rest.first()?.as_bytes().first()?,
        ppid: rest.get(1)?.parse().ok()?,
        pgrp: rest.get(2)?.parse().ok()?,
        session: rest.get(3)?.parse().ok()?,
        start: rest.get(19)?.parse().ok()?,
    })
}

/// `/proc/PID/stat` of `pid`, if it exists and reads as expected.
pub fn read_stat(pid: i32) -> Option<Stat> {
    parse_stat(&fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// Every process in /proc.
pub(super) fn scan() -> Vec<Stat> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(read_stat)
        .collect()
}

pub(super) fn is_dead_state(state: u8) -> bool {
    matches!(state, b'Z' | b'X' | b'x')
}

/// Running, or a zombie leader whose other threads still run.
pub(super) fn is_live(s: &Stat) -> bool {
    !is_dead_state(s.state)
        || fs::read_dir(format!("/proc/{}/task", s.pid)).is_ok_and(|d| d.count() > 1)
}

/// Every thread of `pid` stopped (or dead); a process that is gone counts as stopped.
pub(super) fn is_stopped(pid: i32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return true;
    };
    tasks.flatten().all(|t| {
        let path = t.path().join("stat");
        fs::read_to_string(path)
            .ok()
            .and_then(|text| parse_stat(&text))
            .is_none_or(|s| matches!(s.state, b'T' | b't') || is_dead_state(s.state))
    })
}

/// Signal `pid` if it is still the process that started at `start` (not a reused pid). A
/// process that is gone is not an error.
pub(super) fn signal_if_same(pid: i32, start: u64, sig: Signal) -> nix::Result<()> {
    if read_stat(pid).is_some_and(|s| s.start == start) {
        match kill(Pid::from_raw(pid), sig) {
            Err(Errno::ESRCH) => {}
            other => return other,
        }
    }
    Ok(())
}

/// Poll `done` until it holds or `within` has passed (at least one look). Returns whether it
/// holds.
pub(super) fn wait_until(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if done() {
            return true;
        }
        if start.elapsed() >= within {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn stat_with_an_awkward_command_name() {
        let text = "42 (a) b) (c) S 7 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 12345 1000 100";
        let s = parse_stat(text).unwrap();
        assert_eq!(
            (s.pid, s.ppid, s.pgrp, s.session, s.state, s.start),
            (42, 7, 42, 42, b'S', 12345)
        );
        assert_eq!(parse_stat("42 (x) S 1"), None);
        let me = read_stat(getpid().as_raw()).unwrap();
        assert_eq!(me.pid, getpid().as_raw());
        assert!(is_live(&me));
    }

    /// The walk down the `children` lists and the walk over all of /proc find the same
    /// descendants (the second is the fallback for kernels without the lists).
    #[test]
    fn both_proc_walks_find_a_child_and_its_child() {
        let mut child = Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let tree = ProcTree {
            root: getpid().as_raw(),
            excluded: HashSet::new(),
        };
        let by_children: HashSet<i32> = tree
            .members_by_children()
            .expect("this kernel has children lists")
            .iter()
            .map(|s| s.pid)
            .collect();
        let by_scan: HashSet<i32> = tree.members_by_scan().iter().map(|s| s.pid).collect();
        let _ = kill(Pid::from_raw(grandchild), Signal::SIGKILL);
        let _ = child.kill();
        let _ = child.wait();
        for pid in [child.id() as i32, grandchild] {
            assert!(by_children.contains(&pid), "children walk missed {pid}");
            assert!(by_scan.contains(&pid), "scan missed {pid}");
        }
    }
}
