//! The supervisor's side of `--metrics-file`, `--ping` and the `finished` event
//! (`crate::observe` does the work): what the run tells as it goes ([`Observer`]), and its
//! [`Outcome`] in the words of the metrics and pings.
//!
//! Called at four points of the run: the lock acquired, the command about to start, the
//! run over (with the run record read for the last success, only with `--metrics-file`),
//! and the end, after the release: nothing here comes before the lock is released or the
//! command is stopped.

use std::cell::{Cell, RefCell};
use std::time::{Duration, SystemTime};

use crate::config::RunConfig;
use crate::exit::Ending;
use crate::lock::{Lock, RunOutcome};
use crate::observe::{self, Capture, metrics, ping};
use crate::report::{Reporter, RunFields};

use super::outcome::{Outcome, ReleaseResult, Under};

/// What one run tells the metrics, the pings and the log.
pub(super) struct Observer<'a> {
    cfg: &'a RunConfig,
    started: Cell<SystemTime>,
    fence: Cell<Option<u64>>,
    waited: Cell<Option<Duration>>,
    last_success_ms: Cell<Option<u64>>,
    pinger: RefCell<Option<ping::Pinger>>,
    capture: RefCell<Option<Capture>>,
    start_sent: Cell<bool>,
}

impl<'a> Observer<'a> {
    pub(super) fn new(cfg: &'a RunConfig) -> Self {
        Observer {
            cfg,
            started: Cell::new(SystemTime::now()),
            fence: Cell::new(None),
            waited: Cell::new(None),
            last_success_ms: Cell::new(None),
            pinger: RefCell::new(cfg.observe.ping.clone().map(ping::Pinger::new)),
            capture: RefCell::new(None),
            start_sent: Cell::new(false),
        }
    }

    pub(super) fn acquired(&self, fence: u64, waited: Duration) {
        self.fence.set(Some(fence));
        self.waited.set(Some(waited));
    }

    /// The command is about to start: `/start` is handed to the ping thread (never waited
    /// for), and with `--ping-output` its output is captured from now on.
    pub(super) fn starting(&self, report: &Reporter) {
        self.started.set(SystemTime::now());
        let mut pinger = self.pinger.borrow_mut();
        let Some(pinger) = pinger.as_mut() else {
            return;
        };
        if self.cfg.observe.ping_output > 0 {
            match Capture::start(self.cfg.observe.ping_output) {
                Ok(c) => *self.capture.borrow_mut() = Some(c),
                Err(e) => report.warn(
                    "ping-failed",
                    format_args!("cannot capture the command's output for --ping-output: {e}"),
                ),
            }
        }
        pinger.send("/start", Vec::new());
        self.start_sent.set(true);
    }

    /// The last success, as `--once-per` read it.
    pub(super) fn last_success(&self, ended_ms: u64) {
        self.last_success_ms.set(Some(ended_ms));
    }

    /// With `--metrics-file`: read the run record for the job's last success (on any host).
    /// After the release, bounded by `--connect-timeout`; a failure leaves it unknown.
    pub(super) async fn read_record<L: Lock>(&self, lock: &L) {
        if self.cfg.observe.metrics_file.is_none() {
            return;
        }
        if let Ok(Ok(status)) =
            tokio::time::timeout(self.cfg.target.timeout, lock.status(None)).await
            && let Some(last) = status.records.last_success
        {
            self.last_success_ms.set(Some(last.ended_ms));
        }
    }

    /// After the release: the `finished` event, the metrics file, the final ping (waited for
    /// at most `ping::EXIT_BOUND`). Problems are warnings.
    pub(super) fn finish(self, outcome: &Outcome, ending: Ending, report: &Reporter) {
        if !report.verbose()
            && self.cfg.observe.metrics_file.is_none()
            && self.pinger.borrow().is_none()
        {
            // Nobody asked: no summary line (a host name lookup and formatting) per run.
            return;
        }
        let run = observe::Run {
            key: self.cfg.target.key.clone(),
            outcome: observed(outcome),
            exit_code: ending.code(),
            started: self.started.get(),
            ended: SystemTime::now(),
            last_success_ms: self.last_success_ms.get(),
            fence: self.fence.get(),
            waited: self.waited.get(),
        };
        let summary = summary(&run);
        report.finished(
            &summary,
            &RunFields {
                outcome: run.outcome.as_str(),
                exit_code: run.exit_code,
                duration_ms: run.duration().as_millis() as u64,
                waited_ms: run.waited.map(|w| w.as_millis() as u64),
                fence: run.fence,
            },
        );
        if let Some(path) = &self.cfg.observe.metrics_file
            && let Err(e) = metrics::write(path, &run)
        {
            report.warn("metrics-failed", format_args!("--metrics-file: {e}"));
        }
        let Some(mut pinger) = self.pinger.into_inner() else {
            return;
        };
        let output = self
            .capture
            .into_inner()
            .map(|c| c.finish(ping::MOST_BODY))
            .unwrap_or_default();
        let mut suffix = ping::final_suffix(&run);
        if self.start_sent.get() && suffix == "/log" {
            // A /start was sent: the monitor is owed the end of that run.
            suffix = format!("/{}", run.exit_code.max(1));
        }
        let mut body = format!("{summary}\n").into_bytes();
        body.extend_from_slice(output.as_bytes());
        pinger.send(&suffix, body);
        for warning in pinger.finish(ping::EXIT_BOUND) {
            report.warn("ping-failed", warning);
        }
    }
}

