//! Spreading load: which reactors' routes to move so that no node serves
//! far more requests than another (the Zeus seed's "optimal sharding": the
//! most popular objects each on a server of their own, the least popular
//! grouped together, and both changing as popularity does).
//!
//! Sans-IO: [`Balancer::plan`] takes the requests each reactor received in
//! the last window and where each is routed, and answers the moves. A move
//! changes a route only; the next request at the new node takes the
//! reactor there (Zeus ownership), so the plan is followed by the cluster
//! itself. Reactors used together stay together without help: a request is
//! routed by its first key, and its other reactors move to that node.
//!
//! A move pays an ownership transfer, so the balancer is conservative:
//! nothing moves below [`MIN_WINDOW_REQUESTS`] or while the busiest node is
//! within [`IMBALANCE`] of the mean; a move must lower the busier of the two
//! nodes it touches (so one hot reactor never ping-pongs between nodes: it
//! would only move its heat); at most [`MAX_MOVES_PER_PLAN`] moves a plan,
//! and a moved reactor stays put for [`COOL_DOWN_PLANS`] plans. After a
//! plan that moved anything, the next [`SETTLE_PLANS`] plans move nothing:
//! their windows measure the moves themselves (the reactors following the
//! moved ones, the nodes busy handing them over), not the load, and a
//! closed-loop client's requests slow down where a move costs, so acting
//! on them would chase the transition (seen in `roost bench voter
//! --balance`: a popular reactor whose node was busy handing others over
//! looked cold and was moved onto a node that already had one).

use std::collections::HashMap;

/// Requests a window must hold before its counts say anything.
pub const MIN_WINDOW_REQUESTS: u64 = 1_000;
/// The busiest node may serve this much more than the mean before
/// anything moves (0.25: a quarter more).
pub const IMBALANCE: f64 = 0.25;
/// Moves one plan makes at most.
pub const MAX_MOVES_PER_PLAN: usize = 8;
/// Plans a moved reactor sits out before it may move again.
pub const COOL_DOWN_PLANS: u64 = 4;
/// Plans after one that moved anything that move nothing.
pub const SETTLE_PLANS: u64 = 2;

/// One route change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Move {
    pub reactor: usize,
    pub from: u32,
    pub to: u32,
    /// Its requests in the window.
    pub requests: u64,
}

/// The balancer's memory between plans: which reactors moved lately.
#[derive(Debug, Default)]
pub struct Balancer {
    plans: u64,
    moved_at: HashMap<usize, u64>,
    /// The last plan that moved anything.
    last_moves_at: Option<u64>,
}

