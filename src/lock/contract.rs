//! The contract between the supervisor and a lock backend ([`Lock`]), and the values that
//! cross it.

use std::pin::Pin;
use std::time::Duration;

use futures_util::{Stream, StreamExt};

use super::error::RedisFailure;
use super::protocol::hold::{HoldChange, HoldRecord};
use super::protocol::record::{Finished, Records};
use super::token::Token;
use crate::lease::Stamp;

/// The contract between the supervisor and a lock backend.
///
/// What every backend must guarantee (a second backend is reviewed against this list):
///
/// - **Only its own token.** Renew and release compare the stored value with the token inside
///   one atomic step on each server; nothing ever extends or deletes another holder's lock.
/// - **No write left behind.** `try_acquire` either grants, reports busy, or fails; when it
///   fails after a write may have landed (a lost reply, a timeout, a minority of quorum nodes,
///   too few replica acknowledgements), it takes that write back itself before returning,
///   and makes sure the same attempt cannot land later (the request may still be under way).
///   Bounded does not mean skipped: a take-back to a server that does not answer is sent all
///   the same and awaited only within its bound; the cancelled token keeps the late request
///   from landing.
/// - **A token per attempt.** Each attempt makes a token of its own, so that one cancelled
///   by a take-back is never sent again; the [`Grant`] carries the one that won, which the
///   caller renews and releases with.
/// - **An honest lease start.** A grant and a renewal carry `counted_from`: a moment no later
///   than the one from which every server that counts started its TTL (the local clock read
///   before the first byte was sent). The supervisor's deadline is `counted_from + ttl -
///   drift`; a backend must never report a later moment.
/// - **Replica acknowledgement is part of the write.** With `--min-replicas`, a grant or a
///   renewal counts only if enough replicas acknowledged that very write (WAIT in the same
///   pipeline, on the same connection).
/// - **Bounded.** Every call returns within the bound it is given (or the connect timeout),
///   connection set-up included; a connection that timed out is never reused.
/// - **Fences grow.** A grant's fence is strictly greater than every earlier grant's fence
///   for that lock name, on the assumptions documented in the README.
/// - **No timing decisions.** When to renew, when to stop the command and which exit code to
///   use are the supervisor's; a backend only reports what the servers said.
#[allow(async_fn_in_trait)] // used on one thread only, never as `dyn`; no Send bound needed
pub trait Lock {
    /// The lock's full Redis key, for messages and `REDLOCK_KEY`.
    fn name(&self) -> &str;

    /// One attempt to take the lock, with a token of its own, answered within `within` (plus
    /// the replica wait with `--min-replicas`), the take-back of a write whose reply was lost
    /// included. A grant carries the token that won it.
    async fn try_acquire(
        &self,
        ttl: Duration,
        holder: &HolderInfo,
        within: Duration,
    ) -> Result<Attempt, RedisFailure>;

    /// Extend the lease to `ttl` if the token is still ours, answering within `within`.
    async fn renew(
        &self,
        token: &Token,
        ttl: Duration,
        within: Duration,
    ) -> Result<Renewal, RedisFailure>;

    /// Release if ours, within `within`. With `keep` > 0 the lock is left to expire after
    /// `keep` instead. `record`: the run record, written in the same step on every server
    /// where the token still holds the lock, and nowhere else. A backend on several servers
    /// may return once the answers in hand decide the outcome, but sends the release to every
    /// server: one that lands late only ever deletes this token (compare-and-delete), and one
    /// that never lands expires.
    async fn release(
        &self,
        token: &Token,
        keep: Duration,
        record: Option<&Finished>,
        within: Duration,
    ) -> Result<Released, RedisFailure>;

    /// Announcements that the lock was released, within `within`; `None` if the backend has
    /// none or they could not be set up (waiting then polls alone).
    async fn release_notices(&self, within: Duration) -> Option<ReleaseNotices>;

