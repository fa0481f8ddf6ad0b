//! The lock, as the supervisor sees it: one contract, [`Lock`], and the types it speaks in.
//!
//! - **Target** (`target/`): what `--redis` names: the URL forms, TLS files, and the
//!   `Target`/`Endpoint` a backend is opened for.
//! - **Protocol** (`protocol/`): what a lock *is* in Redis. `protocol/mutex.rs` is one string
//!   key holding the holder's token; `protocol/keys.rs` is the naming rule for a lock key and
//!   its companions; `protocol/scripts/` holds the Lua.
//! - **Topology** (`topology/`): how commands reach servers. `topology/server.rs` is one
//!   connection to one server (replaced after any timeout; EVALSHA with an EVAL fallback; a
//!   write and its WAIT in one pipeline); `topology/one_master.rs` is the lock wherever one
//!   master holds the lock's slot, over a route to it: a fixed server (`single.rs`), the
//!   master Sentinel names (`sentinel.rs`), the slot's master in a Redis Cluster
//!   (`cluster.rs`); `topology/quorum/` is Redlock: the mutex on N independent masters.
//!
//! `topology::Backend` names every backend; `open` picks one for a target. Adding a one-master
//! topology means a route file under `topology/`, a variant of `Backend` and its URL form under
//! `target/`: the supervisor (`supervise/`), the process code and `lease.rs` do not change.
//!
//! Also here: `contract.rs` (the [`Lock`] trait and the values that cross it), `error.rs`
//! (Redis failures sorted into what a user must tell apart) and `token.rs` (the value that
//! marks a lock as this run's). This file only declares and re-exports: the topologies use
//! the contract, and nothing under `lock/` uses the supervisor.

mod contract;
mod error;
pub mod protocol;
pub mod target;
mod token;
pub mod topology;

pub use contract::{
    Attempt, BreakOutcome, Broken, Confirmed, Cut, Grant, Holder, HolderInfo, Kept, ListQuery,
    Listed, Listing, Lock, NodeStatus, Paused, Permit, ReleaseNotices, Released, Renewal,
    ReplicaAck, Status, Waiter,
};
pub use error::{FailureKind, RedisFailure};
pub use protocol::hold::{HoldChange, HoldRecord, HoldState};
pub use protocol::keys::check as check_name;
pub use protocol::record::{Finished, Outcome as RunOutcome, Records, RunRecord};
pub use protocol::shared::SHARED_WAITER;
pub use token::Token;
pub use topology::open;
