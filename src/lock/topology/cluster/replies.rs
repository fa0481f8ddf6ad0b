//! Reading a cluster's replies: redirects (MOVED, ASK, TRYAGAIN and the like), `CLUSTER
//! SLOTS`, and the hash slot of a key.

use redis::{ConnectionAddr, ConnectionInfo, Value};

/// A node's address as the cluster names it.
pub type Addr = (String, u16);

/// What an error reply asks the client to do.
pub enum Redirect {
    Moved(Addr),
    Ask(Addr),
    Pause,
}

/// The first redirect among `replies`, with the error reply that said it; ASK replies are
/// skipped with `keep_asks`.
pub fn redirect(
    replies: &[Value],
    from: &str,
    keep_asks: bool,
) -> Option<(Redirect, redis::ServerError)> {
    replies.iter().find_map(|reply| {
        let Value::ServerError(err) = reply else {
            return None;
        };
        match redirect_of(err, from)? {
            Redirect::Ask(_) if keep_asks => None,
            redirect => Some((redirect, err.clone())),
        }
    })
}

/// What the error reply `err` of a node on `from` asks for, if it is a redirect. A node named
/// without a host (`MOVED 12 :7001`, a node that does not know its address) is on `from`.
pub fn redirect_of(err: &redis::ServerError, from: &str) -> Option<Redirect> {
    let target = || {
        let to = err.details()?.split_whitespace().nth(1)?;
        let (host, port) = to.rsplit_once(':')?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = if host.is_empty() { from } else { host };
        Some((host.to_owned(), port.parse().ok()?))
    };
    Some(match err.code() {
        "MOVED" => Redirect::Moved(target()?),
        "ASK" => Redirect::Ask(target()?),
        "TRYAGAIN" | "CLUSTERDOWN" | "LOADING" => Redirect::Pause,
        _ => return None,
    })
}

/// From a `CLUSTER SLOTS` reply asked of a node on `from`: the master of `slot`, and every
/// node named (masters and replicas).
pub fn slot_owner(reply: &Value, slot: u16, from: &str) -> Option<(Addr, Vec<Addr>)> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let node = |v: &Value| node_addr(v, from);
    let mut owner = None;
    let mut nodes = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let (Some(Value::Int(first)), Some(Value::Int(last))) = (fields.first(), fields.get(1))
        else {
            continue;
        };
        let served = (*first..=*last).contains(&i64::from(slot));
        // The first node of a range is its master. Counted before unusable entries are
        // dropped: a master listed as `?` (no address for this client) must not make its
        // replica look like the master.
        for (i, field) in fields.iter().skip(2).enumerate() {
            let Some(addr) = node(field) else {
                continue;
            };
            if served && i == 0 {
                owner = Some(addr.clone());
            }
            if !nodes.contains(&addr) {
                nodes.push(addr);
            }
        }
    }
    Some((owner?, nodes))
}

/// The address of one node entry of a `CLUSTER SLOTS` range, asked of the node at `from`.
fn node_addr(v: &Value, from: &str) -> Option<Addr> {
    let Value::Array(fields) = v else { return None };
    let host = match fields.first()? {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok()?,
        Value::SimpleString(s) => s.clone(),
        _ => return None,
    };
    // "" is the node asked; "?" (Redis 7) an endpoint the node does not know.
    let host = match host.as_str() {
        "" => from.to_owned(),
        "?" => return None,
        _ => host,
    };
    match fields.get(1)? {
        Value::Int(port) => Some((host, u16::try_from(*port).ok()?)),
        _ => None,
    }
}

/// The masters of a cluster, from `CLUSTER SLOTS`.
pub struct Masters {
    /// Every master that serves slots (the first node of each range; replicas left out),
    /// once each.
    pub addrs: Vec<Addr>,
    /// Slot ranges whose master has no address for this client (`?`): nobody to ask.
    pub unserved: Vec<(i64, i64)>,
}

/// The masters named by a `CLUSTER SLOTS` reply asked of the node at `from`.
pub fn masters(reply: &Value, from: &str) -> Option<Masters> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let mut masters = Masters {
        addrs: Vec::new(),
        unserved: Vec::new(),
    };
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let (Some(Value::Int(first)), Some(Value::Int(last))) = (fields.first(), fields.get(1))
        else {
            continue;
        };
        match fields.get(2).and_then(|m| node_addr(m, from)) {
            Some(addr) if !masters.addrs.contains(&addr) => masters.addrs.push(addr),
            Some(_) => {}
            None => masters.unserved.push((*first, *last)),
        }
    }
    Some(masters)
}

