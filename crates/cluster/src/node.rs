//! A node: the membership state machine and one application [`Protocol`],
//! composed. The node stamps every outgoing message with its epoch, drops
//! application messages of any other epoch, tells the protocol about view
//! changes and whether it may serve. Drivers (the tokio shell, the simulator)
//! call the `on_*` methods and carry out the returned [`NodeEffects`].

use roost_net::{EpochId, NodeId};
use serde::{Deserialize, Serialize};

use crate::coordinated::{CoordinatedMembership, CoordinatorUpdate};
use crate::membership::{
    AcceptorRecord, Health, Membership, MembershipBugs, MembershipConfig, MembershipMsg,
    MembershipOut,
};
use crate::protocol::{
    epoch_admits, Context, Effects, Incarnation, Input, Protocol, TimerId, View,
};

/// What travels between nodes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodeMsg<M> {
    Membership(MembershipMsg),
    App(M),
}

/// A node's timers: the membership's tick and the protocol's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TimerKey {
    MembershipTick,
    App(TimerId),
}

#[derive(Debug, Clone, PartialEq)]
pub struct NodeEffects<M, O> {
    pub sends: Vec<(NodeId, EpochId, NodeMsg<M>)>,
    pub timers: Vec<(TimerKey, u64)>,
    pub outputs: Vec<O>,
    pub logs: Vec<String>,
    /// Views installed during this call, in order.
    pub installed: Vec<View>,
    /// The membership's durable state changed: the driver writes this before
    /// it sends any of `sends` (and stops the node if it cannot).
    pub persist: Option<AcceptorRecord>,
}

impl<M, O> Default for NodeEffects<M, O> {
    fn default() -> Self {
        NodeEffects {
            sends: Vec::new(),
            timers: Vec::new(),
            outputs: Vec::new(),
            logs: Vec::new(),
            installed: Vec::new(),
            persist: None,
        }
    }
}

impl<M, O> NodeEffects<M, O> {
    pub fn clear(&mut self) {
        self.sends.clear();
        self.timers.clear();
        self.outputs.clear();
        self.logs.clear();
        self.installed.clear();
        self.persist = None;
    }
}

/// One node's membership view of another (for `roost status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeHealth {
    pub id: u32,
    pub state: Health,
    pub member: bool,
}

/// Where a node's views and lease come from: the peer-to-peer lease protocol
/// of [`crate::membership`] (the simulator, and clusters without etcd), or a
/// consensus service ([`crate::coordinated`], etcd).
// One per node, built once and never moved on a hot path: boxing the larger
// variant would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone)]
pub enum Members {
    Peer(Membership),
    Coordinated(CoordinatedMembership),
}

impl Members {
    pub fn me(&self) -> NodeId {
        match self {
            Members::Peer(m) => m.me(),
            Members::Coordinated(m) => m.me(),
        }
    }

    pub fn incarnation(&self) -> Incarnation {
        match self {
            Members::Peer(m) => m.incarnation(),
            Members::Coordinated(m) => m.incarnation(),
        }
    }

    pub fn nodes(&self) -> &[NodeId] {
        match self {
            Members::Peer(m) => m.nodes(),
            Members::Coordinated(m) => m.nodes(),
        }
    }

    pub fn view(&self) -> &View {
        match self {
            Members::Peer(m) => m.view(),
            Members::Coordinated(m) => m.view(),
        }
    }

    pub fn is_member(&self) -> bool {
        match self {
            Members::Peer(m) => m.is_member(),
            Members::Coordinated(m) => m.is_member(),
        }
    }

    /// When this node's lease lapses, on its clock (0: it holds none).
    pub fn lease_expiry_ms(&self) -> u64 {
        match self {
            Members::Peer(m) => m.lease_expiry_ms(),
            Members::Coordinated(m) => m.lease_expiry_ms(),
        }
    }

    pub fn serving(&self, now_ms: u64) -> bool {
        match self {
            Members::Peer(m) => m.serving(now_ms),
            Members::Coordinated(m) => m.serving(now_ms),
        }
    }

    pub fn health(&self, node: NodeId, now_ms: u64) -> Health {
        match self {
            Members::Peer(m) => m.health(node, now_ms),
            Members::Coordinated(m) => m.health(node, now_ms),
        }
    }
}

pub struct Node<P: Protocol> {
    membership: Members,
    app: P,
    app_fx: Effects<P::Msg, P::Out>,
    membership_out: MembershipOut,
}

