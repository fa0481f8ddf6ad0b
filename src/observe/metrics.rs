//! `--metrics-file`: the node_exporter textfile collector's format (Prometheus text format
//! 0.0.4), one series per key.
//!
//! - **Atomic.** The new content is written to a temporary file in the same directory,
//!   flushed to disk, and renamed over the file: a reader (the collector) sees the old file
//!   or the new one, never half of one. The temporary name starts with a dot and does not end
//!   in `.prom`, so the collector never reads it.
//! - **Several keys in one file.** The file is read, this key's series replaced, and the
//!   others written back, under an exclusive `flock` on the directory: two runs of different
//!   keys that end at once both keep their update. One file per host (`redlock.prom`) is then
//!   enough; one file per key works as well (an update touches only its own key either way).
//!   Families stay whole (one HELP and TYPE line each, every key's samples under it), as the
//!   format requires: files written per key and merged by the collector could not give that
//!   for the same family in two files if they ever held the same key.
//! - **Counters kept in the file.** `redlock_run_runs_total` is read back from the file
//!   before it is rewritten; a file that is gone starts the counters at 0 again (Prometheus
//!   sees a counter reset, which `rate()` and `increase()` handle).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use super::{Outcome, Run, unix_seconds};

const START: &str = "redlock_run_last_run_start_timestamp_seconds";
const END: &str = "redlock_run_last_run_end_timestamp_seconds";
const DURATION: &str = "redlock_run_last_run_duration_seconds";
const EXIT_CODE: &str = "redlock_run_last_run_exit_code";
const LAST_OUTCOME: &str = "redlock_run_last_run_outcome";
const LAST_SUCCESS: &str = "redlock_run_last_success_timestamp_seconds";
const RUNS: &str = "redlock_run_runs_total";

/// The families, in the order they are written: (name, type, help).
const FAMILIES: [(&str, &str, &str); 7] = [
    (
        START,
        "gauge",
        "When the last run on this host started its command (or started, if the command never did), in seconds since 1970.",
    ),
    (
        END,
        "gauge",
        "When the last run on this host ended, in seconds since 1970.",
    ),
    (
        DURATION,
        "gauge",
        "How long the last run on this host took, from its start to its end, in seconds.",
    ),
    (
        EXIT_CODE,
        "gauge",
        "Exit code of the last run on this host (128+N: killed by signal N; 75: busy).",
    ),
    (
        LAST_OUTCOME,
        "gauge",
        "How the last run on this host ended: 1 for its outcome, 0 for the others.",
    ),
    (
        LAST_SUCCESS,
        "gauge",
        "When the job last succeeded on any host (the lock's run record; the server's clock), in seconds since 1970.",
    ),
    (RUNS, "counter", "Runs on this host, by outcome."),
];

/// What one key has in the file. Arrays, not maps: a family is its index in [`FAMILIES`] and
/// an outcome its index in [`Outcome::ALL`] (two more `BTreeMap` types cost ~6 KB of code).
#[derive(Debug, Default, Clone, PartialEq)]
struct Series {
    /// Gauges without an `outcome` label, by family (the entries of `LAST_OUTCOME` and
    /// `RUNS` stay `None`).
    gauges: [Option<f64>; FAMILIES.len()],
    last_outcome: Option<Outcome>,
    /// Runs by outcome (0 for one not counted yet).
    runs: [f64; Outcome::ALL.len()],
}

impl Series {
    fn gauge(&mut self, family: &str) -> &mut Option<f64> {
        let i = FAMILIES.iter().position(|f| f.0 == family).unwrap_or(0);
        &mut self.gauges[i]
    }

    fn runs_of(&mut self, outcome: Outcome) -> &mut f64 {
        &mut self.runs[outcome as usize]
    }
}

