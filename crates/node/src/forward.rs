//! Migrate or forward: the node's choice, per reactor, between taking a
//! reactor another node owns (Zeus's ownership request) and shipping the
//! write to that owner's RESP port ([`roost_resp::forward`]).
//!
//! Zeus moves a reactor to wherever it is used, which is right when the
//! use moved, and wrong when two nodes keep using it at once: each write
//! would then move it back (ping-pong), paying an ownership round and a
//! copy of its rows per request. What tells the two apart is measured per
//! reactor here: a node that **lost** a reactor knows someone else wants
//! it. For a while after (the *hold*), its writes to that reactor go to the
//! owner instead of taking it back; if it loses the reactor again soon
//! after taking it back, the hold grows (x4 per loss, capped), so two nodes
//! alternating on one key move it a logarithmic number of times, not once
//! per request. Quiet for [`CONTENTION_MEMORY_MS`], a reactor starts over.
//! A node that never lost a reactor takes it as before: a workload that
//! moved follows its data at once.
//!
//! The owner measures too: a reactor whose writes over the last
//! [`YIELD_WINDOW_MS`] all came forwarded (at least [`YIELD_MIN_FORWARDED`]
//! of them, none from its own clients) is not contended but used elsewhere,
//! so the owner tells the other nodes to end their hold on it
//! (`ZeusMsg::Yield`), and the next write there takes it: the reactor
//! follows its use after all, once.
//!
//! Reads never forward: they run at the local replica (Zeus's local
//! read-only transactions). A write on reactors owned by several nodes,
//! or by one whose RESP address is unknown, runs here and acquires them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use roost_cluster::NodeId;
use roost_reactor::ReactorKey;

use crate::zeus::Shared;

/// The first hold after a loss, its growth per loss in a row, its cap.
pub const FIRST_HOLD_MS: u64 = 5_000;
pub const HOLD_GROWTH: u64 = 4;
pub const MAX_HOLD_MS: u64 = 120_000;
/// A loss this long after the last one starts over at [`FIRST_HOLD_MS`].
pub const CONTENTION_MEMORY_MS: u64 = 300_000;
/// The owner's measuring window, and the forwarded writes (with no local
/// one) in it that make it yield a reactor.
pub const YIELD_WINDOW_MS: u64 = 500;
pub const YIELD_MIN_FORWARDED: u64 = 8;
/// Reactors one window yields at most.
const MAX_YIELDS_PER_WINDOW: usize = 256;
/// Reactors remembered at most (entries past their memory are dropped
/// first; a node has as many as the keyspace has reactors).
const MAX_CONTENDED: usize = 1 << 20;

/// One reactor's recent losses.
#[derive(Debug, Clone, Copy)]
struct Lost {
    at_ms: u64,
    hold_ms: u64,
    /// The hold ends here (earlier than `at_ms + hold_ms` if the owner
    /// yielded).
    until_ms: u64,
    /// The owner the metadata names now (kept current while held).
    owner: Option<NodeId>,
}

/// The reactors this node lost lately, and the writes it served.
pub(crate) struct Contention {
    epoch: Instant,
    lost: Mutex<HashMap<ReactorKey, Lost>>,
    /// Losses that started or grew a hold.
    holds: AtomicU64,
    /// Holds ended early: by an owner's yield, and yields sent.
    released: AtomicU64,
    yields: AtomicU64,
    /// Writes served here per keyspace reactor (set with the router).
    usage: std::sync::OnceLock<Usage>,
}

/// Writes served per keyspace reactor: from this node's clients, and
/// shipped here by others; and their counts when the last window closed.
struct Usage {
    keys: Vec<ReactorKey>,
    local: Box<[AtomicU64]>,
    forwarded: Box<[AtomicU64]>,
    window: Mutex<Window>,
}

struct Window {
    opened_ms: u64,
    seen: Vec<(u64, u64)>,
}

impl Default for Contention {
    fn default() -> Self {
        Contention {
            epoch: Instant::now(),
            lost: Mutex::new(HashMap::new()),
            holds: AtomicU64::new(0),
            released: AtomicU64::new(0),
            yields: AtomicU64::new(0),
            usage: std::sync::OnceLock::new(),
        }
    }
}

