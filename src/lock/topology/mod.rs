//! Topologies: how calls reach servers. Two implementations of the [`Lock`] contract:
//!
//! - `one_master`: the lock wherever one master holds its slot, over a [`Route`] (how a call
//!   reaches the server that holds the slot now), one file per route:
//!   - `single`: a fixed server;
//!   - `sentinel`: the master that Redis Sentinel names, found again after every failure;
//!   - `cluster`: the master of the lock's slot in a Redis Cluster, followed through
//!     redirects and migrations;
//! - `quorum`: Redlock, the mutex on N independent masters with a quorum and a fence that
//!   only grows.
//!
//! Beneath them: `server`, one connection to one server (the building block of both),
//! `shared`, what both do alike, and `survey`, `list` on one server. Here: [`Backend`], every backend, and [`open`], which picks
//! one for a target. A new one-master topology is a route file, a `Backend` variant and its
//! URL form; undo, acknowledgements, the queue and status come with `OneMaster`.
//!
//! [`Route`]: one_master::Route

pub mod cluster;
pub mod one_master;
mod push;
pub mod quorum;
pub mod sentinel;
pub mod server;
mod shared;
pub mod single;
mod survey;

use std::time::Duration;

use crate::lock::target::{Endpoint, Target};
use crate::lock::{
    Attempt, BreakOutcome, Finished, HoldChange, HoldRecord, HolderInfo, ListQuery, Listing, Lock,
    RedisFailure, ReleaseNotices, Released, Renewal, ReplicaAck, Status, Token,
};
use cluster::Cluster;
use one_master::OneMaster;
use quorum::Quorum;
use sentinel::Sentinel;
use server::Server;

/// Every backend. The supervisor is generic over [`Lock`] and gets one of these from `open`.
#[allow(clippy::large_enum_variant)] // one per run: its size does not matter
pub enum Backend {
    Single(OneMaster<Server>),
    Sentinel(OneMaster<Sentinel>),
    Cluster(OneMaster<Cluster>),
    Quorum(Quorum),
}

/// Connect to the lock described by `target` within `within`: fails with an
/// `Unreachable`/`Auth` failure when the servers cannot be reached in time or refuse the
/// credentials.
pub async fn open(
    target: &Target,
    ack: Option<ReplicaAck>,
    within: Duration,
) -> Result<Backend, RedisFailure> {
    Ok(match &target.endpoint {
        Endpoint::Single(info) => Backend::Single(single::open(info, target, ack, within).await?),
        Endpoint::Sentinel(spec) => {
            Backend::Sentinel(sentinel::open(spec, target, ack, within).await?)
        }
        Endpoint::Cluster(seeds) => {
            Backend::Cluster(cluster::open(seeds, target, ack, within).await?)
        }
        Endpoint::Quorum(nodes) => Backend::Quorum(Quorum::open(nodes, target, within).await?),
    })
}

/// `$body` with `$lock` bound to whichever backend `$backend` is.
macro_rules! each {
    ($backend:expr, $lock:ident => $body:expr) => {
        match $backend {
            Backend::Single($lock) => $body,
            Backend::Sentinel($lock) => $body,
            Backend::Cluster($lock) => $body,
            Backend::Quorum($lock) => $body,
        }
    };
}

impl Lock for Backend {
    fn name(&self) -> &str {
        each!(self, b => b.name())
    }

    async fn try_acquire(
        &self,
        ttl: Duration,
        holder: &HolderInfo,
        within: Duration,
    ) -> Result<Attempt, RedisFailure> {
        each!(self, b => b.try_acquire(ttl, holder, within).await)
    }

    async fn renew(
        &self,
        token: &Token,
        ttl: Duration,
        within: Duration,
    ) -> Result<Renewal, RedisFailure> {
        each!(self, b => b.renew(token, ttl, within).await)
    }

    async fn release(
        &self,
        token: &Token,
        keep: Duration,
        record: Option<&Finished>,
        within: Duration,
    ) -> Result<Released, RedisFailure> {
        each!(self, b => b.release(token, keep, record, within).await)
    }

    async fn release_notices(&self, within: Duration) -> Option<ReleaseNotices> {
        each!(self, b => b.release_notices(within).await)
    }

    async fn status(&self, held: Option<Duration>) -> Result<Status, RedisFailure> {
        each!(self, b => b.status(held).await)
    }

    async fn leave_queue(&self, holder: &HolderInfo, within: Duration) {
        each!(self, b => b.leave_queue(holder, within).await)
    }

    async fn forget(&self, within: Duration) -> Result<u64, RedisFailure> {
        each!(self, b => b.forget(within).await)
    }

    async fn hold(
        &self,
        token: &Token,
        change: &HoldChange,
        within: Duration,
    ) -> Result<Option<HoldRecord>, RedisFailure> {
        each!(self, b => b.hold(token, change, within).await)
    }

    async fn list(&self, query: &ListQuery) -> Result<Listing, RedisFailure> {
        each!(self, b => b.list(query).await)
    }

    async fn break_holder(
        &self,
        token: &str,
        by: &str,
        within: Duration,
    ) -> Result<BreakOutcome, RedisFailure> {
        each!(self, b => b.break_holder(token, by, within).await)
    }

    async fn pause(
        &self,
        reason: &str,
        by: &str,
        length: Duration,
        within: Duration,
    ) -> Result<u64, RedisFailure> {
        each!(self, b => b.pause(reason, by, length, within).await)
    }

    async fn resume(&self, within: Duration) -> Result<bool, RedisFailure> {
        each!(self, b => b.resume(within).await)
    }
}