/// `--metrics-file PATH` checked before Redis is contacted: not a directory, in a directory
/// that exists and this process may write.
pub fn check_path(path: &Path) -> Result<PathBuf, String> {
    let shown = path.display();
    let Some(name) = path.file_name() else {
        return Err(format!("--metrics-file {shown} names no file"));
    };
    if path.is_dir() {
        return Err(format!(
            "--metrics-file {shown} is a directory; name a file in it"
        ));
    }
    let dir = dir_of(path);
    match std::fs::metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(format!(
                "--metrics-file {shown}: {} is not a directory",
                dir.display()
            ));
        }
        Err(e) => {
            return Err(format!(
                "--metrics-file {shown}: cannot use the directory {}: {e}",
                dir.display()
            ));
        }
    }
    use nix::unistd::{AccessFlags, access};
    if let Err(e) = access(&dir, AccessFlags::W_OK | AccessFlags::X_OK) {
        return Err(format!(
            "--metrics-file {shown}: the directory {} is not writable ({})",
            dir.display(),
            e.desc()
        ));
    }
    Ok(dir.join(name))
}

fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Write `run` into the file at `path` (replacing this key's series, keeping the others).
pub fn write(path: &Path, run: &Run) -> Result<(), String> {
    let dir = dir_of(path);
    let shown = path.display();
    // The directory's lock serializes the read-modify-write of runs ending at once.
    let dir_file = File::open(&dir).map_err(|e| format!("cannot open {}: {e}", dir.display()))?;
    let _locked = nix::fcntl::Flock::lock(dir_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| format!("cannot lock {}: {}", dir.display(), e.desc()))?;
    let old = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(format!("cannot read {shown}: {e}")),
    };
    let mut all = parse(&old);
    let series = all.entry(run.key.clone()).or_default();
    update(series, run);
    let text = render(&all);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let written = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_data()?;
        std::fs::rename(&tmp, path)
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("cannot write {shown}: {e}")
    })
}

fn update(series: &mut Series, run: &Run) {
    *series.gauge(START) = Some(unix_seconds(run.started));
    *series.gauge(END) = Some(unix_seconds(run.ended));
    *series.gauge(DURATION) = Some(run.duration().as_millis() as f64 / 1000.0);
    *series.gauge(EXIT_CODE) = Some(f64::from(run.exit_code));
    if let Some(ms) = run.last_success_ms {
        // Never backwards: a record read from a node that missed the newest write, or an
        // expired record, does not undo what the file already knew.
        let at = ms as f64 / 1000.0;
        let known = series.gauge(LAST_SUCCESS).unwrap_or(0.0);
        *series.gauge(LAST_SUCCESS) = Some(at.max(known));
    }
    series.last_outcome = Some(run.outcome);
    *series.runs_of(run.outcome) += 1.0;
}

fn render(all: &BTreeMap<String, Series>) -> String {
    let mut out = String::new();
    for (index, (family, kind, help)) in FAMILIES.into_iter().enumerate() {
        let mut samples = String::new();
        for (key, series) in all {
            let key = escape(key);
            match family {
                LAST_OUTCOME => {
                    let Some(last) = series.last_outcome else {
                        continue;
                    };
                    for o in Outcome::ALL {
                        let v = u8::from(o == last);
                        let _ = writeln!(
                            samples,
                            "{family}{{key=\"{key}\",outcome=\"{}\"}} {v}",
                            o.as_str()
                        );
                    }
                }
                RUNS => {
                    // Every outcome from 0, so that increase() sees the first of each.
                    for o in Outcome::ALL {
                        let v = series.runs[o as usize];
                        let _ = writeln!(
                            samples,
                            "{family}{{key=\"{key}\",outcome=\"{}\"}} {}",
                            o.as_str(),
                            number(v)
                        );
                    }
                }
                _ => {
                    if let Some(v) = series.gauges[index] {
                        let _ = writeln!(samples, "{family}{{key=\"{key}\"}} {}", number(v));
                    }
                }
            }
        }
        if !samples.is_empty() {
            let _ = writeln!(out, "# HELP {family} {help}");
            let _ = writeln!(out, "# TYPE {family} {kind}");
            out.push_str(&samples);
        }
    }
    out
}

/// A float as Prometheus reads it: integers without a fraction, times with milliseconds.
fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.3}")
    }
}

/// A label value: backslash, double quote and newline escaped.
fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

