//! Roost's client library: a connection to every node of a cluster and the
//! application-level router of the Zeus seed's load balancer.
//!
//! A request names its keys; the first names the request's home object (a
//! phone, an account) and so its keyspace reactor. The router keeps a
//! sticky reactor-to-node map: on first sight it asks a node
//! (`ROOST.OWNER`) who owns the reactor and remembers that node; later
//! requests on the reactor go to the same node. Every node serves every
//! request (the others' reactors move to it, or its writes are shipped to
//! their owner), so a wrong or stale route costs time, never correctness:
//! the router only makes moves rare.
//!
//! **Agreement.** The map is not a second database: its source is the
//! cluster's ownership metadata, which Zeus replicates and which names one
//! owner per reactor at a time, so routers that look at the same time agree,
//! in one process (they share a [`RouteTable`]) or in many.
//!
//! **Following ownership.** [`Router::follow`] looks again at the owners of
//! the reactors in the map; a reactor that every look for a while (at least
//! [`SETTLE_LOOKS`] looks over [`DEFAULT_SETTLE`]) finds at the same other
//! node has settled there, and its route moves. A look can catch an
//! ownership change in flight, and a reactor one transaction took across
//! partitions usually goes back within moments: following either would send
//! the requests after it to the wrong node, which then takes their other
//! reactors too (a cascade of moves).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

pub use redis;
pub use redis::{Cmd, Connection, Value};

pub mod balance;

use balance::Balancer;

/// Looks in a row that must find a reactor at the same other node before
/// its route moves there.
pub const SETTLE_LOOKS: u32 = 2;
/// How long those looks must keep finding it there (by default).
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(1);
/// Keys whose reactor a [`RouteTable`] remembers; past it, it forgets them
/// all and learns again (each costs one `ROOST.OWNER` round trip).
pub const MAX_CACHED_KEYS: usize = 1 << 20;
/// Keys asked about in one `ROOST.OWNER` (a node answers it on an executor
/// that serves transactions too: kept short).
pub const MAX_KEYS_PER_LOOK: usize = 512;
/// Requests a router counts before it adds them to its table's window.
pub const LOAD_FLUSH_REQUESTS: u32 = 256;
/// How long a connection attempt or a reply may take.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A node of the cluster as a client reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeAddr {
    /// Its node id (what `ROOST.OWNER` names).
    pub id: u32,
    /// Its RESP port.
    pub addr: SocketAddr,
}

/// Why a node could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("node {node} is not in the router's cluster")]
    UnknownNode { node: u32 },
    #[error("connecting to node {node} at {addr}: {source}")]
    Io {
        node: u32,
        addr: SocketAddr,
        source: redis::RedisError,
    },
}

/// Why a route could not be found.
#[derive(Debug, thiserror::Error)]
pub enum RouteError {
    #[error("a request names at least one key")]
    NoKeys,
    #[error("no node answered ROOST.OWNER: {last}")]
    NoNode { last: String },
    #[error("node {node} answered ROOST.OWNER with {reply}")]
    BadReply { node: u32, reply: String },
}

/// Why a routed request failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error(transparent)]
    Route(#[from] RouteError),
    #[error(transparent)]
    Connect(#[from] ConnectError),
    /// The node answered with an error, or the connection failed mid-way
    /// (then the request's outcome is unknown).
    #[error("node {node}: {source}")]
    Request {
        node: u32,
        source: redis::RedisError,
    },
}

/// What `ROOST.OWNER` said of one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyOwner {
    /// The key's keyspace reactor.
    pub reactor: usize,
    /// Its owner, where the node asked knows it.
    pub node: Option<u32>,
}

/// A reactor's route.
#[derive(Debug, Clone)]
struct Route {
    node: u32,
    /// A key of the reactor, to look at its owner again.
    key: Vec<u8>,
    /// The other node the last looks found it at, how many in a row, and
    /// when the first of them was.
    elsewhere: Option<(u32, u32, Instant)>,
}

#[derive(Default)]
struct Routes {
    reactor_of: HashMap<Vec<u8>, usize>,
    by_reactor: HashMap<usize, Route>,
    moves: u64,
}