impl Contention {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// The ownership protocol changed this node's access to `key`
    /// (`lost`: it owned the rows and no longer does); `owner`: the owner
    /// its metadata names now.
    pub(crate) fn note(&self, key: &ReactorKey, lost: bool, owner: Option<NodeId>) {
        self.note_at(key, lost, owner, self.now_ms());
    }

    fn note_at(&self, key: &ReactorKey, lost: bool, owner: Option<NodeId>, now_ms: u64) {
        let mut map = self.lost.lock().expect("contention lock");
        if !lost {
            if let Some(entry) = map.get_mut(key) {
                entry.owner = owner;
            }
            return;
        }
        if map.len() >= MAX_CONTENDED && !map.contains_key(key) {
            map.retain(|_, l| now_ms < l.at_ms + CONTENTION_MEMORY_MS);
            if map.len() >= MAX_CONTENDED {
                return;
            }
        }
        let hold_ms = match map.get(key) {
            Some(last) if now_ms < last.at_ms + CONTENTION_MEMORY_MS => {
                (last.hold_ms * HOLD_GROWTH).min(MAX_HOLD_MS)
            }
            _ => FIRST_HOLD_MS,
        };
        debug_assert!((FIRST_HOLD_MS..=MAX_HOLD_MS).contains(&hold_ms));
        map.insert(
            key.clone(),
            Lost {
                at_ms: now_ms,
                hold_ms,
                until_ms: now_ms + hold_ms,
                owner,
            },
        );
        self.holds.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts the writes served per keyspace reactor (`keys`, by index).
    fn measure(&self, keys: Vec<ReactorKey>) {
        let n = keys.len();
        let counters = || (0..n).map(|_| AtomicU64::new(0)).collect();
        let _ = self.usage.set(Usage {
            keys,
            local: counters(),
            forwarded: counters(),
            window: Mutex::new(Window {
                opened_ms: 0,
                seen: vec![(0, 0); n],
            }),
        });
    }

    /// The keyspace reactor at `index` (once measuring).
    fn reactor(&self, index: usize) -> Option<&ReactorKey> {
        self.usage.get()?.keys.get(index)
    }

    fn served(&self, reactors: &[usize], forwarded: bool) {
        let Some(usage) = self.usage.get() else {
            return;
        };
        let counters = if forwarded {
            &usage.forwarded
        } else {
            &usage.local
        };
        for &i in reactors {
            if let Some(c) = counters.get(i) {
                c.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// At the owner, once per [`YIELD_WINDOW_MS`]: the reactors it owns
    /// whose writes in the window all came forwarded.
    pub(crate) fn to_yield(
        &self,
        now_ms: u64,
        owns: impl Fn(&ReactorKey) -> bool,
    ) -> Vec<ReactorKey> {
        let Some(usage) = self.usage.get() else {
            return Vec::new();
        };
        let mut window = usage.window.lock().expect("usage window lock");
        if now_ms < window.opened_ms + YIELD_WINDOW_MS {
            return Vec::new();
        }
        window.opened_ms = now_ms;
        let mut out = Vec::new();
        for (i, seen) in window.seen.iter_mut().enumerate() {
            let now = (
                usage.local[i].load(Ordering::Relaxed),
                usage.forwarded[i].load(Ordering::Relaxed),
            );
            let (local, forwarded) = (now.0 - seen.0, now.1 - seen.1);
            *seen = now;
            if local == 0
                && forwarded >= YIELD_MIN_FORWARDED
                && out.len() < MAX_YIELDS_PER_WINDOW
                && owns(&usage.keys[i])
            {
                out.push(usage.keys[i].clone());
            }
        }
        self.yields.fetch_add(out.len() as u64, Ordering::Relaxed);
        debug_assert!(out.len() <= MAX_YIELDS_PER_WINDOW);
        out
    }

    /// `from`, the owner of `key`, yields it: a hold on it toward `from`
    /// ends now (the loss stays remembered, so a new one holds longer).
    pub(crate) fn release(&self, key: &ReactorKey, from: NodeId) {
        let mut map = self.lost.lock().expect("contention lock");
        if let Some(lost) = map.get_mut(key) {
            let now_ms = self.now_ms();
            if lost.owner == Some(from) && now_ms < lost.until_ms {
                lost.until_ms = now_ms;
                self.released.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The node `key`'s writes go to now, if it is held.
    fn held_by(&self, key: &ReactorKey, me: NodeId, now_ms: u64) -> Option<NodeId> {
        let map = self.lost.lock().expect("contention lock");
        let lost = map.get(key)?;
        let owner = lost.owner.filter(|o| *o != me)?;
        debug_assert!(lost.until_ms <= lost.at_ms + lost.hold_ms);
        (now_ms < lost.until_ms).then_some(owner)
    }

    pub(crate) fn prometheus(&self) -> String {
        let mut text = String::new();
        crate::prom::counter(
            &mut text,
            "roost_zeus_forward_holds_total",
            "Reactors lost to another node that then had this node's writes shipped to their owner for a while.",
            self.holds.load(Ordering::Relaxed),
        );
        crate::prom::counter(
            &mut text,
            "roost_zeus_forward_yields_total",
            "Owned reactors whose writes all came forwarded for a window: the other nodes were told to take them.",
            self.yields.load(Ordering::Relaxed),
        );
        crate::prom::counter(
            &mut text,
            "roost_zeus_forward_holds_released_total",
            "Holds ended early because the owner yielded the reactor.",
            self.released.load(Ordering::Relaxed),
        );
        text
    }
}

/// The front door's [`roost_resp::Router`]: ships a write to the owner of
/// its reactors while this node holds off taking them back.
pub(crate) struct NodeRouter {
    me: NodeId,
    shared: Arc<Shared>,
    resp_addrs: HashMap<NodeId, SocketAddr>,
}

impl NodeRouter {
    pub(crate) fn new(
        me: NodeId,
        shared: Arc<Shared>,
        reactors: Vec<ReactorKey>,
        resp_addrs: HashMap<NodeId, SocketAddr>,
    ) -> NodeRouter {
        // The reactors by index live with their counts.
        shared.contention.measure(reactors);
        NodeRouter {
            me,
            shared,
            resp_addrs,
        }
    }
}

impl roost_resp::Router for NodeRouter {
    fn route(&self, reactors: &[usize]) -> Option<SocketAddr> {
        let now_ms = self.shared.contention.now_ms();
        let mut to = None;
        // Bounded by the command's keys.
        for &index in reactors {
            let key = self.shared.contention.reactor(index)?;
            if self.shared.owns(key) {
                return None;
            }
            let owner = self.shared.contention.held_by(key, self.me, now_ms)?;
            if to.is_some_and(|t| t != owner) {
                return None;
            }
            to = Some(owner);
        }
        self.resp_addrs.get(&to?).copied()
    }

    fn served(&self, reactors: &[usize], forwarded: bool) {
        self.shared.contention.served(reactors, forwarded);
    }
}

/// What `ROOST.OWNER` answers at this node: the owner of each keyspace
/// reactor as the ownership protocol last told this node.
pub(crate) struct NodeDirectory {
    shared: Arc<Shared>,
    /// The keyspace's reactors, by index.
    reactors: Vec<ReactorKey>,
    /// Every node's RESP port, this one's too.
    resp_addrs: HashMap<NodeId, SocketAddr>,
}

impl NodeDirectory {
    pub(crate) fn new(
        shared: Arc<Shared>,
        reactors: Vec<ReactorKey>,
        resp_addrs: HashMap<NodeId, SocketAddr>,
    ) -> NodeDirectory {
        NodeDirectory {
            shared,
            reactors,
            resp_addrs,
        }
    }
}

impl roost_resp::Directory for NodeDirectory {
    fn owner(&self, reactor: usize) -> Option<roost_resp::Owner> {
        let key = self.reactors.get(reactor)?;
        let node = self.shared.owner_of(key)?;
        Some(roost_resp::Owner {
            node: node.0,
            resp_addr: self.resp_addrs.get(&node).copied(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ReactorKey {
        ReactorKey::new("keyspace", name).unwrap()
    }

    #[test]
    fn a_loss_holds_the_reactor_off_and_losses_in_a_row_hold_it_longer() {
        let c = Contention::default();
        let (x, me, other) = (key("x"), NodeId(0), NodeId(1));
        assert_eq!(c.held_by(&x, me, 0), None, "never lost: taken");
        c.note_at(&x, true, Some(other), 1_000);
        assert_eq!(c.held_by(&x, me, 1_000 + FIRST_HOLD_MS - 1), Some(other));
        assert_eq!(c.held_by(&x, me, 1_000 + FIRST_HOLD_MS), None);
        // Taken back, lost again: four times as long.
        let again = 1_000 + FIRST_HOLD_MS + 10;
        c.note_at(&x, true, Some(other), again);
        let second = FIRST_HOLD_MS * HOLD_GROWTH;
        assert_eq!(c.held_by(&x, me, again + second - 1), Some(other));
        assert_eq!(c.held_by(&x, me, again + second), None);
        // The owner the metadata names is followed while held.
        c.note_at(&x, false, Some(NodeId(2)), again + 1);
        assert_eq!(c.held_by(&x, me, again + 2), Some(NodeId(2)));
        // Held by this node itself: nothing to ship.
        c.note_at(&x, false, Some(me), again + 3);
        assert_eq!(c.held_by(&x, me, again + 4), None);
        // Capped, and forgotten after a quiet spell.
        let mut at = again;
        for _ in 0..10 {
            at += 1;
            c.note_at(&x, true, Some(other), at);
        }
        assert_eq!(c.held_by(&x, me, at + MAX_HOLD_MS - 1), Some(other));
        assert_eq!(c.held_by(&x, me, at + MAX_HOLD_MS), None);
        let later = at + CONTENTION_MEMORY_MS;
        c.note_at(&x, true, Some(other), later);
        assert_eq!(c.held_by(&x, me, later + FIRST_HOLD_MS), None);
        assert_eq!(c.holds.load(Ordering::Relaxed), 13);
    }

    #[test]
    fn an_owner_yields_a_reactor_only_other_nodes_write_and_the_hold_ends() {
        let c = Contention::default();
        let (x, y) = (key("x"), key("y"));
        c.measure(vec![x.clone(), y.clone()]);
        assert!(c.to_yield(0, |_| true).is_empty(), "nothing served yet");
        for _ in 0..YIELD_MIN_FORWARDED {
            c.served(&[0, 1], true);
        }
        // y also had a write from this node's own clients: contended.
        c.served(&[1], false);
        assert!(
            c.to_yield(YIELD_WINDOW_MS - 1, |_| true).is_empty(),
            "window open"
        );
        assert_eq!(c.to_yield(YIELD_WINDOW_MS, |_| true), vec![x.clone()]);
        // A new window starts from the counts seen.
        for _ in 0..YIELD_MIN_FORWARDED {
            c.served(&[0], true);
        }
        assert!(
            c.to_yield(2 * YIELD_WINDOW_MS, |k| *k != x).is_empty(),
            "only reactors it owns"
        );
        // At the node holding off: the owner's yield ends the hold, another
        // node's does not.
        let (me, owner) = (NodeId(0), NodeId(1));
        let now = c.now_ms();
        c.note_at(&x, true, Some(owner), now);
        c.release(&x, NodeId(2));
        assert_eq!(c.held_by(&x, me, now), Some(owner));
        c.release(&x, owner);
        assert_eq!(c.held_by(&x, me, c.now_ms()), None);
        // The loss is remembered: the next one holds longer.
        let later = c.now_ms() + 1;
        c.note_at(&x, true, Some(owner), later);
        assert_eq!(
            c.held_by(&x, me, later + FIRST_HOLD_MS * HOLD_GROWTH - 1),
            Some(owner)
        );
    }
}
