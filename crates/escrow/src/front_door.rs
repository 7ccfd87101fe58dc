//! A site's server-based node over the network: the RESP front door
//! (`roost-resp`) serving BC.CREATE/INC/DEC/GET (and §IV-E's BC.FENCE and
//! BC.ADOPT) from the node's [`ServerMiddleware`], whatever keeps the
//! node's counters (the site's Redis, or Roost), and [`FrontDoorClient`],
//! Figure 1's API over one TCP connection to it.
//!
//! This is how an application reaches the node in the seed's deployment
//! (clients talk to their site's middleware over the network), and what
//! `roost bench escrow` measures: every variant's clients then pay one
//! connection per client and at least one round trip per operation.
//!
//! [`EscrowSiteCounters`] is also what `roost resp --site` plugs into its
//! node, with the counters' rows in the node's own keyspace (so that
//! procedures reach them); a [`FrontDoor`] serves a node whose counters
//! live elsewhere, so it registers no procedures.

use std::net::SocketAddr;

use redis::aio::ConnectionLike as _;
use redis::Value;
use roost_bcounter::ReplicaId;
use roost_resp::sites::{refusal_of, SiteFuture};
use roost_resp::{Config, LocalApplied, Server, Services, SiteCounters, SiteOutcome};

use crate::api::{Bound, EscrowCounters, Flag, Op, Outcome};
use crate::error::{check_key, EscrowError};
use crate::roost_store::{apply_strictly_local, state_value, LocalStep};
use crate::server::ServerMiddleware;
use crate::store::{LazyConnection, Tokens};

fn site_outcome(outcome: Outcome) -> SiteOutcome {
    match outcome {
        Outcome::Ok => SiteOutcome::Ok,
        Outcome::Fail => SiteOutcome::Fail,
        Outcome::Retry { global_may_succeed } => SiteOutcome::Retry { global_may_succeed },
    }
}

fn outcome_of(outcome: SiteOutcome) -> Outcome {
    match outcome {
        SiteOutcome::Ok => Outcome::Ok,
        SiteOutcome::Fail => Outcome::Fail,
        SiteOutcome::Retry { global_may_succeed } => Outcome::Retry { global_may_succeed },
    }
}

/// The version of the reports BC.FENCE gives and BC.ADOPT takes.
const REPORT_VERSION: u32 = 1;

/// A §IV-E report on the wire (JSON inside RESP): versioned, as every
/// serialized bounded-counter type.
#[derive(serde::Serialize, serde::Deserialize)]
struct VersionedReport {
    version: u32,
    report: roost_bcounter::FailedReplicaReport,
}

/// The RESP front door's BC.* over an escrow site's node, and procedures'
/// strictly-local operations on its rows.
pub struct EscrowSiteCounters {
    client: ServerMiddleware,
    me: ReplicaId,
    sites: usize,
    /// Tokens of procedures' writes (a writer of their own).
    tokens: Tokens,
}

impl EscrowSiteCounters {
    /// The counters of `client`'s site, one of `sites`.
    pub fn new(client: ServerMiddleware, sites: usize) -> Result<EscrowSiteCounters, EscrowError> {
        let me = ReplicaId::from_index(client.site())
            .filter(|_| client.site() < sites)
            .ok_or_else(|| EscrowError::Config {
                reason: format!("site {} of {sites}", client.site()),
            })?;
        Ok(EscrowSiteCounters {
            client,
            me,
            sites,
            tokens: Tokens::new(),
        })
    }
}

fn text(error: EscrowError) -> String {
    error.to_string()
}

