//! Topologies: how commands reach servers. Each backend is a file of its own and implements
//! the [`Lock`](super::Lock) contract by sending a protocol's calls along its topology.
//!
//! - `server`: one connection to one server, the building block of every backend.
//! - `single`: the mutex on one Redis server.
//! - `cluster`: the mutex on a Redis Cluster (the master of the lock's slot, followed).
//! - `quorum`: Redlock, the mutex on N independent masters with a quorum and a fence that
//!   only grows.
//! - `sentinel`: the same mutex on the master that Redis Sentinel names, found again after
//!   every failure.

pub mod cluster;
pub mod quorum;
pub mod sentinel;
pub mod server;
pub mod single;