/// The sticky reactor-to-node map, shared by the routers of a process.
pub struct RouteTable {
    routes: RwLock<Routes>,
    settle: Duration,
    /// Requests per reactor since the last [`Router::balance`] (each
    /// router adds its own every [`LOAD_FLUSH_REQUESTS`]), and the
    /// balancer that reads them.
    window: Mutex<HashMap<usize, u64>>,
    balancer: Mutex<Balancer>,
}

impl RouteTable {
    /// A table whose routes move after [`DEFAULT_SETTLE`].
    pub fn new() -> Arc<RouteTable> {
        RouteTable::with_settle(DEFAULT_SETTLE)
    }

    /// A table whose routes move once looks have found a reactor at the
    /// same other node for `settle` (and at least [`SETTLE_LOOKS`] looks).
    pub fn with_settle(settle: Duration) -> Arc<RouteTable> {
        Arc::new(RouteTable {
            routes: RwLock::new(Routes::default()),
            settle,
            window: Mutex::new(HashMap::new()),
            balancer: Mutex::new(Balancer::default()),
        })
    }

    /// Where requests on `reactor` go now, if it has been seen.
    pub fn node_of(&self, reactor: usize) -> Option<u32> {
        let routes = self.routes.read().expect("routes lock");
        routes.by_reactor.get(&reactor).map(|r| r.node)
    }

    /// Reactors with a route.
    pub fn len(&self) -> usize {
        self.routes.read().expect("routes lock").by_reactor.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Routes moved because ownership settled elsewhere, in all.
    pub fn moves(&self) -> u64 {
        self.routes.read().expect("routes lock").moves
    }

    /// `key`'s reactor and its route, if known.
    fn cached(&self, key: &[u8]) -> Option<(usize, u32)> {
        let routes = self.routes.read().expect("routes lock");
        let reactor = *routes.reactor_of.get(key)?;
        routes.by_reactor.get(&reactor).map(|r| (reactor, r.node))
    }

    /// Adds a router's request counts to the window.
    fn add_load(&self, counts: &mut HashMap<usize, u64>) {
        let mut window = self.window.lock().expect("window lock");
        for (reactor, n) in counts.drain() {
            *window.entry(reactor).or_default() += n;
        }
    }

    /// First sight of `key`: remembers its reactor, and the reactor's
    /// route unless another router set it first (sticky).
    fn learn(&self, key: &[u8], owner: KeyOwner, fallback: u32) -> u32 {
        let mut routes = self.routes.write().expect("routes lock");
        if routes.reactor_of.len() >= MAX_CACHED_KEYS {
            routes.reactor_of.clear();
        }
        routes.reactor_of.insert(key.to_vec(), owner.reactor);
        let route = routes.by_reactor.entry(owner.reactor).or_insert(Route {
            node: owner.node.unwrap_or(fallback),
            key: key.to_vec(),
            elsewhere: None,
        });
        route.node
    }

    /// `reactor`'s route is `node` now, settled or not (the application
    /// moved it there itself). Whether it changed.
    fn set(&self, reactor: usize, node: u32) -> bool {
        let mut routes = self.routes.write().expect("routes lock");
        let Some(route) = routes.by_reactor.get_mut(&reactor) else {
            return false;
        };
        route.elsewhere = None;
        if route.node == node {
            return false;
        }
        route.node = node;
        routes.moves += 1;
        true
    }

    /// The reactors with a route and a key of each.
    fn known(&self) -> Vec<(usize, Vec<u8>)> {
        let routes = self.routes.read().expect("routes lock");
        routes
            .by_reactor
            .iter()
            .map(|(&r, route)| (r, route.key.clone()))
            .collect()
    }

    /// One look found `reactor` owned by `owner`: the route moves once
    /// [`SETTLE_LOOKS`] looks in a row over the table's settle time found
    /// it at the same other node. Whether it moved.
    fn looked(&self, reactor: usize, owner: u32) -> bool {
        self.looked_at(reactor, owner, Instant::now())
    }

    fn looked_at(&self, reactor: usize, owner: u32, now: Instant) -> bool {
        let mut routes = self.routes.write().expect("routes lock");
        let Some(route) = routes.by_reactor.get_mut(&reactor) else {
            return false;
        };
        if route.node == owner {
            route.elsewhere = None;
            return false;
        }
        let (looks, since) = match route.elsewhere {
            Some((node, looks, since)) if node == owner => (looks + 1, since),
            _ => (1, now),
        };
        if looks < SETTLE_LOOKS || now.duration_since(since) < self.settle {
            route.elsewhere = Some((owner, looks, since));
            return false;
        }
        route.node = owner;
        route.elsewhere = None;
        routes.moves += 1;
        true
    }
}

/// One client's connections to the cluster's nodes and its view of the
/// shared [`RouteTable`]. Not shared between threads: each has its own.
pub struct Router {
    nodes: Vec<NodeAddr>,
    table: Arc<RouteTable>,
    connections: Vec<Option<Connection>>,
    timeout: Duration,
    /// Which node the next `ROOST.OWNER` goes to (they take turns).
    next_look: usize,
    /// Requests routed per reactor, not yet added to the table's window.
    counts: HashMap<usize, u64>,
    counted: u32,
}

impl Router {
    /// A router over `nodes` (connections are made on first use).
    pub fn new(nodes: Vec<NodeAddr>, table: Arc<RouteTable>) -> Router {
        assert!(!nodes.is_empty(), "a router needs a node");
        let connections = nodes.iter().map(|_| None).collect();
        Router {
            nodes,
            table,
            connections,
            timeout: DEFAULT_TIMEOUT,
            next_look: 0,
            counts: HashMap::new(),
            counted: 0,
        }
    }

