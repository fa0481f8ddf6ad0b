//! Black-box tests of `redlock-run` against throwaway Redis servers, in one test binary.
//!
//! Each test owns its redis-server and scratch directory, so they run in parallel. The child
//! commands are small `sh` scripts that leave marker files in the scratch directory (their
//! cwd); the tests wait on those events with generous bounds instead of sleeping. The harness
//! (servers, the wrapper runner, polling helpers) is `tests/common/mod.rs`.
//!
//! - `contract`: the behaviours every topology keeps (a run takes and releases the lock, busy,
//!   renewals, a lost lock, a release that spares another holder, `status --json`, a waiter
//!   woken by the release, arrival order, growing fences), one test per behaviour and
//!   topology (one server, Sentinel, Cluster, Redlock).
//! - `acquire`: mutual exclusion, a busy lock (exit 75, `--conflict-exit-code`), `--wait`,
//!   waiters woken by the release announcement.
//! - `lease`: lost lock (Redis killed, frozen or restarted),
//!   `--grace` escalation, a wrapper woken past its lease, leftovers bounded by the lease, a
//!   SIGKILLed wrapper, `--hold-at-least` (and no hold when the command never ran).
//! - `limit`: `--limit N`: never more than N at once, a killed holder's permit expires,
//!   mismatched limits refused, `status` lists every holder, order kept, random kills.
//! - `multi_step`: issue 25: holds across CI steps (`acquire`, a detached keeper, `release`):
//!   three ttls, busy and queued acquires, `--limit`, a killed keeper, a deleted lock,
//!   `--max-hold`, another token, the eval/GitHub/dotenv output, the docs' CI examples run step
//!   by step, and on Sentinel, Cluster and Redlock.
//! - `signals`: forwarding to the command, a second TERM, a signal while waiting for the lock.
//! - `child`: exit status passthrough, 126/127, the `REDLOCK_*` variables, stdio,
//!   `--max-runtime` (also after a forwarded INT or TERM).
//! - `usage`: bad command lines exit 2 without running anything or touching Redis; typos get
//!   a hint, a bare number is seconds.
//! - `queue`: fair waiting: runs with `--wait` served in arrival order, a killed waiter's
//!   place expires, a waiter that gives up leaves, `--wait 0` never queues, `status`.
//! - `redis_errors`: unreachable or frozen Redis, authentication, wrong key type, read-only
//!   replica, ACL without EVAL (exit 69); a flushed script cache (EVAL, never SCRIPT LOAD).
//! - `secrets`: no message shows any part of a password, whatever the URL holds.
//! - `status`: the `status` subcommand, text and JSON.
//! - `list`: issue 24's `list`: many locks among unrelated keys over many SCAN pages (held,
//!   recorded, queued, `--limit`), a server without KEYS, `--max-locks` and `--scan-time`,
//!   every master of a Cluster, a Redlock quorum view with a node down, Sentinel's master.
//! - `run_record`: issue 22: the run record written with the release (success, failure,
//!   signal, max-runtime; nothing from a run that lost its lock), `status` of the last run
//!   and last success, `--once-per` (a skip, a failure does not count, five waiters run once,
//!   a calendar day boundary in two zones), `forget`, `--limit`, `--hold-at-least`, and on
//!   Sentinel, Cluster and Redlock (the newest record by fence).
//! - `once_per_faults`: `--once-per` under Redlock faults: a node's clock ahead still skips, a
//!   frozen node does not stop the run; a `-c` run that exits 126/127 records nothing.
//! - `observe`: issue 23: `--metrics-file` read by a strict exposition-format parser (and
//!   `prometheus_client` when installed) after failed, successful, skipped and busy runs, two
//!   keys in one file under a reader that never sees half a file; `--ping` against a local
//!   HTTP server (the pings in order, `/log` for busy, no output without `--ping-output`), a
//!   monitor that refuses or never answers; bad paths and URLs exit 2 before Redis; HTTPS
//!   pings to a Python server with the test CA (`SSL_CERT_FILE`; an untrusted one warns),
//!   through a Python proxy (CONNECT, absolute-form, `no_proxy`); and the metrics' last
//!   success from the run record on Sentinel, Cluster and Redlock.
//! - `split_keys`: a lock's keys split between the two nodes of a stalled slot migration for
//!   longer than a lease (a lost `--limit` key is written again by the next renewal), and a
//!   slot moved key by key there and back under contention.
//! - `network`: faults made by the TCP fault proxy: the replica WAIT travels with its write,
//!   a silently dead connection is replaced, an interrupted waiter leaves nothing behind.
//! - `config_file`: issue 24's config file: a key's section reaching the run, precedence
//!   (flag > environment > section > defaults > built-in), errors with file:line and name,
//!   passwords only by file, world-writable files refused, a missing named file, `status`.
//! - `options`: `--prefix`, passwords, `REDLOCK_*` configuration, `-q`, `--log-format json`.
//! - `fencing`: `REDLOCK_FENCE` across a restart, a stale writer rejected, a corrupt counter refused.
//! - `replicas`: `--min-replicas` acknowledgement of the acquire and of renewals.
//! - `shared`: issue 26: `--shared` (as flock -s): shared runs at once, an exclusive run alone
//!   and not starved (one queue for both kinds), a killed shared holder's share expires,
//!   fences across both kinds, `status`, refused with `--limit` and Redlock, Sentinel and
//!   Cluster (also while the lock's slot migrates key by key), and a chaos run with kills
//!   checked by the history checker.
//! - `terminal`: the command on a pseudo-terminal, the live waiting line, `stty tostop`.
//! - `cluster`: `redis+cluster://`: locks on every master, `--min-replicas`, the lock's slot migrated and its master failed over mid-run,
//!   a frozen unrelated master, usage errors and secrets, `--limit`, TLS (harness:
//!   `tests/common/cluster.rs`).
//! - `tls`: a TLS server with a CA made by the harness: `--tls-ca-cert`, client certificates
//!   (`--tls-cert`/`--tls-key`), an unknown CA (exit 69), bad TLS options (exit 2).
//! - `tree`: the command's whole process tree (`setsid`, `timeout(1)`, double forks) is
//!   stopped, in the cgroup and the /proc modes, and with a cgroup after a wrapper SIGKILL.
//! - `container`: the Dockerfile's image laid out from its COPY lines and run with chroot in
//!   new namespaces (`--ignored`, run in CI: a static release build).
//! - `docs`: the committed completions and man page are up to date; the man page documents
//!   every option, its variable and `status`; `--help` shows the usage forms; every command
//!   line of the README and docs/ parses, cron and systemd call the binary by its full path,
//!   the Kubernetes Job survives a busy lock, links and anchors resolve.
//! - `completion`: the bash, zsh and fish completions, run in those shells (zsh on a
//!   pseudo-terminal): options of a run and of `status`, option values, commands after `--`
//!   and the command's own completion.
//! - `sentinel`: `redis+sentinel://`: sentinels partly down, an unknown master name, a
//!   failover while a command runs (no second holder), a restarted old master never used,
//!   a demoted master, fences across a failover, bad URLs, passwords of data nodes and
//!   sentinels, `rediss+sentinel://` (TLS to the data nodes; Redis 7.0 only).
//! - `failover`: issue 18, with `--min-replicas 1`: a run that locks on the old master in the
//!   window of a manual failover and one on the new master never run at once; kill -9 and
//!   SIGSTOP of the master while a run holds; waiters ride out a failover (exit 0, not 69);
//!   queue places left on the old master; a slow chaos test over Sentinel and Cluster with a
//!   history checker (`--ignored`, run in CI).
//! - `harness`: sanity checks of the harness itself.
//! - `quorum`: Redlock over N masters: a node down, frozen or restarted empty, no quorum
//!   (exit 69, nothing left), the fence write-back against a counter far ahead,
//!   `status` with a node down, usage errors, `REDLOCK_REDIS` with several URLs, passwords hidden.
//! - `hardening`: hostile inputs and awkward failures for Sentinel and Redlock (secrets in
//!   malformed URLs, one server under two names, a silent node, a self-waking waiter).
//! - `spawn_modes`: the command starts the same born in its cgroup (clone3) or forked and
//!   joining it (`REDLOCK_NO_CLONE3=1`): signal mask, PATH search, duplicate variables.
//! - `proxy`: the TCP fault proxy (latency, hold, discard, blackhole, refuse, freeze, reset).
//! - `wait_cost`: what waiting and a run cost the server: calls a second and connections per
//!   waiter, commands per uncontended run, 200 waiters in arrival order (`--ignored`).

#[path = "../common/mod.rs"]
mod common;

mod acquire;
mod child;
mod cluster;
mod completion;
mod config_file;
mod container;
mod contract;
mod docs;
mod failover;
mod fencing;
mod hardening;
mod harness;
mod lease;
mod limit;
mod list;
mod multi_step;
mod network;
mod observe;
mod once_per_faults;
mod operator;
mod options;
mod proxy;
mod queue;
mod queue_faults;
mod quorum;
mod redis_errors;
mod replicas;
mod run_record;
mod secrets;
mod sentinel;
mod sentinel_acks;
mod shared;
mod signals;
mod spawn_modes;
mod split_keys;
mod status;
mod terminal;
mod tls;
mod tree;
mod usage;
mod wait_cost;
