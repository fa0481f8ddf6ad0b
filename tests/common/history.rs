//! A history of command runs, written by the commands themselves, and a checker for it: the
//! evidence that two holders ran at once (issue 18).
//!
//! [`job`] is an `sh -c` script for a wrapper's command (run with the history directory as
//! its cwd). It records, from inside the lock:
//! - `runs/TOKEN`: `START_NS FENCE` at once, then a `date +%s%N` beat every 50 ms, so a command
//!   that is SIGKILLed still left its interval (its end is at most one beat late);
//! - `history`: one `START_NS END_NS FENCE` line when it ends (normally or by SIGTERM).
//!
//! [`read`] merges both into one [`Run`] per acquisition, [`check`] asserts that no two
//! commands' intervals overlap and that the fences strictly increase in start order.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

/// A command for the wrapper's `-c`: writes `NAME.pid` (its pid) and `NAME.token` unless
/// `name` is empty, runs `first` (more shell, may be empty) right after its start line, then
/// beats every 50 ms, `beats` times or until the file `go-NAME` exists.
pub fn job(name: &str, beats: u32, first: &str) -> String {
    let own = if name.is_empty() {
        String::new()
    } else {
        format!("echo $$ > {name}.pid; echo $REDLOCK_TOKEN > {name}.token; ")
    };
    let first = if first.is_empty() {
        String::new()
    } else {
        format!("{first}; ")
    };
    format!(
        "s=$(date +%s%N); f=$REDLOCK_FENCE; r=runs/$REDLOCK_TOKEN; mkdir -p runs; \
         echo \"$s $f\" > $r; {own}\
         trap 'echo \"$s $(date +%s%N) $f\" >> history; exit 143' TERM; {first}\
         i=0; while [ $i -lt {beats} ] && [ ! -e go-{name} ]; do date +%s%N >> $r; \
         sleep 0.05; i=$((i+1)); done; echo \"$s $(date +%s%N) $f\" >> history"
    )
}

/// One command run: from its first to its last own timestamp.
#[derive(Clone, Debug)]
pub struct Run {
    pub start: u128,
    pub end: u128,
    pub fence: u64,
    /// Whether it wrote its `history` line (false: killed before it could).
    pub ended: bool,
}

/// Every run recorded in `dir` (by [`job`]), in start order.
pub fn read(dir: &Path) -> Vec<Run> {
    let mut ends: BTreeMap<(u128, u64), u128> = BTreeMap::new();
    for line in fs::read_to_string(dir.join("history"))
        .unwrap_or_default()
        .lines()
    {
        let f: Vec<&str> = line.split_whitespace().collect();
        if let [s, e, fence] = f[..]
            && let (Ok(s), Ok(e), Ok(fence)) = (s.parse(), e.parse(), fence.parse())
        {
            ends.insert((s, fence), e);
        }
    }
    let mut runs = Vec::new();
    for entry in fs::read_dir(dir.join("runs"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let text = fs::read_to_string(entry.path()).unwrap_or_default();
        let mut lines = text.lines();
        let Some((start, fence)) = lines.next().and_then(|l| {
            let (s, f) = l.split_once(' ')?;
            Some((s.parse::<u128>().ok()?, f.trim().parse::<u64>().ok()?))
        }) else {
            continue;
        };
        let last_beat = lines
            .filter_map(|l| l.trim().parse::<u128>().ok())
            .max()
            .unwrap_or(start);
        let ended = ends.get(&(start, fence)).copied();
        runs.push(Run {
            start,
            end: ended.unwrap_or(0).max(last_beat),
            fence,
            ended: ended.is_some(),
        });
    }
    runs.sort_by_key(|r| r.start);
    runs
}

/// Pairs of runs whose intervals overlap, with the overlap in ns.
pub fn overlaps(runs: &[Run]) -> Vec<(Run, Run, u128)> {
    let mut found = Vec::new();
    for (i, a) in runs.iter().enumerate() {
        for b in &runs[i + 1..] {
            // Sorted by start: b starts at or after a.
            if b.start <= a.end {
                found.push((a.clone(), b.clone(), a.end.min(b.end) - b.start));
            }
        }
    }
    found
}

/// `Err` describing every overlap and every fence that did not grow in start order.
pub fn check(runs: &[Run]) -> Result<(), String> {
    let mut problems = Vec::new();
    for (a, b, ns) in overlaps(runs) {
        problems.push(format!(
            "two holders for {:.1} ms: fence {} ran {}..{}{}, fence {} ran {}..{}{}",
            ns as f64 / 1e6,
            a.fence,
            a.start,
            a.end,
            if a.ended { "" } else { " (killed)" },
            b.fence,
            b.start,
            b.end,
            if b.ended { "" } else { " (killed)" },
        ));
    }
    for w in runs.windows(2) {
        if w[1].fence <= w[0].fence {
            problems.push(format!(
                "fence {} (started {}) after fence {} (started {})",
                w[1].fence, w[1].start, w[0].fence, w[0].start
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} problem(s) in {} runs:\n{}",
            problems.len(),
            runs.len(),
            problems.join("\n")
        ))
    }
}
