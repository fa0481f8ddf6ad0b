//! A throwaway Redis Cluster: masters (and replicas) on free loopback ports, each a
//! [`RedisServer`] with `cluster-enabled yes`, formed with CLUSTER ADDSLOTS, MEET and
//! REPLICATE (commands every server of the matrix has: Redis 6.2 lacks ADDSLOTSRANGE), and
//! ready once every node says `cluster_state:ok` and names the same master for every slot.
//!
//! Helpers: which node serves a key, migrating a slot to another master (in the three steps
//! a test may want to stop between, the second one also key by key), killing a master and
//! waiting for its replica to take over, and a `Wrapper` on the cluster. Dropping the cluster
//! kills every node (each `RedisServer` does so itself).

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::time::Duration;
use std::time::{SystemTime, UNIX_EPOCH};

use super::tls::{Pki, TlsServer};
use super::{RedisServer, Wrapper, wait_until};

/// CLUSTER node timeout: a failed master is replaced about two of these later.
const NODE_TIMEOUT_MS: &str = "1000";

/// How long formation, a promotion or a migration step may take before a test fails.
const READY: Duration = Duration::from_secs(30);

pub struct Cluster {
    /// Masters first (`0..masters`), then replicas; replica `masters + i` replicates the
    /// master `i % masters`. A killed node stays in the list (not running).
    pub nodes: Vec<RedisServer>,
    masters: usize,
    /// Which nodes were killed.
    dead: Vec<bool>,
    /// The TLS port of each node, for a cluster made by `start_tls` (empty otherwise).
    tls_ports: Vec<u16>,
}

impl Cluster {
    /// `masters` masters with `replicas` replicas each, the slots split evenly.
    pub fn start(masters: usize, replicas: usize) -> Cluster {
        Self::start_with(masters, replicas, &[])
    }

    /// As `start`, with extra server arguments for every node.
    pub fn start_with(masters: usize, replicas: usize, extra: &[&str]) -> Cluster {
        let extra: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
        Self::start_nodes(masters, replicas, || (extra.clone(), None))
    }

    /// `masters` masters that also speak TLS, on ports of their own, with `pki`'s server
    /// certificate (which has an IP SAN for 127.0.0.1: nodes are announced by address), and
    /// the cluster bus over TLS too (`tls-cluster yes`), which makes the nodes announce their
    /// TLS ports to TLS clients. `None`, with a SKIPPED line, when the server has no TLS.
    pub fn start_tls(masters: usize, pki: &Pki) -> Option<Cluster> {
        // Probe (and say SKIPPED) with a plain TLS server first.
        drop(TlsServer::start(pki, false)?);
        let path = |f: &str| pki.path(f).to_string_lossy().into_owned();
        Some(Self::start_nodes(masters, 0, || {
            let tls_port = tls_port_with_bus();
            let args = [
                "--tls-port",
                &tls_port.to_string(),
                "--tls-cert-file",
                &path("server.crt"),
                "--tls-key-file",
                &path("server.key"),
                "--tls-ca-cert-file",
                &path("ca.crt"),
                "--tls-auth-clients",
                "no",
                "--tls-cluster",
                "yes",
            ]
            .map(String::from)
            .to_vec();
            (args, Some(tls_port))
        }))
    }

    /// Start the nodes, each with the arguments (and TLS port) `node_args` gives, and form
    /// the cluster.
    fn start_nodes(
        masters: usize,
        replicas: usize,
        mut node_args: impl FnMut() -> (Vec<String>, Option<u16>),
    ) -> Cluster {
        let base = [
            "--cluster-enabled",
            "yes",
            "--cluster-node-timeout",
            NODE_TIMEOUT_MS,
            // Relative to --dir: each node has a dir of its own.
            "--cluster-config-file",
            "nodes.conf",
            // Replicas sync at once instead of after the default 5 s.
            "--repl-diskless-sync-delay",
            "0",
        ];
        let total = masters * (1 + replicas);
        let mut nodes = Vec::new();
        let mut tls_ports = Vec::new();
        for _ in 0..total {
            let (extra, tls_port) = node_args();
            let args: Vec<&str> = base
                .iter()
                .copied()
                .chain(extra.iter().map(String::as_str))
                .collect();
            nodes.push(RedisServer::start_with(&args));
            tls_ports.extend(tls_port);
        }
        let cluster = Cluster {
            nodes,
            masters,
            dead: vec![false; total],
            tls_ports,
        };
        cluster.form();
        cluster
    }

