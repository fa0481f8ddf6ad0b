//! The supervisor: acquire -> spawn -> keep the lease while the command runs -> release.
//!
//! Every change of the lock's state happens in this file, in this order:
//!
//! 1. `acquire`: try SET NX until it succeeds, the wait runs out, or a signal ends the wait.
//! 2. replica check (`--min-replicas`): not enough acknowledgements -> release, do not run.
//! 3. `supervise`: the command runs; renewals extend the lease; the lease deadline, the
//!    max-runtime and forwarded signals may stop the command.
//! 4. `release`: compare-and-delete (or expire later under `--hold-at-least`).
//!
//! A failed acquirer never writes to the key, and only the token this run generated can
//! extend or release it.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use nix::sys::signal::Signal;

use crate::backoff::Backoff;
use crate::child::{self, Job, SpawnError};
use crate::cli::Wait;
use crate::config::RunConfig;
use crate::exit::{ChildEnd, Ending};
use crate::lease::{Lease, Stamp, Standing};
use crate::lock::{new_token, Acquired, Holder, HolderInfo, Lock, ReleaseNotices, Released};
use crate::report::Reporter;
use crate::signals::Signals;

/// Longest nap between lease checks. tokio's timers run on CLOCK_MONOTONIC, which stops during
/// a system suspend; waking at least this often bounds how late a suspend is noticed.
const MAX_NAP: Duration = Duration::from_millis(200);

/// Pause between renewal attempts after a failed one.
const RENEW_RETRY: Duration = Duration::from_millis(100);

pub async fn run(cfg: &RunConfig, report: &Reporter) -> Ending {
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            report.error("internal", format!("cannot install signal handlers: {e}"));
            return Ending::Software;
        }
    };
    let lock = match Lock::connect(&cfg.target).await {
        Ok(lock) => lock,
        Err(e) => {
            report.error("unavailable", &e);
            return Ending::Unavailable;
        }
    };
    let token = match new_token() {
        Ok(token) => token,
        Err(e) => {
            report.error(
                "internal",
                format_args!("cannot read random bytes for the token: {e}"),
            );
            return Ending::Software;
        }
    };
    let holder = HolderInfo {
        host: hostname(),
        pid: std::process::id(),
        command: cfg.command.display.clone(),
    };

    // 1. Acquire.
    let held = match acquire(cfg, &lock, &token, &holder, &mut signals, report).await {
        Ok(held) => held,
        Err(ending) => return ending,
    };
    report.info(
        "acquired",
        format_args!(
            "acquired {} (fence {}, ttl {}) after {}",
            lock.keys().lock,
            held.fence,
            show(cfg.ttl),
            show_ms(held.waited)
        ),
    );

    // 2. Replica acknowledgement of the acquire.
    if cfg.min_replicas > 0 {
        if let Err(msg) = confirm_replicas(cfg, &lock).await {
            report.error("replicas", format_args!("{msg}; not running the command"));
            release(cfg, &lock, &token, &held, report, false).await;
            return Ending::Unavailable;
        }
    }
    if let Some(sig) = signals.pending().await {
        release(cfg, &lock, &token, &held, report, false).await;
        return Ending::Interrupted(sig as i32);
    }

    // The acquire's reply, the replica check or a pause of this process may have taken so long
    // that the lease is already in its last --grace: then starting the command would be
    // starting it without the lock.
    if held.lease.standing(Stamp::now()) != Standing::Safe {
        release(cfg, &lock, &token, &held, report, true).await;
        report.error(
            "lost",
            format_args!(
                "lease on {} ran out before the command could start (slow reply, replica wait \
                 or a paused process); not running it",
                lock.keys().lock
            ),
        );
        return Ending::Lost;
    }

    // 3. Run the command under the lease.
    child::become_subreaper();
    let env = [
        ("REDLOCK_KEY", lock.keys().lock.clone()),
        ("REDLOCK_TOKEN", token.clone()),
        ("REDLOCK_TTL_MS", cfg.ttl.as_millis().to_string()),
        ("REDLOCK_FENCE", held.fence.to_string()),
    ];
    let mut job = match Job::spawn(&cfg.command, &env) {
        Ok(job) => job,
        Err(err) => {
            release(cfg, &lock, &token, &held, report, false).await;
            let (ending, err) = match err {
                SpawnError::NotFound(e) => (Ending::NotFound, e),
                SpawnError::NotExecutable(e) => (Ending::NotExecutable, e),
            };
            report.error(
                "spawn",
                format_args!("cannot run {}: {err}", cfg.command.display),
            );
            return ending;
        }
    };
    report.info(
        "spawned",
        format_args!("started pid {}: {}", job.pid(), cfg.command.display),
    );
    let (end, stop, deadline) =
        supervise(cfg, &lock, &token, &held, &mut job, &mut signals, report).await;
    // Leftovers in the group get --grace, but never past the lease: renewals have stopped.
    let leftovers_until = Stamp::now()
        .checked_add(cfg.grace)
        .map_or(deadline, |at| at.min(deadline));
    // An INT or TERM now (the user pressing Ctrl-C again) skips the wait for leftovers.
    job.finish(leftovers_until, signals.recv_quit()).await;

    // 4. Release and decide the outcome.
    let lost_already = matches!(stop, Some(Stop::Lost | Stop::Unconfirmed(_)));
    let released_ours = if lost_already {
        // Not ours any more (or not provably): the compare in the script keeps a new holder
        // safe, so still try, to clean up if the key happens to hold our token.
        release(cfg, &lock, &token, &held, report, true).await;
        false
    } else {
        release(cfg, &lock, &token, &held, report, false).await
    };
    let end = match end {
        Ok(end) => end,
        Err(e) => {
            report.error("wait", format_args!("lost track of the command: {e}"));
            return Ending::Software;
        }
    };
    match stop {
        Some(Stop::Lost) => {
            report.error(
                "lost",
                format_args!(
                    "lock {} was lost while the command ran (the key expired, was deleted or \
                     now holds another value); the command was stopped",
                    lock.keys().lock
                ),
            );
            Ending::Lost
        }
        Some(Stop::Unconfirmed(why)) => {
            report.error(
                "lost",
                format_args!(
                    "lock {} could not be renewed before its lease ran out ({why}); the command \
                     was stopped",
                    lock.keys().lock
                ),
            );
            Ending::Lost
        }
        // The lock was not ours at release: that outranks how the command ended.
        Some(Stop::MaxRuntime | Stop::Signal(_)) | None if !released_ours => Ending::Lost,
        Some(Stop::MaxRuntime) => {
            report.error(
                "max-runtime",
                format_args!(
                    "the command ran longer than --max-runtime {} and was stopped",
                    show(cfg.max_runtime.unwrap_or_default())
                ),
            );
            Ending::MaxRuntime
        }
        Some(Stop::Signal(_)) | None => Ending::Ran(ChildEnd::from(end)),
    }
}

