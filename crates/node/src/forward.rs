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
/// Reactors remembered at most (entries past their memory are dropped
/// first; a node has as many as the keyspace has reactors).
const MAX_CONTENDED: usize = 1 << 20;

/// One reactor's recent losses.
#[derive(Debug, Clone, Copy)]
struct Lost {
    at_ms: u64,
    hold_ms: u64,
    /// The owner the metadata names now (kept current while held).
    owner: Option<NodeId>,
}

/// The reactors this node lost lately.
pub(crate) struct Contention {
    epoch: Instant,
    lost: Mutex<HashMap<ReactorKey, Lost>>,
    /// Losses that started or grew a hold.
    holds: AtomicU64,
}

impl Default for Contention {
    fn default() -> Self {
        Contention {
            epoch: Instant::now(),
            lost: Mutex::new(HashMap::new()),
            holds: AtomicU64::new(0),
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
                owner,
            },
        );
        self.holds.fetch_add(1, Ordering::Relaxed);
    }

    /// The node `key`'s writes go to now, if it is held.
    fn held_by(&self, key: &ReactorKey, me: NodeId, now_ms: u64) -> Option<NodeId> {
        let map = self.lost.lock().expect("contention lock");
        let lost = map.get(key)?;
        let owner = lost.owner.filter(|o| *o != me)?;
        (now_ms < lost.at_ms + lost.hold_ms).then_some(owner)
    }

    pub(crate) fn prometheus(&self) -> String {
        let mut text = String::new();
        crate::prom::counter(
            &mut text,
            "roost_zeus_forward_holds_total",
            "Reactors lost to another node that then had this node's writes shipped to their owner for a while.",
            self.holds.load(Ordering::Relaxed),
        );
        text
    }
}

/// The front door's [`roost_resp::Router`]: ships a write to the owner of
/// its reactors while this node holds off taking them back.
pub(crate) struct NodeRouter {
    me: NodeId,
    shared: Arc<Shared>,
    /// The keyspace reactors, by index.
    reactors: Vec<ReactorKey>,
    resp_addrs: HashMap<NodeId, SocketAddr>,
}

impl NodeRouter {
    pub(crate) fn new(
        me: NodeId,
        shared: Arc<Shared>,
        reactors: Vec<ReactorKey>,
        resp_addrs: HashMap<NodeId, SocketAddr>,
    ) -> NodeRouter {
        NodeRouter {
            me,
            shared,
            reactors,
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
            let key = self.reactors.get(index)?;
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
}
