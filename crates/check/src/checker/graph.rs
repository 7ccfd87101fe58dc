//! The dependency graph: transactions are nodes, edges are labelled with why
//! one must precede the other. Strongly connected components by an iterative
//! Tarjan (no recursion: a 100k-node chain must not overflow the stack), and
//! shortest cycles by breadth-first search inside one component.

use std::collections::{HashMap, VecDeque};

/// Why an edge orders two transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum EdgeKind {
    /// Write-write: the target overwrote (or appended after) the source.
    Ww,
    /// Write-read: the target read the source's write.
    Wr,
    /// Real time: the source completed before the target was invoked.
    Rt,
    /// Write-write whose version order was inferred from real time
    /// (rw-register only); a cycle using it is a real-time anomaly.
    WwRt,
    /// Write-read where which version was read was inferred from real time
    /// (scan only: a key read as absent, placed after the delete that made
    /// it absent because every earlier absent state was excluded by real
    /// time); a cycle using it is a real-time anomaly.
    WrRt,
    /// Read-write (anti-dependency): the source read a version the target
    /// overwrote.
    Rw,
    /// Read-write from a real-time version order (rw-register only).
    RwRt,
}

impl EdgeKind {
    pub const ALL: [EdgeKind; 7] = [
        EdgeKind::Ww,
        EdgeKind::Wr,
        EdgeKind::Rt,
        EdgeKind::WwRt,
        EdgeKind::WrRt,
        EdgeKind::Rw,
        EdgeKind::RwRt,
    ];

    pub fn bit(self) -> u8 {
        1 << (self as u8)
    }

    pub fn is_realtime(self) -> bool {
        matches!(
            self,
            EdgeKind::Rt | EdgeKind::WwRt | EdgeKind::WrRt | EdgeKind::RwRt
        )
    }

    pub fn is_rw(self) -> bool {
        matches!(self, EdgeKind::Rw | EdgeKind::RwRt)
    }

    pub fn name(self) -> &'static str {
        match self {
            EdgeKind::Ww => "ww",
            EdgeKind::Wr => "wr",
            EdgeKind::Rt => "rt",
            EdgeKind::WwRt => "ww(rt)",
            EdgeKind::WrRt => "wr(rt)",
            EdgeKind::Rw => "rw",
            EdgeKind::RwRt => "rw(rt)",
        }
    }
}

/// A set of edge kinds, for searching restricted subgraphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KindSet(u8);

impl KindSet {
    pub fn of(kinds: &[EdgeKind]) -> Self {
        KindSet(kinds.iter().fold(0, |bits, k| bits | k.bit()))
    }

    pub fn all() -> Self {
        KindSet::of(&EdgeKind::ALL)
    }

    pub fn contains(self, kind: EdgeKind) -> bool {
        self.0 & kind.bit() != 0
    }
}

/// One labelled edge. `key`/`value` explain it: the key involved and the
/// value written (ww, rw) or read (wr); both 0 for real-time edges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    pub from: u32,
    pub to: u32,
    pub kind: EdgeKind,
    pub key: u64,
    pub value: u64,
}

/// Compressed adjacency: the out-edges of node `v` are
/// `edges[offsets[v]..offsets[v + 1]]`, sorted by kind so that a search meets
/// the most benign label between two nodes first.
pub struct Graph {
    offsets: Vec<usize>,
    edges: Vec<Edge>,
}

impl Graph {
    pub fn new(nodes: usize, mut edges: Vec<Edge>) -> Self {
        assert!(nodes <= u32::MAX as usize, "node ids are u32");
        edges.retain(|e| e.from != e.to);
        edges.sort_unstable_by_key(|e| (e.from, e.kind, e.to));
        let mut offsets = vec![0usize; nodes + 1];
        for e in &edges {
            assert!((e.to as usize) < nodes, "edge to a missing node");
            offsets[e.from as usize + 1] += 1;
        }
        for v in 0..nodes {
            offsets[v + 1] += offsets[v];
        }
        Graph { offsets, edges }
    }

    pub fn nodes(&self) -> usize {
        self.offsets.len() - 1
    }

    pub fn edge_count(&self) -> usize {
        self.edges.len()
    }

