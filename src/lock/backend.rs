//! Every backend under one type: [`open`] picks the one a [`Target`] names, and [`Backend`]
//! forwards the [`Lock`] contract to it.

use std::time::Duration;

use super::target::{Endpoint, Target};
use super::topology;
use super::{
    Attempt, HolderInfo, Lock, RedisFailure, ReleaseNotices, Released, Renewal, ReplicaAck, Status,
    Token,
};

/// Every backend. The supervisor is generic over [`Lock`] and gets one of these from `open`.
#[allow(clippy::large_enum_variant)] // one per run: its size does not matter
pub enum Backend {
    Single(topology::single::Single),
    Cluster(topology::cluster::Cluster),
    Quorum(topology::quorum::Quorum),
    Sentinel(topology::single::Single<topology::sentinel::Sentinel>),
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
        Endpoint::Single(info) => {
            Backend::Single(topology::single::Single::open(info, target, ack, within).await?)
        }
        Endpoint::Cluster(seeds) => {
            Backend::Cluster(topology::cluster::Cluster::open(seeds, target, ack, within).await?)
        }
        Endpoint::Quorum(nodes) => {
            Backend::Quorum(topology::quorum::Quorum::open(nodes, target, within).await?)
        }
        Endpoint::Sentinel(spec) => {
            Backend::Sentinel(topology::sentinel::open(spec, target, ack, within).await?)
        }
    })
}

impl Lock for Backend {
    fn name(&self) -> &str {
        match self {
            Backend::Single(b) => b.name(),
            Backend::Cluster(b) => b.name(),
            Backend::Quorum(b) => b.name(),
            Backend::Sentinel(b) => b.name(),
        }
    }

    async fn try_acquire(
        &self,
        token: &Token,
        ttl: Duration,
        holder: &HolderInfo,
        within: Duration,
    ) -> Result<Attempt, RedisFailure> {
        match self {
            Backend::Single(b) => b.try_acquire(token, ttl, holder, within).await,
            Backend::Cluster(b) => b.try_acquire(token, ttl, holder, within).await,
            Backend::Quorum(b) => b.try_acquire(token, ttl, holder, within).await,
            Backend::Sentinel(b) => b.try_acquire(token, ttl, holder, within).await,
        }
    }

    async fn renew(
        &self,
        token: &Token,
        ttl: Duration,
        within: Duration,
    ) -> Result<Renewal, RedisFailure> {
        match self {
            Backend::Single(b) => b.renew(token, ttl, within).await,
            Backend::Cluster(b) => b.renew(token, ttl, within).await,
            Backend::Quorum(b) => b.renew(token, ttl, within).await,
            Backend::Sentinel(b) => b.renew(token, ttl, within).await,
        }
    }

    async fn release(
        &self,
        token: &Token,
        keep: Duration,
        within: Duration,
    ) -> Result<Released, RedisFailure> {
        match self {
            Backend::Single(b) => b.release(token, keep, within).await,
            Backend::Cluster(b) => b.release(token, keep, within).await,
            Backend::Quorum(b) => b.release(token, keep, within).await,
            Backend::Sentinel(b) => b.release(token, keep, within).await,
        }
    }

    async fn release_notices(&self, within: Duration) -> Option<ReleaseNotices> {
        match self {
            Backend::Single(b) => b.release_notices(within).await,
            Backend::Cluster(b) => b.release_notices(within).await,
            Backend::Quorum(b) => b.release_notices(within).await,
            Backend::Sentinel(b) => b.release_notices(within).await,
        }
    }

    async fn status(&self) -> Result<Status, RedisFailure> {
        match self {
            Backend::Single(b) => b.status().await,
            Backend::Cluster(b) => b.status().await,
            Backend::Quorum(b) => b.status().await,
            Backend::Sentinel(b) => b.status().await,
        }
    }

    async fn leave_queue(&self, holder: &HolderInfo, within: Duration) {
        match self {
            Backend::Single(b) => b.leave_queue(holder, within).await,
            Backend::Cluster(b) => b.leave_queue(holder, within).await,
            Backend::Quorum(b) => b.leave_queue(holder, within).await,
            Backend::Sentinel(b) => b.leave_queue(holder, within).await,
        }
    }
}