    /// Who holds the lock now, and its run record. Read-only. `held`: the ttl of a lease
    /// this run holds while it reads (`--once-per`, before its first renewal); a backend on
    /// several servers then bounds each server as it bounds an acquire, and returns once the
    /// answers in hand settle the result (a quorum answered), so that a frozen server does
    /// not spend the lease. `None` (the `status` subcommand, the metrics after a run): every
    /// server is awaited up to `--connect-timeout`.
    async fn status(&self, held: Option<Duration>) -> Result<Status, RedisFailure>;

    /// Clear the run record (`forget`), on every server, within `within`; the lock itself is
    /// left alone. Returns how many record keys existed (the most any server had).
    async fn forget(&self, within: Duration) -> Result<u64, RedisFailure>;

    /// The record of a hold across CI steps (`acquire` ... `release`, `protocol/hold.rs`)
    /// under `token`: `change` applied in one script on every server, within `within`.
    /// `Begin` writes only where the lock holds the token. Returns the record as it then
    /// stands (`None`: there is none, or `Begin` found the lock not ours). A backend on
    /// several servers answers once a quorum agreed, and prefers an ended record to one still
    /// held (a keeper that ended the hold on a quorum of nodes).
    async fn hold(
        &self,
        token: &Token,
        change: &HoldChange,
        within: Duration,
    ) -> Result<Option<HoldRecord>, RedisFailure>;
    /// `list`: every lock whose name starts with `query.starts_with`, on the servers this
    /// backend reaches (every master of a cluster; every Redlock node, as a quorum view), not
    /// only this lock. Read-only; SCAN, never KEYS; bounded as `query` says.
    async fn list(&self, query: &ListQuery) -> Result<Listing, RedisFailure>;

    /// A waiter that gives up leaves the queue now (best effort, within `within`): a place
    /// left behind would make the others wait until it expires.
    async fn leave_queue(&self, holder: &HolderInfo, within: Duration);

    /// `break`: take the lock (or one `--limit` permit, or one `--shared` holder's share)
    /// away from the holder whose token is `token`, and from no other, in one atomic step
    /// per server: raise the fence, leave a broken mark for `token` (read by its renewal:
    /// [`Renewal::Lost`]) naming `by`, and write the run record's last run as `broken`.
    /// Within `within`.
    async fn break_holder(
        &self,
        token: &str,
        by: &str,
        within: Duration,
    ) -> Result<BreakOutcome, RedisFailure>;

    /// `pause`: new runs are busy for `length` (or until `resume`); holders are not touched
    /// and waiters keep their places. Returns when it ends (ms, server clock).
    async fn pause(
        &self,
        reason: &str,
        by: &str,
        length: Duration,
        within: Duration,
    ) -> Result<u64, RedisFailure>;

    /// `resume`: end a pause now and wake the queue's head. `false`: there was none.
    async fn resume(&self, within: Duration) -> Result<bool, RedisFailure>;
}

/// What `break` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakOutcome {
    /// Taken away; the next grant's fence is above `fence`.
    Broken { fence: u64 },
    /// The lock (or permit) holds another token now: nothing was changed.
    HeldByOther,
    /// Nobody holds the lock.
    Free,
}

/// Who broke a lock (`break`), and when: what a holder that lost its lock to a break is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broken {
    /// The host `break` ran on.
    pub by: String,
    /// When, in ms since 1970 on the server's clock.
    pub at_ms: u64,
}

/// A pause in force (`pause`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Paused {
    pub reason: String,
    /// The host `pause` ran on.
    pub by: String,
    /// When it began (0 when unknown) and when it ends, ms since 1970 (server clock).
    pub since_ms: u64,
    pub until_ms: u64,
}

impl Broken {
    /// `broken by web1 at T (redlock-run break)`, as every message that tells it says it.
    pub fn describe(&self) -> String {
        format!(
            "broken by {} at {} (redlock-run break)",
            self.by,
            crate::timestamp::seconds(self.at_ms)
        )
    }
}

impl Paused {
    /// `paused by web1 until T: REASON`, as `status` and the busy message say it.
    pub fn describe(&self) -> String {
        format!(
            "paused by {} until {}: {}",
            self.by,
            crate::timestamp::seconds(self.until_ms),
            self.reason
        )
    }
}