    fn form(&self) {
        let per = 16384 / self.masters;
        for m in 0..self.masters {
            let first = m * per;
            let last = if m + 1 == self.masters {
                16383
            } else {
                first + per - 1
            };
            let slots: Vec<String> = (first..=last).map(|s| s.to_string()).collect();
            let mut cmd = vec!["CLUSTER", "ADDSLOTS"];
            cmd.extend(slots.iter().map(String::as_str));
            assert_eq!(self.nodes[m].cli(&cmd), "OK");
        }
        // With the bus over TLS, a node's bus port is its TLS port + 10000: MEET names that.
        let port0 = self
            .tls_ports
            .first()
            .copied()
            .unwrap_or_else(|| self.nodes[0].port())
            .to_string();
        for node in &self.nodes[1..] {
            assert_eq!(node.cli(&["CLUSTER", "MEET", "127.0.0.1", &port0]), "OK");
        }
        let total = self.nodes.len().to_string();
        wait_until(READY, "every node to know every other", || {
            self.nodes.iter().all(|n| {
                n.cli(&["CLUSTER", "INFO"])
                    .contains(&format!("cluster_known_nodes:{total}"))
                    && !n.cli(&["CLUSTER", "NODES"]).contains("handshake")
            })
        });
        for r in self.masters..self.nodes.len() {
            let master = self.id(r % self.masters);
            assert_eq!(self.nodes[r].cli(&["CLUSTER", "REPLICATE", &master]), "OK");
        }
        self.wait_ready("the cluster to form");
        for r in self.masters..self.nodes.len() {
            wait_until(READY, "replica link up", || {
                self.nodes[r]
                    .cli(&["INFO", "replication"])
                    .contains("master_link_status:up")
            });
        }
    }

    /// Wait until every live node says `cluster_state:ok` and all agree on which master
    /// serves each slot.
    pub fn wait_ready(&self, what: &str) {
        wait_until(READY, what, || {
            let live: Vec<&RedisServer> = self.live().map(|i| &self.nodes[i]).collect();
            live.iter()
                .all(|n| n.cli(&["CLUSTER", "INFO"]).contains("cluster_state:ok"))
                && live
                    .iter()
                    .map(|n| slot_map(&n.cli(&["CLUSTER", "NODES"])))
                    .collect::<BTreeSet<_>>()
                    .len()
                    == 1
        });
    }