pub fn addr_of(info: &ConnectionInfo) -> Option<Addr> {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            Some((host.clone(), *port))
        }
        _ => None,
    }
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag (the part between
/// the first `{` and the next `}`, if not empty) or of the whole key, modulo 16384.
pub fn slot(key: &str) -> u16 {
    let key = key.as_bytes();
    let hashed = key
        .iter()
        .position(|&c| c == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            let len = rest.iter().position(|&c| c == b'}')?;
            (len > 0).then(|| &rest[..len])
        })
        .unwrap_or(key);
    crc16(hashed) % 16384
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lock::protocol::keys::Keys;

    #[test]
    fn slots_follow_the_cluster_spec() {
        // The check value of CRC16/XMODEM, and slots as CLUSTER KEYSLOT gives them.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(slot("foo"), 12182);
        assert_eq!(slot("{user1000}.following"), slot("user1000"));
        assert_eq!(slot("{}x"), slot("{}x"));
        assert_ne!(slot("{}x"), slot("x"));
        assert_eq!(slot("a{}{b}"), crc16(b"a{}{b}") % 16384);
    }

    #[test]
    fn every_key_of_a_lock_is_in_its_slot() {
        for name in [
            "redlock:job",
            "redlock:{tag}:job",
            "x{y}z",
            "redlock:{a}{b}",
        ] {
            let k = Keys::new(name).unwrap();
            let s = slot(&k.lock);
            for key in [&k.fence, &k.holder, &k.released, &k.cancelled] {
                assert_eq!(slot(key), s, "{key} of {name}");
            }
        }
    }

    fn error_reply(text: &str) -> Value {
        redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap()
    }

    #[test]
    fn reads_redirects() {
        let moved = [Value::Okay, error_reply("MOVED 3999 10.0.0.2:7001")];
        let Some((Redirect::Moved(to), _)) = redirect(&moved, "h", false) else {
            panic!("no MOVED");
        };
        assert_eq!(to, ("10.0.0.2".to_owned(), 7001));
        let Some((Redirect::Ask(to), _)) = redirect(&[error_reply("ASK 1 :7002")], "h", false)
        else {
            panic!("no ASK");
        };
        assert_eq!(to, ("h".to_owned(), 7002));
        assert!(matches!(
            redirect(
                &[error_reply(
                    "TRYAGAIN Multiple keys request during rehashing of slot"
                )],
                "h",
                false
            ),
            Some((Redirect::Pause, _))
        ));
        assert!(redirect(&[error_reply("NOSCRIPT No matching script")], "h", false).is_none());
        assert!(redirect(&[Value::Int(1)], "h", false).is_none());
        // `status` keeps the ASK replies (to read those keys where they are), not the rest.
        let mixed = [error_reply("ASK 1 :7002"), error_reply("TRYAGAIN x")];
        assert!(matches!(
            redirect(&mixed, "h", true),
            Some((Redirect::Pause, _))
        ));
        assert!(redirect(&mixed[..1], "h", true).is_none());
    }

    #[test]
    fn reads_cluster_slots() {
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        let range = |a, b, nodes: Vec<(&str, i64)>| {
            let mut v = vec![Value::Int(a), Value::Int(b)];
            for (h, p) in nodes {
                v.push(Value::Array(vec![bulk(h), Value::Int(p), bulk("id")]));
            }
            Value::Array(v)
        };
        let reply = Value::Array(vec![
            range(0, 5460, vec![("10.0.0.1", 7000), ("10.0.0.4", 7003)]),
            range(5461, 16383, vec![("", 7001)]),
        ]);
        let (owner, nodes) = slot_owner(&reply, 12182, "10.0.0.9").unwrap();
        assert_eq!(owner, ("10.0.0.9".to_owned(), 7001));
        assert_eq!(nodes.len(), 3);
        assert_eq!(slot_owner(&reply, 5, "h").unwrap().0.1, 7000);
        assert!(slot_owner(&Value::Array(vec![range(0, 1, vec![])]), 5, "h").is_none());
    }
}