/// `--min-replicas`: how many replicas must acknowledge each acquire and renewal, and how long
/// to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaAck {
    pub replicas: u32,
    pub timeout: Duration,
}

/// Time beyond the WAIT timeout for its reply: the server checks WAIT timeouts on a 100 ms
/// timer, plus the round trip.
const WAIT_SLACK: Duration = Duration::from_millis(300);

impl ReplicaAck {
    /// How long a write with `ack` may take beyond a plain reply: the WAIT behind it.
    pub fn wait_time(ack: Option<ReplicaAck>) -> Duration {
        ack.map_or(Duration::ZERO, |a| a.timeout + WAIT_SLACK)
    }
}

/// The outcome of one acquire attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt {
    Granted(Grant),
    /// Someone else holds it.
    Busy(Holder),
}

/// A granted lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The token that won: renewals and the release use it.
    pub token: Token,
    /// Strictly greater than every earlier fence of this lock name.
    pub fence: u64,
    /// The lease counts from here (see the contract).
    pub counted_from: Stamp,
    /// Servers that did not take part although the grant holds (a Redlock master down), in
    /// words for a warning: one more such failure could stop every run. `None`: all did.
    pub degraded: Option<String>,
    /// The names of the servers (no password) that did not grant, for the renewals to tell
    /// apart from one that stops answering later (empty for one server).
    pub absent: Vec<String>,
}

/// The outcome of one renewal that got an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renewal {
    /// Extended; the new lease counts from `counted_from`. `nodes`: on several servers
    /// (Redlock), which of them did not confirm it (`None` for one server).
    Renewed {
        counted_from: Stamp,
        nodes: Option<Confirmed>,
    },
    /// The token is gone: someone else may hold the lock. Final. `Some` when an operator's
    /// `break` took it: by whom and when.
    Lost(Option<Broken>),
}

/// Which servers confirmed a renewal that holds on several (Redlock).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Confirmed {
    /// Each server that did not confirm, by name (no password), with why, in words that
    /// name it (`Redis at redis://10.0.0.2:6379 is unreachable: ...`).
    pub missing: Vec<(String, String)>,
    /// Each server that did, by name.
    pub confirmed: Vec<String>,
    /// `2 of 3 masters (2 needed)`.
    pub tally: String,
}

/// What is known about the current holder of a busy lock.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Holder {
    /// Remaining TTL in ms; `None` when the key has no TTL (a foreign lock that never expires)
    /// or when the lock is free but others wait before us (`free`).
    pub ttl_ms: Option<u64>,
    /// Nobody holds the lock, but waiters queued earlier come first.
    pub free: bool,
    /// Waiters in the queue (ourselves included when queued), and our place in it (1 = next;
    /// 0 when not queued).
    pub queued: u64,
    pub place: u64,
    /// Host and pid of a redlock-run holder; `None` for a foreign value.
    pub host: Option<String>,
    pub pid: Option<u32>,
    /// When the holder acquired it (ms since the epoch, server clock).
    pub acquired_ms: Option<u64>,
    /// The lock is paused (`pause`): new runs are busy until it ends.
    pub paused: Option<Paused>,
    /// The holder's command finished and `--hold-at-least` keeps the lock: its pid is gone.
    pub kept: Option<Kept>,
    /// `--shared`: how many shared holders keep the lock from an exclusive run (0: none;
    /// `ttl_ms` is then the time left on the longest shared lease).
    pub shared: u64,
}

/// A lock whose command finished, kept by `--hold-at-least` (written by the release under
/// the holder's token; ms since the epoch, server clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kept {
    pub finished_ms: u64,
    pub until_ms: u64,
}

impl Kept {
    /// From the holder hash's `finished_ms` and `kept_until_ms`; `None` unless both are
    /// numbers.
    pub fn parse(finished: Option<&str>, until: Option<&str>) -> Option<Kept> {
        Some(Kept {
            finished_ms: finished?.parse().ok()?,
            until_ms: until?.parse().ok()?,
        })
    }
}