/// One line about the run, for `finished` and the body of the final ping.
fn summary(run: &observe::Run) -> String {
    let host = crate::process::hostname();
    let mut line = format!(
        "finished: {} {} on {host} pid {}: exit {}, {}",
        run.key,
        run.outcome.as_str(),
        std::process::id(),
        run.exit_code,
        humantime::format_duration(Duration::from_millis(run.duration().as_millis() as u64))
    );
    if let Some(fence) = run.fence {
        line.push_str(&format!(", fence {fence}"));
    }
    if let Some(w) = run.waited {
        line.push_str(&format!(
            ", waited {}",
            humantime::format_duration(Duration::from_millis(w.as_millis() as u64))
        ));
    }
    line
}

/// The run's outcome in the words of the metrics and pings.
fn observed(outcome: &Outcome) -> observe::Outcome {
    use observe::Outcome as O;
    match outcome {
        Outcome::NotHeld(Ending::Busy(_)) => O::Busy,
        Outcome::NotHeld(Ending::Done(_)) => O::Skipped,
        Outcome::NotHeld(Ending::Unavailable) => O::Unavailable,
        Outcome::NotHeld(Ending::Interrupted(_)) => O::Interrupted,
        Outcome::NotHeld(_) => O::Error,
        Outcome::Held { under, release } => match under {
            Under::LateStart => O::Lost,
            Under::Interrupted(_) => O::Interrupted,
            Under::SpawnFailed(_) => O::Failed,
            Under::Ran {
                end,
                lease,
                max_runtime,
            } => {
                let found_gone =
                    matches!(release, ReleaseResult::HeldByOther | ReleaseResult::Gone);
                match super::once::ran_outcome(
                    end.as_ref(),
                    lease.is_some() || found_gone,
                    *max_runtime,
                ) {
                    RunOutcome::Succeeded => O::Succeeded,
                    RunOutcome::Failed => O::Failed,
                    RunOutcome::Signalled => O::Signalled,
                    RunOutcome::TimedOut => O::TimedOut,
                    RunOutcome::Lost => O::Lost,
                }
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::ChildEnd;
    use crate::supervise::outcome::exit_for;

    /// The observed outcome agrees with the exit code the run gets.
    #[test]
    fn outcomes_agree_with_exit_codes() {
        let ran = |end, max_runtime| Outcome::Held {
            under: Under::Ran {
                end: Some(end),
                lease: None,
                max_runtime,
            },
            release: ReleaseResult::Released,
        };
        for (outcome, want, code) in [
            (
                ran(ChildEnd::Exited(0), false),
                observe::Outcome::Succeeded,
                0,
            ),
            (ran(ChildEnd::Exited(3), false), observe::Outcome::Failed, 3),
            (
                ran(ChildEnd::Signalled(15), false),
                observe::Outcome::Signalled,
                143,
            ),
            (
                ran(ChildEnd::Signalled(15), true),
                observe::Outcome::TimedOut,
                124,
            ),
            (
                Outcome::NotHeld(Ending::Busy(75)),
                observe::Outcome::Busy,
                75,
            ),
            (
                Outcome::NotHeld(Ending::Done(0)),
                observe::Outcome::Skipped,
                0,
            ),
        ] {
            assert_eq!(observed(&outcome), want);
            assert_eq!(exit_for(&outcome).code(), code);
        }
        let gone = Outcome::Held {
            under: Under::Ran {
                end: Some(ChildEnd::Exited(0)),
                lease: None,
                max_runtime: false,
            },
            release: ReleaseResult::Gone,
        };
        assert_eq!(observed(&gone), observe::Outcome::Lost);
    }
}