    fn live(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.nodes.len()).filter(|&i| !self.dead[i])
    }

    /// `redis+cluster://` naming every master as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = (0..self.masters)
            .map(|m| format!("127.0.0.1:{}", self.nodes[m].port()))
            .collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    /// `rediss+cluster://` naming every master's TLS port (a cluster from `start_tls`).
    pub fn tls_url(&self) -> String {
        assert!(!self.tls_ports.is_empty(), "not a TLS cluster");
        let seeds: Vec<String> = self.tls_ports[..self.masters]
            .iter()
            .map(|p| format!("127.0.0.1:{p}"))
            .collect();
        format!("rediss+cluster://{}", seeds.join(","))
    }

    /// `--redis URL --key KEY` for this cluster.
    pub fn wrapper(&self, key: &str) -> Wrapper {
        Wrapper::new().args(["--redis", &self.url(), "--key", key])
    }

    /// The node id of node `i`.
    pub fn id(&self, i: usize) -> String {
        self.nodes[i].cli(&["CLUSTER", "MYID"])
    }

    /// The hash slot of `key`.
    pub fn slot(&self, key: &str) -> u16 {
        let i = self.live().next().expect("a live node");
        self.nodes[i].cli_int(&["CLUSTER", "KEYSLOT", key]) as u16
    }

    /// The index of the node that serves `key`'s slot, as node 0 (or the first live node)
    /// sees it.
    pub fn owner_of(&self, key: &str) -> usize {
        let slot = self.slot(key);
        let i = self.live().next().expect("a live node");
        let nodes = self.nodes[i].cli(&["CLUSTER", "NODES"]);
        let owner = nodes
            .lines()
            .find(|line| serves(line, slot))
            .unwrap_or_else(|| panic!("no master serves slot {slot}:\n{nodes}"));
        let port = owner
            .split_whitespace()
            .nth(1)
            .and_then(|a| a.split(['@', ':']).nth(1))
            .and_then(|p| p.parse::<u16>().ok())
            .expect("address in CLUSTER NODES");
        self.nodes
            .iter()
            .position(|n| n.port() == port)
            .expect("owner among the nodes")
    }

    /// The keys of `slot` that node `i` has, as `CLUSTER GETKEYSINSLOT` lists them: this
    /// answers whatever the slot's state on the node (a command on a key would get MOVED or
    /// ASK while the slot is migrating).
    pub fn keys_in_slot(&self, i: usize, slot: u16) -> Vec<String> {
        let keys = self.nodes[i].cli(&["CLUSTER", "GETKEYSINSLOT", &slot.to_string(), "1000"]);
        keys.lines()
            .filter(|k| !k.is_empty())
            .map(str::to_owned)
            .collect()
    }

    /// Whether any live node has `key`.
    pub fn anywhere(&self, key: &str) -> bool {
        let slot = self.slot(key);
        self.live()
            .any(|i| self.keys_in_slot(i, slot).iter().any(|k| k == key))
    }

    /// A master other than `not`.
    pub fn other_master(&self, not: usize) -> usize {
        (0..self.masters)
            .find(|&m| m != not && !self.dead[m])
            .expect("another live master")
    }

    /// The first step of a migration of `slot` from `from` to `to`: the slot is importing
    /// on `to` and migrating on `from`. Keys still on `from` are served there; missing ones
    /// get ASK.
    pub fn begin_migration(&self, slot: u16, from: usize, to: usize) {
        let slot = slot.to_string();
        let (from_id, to_id) = (self.id(from), self.id(to));
        assert_eq!(
            self.nodes[to].cli(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]),
            "OK"
        );
        assert_eq!(
            self.nodes[from].cli(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]),
            "OK"
        );
    }

    /// The second step: every key of `slot` moves from `from` to `to` (one MIGRATE).
    pub fn move_keys(&self, slot: u16, from: usize, to: usize) {
        let keys = self.keys_in_slot(from, slot);
        if !keys.is_empty() {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            self.move_these_keys(&keys, from, to);
        }
    }

    /// Part of the second step: only `keys` (which must be on `from`) move to `to`, in one
    /// MIGRATE, leaving the slot's other keys where they are.
    pub fn move_these_keys(&self, keys: &[&str], from: usize, to: usize) {
        let port = self.nodes[to].port().to_string();
        let mut cmd = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
        cmd.extend(keys.iter().copied());
        let reply = self.nodes[from].cli(&cmd);
        assert_eq!(reply, "OK", "MIGRATE {keys:?}");
    }

    /// The last step: every master says `to` serves `slot`, and the cluster agrees.
    pub fn finish_migration(&self, slot: u16, to: usize) {
        let slot = slot.to_string();
        let to_id = self.id(to);
        // The importing node first, as redis-cli does, so the slot is never without owner.
        let order = std::iter::once(to).chain((0..self.masters).filter(|&m| m != to));
        for m in order.filter(|&m| !self.dead[m]) {
            assert_eq!(
                self.nodes[m].cli(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]),
                "OK"
            );
        }
        self.wait_ready("the cluster to agree on the migrated slot");
    }

    /// Kill master `m` (SIGKILL) and wait until a replica of it serves its slots and every
    /// live node agrees. Returns the index of the promoted replica. The replicas are those
    /// that say so (`ROLE`), so `m` may be a replica promoted earlier.
    pub fn kill_and_fail_over(&mut self, m: usize) -> usize {
        let replicas: Vec<usize> = self.live().filter(|&r| self.follows(r, m)).collect();
        assert!(!replicas.is_empty(), "master {m} has no replica");
        self.nodes[m].kill();
        self.dead[m] = true;
        let mut promoted = None;
        wait_until(READY, "a replica to be promoted", || {
            promoted = replicas.iter().copied().find(|&r| {
                self.nodes[r]
                    .cli(&["ROLE"])
                    .lines()
                    .next()
                    .is_some_and(|l| l == "master")
            });
            promoted.is_some()
        });
        self.wait_ready("the cluster to agree after the failover");
        promoted.unwrap()
    }
}