impl Kept {
    /// `pid 42 finished at T, kept until T' by --hold-at-least`: who is named by pid must be
    /// told apart from a command that still runs.
    pub fn describe(&self, pid: Option<u32>) -> String {
        let at = crate::timestamp::seconds;
        let who = pid.map_or_else(|| "its command".to_owned(), |pid| format!("pid {pid}"));
        format!(
            "{who} finished at {}, kept until {} by --hold-at-least",
            at(self.finished_ms),
            at(self.until_ms)
        )
    }
}

/// What `release` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
// Linted since `lock` became private; `Released::Released` is how every topology and the
// supervisor spell it.
#[allow(clippy::enum_variant_names)]
pub enum Released {
    Released,
    /// The key holds another value: someone else has the lock now. Left untouched.
    HeldByOther,
    /// The key had already expired or been deleted.
    Gone,
}

/// Who holds a lock, for `status`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    pub held: bool,
    /// The lock is held by a value that is not a redlock-run token with holder info.
    pub foreign: bool,
    /// The holder's token (`break --holder`); `None` when free.
    pub token: Option<String>,
    /// The holder's `--note`.
    pub note: Option<String>,
    /// A pause in force (`pause`); on Redlock, when enough nodes are paused to keep any
    /// quorum from granting.
    pub paused: Option<Paused>,
    pub ttl_ms: Option<u64>,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub command: Option<String>,
    pub acquired_ms: Option<u64>,
    pub fence: Option<u64>,
    /// The holder's command finished; `--hold-at-least` keeps the lock until then.
    pub kept: Option<Kept>,
    /// Waiters queued (fair waiting), and the first of them as `host pid`.
    pub queued: u64,
    pub queue_head: Option<String>,
    /// `--limit`: the limit recorded with the lock, and every holder (empty for a mutex).
    pub limit: Option<u32>,
    pub permits: Vec<Permit>,
    /// `--shared`: every shared holder whose lease lasts (empty when none). `held` is true
    /// while there is one.
    pub shared: Vec<Permit>,
    /// The waiter at the head of the queue waits for an exclusive hold (a run without
    /// `--shared`): it keeps new shared runs out.
    pub next_exclusive: bool,
    /// Redlock: what each node says, in `--redis` order (empty for one server). The fields
    /// above are then the quorum's view.
    pub nodes: Vec<NodeStatus>,
    /// The run record (last run, last success) and the server's clock; on Redlock the
    /// newest record by fence among the nodes that answered.
    pub records: Records,
}

/// What `list` looks for, and its bounds.
#[derive(Debug, Clone)]
pub struct ListQuery {
    /// The start of every lock name listed (the key prefix included).
    pub starts_with: String,
    /// SCAN's COUNT: keys looked at per call.
    pub scan_count: u32,
    /// Locks shown at most: the first by name.
    pub max_locks: usize,
    /// No SCAN call is started after this long (checked between calls).
    pub scan_time: Duration,
    /// Bound on each reply (`--connect-timeout`).
    pub reply_within: Duration,
}

/// What `list` found: each lock by name, in name order.
#[derive(Debug, Clone, Default)]
pub struct Listing {
    pub locks: Vec<Listed>,
    /// Why the listing may miss locks, if it may.
    pub cut: Option<Cut>,
}

/// One lock found by `list`.
#[derive(Debug, Clone)]
pub struct Listed {
    /// Its full Redis key.
    pub name: String,
    /// Its status, as `status` shows it, or why it could not be read.
    pub status: Result<Status, String>,
}

/// Why a listing may be incomplete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// More locks than `max_locks` were found; the first `max_locks` by name are shown.
    TooMany,
    /// `scan_time` ran out before every server was scanned to the end.
    TookTooLong,
}

/// One Redlock node's answer to `status`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeStatus {
    /// The node's URL, password hidden.
    pub server: String,
    /// Its status, or why it could not tell.
    pub status: Result<Status, String>,
}