impl<P: Protocol> Node<P> {
    /// A node on the peer membership; `recovered` is its last persisted
    /// [`AcceptorRecord`] (see [`Membership::new`]).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        me: NodeId,
        incarnation: Incarnation,
        nodes: &[NodeId],
        config: MembershipConfig,
        bugs: MembershipBugs,
        recovered: Option<AcceptorRecord>,
        app: P,
        now_ms: u64,
    ) -> Self {
        Node {
            membership: Members::Peer(Membership::new(
                me,
                incarnation,
                nodes,
                config,
                bugs,
                recovered,
                now_ms,
            )),
            app,
            app_fx: Effects::default(),
            membership_out: MembershipOut::default(),
        }
    }

    /// A node whose membership comes from a consensus service: views and the
    /// lease arrive through [`Node::on_coordinator`].
    pub fn coordinated(me: NodeId, incarnation: Incarnation, nodes: &[NodeId], app: P) -> Self {
        Node {
            membership: Members::Coordinated(CoordinatedMembership::new(me, incarnation, nodes)),
            app,
            app_fx: Effects::default(),
            membership_out: MembershipOut::default(),
        }
    }

    pub fn me(&self) -> NodeId {
        self.membership.me()
    }

    pub fn membership(&self) -> &Members {
        &self.membership
    }

    pub fn app(&self) -> &P {
        &self.app
    }

    pub fn epoch(&self) -> EpochId {
        self.membership.view().epoch
    }

    pub fn serving(&self, now_ms: u64) -> bool {
        self.membership.serving(now_ms)
    }

    pub fn health(&self, now_ms: u64) -> Vec<NodeHealth> {
        let view = self.membership.view();
        self.membership
            .nodes()
            .iter()
            .map(|&node| NodeHealth {
                id: node.0,
                state: self.membership.health(node, now_ms),
                member: view.members.contains_key(&node),
            })
            .collect()
    }

    /// Arms the membership tick; call once after creating the node.
    pub fn start(&mut self, now_ms: u64, fx: &mut NodeEffects<P::Msg, P::Out>) {
        self.on_timer(now_ms, TimerKey::MembershipTick, fx);
    }

    pub fn on_timer(&mut self, now_ms: u64, timer: TimerKey, fx: &mut NodeEffects<P::Msg, P::Out>) {
        match timer {
            TimerKey::MembershipTick => {
                // A coordinated node's membership has no timer of its own.
                let Members::Peer(membership) = &mut self.membership else {
                    return;
                };
                membership.on_tick(now_ms, &mut self.membership_out);
                let interval = membership.config().heartbeat_interval_ms;
                fx.timers.push((TimerKey::MembershipTick, interval));
                self.after_membership(now_ms, fx);
            }
            TimerKey::App(id) => self.call_app(now_ms, Input::Timer(id), fx),
        }
    }

    pub fn on_message(
        &mut self,
        now_ms: u64,
        from: NodeId,
        epoch: EpochId,
        msg: NodeMsg<P::Msg>,
        fx: &mut NodeEffects<P::Msg, P::Out>,
    ) {
        match msg {
            NodeMsg::Membership(msg) => {
                // Peer membership messages mean nothing to a coordinated node.
                if let Members::Peer(membership) = &mut self.membership {
                    membership.on_message(now_ms, from, msg, &mut self.membership_out);
                    self.after_membership(now_ms, fx);
                }
            }
            NodeMsg::App(msg) => {
                // Messages of other epochs are dropped: the protocol only ever
                // talks within one view.
                if epoch_admits(self.epoch(), epoch) {
                    self.call_app(now_ms, Input::Message { from, msg }, fx);
                }
            }
        }
    }

    /// A round of the consensus service's shell: the view it read and this
    /// node's lease. Ignored by a peer-membership node.
    pub fn on_coordinator(
        &mut self,
        now_ms: u64,
        update: CoordinatorUpdate,
        fx: &mut NodeEffects<P::Msg, P::Out>,
    ) {
        let Members::Coordinated(membership) = &mut self.membership else {
            return;
        };
        membership.on_update(&update);
        // Each view is installed and announced in turn, so a protocol sees
        // every epoch its incarnation belonged to.
        for view in update.views {
            let Members::Coordinated(membership) = &mut self.membership else {
                unreachable!("checked above");
            };
            if membership.install(view) {
                self.membership_out.installed = true;
                self.after_membership(now_ms, fx);
            }
        }
    }

    pub fn on_command(&mut self, now_ms: u64, cmd: P::Cmd, fx: &mut NodeEffects<P::Msg, P::Out>) {
        self.call_app(now_ms, Input::Command(cmd), fx);
    }

    fn after_membership(&mut self, now_ms: u64, fx: &mut NodeEffects<P::Msg, P::Out>) {
        if let Some(record) = self.membership_out.persist.take() {
            fx.persist = Some(record); // the latest whole record supersedes any earlier
        }
        let epoch = self.epoch();
        for (to, msg) in self.membership_out.sends.drain(..) {
            fx.sends.push((to, epoch, NodeMsg::Membership(msg)));
        }
        if std::mem::take(&mut self.membership_out.installed) {
            let view = self.membership.view().clone();
            fx.logs.push(format!(
                "installed {} members {:?}",
                view.epoch,
                view.members.keys().map(|n| n.0).collect::<Vec<_>>()
            ));
            fx.installed.push(view);
            self.call_app(now_ms, Input::ViewChange, fx);
        }
    }

    fn call_app(
        &mut self,
        now_ms: u64,
        input: Input<P::Msg, P::Cmd>,
        fx: &mut NodeEffects<P::Msg, P::Out>,
    ) {
        let ctx = Context {
            now_ms,
            me: self.membership.me(),
            nodes: self.membership.nodes(),
            view: self.membership.view(),
            member: self.membership.is_member(),
            serving: self.membership.serving(now_ms),
        };
        self.app_fx.clear();
        self.app.on_input(&ctx, input, &mut self.app_fx);
        let epoch = ctx.view.epoch;
        for (to, msg) in self.app_fx.sends.drain(..) {
            fx.sends.push((to, epoch, NodeMsg::App(msg)));
        }
        for (id, after_ms) in self.app_fx.timers.drain(..) {
            fx.timers.push((TimerKey::App(id), after_ms));
        }
        fx.outputs.append(&mut self.app_fx.outputs);
        fx.logs.append(&mut self.app_fx.logs);
    }
}