    pub fn table(&self) -> &Arc<RouteTable> {
        &self.table
    }

    pub fn nodes(&self) -> &[NodeAddr] {
        &self.nodes
    }

    fn index_of(&self, node: u32) -> Result<usize, ConnectError> {
        self.nodes
            .iter()
            .position(|n| n.id == node)
            .ok_or(ConnectError::UnknownNode { node })
    }

    /// The connection to `node`, made if need be.
    pub fn connection(&mut self, node: u32) -> Result<&mut Connection, ConnectError> {
        let i = self.index_of(node)?;
        if self.connections[i].is_none() {
            let NodeAddr { id, addr } = self.nodes[i];
            let io = |source| ConnectError::Io {
                node: id,
                addr,
                source,
            };
            let client = redis::Client::open(format!("redis://{addr}/")).map_err(io)?;
            let con = client
                .get_connection_with_timeout(self.timeout)
                .map_err(io)?;
            con.set_read_timeout(Some(self.timeout)).map_err(io)?;
            con.set_write_timeout(Some(self.timeout)).map_err(io)?;
            self.connections[i] = Some(con);
        }
        Ok(self.connections[i].as_mut().expect("just made"))
    }

    /// Drops the connection to `node` (after an error that may have left
    /// it mid-reply).
    pub fn disconnect(&mut self, node: u32) {
        if let Ok(i) = self.index_of(node) {
            self.connections[i] = None;
        }
    }

    /// `ROOST.OWNER` for `keys`, at whichever node answers first (they
    /// take turns).
    pub fn owners(&mut self, keys: &[&[u8]]) -> Result<Vec<KeyOwner>, RouteError> {
        assert!(
            keys.len() <= MAX_KEYS_PER_LOOK,
            "one look asks about at most {MAX_KEYS_PER_LOOK} keys"
        );
        let mut last = String::from("no node tried");
        // Bounded: each node once.
        for _ in 0..self.nodes.len() {
            let node = self.nodes[self.next_look % self.nodes.len()].id;
            self.next_look = self.next_look.wrapping_add(1);
            let mut cmd = redis::cmd("ROOST.OWNER");
            for key in keys {
                cmd.arg(*key);
            }
            let reply = match self.connection(node) {
                Ok(con) => cmd.query::<Value>(con),
                Err(e) => {
                    last = e.to_string();
                    continue;
                }
            };
            match reply {
                Ok(value) => return parse_owners(node, &value, keys.len()),
                Err(e) => {
                    self.disconnect(node);
                    last = format!("node {node}: {e}");
                }
            }
        }
        Err(RouteError::NoNode { last })
    }

    /// The node a request on `keys` goes to: its first key's reactor's
    /// route, learned on first sight.
    pub fn route(&mut self, keys: &[&[u8]]) -> Result<u32, RouteError> {
        let home = *keys.first().ok_or(RouteError::NoKeys)?;
        if let Some((reactor, node)) = self.table.cached(home) {
            self.count(reactor);
            return Ok(node);
        }
        let owner = self.owners(&[home])?[0];
        // An owner nobody knows (a reactor being created): any node serves
        // it; spread such reactors by their index.
        let fallback = self.nodes[owner.reactor % self.nodes.len()].id;
        self.count(owner.reactor);
        Ok(self.table.learn(home, owner, fallback))
    }

