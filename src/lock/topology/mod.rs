//! Topologies: how calls reach servers. Two implementations of the [`Lock`](super::Lock)
//! contract live here:
//!
//! - `one_master`: the lock wherever one master holds its slot, over a [`Route`] (the server
//!   that holds the slot now), one file each:
//!   - `single`: a fixed server;
//!   - `sentinel`: the master that Redis Sentinel names, found again after every failure;
//!   - `cluster`: the master of the lock's slot in a Redis Cluster, followed through
//!     redirects and migrations;
//! - `quorum`: Redlock, the mutex on N independent masters with a quorum and a fence that
//!   only grows.
//!
//! Beneath them: `server`, one connection to one server (the building block of both), and
//! `shared`, what both implementations do alike. A new one-master topology is one route file
//! (plus its URL form); it gets undo, acknowledgements, the queue and status for free.
//!
//! [`Route`]: one_master::Route

pub mod cluster;
pub mod one_master;
pub mod quorum;
pub mod sentinel;
pub mod server;
mod shared;
pub mod single;