impl SiteCounters for EscrowSiteCounters {
    fn create(
        &self,
        key: &str,
        bound: Bound,
        k: i64,
        initial: i64,
    ) -> SiteFuture<'_, Result<(), String>> {
        let (mut client, key) = (self.client.clone(), key.to_owned());
        Box::pin(async move {
            // The initial value's distance to the bound is rights, added by
            // the operation that needs none (an increment of a lower bound).
            let rights = match bound {
                Bound::Lower => i128::from(initial) - i128::from(k),
                Bound::Upper => i128::from(k) - i128::from(initial),
            };
            let rights = u64::try_from(rights)
                .map_err(|_| format!("the initial value {initial} is beyond the bound {k}"))?;
            if client.read(&key).await.is_ok() {
                return Err("key already exists".to_owned());
            }
            // One type: both crates re-export roost-bcounter's `Bound`.
            client.create(&key, bound, k).await.map_err(text)?;
            if rights > 0 {
                let outcome = match bound {
                    Bound::Lower => client.inc(&key, rights, Flag::StrictLocal).await,
                    Bound::Upper => client.dec(&key, rights, Flag::StrictLocal).await,
                }
                .map_err(text)?;
                if outcome != Outcome::Ok {
                    return Err(format!("setting the initial value: {outcome:?}"));
                }
            }
            Ok(())
        })
    }

    fn add(
        &self,
        key: &str,
        up: bool,
        delta: u64,
        global: bool,
    ) -> SiteFuture<'_, Result<SiteOutcome, String>> {
        let (mut client, key) = (self.client.clone(), key.to_owned());
        Box::pin(async move {
            let flag = if global {
                Flag::Global
            } else {
                Flag::StrictLocal
            };
            let outcome = if up {
                client.inc(&key, delta, flag).await
            } else {
                client.dec(&key, delta, flag).await
            }
            .map_err(text)?;
            Ok(site_outcome(outcome))
        })
    }

    fn fence_and_report(
        &self,
        failed: usize,
    ) -> SiteFuture<'_, Result<Vec<(String, String)>, String>> {
        let client = self.client.clone();
        Box::pin(async move {
            let reports = client.fence_and_report(failed).await.map_err(text)?;
            reports
                .into_iter()
                .map(|(key, report)| {
                    let versioned = VersionedReport {
                        version: REPORT_VERSION,
                        report,
                    };
                    serde_json::to_string(&versioned)
                        .map(|json| (key, json))
                        .map_err(|e| e.to_string())
                })
                .collect()
        })
    }

    fn adopt(
        &self,
        failed: usize,
        key: &str,
        reports: Vec<String>,
    ) -> SiteFuture<'_, Result<u64, String>> {
        let (client, key) = (self.client.clone(), key.to_owned());
        Box::pin(async move {
            let reports = reports
                .iter()
                .map(|json| {
                    let versioned: VersionedReport = serde_json::from_str(json)
                        .map_err(|e| format!("a report is not a report: {e}"))?;
                    if versioned.version != REPORT_VERSION {
                        return Err(format!(
                            "report version {} is not supported (this node reads {REPORT_VERSION})",
                            versioned.version
                        ));
                    }
                    Ok(versioned.report)
                })
                .collect::<Result<Vec<_>, String>>()?;
            client.adopt(failed, &key, reports).await.map_err(text)
        })
    }

    fn state_value(&self, key: &str, state: &str) -> Result<i64, String> {
        state_value(key, state, self.me, self.sites).map_err(text)
    }

    fn apply_local(
        &self,
        key: &str,
        state: &str,
        up: bool,
        delta: u64,
    ) -> Result<LocalApplied, String> {
        let op = if up { Op::inc(delta) } else { Op::dec(delta) };
        Ok(
            match apply_strictly_local(key, state, self.me, self.sites, op).map_err(text)? {
                LocalStep::Applied { state, value } => LocalApplied::Applied {
                    state,
                    token: self.tokens.next(),
                    value,
                },
                LocalStep::Refused(outcome) => LocalApplied::Refused(site_outcome(outcome)),
            },
        )
    }

    fn changed(&self, key: &str) {
        // A key the site refuses cannot have a row; nothing to ship.
        let _ = self.client.reload(key);
    }

    fn value_after_ok(&self, key: &str) -> SiteFuture<'_, Result<Option<i64>, String>> {
        let (mut client, key) = (self.client.clone(), key.to_owned());
        Box::pin(async move {
            match client.value_after_ok(&key).await {
                Ok(value) => Ok(Some(value)),
                Err(EscrowError::UnknownCounter { .. }) => Ok(None),
                Err(e) => Err(text(e)),
            }
        })
    }

    fn value(&self, key: &str) -> SiteFuture<'_, Result<Option<i64>, String>> {
        let (mut client, key) = (self.client.clone(), key.to_owned());
        Box::pin(async move {
            match client.read(&key).await {
                Ok(value) => Ok(Some(value)),
                Err(EscrowError::UnknownCounter { .. }) => Ok(None),
                Err(e) => Err(text(e)),
            }
        })
    }
}

