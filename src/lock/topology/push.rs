//! Release notices on the command connection: RESP3 push (Redis 6 and later), so that a
//! waiter holds one connection, not two (a command connection and a pub/sub one).
//!
//! A `Server` asked to subscribe opens a RESP3 connection that carries the subscription and,
//! once it is up, makes it its command connection. When that connection is dropped (a
//! timeout, an error) the notices end and the wait polls, as when a pub/sub connection broke.
//! A server that refuses `HELLO 3` (Redis 5, a proxy, an ACL without it) gets the separate
//! pub/sub connection of old.

use futures_util::{StreamExt, stream};
use redis::{PushInfo, PushKind, Value};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender, unbounded_channel};

use crate::lock::ReleaseNotices;

/// A subscription to carry on the command connection.
pub struct Push {
    pub channel: String,
    pub sender: UnboundedSender<PushInfo>,
}

impl Push {
    /// A subscription to `channel`, and the receiving end of its notices.
    pub fn new(channel: &str) -> (Push, UnboundedReceiver<PushInfo>) {
        let (sender, receiver) = unbounded_channel();
        let push = Push {
            channel: channel.to_owned(),
            sender,
        };
        (push, receiver)
    }

    /// Whether anyone still reads the notices (a waiter that gave up dropped them).
    pub fn wanted(&self) -> bool {
        !self.sender.is_closed()
    }
}

/// The settings for a RESP3 connection to `info`.
pub fn resp3(info: &redis::ConnectionInfo) -> redis::ConnectionInfo {
    let settings = info
        .redis_settings()
        .clone()
        .set_protocol(redis::ProtocolVersion::RESP3);
    info.clone().set_redis_settings(settings)
}

/// Whether a failed RESP3 connection attempt was the server's answer (HELLO refused, an
/// unknown command, no permission), not the network: then RESP2 and a pub/sub connection
/// are used instead.
pub fn refused(e: &redis::RedisError) -> bool {
    !(e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.is_connection_refusal())
}

/// The payloads published on `channel`, as release notices.
pub fn notices(channel: String, receiver: UnboundedReceiver<PushInfo>) -> ReleaseNotices {
    let payloads = stream::unfold(receiver, |mut receiver| async move {
        let push = receiver.recv().await?;
        Some((push, receiver))
    })
    .filter_map(move |push| {
        let payload = payload(&channel, push);
        async move { payload }
    })
    // The end (every connection that carried the subscription gone, and none to come) is
    // asked for again by every later wait: it must stay the end.
    .fuse();
    ReleaseNotices::new((), payloads)
}

/// A message on `channel`: its payload. Anything else (a subscription's confirmation, the
/// library's note that a connection closed) is none.
fn payload(channel: &str, push: PushInfo) -> Option<String> {
    if push.kind != PushKind::Message {
        return None;
    }
    let [on, payload] = push.data.as_slice() else {
        return None;
    };
    if text(on)? != channel {
        return None;
    }
    text(payload)
}

fn text(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn only_messages_on_the_channel_are_notices() {
        let message = |on: &str, what: &str| PushInfo {
            kind: PushKind::Message,
            data: vec![bulk(on), bulk(what)],
        };
        assert_eq!(payload("c", message("c", "w 1")), Some("w 1".to_owned()));
        assert_eq!(payload("c", message("d", "w 1")), None);
        let subscribed = PushInfo {
            kind: PushKind::Subscribe,
            data: vec![bulk("c"), Value::Int(1)],
        };
        assert_eq!(payload("c", subscribed), None);
        assert_eq!(
            payload(
                "c",
                PushInfo {
                    kind: PushKind::Disconnection,
                    data: vec![]
                }
            ),
            None
        );
    }
}