/// The series of a file written by this module. Lines it did not write (comments, other
/// families, anything malformed) are left out of the next version of the file.
fn parse(text: &str) -> BTreeMap<String, Series> {
    let mut all: BTreeMap<String, Series> = BTreeMap::new();
    for line in text.lines() {
        let Some((name, labels, value)) = sample(line) else {
            continue;
        };
        let Some(family) = FAMILIES.iter().map(|f| f.0).find(|f| *f == name) else {
            continue;
        };
        let Ok(value) = value.parse::<f64>() else {
            continue;
        };
        let mut key = None;
        let mut outcome = None;
        for (k, v) in labels {
            match k.as_str() {
                "key" => key = Some(v),
                "outcome" => outcome = Outcome::from_str(&v),
                _ => {}
            }
        }
        let Some(key) = key else { continue };
        let series = all.entry(key).or_default();
        match (family, outcome) {
            (RUNS, Some(o)) => *series.runs_of(o) = value,
            (LAST_OUTCOME, Some(o)) if value == 1.0 => series.last_outcome = Some(o),
            (LAST_OUTCOME | RUNS, _) => {}
            (family, _) => *series.gauge(family) = Some(value),
        }
    }
    all
}

/// A sample's labels, as (name, value).
type Labels = Vec<(String, String)>;

/// `name{a="x",b="y"} value` -> its parts, label values unescaped.
fn sample(line: &str) -> Option<(&str, Labels, &str)> {
    if line.starts_with('#') || line.trim().is_empty() {
        return None;
    }
    let open = line.find('{')?;
    let name = &line[..open];
    let mut labels = Vec::new();
    let mut rest = &line[open + 1..];
    loop {
        rest = rest.trim_start_matches(',');
        if let Some(after) = rest.strip_prefix('}') {
            let value = after.trim();
            return Some((name, labels, value));
        }
        let eq = rest.find("=\"")?;
        let label = rest[..eq].to_owned();
        let mut value = String::new();
        let mut chars = rest[eq + 2..].char_indices();
        let end = loop {
            let (i, c) = chars.next()?;
            match c {
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                '"' => break eq + 2 + i + 1,
                c => value.push(c),
            }
        };
        labels.push((label, value));
        rest = &rest[end..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, SystemTime};

    fn run(key: &str, outcome: Outcome) -> Run {
        let started = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_250);
        Run {
            key: key.to_owned(),
            outcome,
            exit_code: 3,
            started,
            ended: started + Duration::from_millis(1500),
            last_success_ms: Some(1_699_999_000_000),
            fence: Some(7),
            waited: None,
        }
    }

    #[test]
    fn a_file_read_back_keeps_counters_and_other_keys() {
        let mut all = BTreeMap::new();
        update(
            all.entry("a\"b\\c\nd".to_owned()).or_default(),
            &run("x", Outcome::Failed),
        );
        update(
            all.entry("k2".to_owned()).or_default(),
            &run("k2", Outcome::Busy),
        );
        update(
            all.entry("k2".to_owned()).or_default(),
            &run("k2", Outcome::Busy),
        );
        let text = render(&all);
        assert_eq!(render(&parse(&text)), text);
        assert_eq!(parse(&text)["k2"].runs[Outcome::Busy as usize], 2.0);
        assert!(
            text.contains("redlock_run_runs_total{key=\"k2\",outcome=\"busy\"} 2\n"),
            "{text}"
        );
        assert!(text.contains("key=\"a\\\"b\\\\c\\nd\""), "{text}");
        assert!(
            text.contains(
                "redlock_run_last_run_start_timestamp_seconds{key=\"k2\"} 1700000000.250\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("redlock_run_last_run_duration_seconds{key=\"k2\"} 1.500\n"),
            "{text}"
        );
        assert_eq!(
            text.matches("# TYPE redlock_run_runs_total counter")
                .count(),
            1
        );
    }

    #[test]
    fn an_outcome_is_its_index_in_all() {
        for (i, o) in Outcome::ALL.into_iter().enumerate() {
            assert_eq!(o as usize, i, "{o:?}");
        }
    }

    #[test]
    fn the_last_success_never_goes_back() {
        let mut s = Series::default();
        let mut r = run("k", Outcome::Succeeded);
        r.last_success_ms = Some(2_000_000);
        update(&mut s, &r);
        r.last_success_ms = Some(1_000_000);
        update(&mut s, &r);
        r.last_success_ms = None;
        update(&mut s, &r);
        assert_eq!(*s.gauge(LAST_SUCCESS), Some(2000.0));
    }
}