impl Cluster {
    /// A live replica of master `m` (as its `ROLE` says), if any.
    pub fn replica_of(&self, m: usize) -> Option<usize> {
        self.live().find(|&r| self.follows(r, m))
    }

    /// Whether node `r` says (`ROLE`) that it is a replica of node `m`.
    fn follows(&self, r: usize, m: usize) -> bool {
        let role = self.nodes[r].cli(&["ROLE"]);
        let lines: Vec<&str> = role.lines().collect();
        r != m
            && lines.first() == Some(&"slave")
            && lines.get(2) == Some(&&*self.nodes[m].port().to_string())
    }

    /// Starts a killed node again on its port, with its cluster config (`nodes.conf` in its
    /// dir) but no data: it rejoins as a replica of the master that took its slots. Waits
    /// until its replication link is up and the cluster agrees.
    pub fn restart_node(&mut self, i: usize) {
        self.nodes[i].restart();
        self.dead[i] = false;
        wait_until(READY, "the restarted node to sync as a replica", || {
            let info = self.nodes[i].cli(&["INFO", "replication"]);
            info.contains("role:slave") && info.contains("master_link_status:up")
        });
        self.wait_ready("the cluster to agree after the restart");
    }
}

/// A TLS port whose bus port (+ 10000, with `tls-cluster yes`) is free too. Both are taken
/// below the kernel's ephemeral range (32768 and up), where no outgoing connection's local
/// port or other test's `free_port` can take them between this check and the server's
/// start: the server is started with this port on every retry, so it must stay free.
fn tls_port_with_bus() -> u16 {
    let free = |port: u16| TcpListener::bind(("127.0.0.1", port)).is_ok();
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    for i in 0..2768u32 {
        let port = 20000 + ((seed.wrapping_add(i * 7919)) % 2768) as u16;
        if free(port) && free(port + 10000) {
            return port;
        }
    }
    panic!("no free port pair in 20000-22767 / 30000-32767");
}

/// The masters and their slot ranges in a `CLUSTER NODES` listing, by address, without the
/// node's own flags (`myself`) and without migration marks: what all nodes must agree on.
fn slot_map(nodes: &str) -> BTreeSet<String> {
    nodes
        .lines()
        .filter(|l| l.contains("master") && !l.contains("fail"))
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let addr = fields.get(1)?.split('@').next()?;
            let slots: Vec<&str> = fields
                .iter()
                .skip(8)
                .copied()
                .filter(|s| !s.starts_with('['))
                .collect();
            (!slots.is_empty()).then(|| format!("{addr} {}", slots.join(" ")))
        })
        .collect()
}

/// Whether a `CLUSTER NODES` line is a live master serving `slot`.
fn serves(line: &str, slot: u16) -> bool {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if !fields.get(2).is_some_and(|f| f.contains("master")) || line.contains("fail") {
        return false;
    }
    fields.iter().skip(8).any(|range| {
        if range.starts_with('[') {
            return false;
        }
        let (a, b) = range.split_once('-').unwrap_or((range, range));
        match (a.parse::<u16>(), b.parse::<u16>()) {
            (Ok(a), Ok(b)) => (a..=b).contains(&slot),
            _ => false,
        }
    })
}
