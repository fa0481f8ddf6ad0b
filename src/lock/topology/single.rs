//! The fixed route: one Redis server, the same for every call (`redis://`, `rediss://`,
//! `unix://`). Everything about the connection is [`Server`]'s; this file only opens it and
//! names it in messages.

use std::time::Duration;

use redis::{Pipeline, Value};

use super::one_master::{Answered, OneMaster, Route};
use super::server::{ScriptReply, Server};
use super::shared::protocol_for;
use super::survey;
use crate::lock::protocol::ScriptCall;
use crate::lock::target::Target;
use crate::lock::{ListQuery, Listing, RedisFailure, ReleaseNotices, ReplicaAck};

/// Connect to `info`, the one server of `target`, within `within`.
pub async fn open(
    info: &redis::ConnectionInfo,
    target: &Target,
    ack: Option<ReplicaAck>,
    within: Duration,
) -> Result<OneMaster<Server>, RedisFailure> {
    let protocol = protocol_for(target)?;
    let server = Server::new(info, &target.tls, &target.redis_shown)?;
    server.connect(within).await?;
    Ok(OneMaster::new(server, protocol, ack, target))
}

impl Route for Server {
    async fn script(
        &self,
        call: &ScriptCall,
        ack: Option<ReplicaAck>,
        what: &str,
        within: Duration,
    ) -> Result<Answered<ScriptReply>, RedisFailure> {
        let reply = Server::script(self, call, ack, what, within).await?;
        Ok(self.answered(reply))
    }

    async fn eval(
        &self,
        call: &ScriptCall,
        what: &str,
        within: Duration,
    ) -> Result<(), RedisFailure> {
        Server::eval(self, call, what, within).await.map(drop)
    }

    async fn read(
        &self,
        pipe: &Pipeline,
        what: &str,
        within: Duration,
    ) -> Result<Answered<Vec<Value>>, RedisFailure> {
        let replies = self.query(pipe, what, within).await?;
        Ok(self.answered(replies))
    }

    async fn subscribe(&self, channel: &str, within: Duration) -> Option<ReleaseNotices> {
        Server::subscribe(self, channel, within).await
    }

    async fn list(&self, query: &ListQuery) -> Result<Listing, RedisFailure> {
        survey::one_server(self, query).await
    }
}

impl Server {
    fn answered<T>(&self, reply: T) -> Answered<T> {
        Answered {
            reply,
            by: self.shown_rc(),
        }
    }
}