impl Balancer {
    /// The moves for one window: `load[reactor]` requests, `route[reactor]`
    /// its node now, over `nodes` (every node, the idle ones too).
    pub fn plan(
        &mut self,
        nodes: &[u32],
        load: &HashMap<usize, u64>,
        route: &HashMap<usize, u32>,
    ) -> Vec<Move> {
        assert!(!nodes.is_empty(), "a cluster has a node");
        self.plans += 1;
        let plan = self.plans;
        self.moved_at
            .retain(|_, at| plan.saturating_sub(*at) <= COOL_DOWN_PLANS);
        if self
            .last_moves_at
            .is_some_and(|at| plan - at <= SETTLE_PLANS)
        {
            return Vec::new();
        }
        let mut per_node: HashMap<u32, u64> = nodes.iter().map(|&n| (n, 0)).collect();
        let mut on_node: HashMap<u32, Vec<(usize, u64)>> = HashMap::new();
        for (&reactor, &requests) in load {
            let Some(&node) = route.get(&reactor) else {
                continue;
            };
            let Some(total) = per_node.get_mut(&node) else {
                continue;
            };
            *total += requests;
            on_node.entry(node).or_default().push((reactor, requests));
        }
        let total: u64 = per_node.values().sum();
        if total < MIN_WINDOW_REQUESTS {
            return Vec::new();
        }
        let mean = total as f64 / nodes.len() as f64;
        let mut moves = Vec::new();
        // Bounded: a move per round, at most MAX_MOVES_PER_PLAN rounds.
        while moves.len() < MAX_MOVES_PER_PLAN {
            // Ties broken by node id, so a plan is deterministic.
            let (&hot, &hot_load) = per_node
                .iter()
                .max_by_key(|(n, l)| (**l, std::cmp::Reverse(**n)))
                .expect("a node");
            let (&cold, &cold_load) = per_node
                .iter()
                .min_by_key(|(n, l)| (**l, **n))
                .expect("a node");
            if (hot_load as f64) <= mean * (1.0 + IMBALANCE) || hot == cold {
                break;
            }
            let gap = hot_load - cold_load;
            // The reactor whose move best evens the two: its requests
            // nearest half the gap, and below the gap (else the cold node
            // would end up the busier one, and the heat only moves).
            let best = on_node
                .get(&hot)
                .into_iter()
                .flatten()
                .filter(|(r, n)| *n > 0 && *n < gap && !self.moved_at.contains_key(r))
                .min_by_key(|(r, n)| ((*n as i128 * 2 - gap as i128).unsigned_abs(), *r))
                .copied();
            let Some((reactor, requests)) = best else {
                break;
            };
            assert!(requests < gap, "a move lowers the busier node");
            on_node
                .get_mut(&hot)
                .expect("the hot node's reactors")
                .retain(|(r, _)| *r != reactor);
            on_node.entry(cold).or_default().push((reactor, requests));
            *per_node.get_mut(&hot).expect("hot") -= requests;
            *per_node.get_mut(&cold).expect("cold") += requests;
            self.moved_at.insert(reactor, plan);
            moves.push(Move {
                reactor,
                from: hot,
                to: cold,
                requests,
            });
        }
        if !moves.is_empty() {
            self.last_moves_at = Some(plan);
        }
        assert!(moves.len() <= MAX_MOVES_PER_PLAN);
        moves
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(reactors: &[(usize, u32, u64)]) -> (HashMap<usize, u64>, HashMap<usize, u32>) {
        let load = reactors.iter().map(|&(r, _, n)| (r, n)).collect();
        let route = reactors.iter().map(|&(r, node, _)| (r, node)).collect();
        (load, route)
    }

    fn loads(nodes: &[u32], load: &HashMap<usize, u64>, route: &HashMap<usize, u32>) -> Vec<u64> {
        nodes
            .iter()
            .map(|n| {
                load.iter()
                    .filter(|(r, _)| route[r] == *n)
                    .map(|(_, l)| l)
                    .sum()
            })
            .collect()
    }

    #[test]
    fn a_balanced_or_quiet_cluster_moves_nothing() {
        let mut b = Balancer::default();
        let (load, route) = window(&[(0, 0, 500), (1, 1, 450), (2, 2, 520)]);
        assert!(b.plan(&[0, 1, 2], &load, &route).is_empty());
        let (load, route) = window(&[(0, 0, 900)]);
        assert!(b.plan(&[0, 1, 2], &load, &route).is_empty(), "too few");
    }

    #[test]
    fn the_popular_reactor_keeps_a_node_and_the_rest_are_spread() {
        // Node 0 holds a popular reactor (3,000) and twenty others (100
        // each); nodes 1 and 2 hold twenty each.
        let mut reactors = vec![(0usize, 0u32, 3_000u64)];
        for i in 0..60 {
            reactors.push((1 + i, (i / 20) as u32, 100));
        }
        let (load, mut route) = window(&reactors);
        let nodes = [0, 1, 2];
        let mut b = Balancer::default();
        for _ in 0..10 {
            for m in b.plan(&nodes, &load, &route) {
                assert_eq!(route[&m.reactor], m.from);
                assert_ne!(m.reactor, 0, "the popular one would only move its heat");
                route.insert(m.reactor, m.to);
            }
        }
        let after = loads(&nodes, &load, &route);
        // 9,000 requests: node 0 keeps the popular reactor and sheds the
        // others until it is within IMBALANCE of the mean (3,000).
        assert!(after[0] as f64 <= 3_000.0 * (1.0 + IMBALANCE), "{after:?}");
        assert!(after[0] >= 3_000, "the popular reactor stayed: {after:?}");
        assert!(after[1] >= 2_600 && after[2] >= 2_600, "{after:?}");
        assert_eq!(after.iter().sum::<u64>(), 9_000);
    }

    #[test]
    fn two_popular_reactors_on_one_node_are_split() {
        let (load, mut route) = window(&[(0, 0, 2_000), (1, 0, 2_000), (2, 1, 100), (3, 2, 100)]);
        let mut b = Balancer::default();
        let moves = b.plan(&[0, 1, 2], &load, &route);
        assert!(!moves.is_empty());
        for m in &moves {
            route.insert(m.reactor, m.to);
        }
        assert_ne!(route[&0], route[&1], "the popular two split: {moves:?}");
        let after = loads(&[0, 1, 2], &load, &route);
        assert_eq!(
            after.iter().filter(|l| **l >= 2_000).count(),
            2,
            "{after:?}"
        );
        // Moved once, it cools down: a window that would move it back does
        // not, for a while.
        let popular = moves.iter().find(|m| m.reactor <= 1).expect("one moved");
        let (load2, route2) = window(&[
            (popular.reactor, popular.to, 3_000),
            (8, popular.to, 3_000),
            (9, popular.from, 10),
        ]);
        for _ in 0..SETTLE_PLANS {
            assert!(
                b.plan(&[0, 1, 2], &load2, &route2).is_empty(),
                "the windows right after a move measure the move"
            );
        }
        let again = b.plan(&[0, 1, 2], &load2, &route2);
        assert!(!again.is_empty());
        assert!(
            again.iter().all(|m| m.reactor != popular.reactor),
            "{again:?}"
        );
    }

    #[test]
    fn moves_are_bounded_and_never_make_the_target_the_busier() {
        let mut reactors = Vec::new();
        for i in 0..200 {
            reactors.push((i, 0, 50 + (i as u64 % 7) * 10));
        }
        let (load, route) = window(&reactors);
        let mut b = Balancer::default();
        let moves = b.plan(&[0, 1, 2], &load, &route);
        assert_eq!(moves.len(), MAX_MOVES_PER_PLAN);
        let mut per = [loads(&[0], &load, &route)[0], 0, 0];
        for m in &moves {
            per[m.from as usize] -= m.requests;
            per[m.to as usize] += m.requests;
            assert!(per[m.to as usize] <= per[m.from as usize] + m.requests);
        }
    }
}