/// The lock as held by this run.
struct Held {
    lease: Lease,
    /// When the successful SET was sent: the lease and the heartbeat count from here.
    sent: Stamp,
    fence: u64,
    /// When the acquire's reply arrived: `--hold-at-least` counts from here, which is no
    /// earlier than the server's SET.
    acquired: Stamp,
    waited: Duration,
}

async fn acquire(
    cfg: &RunConfig,
    lock: &Lock,
    token: &str,
    holder: &HolderInfo,
    signals: &mut Signals,
    report: &Reporter,
) -> Result<Held, Ending> {
    let started = Stamp::now();
    let mut backoff = Backoff::new(token);
    // Subscribed on the first busy reply when there is time to wait; wakes the next attempt
    // as soon as the holder releases, instead of at the next poll.
    let mut notices: Option<ReleaseNotices> = None;
    let mut subscribed = false;
    let result = loop {
        let sent = Stamp::now();
        // Never cancelled by a signal: a SET that was sent may have landed. A signal is looked
        // at after the reply, and a lock already taken is released first.
        let attempt = lock.acquire(token, cfg.ttl, holder).await;
        let now = Stamp::now();
        let left = match cfg.wait {
            Wait::Forever => Some(Duration::MAX),
            Wait::For(limit) => limit
                .checked_sub(now.since(started))
                .filter(|d| !d.is_zero()),
        };
        match attempt {
            Ok(Acquired::Yes { fence }) => {
                let held = Held {
                    lease: Lease::granted(sent, cfg.ttl, cfg.grace)
                        .expect("config guarantees ttl > drift"),
                    sent,
                    fence,
                    acquired: now,
                    waited: now.since(started),
                };
                if let Some(sig) = signals.pending().await {
                    release(cfg, lock, token, &held, report, false).await;
                    break Err(Ending::Interrupted(sig as i32));
                }
                break Ok(held);
            }
            Ok(Acquired::Busy(holder)) => {
                let Some(left) = left else {
                    report.busy(busy_message(&lock.keys().lock, &holder, cfg.wait));
                    break Err(Ending::Busy(cfg.conflict_exit_code));
                };
                report.waiting(waiting_message(
                    &lock.keys().lock,
                    &holder,
                    now.since(started),
                    cfg.wait,
                ));
                if !subscribed {
                    subscribed = true;
                    notices = lock.release_notices().await;
                    // The holder may have released while we subscribed: try again at once.
                    continue;
                }
                let nap = backoff.pause().min(left);
                tokio::select! {
                    () = tokio::time::sleep(nap) => {}
                    () = async {
                        match notices.as_mut() {
                            Some(n) => n.next().await,
                            None => std::future::pending().await,
                        }
                    } => {}
                    sig = signals.recv() => break Err(Ending::Interrupted(sig as i32)),
                }
            }
            Err(e) if e.is_transient() && left.is_some() => {
                report.info("retry", format_args!("{e}; retrying"));
                let nap = RENEW_RETRY
                    .max(backoff.pause())
                    .min(left.unwrap_or_default());
                tokio::select! {
                    () = tokio::time::sleep(nap) => {}
                    sig = signals.recv() => break Err(Ending::Interrupted(sig as i32)),
                }
            }
            Err(e) => {
                // A SET whose reply timed out or could not be read may still have landed:
                // take back our own token, if it is there, rather than block everyone for a
                // whole TTL. The compare in the script leaves any other value alone.
                if e.may_have_written() {
                    let _ = lock.release(token, Duration::ZERO).await;
                }
                report.error("unavailable", &e);
                break Err(Ending::Unavailable);
            }
        }
    };
    report.waiting_done();
    result
}