    pub fn out(&self, v: u32) -> &[Edge] {
        &self.edges[self.offsets[v as usize]..self.offsets[v as usize + 1]]
    }

    /// Strongly connected components with at least two nodes (no self
    /// loops exist), over all edges.
    pub fn components(&self) -> Vec<Vec<u32>> {
        let csr = Csr {
            offsets: self.offsets.clone(),
            targets: self.edges.iter().map(|e| e.to).collect(),
        };
        tarjan(&csr)
    }

    /// The components of the subgraph induced by `nodes` and the edges whose
    /// kind is in `allowed`, in the graph's node ids.
    pub fn sub_components(&self, nodes: &[u32], allowed: KindSet) -> Vec<Vec<u32>> {
        let local: HashMap<u32, u32> = nodes
            .iter()
            .enumerate()
            .map(|(i, &v)| (v, i as u32))
            .collect();
        let mut csr = Csr {
            offsets: Vec::with_capacity(nodes.len() + 1),
            targets: Vec::new(),
        };
        csr.offsets.push(0);
        for &v in nodes {
            for e in self.out(v) {
                if let (true, Some(&to)) = (allowed.contains(e.kind), local.get(&e.to)) {
                    csr.targets.push(to);
                }
            }
            csr.offsets.push(csr.targets.len());
        }
        tarjan(&csr)
            .into_iter()
            .map(|c| c.into_iter().map(|i| nodes[i as usize]).collect())
            .collect()
    }

    /// The shortest path (as edges) from `from` to `to` using `allowed`
    /// edges between nodes for which `in_scope` holds, visiting at most
    /// `budget` nodes. A path from a node to itself is a cycle.
    pub fn shortest_path(
        &self,
        from: u32,
        to: u32,
        allowed: KindSet,
        in_scope: &dyn Fn(u32) -> bool,
        budget: &mut usize,
    ) -> Option<Vec<Edge>> {
        // parent[v] = the edge that discovered v.
        let mut parent: HashMap<u32, Edge> = HashMap::new();
        let mut queue = VecDeque::from([from]);
        while let Some(u) = queue.pop_front() {
            if *budget == 0 {
                return None;
            }
            *budget -= 1;
            for e in self.out(u) {
                if !allowed.contains(e.kind) || !in_scope(e.to) {
                    continue;
                }
                if e.to == to {
                    return Some(unwind(&parent, from, *e));
                }
                if e.to != from && !parent.contains_key(&e.to) {
                    parent.insert(e.to, *e);
                    queue.push_back(e.to);
                }
            }
        }
        None
    }
}

/// Follows parent edges back from `last` to `from`.
fn unwind(parent: &HashMap<u32, Edge>, from: u32, last: Edge) -> Vec<Edge> {
    let mut path = vec![last];
    let mut at = last.from;
    // Each step moves to a node discovered earlier, so this ends within
    // parent.len() steps; the bound makes that explicit.
    for _ in 0..=parent.len() {
        if at == from {
            break;
        }
        let e = parent[&at];
        path.push(e);
        at = e.from;
    }
    debug_assert_eq!(at, from, "path does not lead back to its start");
    path.reverse();
    path
}

struct Csr {
    offsets: Vec<usize>,
    targets: Vec<u32>,
}

const UNVISITED: u32 = u32::MAX;

/// Tarjan's bookkeeping, one entry per node.
struct Tarjan<'a> {
    csr: &'a Csr,
    index: Vec<u32>,
    lowlink: Vec<u32>,
    on_stack: Vec<bool>,
    stack: Vec<u32>,
    /// (node, position of the next out-edge to look at): the explicit
    /// call stack that replaces recursion.
    calls: Vec<(u32, usize)>,
    next_index: u32,
}

impl Tarjan<'_> {
    fn visit(&mut self, v: u32) {
        let i = v as usize;
        self.index[i] = self.next_index;
        self.lowlink[i] = self.next_index;
        self.next_index += 1;
        self.stack.push(v);
        self.on_stack[i] = true;
        self.calls.push((v, self.csr.offsets[i]));
    }

    /// Pops the component rooted at `v` off the stack.
    fn pop_component(&mut self, v: u32) -> Vec<u32> {
        let mut component = Vec::new();
        while let Some(w) = self.stack.pop() {
            self.on_stack[w as usize] = false;
            component.push(w);
            if w == v {
                break;
            }
        }
        component
    }
}

