//! The sans-IO shape every Roost protocol takes: a state machine that is given
//! inputs (a message, a timer, a membership change, a local command) and the
//! current time, and answers with effects (messages to send, timers to set,
//! outputs for the local caller, log lines). No clock, socket or randomness
//! inside, so the tokio shell ([`crate::runtime`]) and the deterministic
//! simulator ([`crate::sim`]) drive the very same code.

use std::collections::BTreeMap;
use std::fmt::Debug;

use roost_net::{EpochId, NodeId};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// A process's incarnation: a node that restarts comes back as a new
/// incarnation, which the membership treats as a new member (its memory is gone).
pub type Incarnation = u64;

/// An installed membership view: the epoch id and the members (with the
/// incarnation that was admitted).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct View {
    pub epoch: EpochId,
    pub members: BTreeMap<NodeId, Incarnation>,
}

impl View {
    pub fn contains(&self, node: NodeId, incarnation: Incarnation) -> bool {
        self.members.get(&node) == Some(&incarnation)
    }
}

/// A protocol-chosen timer name; setting a timer again replaces it.
pub type TimerId = u64;

/// What a protocol is told about its node when it is called.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    pub now_ms: u64,
    pub me: NodeId,
    /// Every node of the static configuration (quorums are majorities of it).
    pub nodes: &'a [NodeId],
    pub view: &'a View,
    /// This process (this incarnation) is a member of `view`.
    pub member: bool,
    /// This node is a member of `view` and holds a valid lease: it may serve.
    pub serving: bool,
}

impl Context<'_> {
    /// A majority of the configured nodes.
    pub fn majority(&self) -> usize {
        self.nodes.len() / 2 + 1
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Input<M, C> {
    /// A message from `from`, already checked to be of the current epoch.
    Message {
        from: NodeId,
        msg: M,
    },
    Timer(TimerId),
    /// A new view was installed (its epoch is larger than any before).
    ViewChange,
    /// A request from a local client.
    Command(C),
}

/// What a protocol asks its driver to do.
#[derive(Debug, Clone, PartialEq)]
pub struct Effects<M, O> {
    /// Messages; the driver stamps them with the current epoch.
    pub sends: Vec<(NodeId, M)>,
    /// `(timer, after_ms)`.
    pub timers: Vec<(TimerId, u64)>,
    pub outputs: Vec<O>,
    pub logs: Vec<String>,
}

impl<M, O> Default for Effects<M, O> {
    fn default() -> Self {
        Effects {
            sends: Vec::new(),
            timers: Vec::new(),
            outputs: Vec::new(),
            logs: Vec::new(),
        }
    }
}

impl<M, O> Effects<M, O> {
    pub fn send(&mut self, to: NodeId, msg: M) {
        self.sends.push((to, msg));
    }

    pub fn set_timer(&mut self, timer: TimerId, after_ms: u64) {
        self.timers.push((timer, after_ms));
    }

    pub fn output(&mut self, out: O) {
        self.outputs.push(out);
    }

    pub fn log(&mut self, line: impl Into<String>) {
        self.logs.push(line.into());
    }

    pub fn clear(&mut self) {
        self.sends.clear();
        self.timers.clear();
        self.outputs.clear();
        self.logs.clear();
    }

    /// Takes in the effects of a protocol this one composes: its messages
    /// wrapped by `wrap`, its timers and logs as they are. Its outputs are
    /// returned for the caller to interpret.
    pub fn absorb<N, P>(&mut self, inner: Effects<N, P>, wrap: impl Fn(N) -> M) -> Vec<P> {
        let Effects {
            sends,
            timers,
            outputs,
            logs,
        } = inner;
        self.sends
            .extend(sends.into_iter().map(|(to, m)| (to, wrap(m))));
        self.timers.extend(timers);
        self.logs.extend(logs);
        outputs
    }
}

/// A replicated protocol running on every node.
pub trait Protocol {
    type Msg: Clone + Debug + Serialize + DeserializeOwned + Send + 'static;
    type Cmd: Clone + Debug;
    type Out: Clone + Debug;

    fn on_input(
        &mut self,
        ctx: &Context<'_>,
        input: Input<Self::Msg, Self::Cmd>,
        fx: &mut Effects<Self::Msg, Self::Out>,
    );
}

/// Epochs of a message relative to this node's: only the current one is
/// delivered to protocols (older ones are stale; newer ones wait for the view
/// to arrive through the membership and are retransmitted by their senders).
pub fn epoch_admits(mine: EpochId, theirs: EpochId) -> bool {
    mine == theirs
}
