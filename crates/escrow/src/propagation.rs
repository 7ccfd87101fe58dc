//! Which counters to ship to which site, sans IO (the custom cross-site
//! propagation of §IV-B/C: "forwards modified counters to other DCs
//! periodically").
//!
//! Every changed counter is marked for every other site. Each tick the shell
//! takes a batch for each connected site, reads the durable states and ships
//! one frame of deltas. A site that (re)connects gets everything this site
//! knows (its earlier batches may have been lost with the connection), and a
//! periodic resync does the same for all, so a lost frame costs at most one
//! resync period. Merging is idempotent, so shipping twice is harmless.

use std::collections::BTreeSet;

/// Dirty counters per peer site.
#[derive(Debug, Clone)]
pub struct Propagator {
    me: usize,
    known: BTreeSet<String>,
    dirty: Vec<BTreeSet<String>>,
    connected: Vec<bool>,
    max_batch: usize,
}

impl Propagator {
    /// For site `me` of `sites`; at most `max_batch` counters per frame.
    pub fn new(me: usize, sites: usize, max_batch: usize) -> Propagator {
        Propagator {
            me,
            known: BTreeSet::new(),
            dirty: vec![BTreeSet::new(); sites],
            connected: vec![false; sites],
            max_batch: max_batch.max(1),
        }
    }

    fn peers(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.dirty.len()).filter(move |&p| p != self.me)
    }

    /// A counter's durable state changed (or was learnt of).
    pub fn changed(&mut self, key: &str) {
        if !self.known.contains(key) {
            self.known.insert(key.to_owned());
        }
        for peer in self.peers().collect::<Vec<_>>() {
            if !self.dirty[peer].contains(key) {
                self.dirty[peer].insert(key.to_owned());
            }
        }
    }

    /// `peer` is reachable again: it gets everything.
    pub fn connected(&mut self, peer: usize) {
        if peer == self.me || peer >= self.dirty.len() {
            return;
        }
        self.connected[peer] = true;
        self.dirty[peer].extend(self.known.iter().cloned());
    }

    pub fn disconnected(&mut self, peer: usize) {
        if let Some(connected) = self.connected.get_mut(peer) {
            *connected = false;
        }
    }

    /// Periodic anti-entropy: every peer gets everything again.
    pub fn resync(&mut self) {
        for peer in self.peers().collect::<Vec<_>>() {
            self.dirty[peer].extend(self.known.iter().cloned());
        }
    }

    /// The next batch for `peer` (empty while it is not connected). What is
    /// taken is no longer dirty; a failed send calls [`Propagator::requeue`].
    pub fn take_batch(&mut self, peer: usize) -> Vec<String> {
        if !self.connected.get(peer).copied().unwrap_or(false) {
            return Vec::new();
        }
        let mut batch = Vec::new();
        while batch.len() < self.max_batch {
            match self.dirty[peer].pop_first() {
                Some(key) => batch.push(key),
                None => break,
            }
        }
        batch
    }

    pub fn requeue(&mut self, peer: usize, keys: Vec<String>) {
        if let Some(dirty) = self.dirty.get_mut(peer) {
            dirty.extend(keys);
        }
    }

    pub fn known(&self) -> impl Iterator<Item = &String> {
        self.known.iter()
    }

    pub fn dirty_for(&self, peer: usize) -> usize {
        self.dirty.get(peer).map_or(0, BTreeSet::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_go_only_to_connected_peers_and_reconnects_resend_everything() {
        let mut p = Propagator::new(0, 3, 2);
        p.changed("a");
        p.changed("b");
        p.changed("c");
        assert!(p.take_batch(1).is_empty(), "not connected yet");
        p.connected(1);
        assert_eq!(p.take_batch(1), vec!["a", "b"]);
        assert_eq!(p.take_batch(1), vec!["c"]);
        assert!(p.take_batch(1).is_empty());
        assert_eq!(p.dirty_for(2), 3, "site 2 keeps its backlog");
        assert!(p.take_batch(0).is_empty(), "never to itself");
        p.changed("b");
        p.disconnected(1);
        assert!(p.take_batch(1).is_empty());
        p.connected(1);
        assert_eq!(p.take_batch(1), vec!["a", "b"]);
        p.requeue(1, vec!["a".to_owned()]);
        assert_eq!(p.take_batch(1), vec!["a", "c"]);
        p.resync();
        assert_eq!(p.dirty_for(1), 3);
        assert_eq!(p.known().count(), 3);
    }
}