    /// One request routed by `reactor`'s route.
    fn count(&mut self, reactor: usize) {
        *self.counts.entry(reactor).or_default() += 1;
        self.counted += 1;
        if self.counted >= LOAD_FLUSH_REQUESTS {
            self.counted = 0;
            self.table.add_load(&mut self.counts);
        }
    }

    /// Spreads load: the requests every router of the process routed since
    /// the last call (this one's up to now, the others' up to their last
    /// [`LOAD_FLUSH_REQUESTS`]) go to the [`Balancer`], and the routes it
    /// moves change at once; the next request at each reactor's new node
    /// takes the reactor there. Call it every second or so, beside
    /// [`Router::follow`]. Returns the moves.
    pub fn balance(&mut self) -> Vec<balance::Move> {
        self.counted = 0;
        self.table.add_load(&mut self.counts);
        let window = std::mem::take(&mut *self.table.window.lock().expect("window lock"));
        let route: HashMap<usize, u32> = {
            let routes = self.table.routes.read().expect("routes lock");
            window
                .keys()
                .filter_map(|&r| Some((r, routes.by_reactor.get(&r)?.node)))
                .collect()
        };
        let nodes: Vec<u32> = self.nodes.iter().map(|n| n.id).collect();
        let moves = self
            .table
            .balancer
            .lock()
            .expect("balancer lock")
            .plan(&nodes, &window, &route);
        for m in &moves {
            self.table.set(m.reactor, m.to);
        }
        moves
    }

    /// Runs `cmd` (a request on `keys`) at the node its route names.
    pub fn call(&mut self, keys: &[&[u8]], cmd: &Cmd) -> Result<Value, CallError> {
        let node = self.route(keys)?;
        let con = self.connection(node)?;
        match cmd.query::<Value>(con) {
            Ok(value) => Ok(value),
            Err(source) => {
                if !source.is_unrecoverable_error() && source.kind() != redis::ErrorKind::Io {
                    // A reply that is an error: the connection is fine.
                    return Err(CallError::Request { node, source });
                }
                self.disconnect(node);
                Err(CallError::Request { node, source })
            }
        }
    }

    /// Routes requests on `key`'s reactor to `node` from now on, without
    /// waiting for ownership to settle there: for an application that moved
    /// the reactor itself (a write at `node`) and sends the reactor's next
    /// requests after it, where looks could still catch it elsewhere
    /// (requests already sent to the old owner can take it back once).
    pub fn moved(&mut self, key: &[u8], node: u32) -> Result<(), RouteError> {
        self.route(&[key])?;
        let reactor = {
            let routes = self.table.routes.read().expect("routes lock");
            routes.reactor_of.get(key).copied()
        };
        match reactor {
            Some(reactor) => {
                self.table.set(reactor, node);
            }
            // Forgotten at once (the table was full): learn it at `node`.
            None => {
                let owner = self.owners(&[key])?[0];
                self.table.learn(key, owner, node);
                self.table.set(owner.reactor, node);
            }
        }
        Ok(())
    }