fn waiting_message(key: &str, holder: &Holder, elapsed: Duration, wait: Wait) -> String {
    let who = match (&holder.host, holder.pid) {
        (Some(host), Some(pid)) => format!(" (held by {host} pid {pid})"),
        _ => String::new(),
    };
    let left = match wait {
        Wait::Forever => "no limit".to_owned(),
        Wait::For(d) => format!("{} left", show_secs(d.saturating_sub(elapsed))),
    };
    format!(
        "waiting for {key}{who}: {} elapsed, {left}",
        show_secs(elapsed)
    )
}

fn busy_message(key: &str, holder: &Holder, wait: Wait) -> String {
    let who = match (&holder.host, holder.pid) {
        (Some(host), Some(pid)) => format!(" by {host} pid {pid}"),
        _ => String::new(),
    };
    let ttl = match holder.ttl_ms {
        Some(ms) => format!(", {} left", show_ms(Duration::from_millis(ms))),
        None => ", and the key has no TTL (it will never expire by itself)".to_owned(),
    };
    let waited = match wait {
        Wait::For(d) if !d.is_zero() => format!(" after waiting {}", show(d)),
        _ => String::new(),
    };
    format!("lock {key} is busy: held{who}{ttl}{waited}")
}

/// Why the supervisor stopped the command.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stop {
    /// A forwarded INT or TERM asked the command to end; its status stands.
    Signal(Signal),
    /// A renewal found the token gone: someone else may hold the lock now.
    Lost,
    /// No renewal succeeded in time; carries the last error.
    Unconfirmed(String),
    MaxRuntime,
}

/// The outcome of one renewal attempt.
enum Renewal {
    Renewed,
    Lost,
    Failed(String),
}

type RenewalFuture<'a> = Pin<Box<dyn Future<Output = (Stamp, Renewal)> + 'a>>;