/// One holder of a `--limit` lock.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Permit {
    /// The permit's token (`break --holder`).
    pub token: String,
    pub host: Option<String>,
    pub pid: Option<u32>,
    pub command: Option<String>,
    /// The holder's `--note`.
    pub note: Option<String>,
    pub acquired_ms: Option<u64>,
    pub fence: Option<u64>,
    pub ttl_ms: u64,
    /// Its command finished; `--hold-at-least` keeps the permit.
    pub kept: Option<Kept>,
}

/// Who asks for the lock: stored beside the lock for `status` once granted.
#[derive(Debug, Clone)]
pub struct HolderInfo {
    pub host: String,
    pub pid: u32,
    pub command: String,
    /// `--note`: free text shown by `status` ('' for none).
    pub note: String,
    /// A run that waits (`--wait` above 0) takes the lock in arrival order, with this place
    /// in the queue. `None`: the run does not wait and never queues.
    pub waiter: Option<Waiter>,
}

/// A waiter's place in the queue of a busy lock.
#[derive(Debug, Clone)]
pub struct Waiter {
    /// `RANDOM host pid`: random, so that two waiters never share a place; host and pid, so
    /// that `status` shows who is next.
    pub id: String,
    /// How long the place is kept after each attempt: longer than the gap between two
    /// attempts (a pause, plus an attempt that may take up to `--connect-timeout`), so that
    /// a live waiter never loses it, and short, so that a dead one blocks nobody for long.
    pub place_kept: Duration,
}

/// Announcements that the lock was released. A hint only: a missed or late message costs one
/// poll interval, and expiry (a holder that died) is never announced.
///
/// Each announcement names whom it is for: the waiter at the head of the queue when the lock
/// was released (the only one that may take it), or [`FOR_EVERYONE`] when nobody queued or
/// the lock keeps no queue (Redlock). Waking only the head spares the others an attempt that
/// can only find the lock busy, and the head a Redis busy with those attempts.
pub struct ReleaseNotices {
    /// Whatever keeps the subscription open (a connection, a sink).
    _keep: Box<dyn std::any::Any>,
    /// The payload of each announcement.
    stream: Pin<Box<dyn Stream<Item = String>>>,
}

/// The payload of an announcement for every waiter.
pub const FOR_EVERYONE: &str = "1";

impl ReleaseNotices {
    pub fn new(keep: impl std::any::Any, stream: impl Stream<Item = String> + 'static) -> Self {
        ReleaseNotices {
            _keep: Box::new(keep),
            stream: Box::pin(stream),
        }
    }

    /// The next announcement, whomever it is for; pending forever once the subscription is
    /// gone.
    pub async fn next(&mut self) -> String {
        match self.stream.next().await {
            Some(payload) => payload,
            None => std::future::pending().await,
        }
    }

    /// The next announcement for `waiter` (its id): one for everyone, or one that names it.
    pub async fn next_for(&mut self, waiter: Option<&str>) {
        loop {
            let payload = self.next().await;
            if payload == FOR_EVERYONE || Some(payload.as_str()) == waiter {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn notices(payloads: &[&str]) -> ReleaseNotices {
        let payloads: Vec<String> = payloads.iter().map(|p| (*p).to_owned()).collect();
        ReleaseNotices::new((), futures_util::stream::iter(payloads))
    }

    /// Which announcements wake which waiter, without waiting for the end of the stream
    /// (which would leave `next` pending for ever).
    fn woken(payloads: &[&str], waiter: Option<&str>) -> usize {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut n = notices(payloads);
        let mut woken = 0;
        runtime.block_on(async {
            while tokio::time::timeout(Duration::from_millis(50), n.next_for(waiter))
                .await
                .is_ok()
            {
                woken += 1;
            }
        });
        woken
    }

    #[test]
    fn a_waiter_wakes_for_its_own_id_and_for_everyone() {
        let payloads = ["a 1", "1", "b 2", "a 1", "c 3"];
        assert_eq!(woken(&payloads, Some("a 1")), 3);
        assert_eq!(woken(&payloads, Some("b 2")), 2);
        assert_eq!(woken(&payloads, Some("z 9")), 1);
        // A run with no place in any queue (none is kept for it) wakes for everyone's only.
        assert_eq!(woken(&payloads, None), 1);
    }
}