/// Tarjan's algorithm with an explicit call stack. Returns components of
/// two or more nodes.
fn tarjan(csr: &Csr) -> Vec<Vec<u32>> {
    let n = csr.offsets.len() - 1;
    let mut t = Tarjan {
        csr,
        index: vec![UNVISITED; n],
        lowlink: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        calls: Vec::new(),
        next_index: 0,
    };
    let mut components = Vec::new();
    for root in 0..n as u32 {
        if t.index[root as usize] != UNVISITED {
            continue;
        }
        t.visit(root);
        while let Some(&(v, pos)) = t.calls.last() {
            let vi = v as usize;
            if pos < csr.offsets[vi + 1] {
                if let Some(frame) = t.calls.last_mut() {
                    frame.1 += 1;
                }
                let w = csr.targets[pos] as usize;
                if t.index[w] == UNVISITED {
                    t.visit(w as u32);
                } else if t.on_stack[w] {
                    t.lowlink[vi] = t.lowlink[vi].min(t.index[w]);
                }
                continue;
            }
            t.calls.pop();
            if let Some(&(parent, _)) = t.calls.last() {
                let p = parent as usize;
                t.lowlink[p] = t.lowlink[p].min(t.lowlink[vi]);
            }
            if t.lowlink[vi] == t.index[vi] {
                let mut component = t.pop_component(v);
                if component.len() > 1 {
                    component.sort_unstable();
                    components.push(component);
                }
            }
        }
    }
    components
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(from: u32, to: u32, kind: EdgeKind) -> Edge {
        Edge {
            from,
            to,
            kind,
            key: 0,
            value: 0,
        }
    }

    #[test]
    fn tarjan_finds_components() {
        // 0 -> 1 -> 2 -> 0, 2 -> 3, 3 -> 4 -> 3, 5 alone
        let g = Graph::new(
            6,
            vec![
                edge(0, 1, EdgeKind::Ww),
                edge(1, 2, EdgeKind::Wr),
                edge(2, 0, EdgeKind::Rw),
                edge(2, 3, EdgeKind::Ww),
                edge(3, 4, EdgeKind::Ww),
                edge(4, 3, EdgeKind::Ww),
            ],
        );
        let mut comps = g.components();
        comps.sort();
        assert_eq!(comps, vec![vec![0, 1, 2], vec![3, 4]]);
        let ww_only = g.sub_components(&[0, 1, 2], KindSet::of(&[EdgeKind::Ww]));
        assert!(ww_only.is_empty());
    }

    #[test]
    fn a_long_chain_does_not_overflow_the_stack() {
        let n = 200_000u32;
        let mut edges: Vec<Edge> = (0..n - 1).map(|i| edge(i, i + 1, EdgeKind::Ww)).collect();
        edges.push(edge(n - 1, 0, EdgeKind::Rw));
        let g = Graph::new(n as usize, edges);
        let comps = g.components();
        assert_eq!(comps.len(), 1);
        assert_eq!(comps[0].len(), n as usize);
    }

    #[test]
    fn bfs_finds_the_shortest_cycle() {
        // long way 0->1->2->3->0, short way 0->4->0
        let g = Graph::new(
            5,
            vec![
                edge(0, 1, EdgeKind::Ww),
                edge(1, 2, EdgeKind::Ww),
                edge(2, 3, EdgeKind::Ww),
                edge(3, 0, EdgeKind::Ww),
                edge(0, 4, EdgeKind::Wr),
                edge(4, 0, EdgeKind::Wr),
            ],
        );
        let mut budget = 100;
        let cycle = g
            .shortest_path(0, 0, KindSet::all(), &|_| true, &mut budget)
            .unwrap();
        assert_eq!(cycle.len(), 2);
        let ww = g
            .shortest_path(0, 0, KindSet::of(&[EdgeKind::Ww]), &|_| true, &mut budget)
            .unwrap();
        assert_eq!(ww.len(), 4);
        assert_eq!(ww[0].from, 0);
        assert_eq!(ww[3].to, 0);
    }
}