/// Run the command to its end while keeping the lease. Returns its wait status, why the
/// supervisor had to stop it (if it did), and the lease deadline at the end.
///
/// Each pass of the loop first reads the clock and acts on the lease standing, so a process
/// that wakes up late (SIGSTOP, VM pause, suspend, overload) stops the command before it does
/// anything else, never after trying a renewal first. Then it waits for the first of: the
/// command's exit, a signal, a renewal reply, or the next timer.
async fn supervise(
    cfg: &RunConfig,
    lock: &Lock,
    token: &str,
    held: &Held,
    job: &mut Job,
    signals: &mut Signals,
    report: &Reporter,
) -> (
    std::io::Result<std::process::ExitStatus>,
    Option<Stop>,
    Stamp,
) {
    let started = Stamp::now();
    let mut lease = held.lease;
    let max_runtime_at = cfg.max_runtime.and_then(|d| started.checked_add(d));
    // Heartbeats count from the acquire's send time, like the lease they extend.
    let mut next_renewal = held.sent.checked_add(cfg.heartbeat);
    let mut renewal: Option<RenewalFuture<'_>> = None;
    let mut stop: Option<Stop> = None;
    // When SIGKILL goes to the group, once the command has been asked to stop.
    let mut kill_at: Option<Stamp> = None;
    let mut killed = false;
    let mut quit_signals = 0u32;
    let mut last_error = String::from("no renewal was answered in time");

    loop {
        let now = Stamp::now();

        // The lease first. `stop` for a lease reason is set at most once.
        let standing = lease.standing(now);
        let lease_stop_needed =
            standing != Standing::Safe && !matches!(stop, Some(Stop::Lost | Stop::Unconfirmed(_)));
        if lease_stop_needed {
            job.signal(Signal::SIGTERM);
            // SIGKILL at the deadline, so the command is gone before the server can expire
            // the key; if the deadline has passed already (a late wake-up), after --grace.
            let at = if standing == Standing::Expired {
                now.checked_add(cfg.grace)
            } else {
                Some(lease.deadline())
            };
            kill_at = earliest(kill_at, at);
            stop = Some(Stop::Unconfirmed(last_error.clone()));
            renewal = None;
            next_renewal = None;
            report.info(
                "stopping",
                format_args!(
                    "lease on {} not renewed in time ({last_error}); sending SIGTERM",
                    lock.keys().lock
                ),
            );
        }
        if let Some(at) = max_runtime_at {
            if now >= at && stop.is_none() {
                job.signal(Signal::SIGTERM);
                kill_at = earliest(kill_at, now.checked_add(cfg.grace));
                stop = Some(Stop::MaxRuntime);
            }
        }
        if kill_at.is_some_and(|at| now >= at) && !killed {
            job.signal(Signal::SIGKILL);
            killed = true;
        }
        if renewal.is_none() && next_renewal.is_some_and(|at| now >= at) {
            renewal = Some(Box::pin(renew(cfg, lock, token, lease.deadline())));
        }

        // The next moment something is due, napping at most MAX_NAP.
        let mut wake = now.checked_add(MAX_NAP);
        if renewal.is_none() {
            wake = earliest(wake, next_renewal);
        }
        if !matches!(stop, Some(Stop::Lost | Stop::Unconfirmed(_))) {
            wake = earliest(wake, Some(lease.stop_at()));
        }
        if !killed {
            wake = earliest(wake, kill_at);
        }
        if stop.is_none() {
            wake = earliest(wake, max_runtime_at);
        }
        let nap = wake.map_or(MAX_NAP, |w| now.until(w));

        tokio::select! {
            biased;
            status = job.wait() => return (status, stop, lease.deadline()),
            sig = signals.recv() => {
                let quit = matches!(sig, Signal::SIGINT | Signal::SIGTERM);
                if quit {
                    quit_signals += 1;
                }
                if quit && quit_signals > 1 {
                    report.info("signal", format_args!("second {sig}: killing the command"));
                    job.signal(Signal::SIGKILL);
                    killed = true;
                } else {
                    report.info("signal", format_args!("forwarding {sig} to the command"));
                    job.signal(sig);
                }
                if quit && stop.is_none() {
                    stop = Some(Stop::Signal(sig));
                }
            }
            (sent, outcome) = async { renewal.as_mut().expect("guarded").await }, if renewal.is_some() => {
                renewal = None;
                match outcome {
                    Renewal::Renewed => {
                        lease.renewed(sent);
                        next_renewal = sent.checked_add(cfg.heartbeat);
                        report.info("renewed", format_args!("renewed {}", lock.keys().lock));
                    }
                    Renewal::Lost => {
                        if !matches!(stop, Some(Stop::Lost)) {
                            job.signal(Signal::SIGTERM);
                            kill_at = earliest(kill_at, Stamp::now().checked_add(cfg.grace));
                            stop = Some(Stop::Lost);
                        }
                        next_renewal = None;
                    }
                    Renewal::Failed(why) => {
                        report.info("renew-failed", format_args!("renewal failed: {why}; retrying"));
                        last_error = why;
                        next_renewal = Stamp::now().checked_add(RENEW_RETRY);
                    }
                }
            }
            () = tokio::time::sleep(nap) => {}
        }
    }
}