/// A RESP server serving one site node's counters, on the runtime that
/// started it; it stops accepting when dropped (open connections end when
/// their clients close them).
pub struct FrontDoor {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl FrontDoor {
    /// Serves `node` (its site one of `sites`) on `bind` (port 0: any) to
    /// clients that authenticate with `password` (AUTH; every link is
    /// authenticated). Its keyspace holds nothing (the node keeps its
    /// counters elsewhere), so it is the smallest one: a reactor, an
    /// executor that never spins.
    pub async fn start(
        node: ServerMiddleware,
        sites: usize,
        bind: SocketAddr,
        password: &str,
    ) -> Result<FrontDoor, EscrowError> {
        if password.is_empty() {
            return Err(EscrowError::Config {
                reason: "a front door needs a password".to_owned(),
            });
        }
        let counters = EscrowSiteCounters::new(node, sites)?;
        let config = Config {
            bind,
            requirepass: Some(password.to_owned()),
            keyspace_reactors: 1,
            executors: 1,
            spin_before_park_us: Some(0),
            spin_while_active_us: Some(0),
            ..Config::default()
        };
        let services = Services {
            site_counters: Some(std::sync::Arc::new(counters)),
            ..Services::default()
        };
        let server = Server::bind_with_services(config, services)
            .await
            .map_err(|e| EscrowError::FrontDoor {
                reason: e.to_string(),
            })?;
        let addr = server.local_addr().map_err(|e| EscrowError::FrontDoor {
            reason: e.to_string(),
        })?;
        let task = tokio::spawn(async move {
            if let Err(error) = server.serve().await {
                tracing::warn!(%error, "escrow front door stopped");
            }
        });
        Ok(FrontDoor { addr, task })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for FrontDoor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Figure 1's API at a site's [`FrontDoor`] (or a `roost resp --site`
/// node): one TCP connection, one command per operation, one operation in
/// flight (the caller awaits each).
pub struct FrontDoorClient {
    con: LazyConnection,
}

fn front_door_error(reason: impl std::fmt::Display) -> EscrowError {
    EscrowError::FrontDoor {
        reason: reason.to_string(),
    }
}

/// A connection's failure, named as the front door's (the shared
/// connection helpers call every failure Redis's).
fn connection_error(error: EscrowError) -> EscrowError {
    match error {
        EscrowError::Redis { reason } => front_door_error(reason),
        other => other,
    }
}

impl FrontDoorClient {
    /// Connects to the front door at `addr` and authenticates with
    /// `password` (a wrong one is an error here, not at the first call).
    pub async fn connect(addr: SocketAddr, password: &str) -> Result<FrontDoorClient, EscrowError> {
        let mut url = redis::parse_redis_url(&format!("redis://{addr}/"))
            .ok_or_else(|| front_door_error(format!("no redis URL for {addr}")))?;
        url.set_password(Some(password))
            .map_err(|()| front_door_error("the password does not fit a URL"))?;
        let url = url.to_string();
        let con = crate::store::connect(&url)
            .await
            .map_err(connection_error)?;
        Ok(FrontDoorClient {
            con: LazyConnection::new(&url, Some(con)),
        })
    }

    /// Sends `cmd`; a reply that is an error stays a [`Value::ServerError`]
    /// (BC.INC's `BOUND` and `RETRY` are answers, not failures), a lost
    /// connection is an error and the next call reconnects.
    async fn call(&mut self, cmd: &redis::Cmd) -> Result<Value, EscrowError> {
        let mut con = self.con.get().await.map_err(connection_error)?;
        let sent = con.req_packed_command(cmd).await;
        self.con.failed(sent).map_err(connection_error)
    }

    /// BC.INC or BC.DEC: the outcome and, when `Ok`, the value at the site
    /// after it (the front door's reply).
    pub async fn apply(
        &mut self,
        key: &str,
        op: Op,
        flag: Flag,
    ) -> Result<(Outcome, Option<i64>), EscrowError> {
        check_key(key)?;
        let mut cmd = redis::cmd(match op.direction {
            crate::api::Direction::Inc => "BC.INC",
            crate::api::Direction::Dec => "BC.DEC",
        });
        cmd.arg(key).arg(op.delta).arg(match flag {
            Flag::StrictLocal => "LOCAL",
            Flag::Global => "GLOBAL",
        });
        match self.call(&cmd).await? {
            // The value at the site after the operation.
            Value::Int(value) => Ok((Outcome::Ok, Some(value))),
            Value::ServerError(error) => {
                match refusal_of(error.code(), error.details().unwrap_or_default()) {
                    Some(outcome) => Ok((outcome_of(outcome), None)),
                    None => Err(front_door_error(error)),
                }
            }
            other => Err(front_door_error(format!(
                "unexpected reply {other:?} to {}",
                cmd_name(&op)
            ))),
        }
    }
}

fn cmd_name(op: &Op) -> &'static str {
    match op.direction {
        crate::api::Direction::Inc => "BC.INC",
        crate::api::Direction::Dec => "BC.DEC",
    }
}

fn bound_arg(bound: Bound) -> &'static str {
    match bound {
        Bound::Lower => "LOWER",
        Bound::Upper => "UPPER",
    }
}

impl EscrowCounters for FrontDoorClient {
    /// BC.CREATE with the value at the bound (no rights). The front door
    /// refuses a counter that exists (its BC.CREATE gives rights), so this
    /// is a [`EscrowError::FrontDoor`] error then, not `Ok`.
    async fn create(&mut self, key: &str, bound: Bound, k: i64) -> Result<(), EscrowError> {
        check_key(key)?;
        let mut cmd = redis::cmd("BC.CREATE");
        cmd.arg(key).arg(bound_arg(bound)).arg(k);
        match self.call(&cmd).await? {
            Value::Okay => Ok(()),
            Value::ServerError(error) => Err(front_door_error(error)),
            other => Err(front_door_error(format!(
                "unexpected reply {other:?} to BC.CREATE"
            ))),
        }
    }

    async fn read(&mut self, key: &str) -> Result<i64, EscrowError> {
        check_key(key)?;
        let mut cmd = redis::cmd("BC.GET");
        cmd.arg(key);
        match self.call(&cmd).await? {
            Value::Int(value) => Ok(value),
            Value::Nil => Err(EscrowError::UnknownCounter {
                key: key.to_owned(),
            }),
            Value::ServerError(error) => Err(front_door_error(error)),
            other => Err(front_door_error(format!(
                "unexpected reply {other:?} to BC.GET"
            ))),
        }
    }

    async fn inc(&mut self, key: &str, delta: u64, flag: Flag) -> Result<Outcome, EscrowError> {
        Ok(self.apply(key, Op::inc(delta), flag).await?.0)
    }

    async fn dec(&mut self, key: &str, delta: u64, flag: Flag) -> Result<Outcome, EscrowError> {
        Ok(self.apply(key, Op::dec(delta), flag).await?.0)
    }
}