    /// Looks again at the owner of every reactor with a route; returns how
    /// many routes moved (ownership settled elsewhere).
    pub fn follow(&mut self) -> Result<usize, RouteError> {
        let known = self.table.known();
        let mut moved = 0;
        for chunk in known.chunks(MAX_KEYS_PER_LOOK) {
            let keys: Vec<&[u8]> = chunk.iter().map(|(_, k)| k.as_slice()).collect();
            let owners = self.owners(&keys)?;
            for ((reactor, _), owner) in chunk.iter().zip(owners) {
                debug_assert_eq!(*reactor, owner.reactor, "a key's reactor never changes");
                if let Some(node) = owner.node {
                    moved += usize::from(self.table.looked(*reactor, node));
                }
            }
        }
        Ok(moved)
    }
}

fn parse_owners(node: u32, value: &Value, want: usize) -> Result<Vec<KeyOwner>, RouteError> {
    let bad = || RouteError::BadReply {
        node,
        reply: format!("{value:?}"),
    };
    let Value::Array(items) = value else {
        return Err(bad());
    };
    if items.len() != want {
        return Err(bad());
    }
    items
        .iter()
        .map(|item| match item {
            Value::Array(fields) if fields.len() == 3 => {
                let reactor = match fields[0] {
                    Value::Int(r) if r >= 0 => r as usize,
                    _ => return Err(bad()),
                };
                let node = match fields[1] {
                    Value::Int(n) => Some(u32::try_from(n).map_err(|_| bad())?),
                    Value::Nil => None,
                    _ => return Err(bad()),
                };
                Ok(KeyOwner { reactor, node })
            }
            _ => Err(bad()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_route_is_sticky_and_moves_only_after_settling() {
        let table = RouteTable::with_settle(Duration::ZERO);
        let owner = KeyOwner {
            reactor: 7,
            node: Some(1),
        };
        assert_eq!(table.learn(b"a", owner, 0), 1);
        // Another router's first sight of the same reactor, told another
        // owner meanwhile: the route stays.
        let other = KeyOwner {
            reactor: 7,
            node: Some(2),
        };
        assert_eq!(table.learn(b"b", other, 0), 1);
        assert_eq!(table.cached(b"b"), Some((7, 1)));
        // One look elsewhere is not enough; a look back home resets it.
        assert!(!table.looked(7, 2));
        assert!(!table.looked(7, 1));
        assert!(!table.looked(7, 2));
        assert_eq!(table.node_of(7), Some(1));
        // Two in a row at the same other node: settled.
        assert!(table.looked(7, 2));
        assert_eq!(table.node_of(7), Some(2));
        assert_eq!(table.moves(), 1);
        // Two looks at two different other nodes: not settled.
        assert!(!table.looked(7, 0));
        assert!(!table.looked(7, 1));
        assert_eq!(table.node_of(7), Some(2));
    }

    #[test]
    fn a_route_set_by_the_application_moves_at_once_and_stays() {
        let table = RouteTable::new();
        let owner = KeyOwner {
            reactor: 3,
            node: Some(0),
        };
        table.learn(b"c", owner, 0);
        assert!(table.set(3, 1));
        assert_eq!(table.cached(b"c"), Some((3, 1)));
        assert_eq!(table.moves(), 1);
        assert!(!table.set(3, 1), "no change");
        // A look that catches it back at the old owner moves nothing.
        assert!(!table.looked(3, 0));
        assert_eq!(table.node_of(3), Some(1));
        // An unknown reactor has no route to set.
        assert!(!table.set(9, 1));
    }

    #[test]
    fn a_route_waits_out_the_settle_time() {
        let table = RouteTable::with_settle(Duration::from_secs(1));
        let owner = KeyOwner {
            reactor: 1,
            node: Some(0),
        };
        table.learn(b"k", owner, 0);
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        // Found elsewhere for less than the settle time: stays.
        for t in [0, 100, 200, 900] {
            assert!(!table.looked_at(1, 2, ms(t)));
        }
        // A look back home restarts the clock.
        assert!(!table.looked_at(1, 0, ms(950)));
        assert!(!table.looked_at(1, 2, ms(1_000)));
        assert!(!table.looked_at(1, 2, ms(1_900)));
        assert!(table.looked_at(1, 2, ms(2_000)));
        assert_eq!(table.node_of(1), Some(2));
    }

    #[test]
    fn an_unknown_owner_falls_back_and_a_reply_of_the_wrong_shape_is_an_error() {
        let table = RouteTable::new();
        let unknown = KeyOwner {
            reactor: 3,
            node: None,
        };
        assert_eq!(table.learn(b"k", unknown, 2), 2);
        let good = Value::Array(vec![Value::Array(vec![
            Value::Int(3),
            Value::Int(1),
            Value::BulkString(b"127.0.0.1:1".to_vec()),
        ])]);
        assert_eq!(
            parse_owners(0, &good, 1).unwrap(),
            vec![KeyOwner {
                reactor: 3,
                node: Some(1)
            }]
        );
        assert!(matches!(
            parse_owners(0, &good, 2),
            Err(RouteError::BadReply { .. })
        ));
        let bad = Value::Array(vec![Value::Array(vec![
            Value::Int(-1),
            Value::Nil,
            Value::Nil,
        ])]);
        assert!(matches!(
            parse_owners(0, &bad, 1),
            Err(RouteError::BadReply { .. })
        ));
        assert!(matches!(
            parse_owners(0, &Value::Okay, 1),
            Err(RouteError::BadReply { .. })
        ));
    }
}
