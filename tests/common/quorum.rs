//! Redlock test harness: N independent throwaway masters, and a wrapper pointed at all of them.

use super::{RedisServer, Wrapper};

/// N masters, each a [`RedisServer`] of its own (killed on drop).
pub struct Nodes {
    pub servers: Vec<RedisServer>,
}

impl Nodes {
    /// `n` masters with the default test settings.
    pub fn start(n: usize) -> Nodes {
        Nodes::start_with(n, &[])
    }

    /// `n` masters started with `extra` arguments each.
    pub fn start_with(n: usize, extra: &[&str]) -> Nodes {
        Nodes {
            servers: (0..n).map(|_| RedisServer::start_with(extra)).collect(),
        }
    }

    pub fn urls(&self) -> Vec<String> {
        self.servers.iter().map(RedisServer::url).collect()
    }

    /// `--redis URL` for every node.
    pub fn redis_args(&self) -> Vec<String> {
        self.urls()
            .into_iter()
            .flat_map(|u| ["--redis".to_owned(), u])
            .collect()
    }

    /// A wrapper with `--redis` for every node and `--key key`.
    pub fn wrapper(&self, key: &str) -> Wrapper {
        Wrapper::new().args(self.redis_args()).args(["--key", key])
    }

    /// How many nodes hold `key` (every node must be running).
    pub fn holding(&self, key: &str) -> usize {
        self.servers.iter().filter(|s| s.exists(key)).count()
    }
}