/// One renewal: compare-then-PEXPIRE, then (with --min-replicas) WAIT. Bounded so that it
/// never outlives the lease it tries to extend.
async fn renew(cfg: &RunConfig, lock: &Lock, token: &str, deadline: Stamp) -> (Stamp, Renewal) {
    let sent = Stamp::now();
    let bound = sent.until(deadline).max(Duration::from_millis(10));
    let outcome = match lock.renew(token, cfg.ttl, bound).await {
        Ok(false) => Renewal::Lost,
        Ok(true) if cfg.min_replicas == 0 => Renewal::Renewed,
        Ok(true) => match confirm_replicas(cfg, lock).await {
            Ok(()) => Renewal::Renewed,
            Err(msg) => Renewal::Failed(msg),
        },
        Err(e) => Renewal::Failed(e.to_string()),
    };
    (sent, outcome)
}

/// `Err` with a message when fewer than --min-replicas acknowledge our writes in time.
async fn confirm_replicas(cfg: &RunConfig, lock: &Lock) -> Result<(), String> {
    match lock
        .wait_replicas(cfg.min_replicas, cfg.replica_timeout)
        .await
    {
        Ok(n) if n >= cfg.min_replicas => Ok(()),
        Ok(n) => Err(format!(
            "only {n} of {} replicas acknowledged the lock {} within {}",
            cfg.min_replicas,
            lock.keys().lock,
            show(cfg.replica_timeout)
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// Release the lock. Returns true if the key still held our token (released or, under
/// --hold-at-least, left to expire later). `quiet_if_gone` suppresses the message when the
/// caller already knows the lock is lost.
async fn release(
    cfg: &RunConfig,
    lock: &Lock,
    token: &str,
    held: &Held,
    report: &Reporter,
    quiet_if_gone: bool,
) -> bool {
    let keep = cfg
        .hold_at_least
        .and_then(|hold| hold.checked_sub(Stamp::now().since(held.acquired)))
        .unwrap_or_default();
    let key = &lock.keys().lock;
    match lock.release(token, keep).await {
        Ok(Released::Released) => {
            if keep.is_zero() {
                report.info("released", format_args!("released {key}"));
            } else {
                report.info(
                    "released",
                    format_args!(
                        "{key} stays locked for {} more (--hold-at-least)",
                        show_ms(keep)
                    ),
                );
            }
            true
        }
        Ok(Released::HeldByOther) => {
            if !quiet_if_gone {
                report.error(
                    "lost",
                    format_args!("lock {key} was held by someone else at release; left it alone"),
                );
            }
            false
        }
        Ok(Released::Gone) => {
            if !quiet_if_gone {
                report.error(
                    "lost",
                    format_args!("lock {key} had already expired or been deleted at release"),
                );
            }
            false
        }
        Err(e) => {
            // The command ran under a valid lease; the key expires by itself within --ttl.
            report.warn(
                "release-failed",
                format_args!(
                    "could not release {key} ({e}); it expires within {}",
                    show(cfg.ttl)
                ),
            );
            true
        }
    }
}

fn earliest(a: Option<Stamp>, b: Option<Stamp>) -> Option<Stamp> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".to_owned())
}

fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

fn show_secs(d: Duration) -> String {
    show(Duration::from_secs(d.as_secs()))
}

fn show_ms(d: Duration) -> String {
    show(Duration::from_millis(d.as_millis() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_message_names_key_holder_and_ttl() {
        let holder = Holder {
            ttl_ms: Some(1500),
            host: Some("web1".into()),
            pid: Some(42),
        };
        assert_eq!(
            busy_message("redlock:k", &holder, Wait::For(Duration::ZERO)),
            "lock redlock:k is busy: held by web1 pid 42, 1s 500ms left"
        );
        let foreign = Holder::default();
        assert!(busy_message("k", &foreign, Wait::For(Duration::from_secs(2))).contains("no TTL"));
    }

    #[test]
    fn earliest_ignores_missing() {
        let a = Stamp::now();
        let b = a.checked_add(Duration::from_secs(1));
        assert_eq!(earliest(Some(a), b), Some(a));
        assert_eq!(earliest(None, b), b);
        assert_eq!(earliest(None, None), None);
    }
}
