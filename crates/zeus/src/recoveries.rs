//! Which members of the view finished the reliable commit's recovery.
//!
//! The seed (§5, recovery): "When a node has no more pending reliable
//! commits (R-INV messages) from nodes that are not live, it informs the
//! ownership protocol that it has finished the recovery. Once all live
//! nodes finish the recovery, the ownership protocol starts accepting
//! again all ownership requests as normal." One node's own recovery is
//! not enough: a reader with nothing to replay could become owner while
//! another node still replays a failed coordinator's newer version to it
//! (the composed simulation found exactly that). So each node tells the
//! others when its recovery in the current epoch is over ([`Recovered`],
//! carrying every member it knows to be done), re-sends on its tick while
//! some member is not known done, and answers a message that knows less
//! than it does. Ownership serves once [`Recoveries::all_recovered`].
//!
//! Sans-IO: the caller passes the context and sends what it is given.

use std::collections::BTreeSet;

use roost_cluster::{Context, EpochId, NodeId};
use serde::{Deserialize, Serialize};

/// The members the sender knows finished recovering in `epoch` (itself
/// among them).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Recovered {
    pub epoch: EpochId,
    pub done: BTreeSet<NodeId>,
}

/// Why a [`Recovered`] message was ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecoveredRefusal {
    /// Not of this node's current view (or this node is in none).
    OtherEpoch,
    /// Names the sender not done, or nodes that are not configured.
    Malformed,
}

/// One node's knowledge of the recoveries in its current view.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Recoveries {
    epoch: EpochId,
    done: BTreeSet<NodeId>,
}

impl Recoveries {
    pub fn new() -> Self {
        Recoveries::default()
    }

    /// Every member of the current view finished its recovery (as far as
    /// this node heard; it never counts a member that did not say so).
    pub fn all_recovered(&self, ctx: &Context<'_>) -> bool {
        ctx.member
            && self.epoch == ctx.view.epoch
            && ctx.view.members.keys().all(|n| self.done.contains(n))
    }

    /// After any input: follows the view, and records whether this node's
    /// own recovery is over (`recovered_here`); the first time it is in an
    /// epoch, tells every other member (`send`).
    pub fn note(
        &mut self,
        ctx: &Context<'_>,
        recovered_here: bool,
        send: &mut impl FnMut(NodeId, Recovered),
    ) {
        if self.epoch != ctx.view.epoch {
            self.epoch = ctx.view.epoch;
            self.done.clear();
        }
        if !ctx.member {
            self.done.clear();
            return;
        }
        if !recovered_here {
            // (A replay that arrived after the report: the others may
            // still count this node done for this epoch.)
            self.done.remove(&ctx.me);
        } else if self.done.insert(ctx.me) {
            self.tell(ctx, None, send);
        }
        debug_assert!(self.done.len() <= ctx.nodes.len());
        debug_assert!(self.done.iter().all(|n| ctx.view.members.contains_key(n)));
    }

    /// A member's report: what it knows is merged in; if this node knows
    /// more than the sender, the sender is told.
    pub fn on_message(
        &mut self,
        ctx: &Context<'_>,
        from: NodeId,
        msg: Recovered,
        recovered_here: bool,
        send: &mut impl FnMut(NodeId, Recovered),
    ) -> Result<(), RecoveredRefusal> {
        self.note(ctx, recovered_here, send);
        if !ctx.member || msg.epoch != ctx.view.epoch {
            return Err(RecoveredRefusal::OtherEpoch);
        }
        if !msg.done.contains(&from)
            || msg.done.len() > ctx.nodes.len()
            || !msg.done.iter().all(|n| ctx.nodes.contains(n))
        {
            return Err(RecoveredRefusal::Malformed);
        }
        let members = &ctx.view.members;
        self.done
            .extend(msg.done.iter().copied().filter(|n| members.contains_key(n)));
        if self.done.contains(&ctx.me) && !self.done.is_subset(&msg.done) {
            self.tell(ctx, Some(from), send);
        }
        Ok(())
    }

    /// The periodic re-send: while some member is not known done, this
    /// node (if done) tells every other member again (a report may have
    /// been lost either way).
    pub fn on_tick(&self, ctx: &Context<'_>, send: &mut impl FnMut(NodeId, Recovered)) {
        if self.epoch == ctx.view.epoch && self.done.contains(&ctx.me) && !self.all_recovered(ctx) {
            self.tell(ctx, None, send);
        }
    }

    fn tell(
        &self,
        ctx: &Context<'_>,
        to: Option<NodeId>,
        send: &mut impl FnMut(NodeId, Recovered),
    ) {
        debug_assert_eq!(self.epoch, ctx.view.epoch);
        let msg = Recovered {
            epoch: self.epoch,
            done: self.done.clone(),
        };
        match to {
            Some(node) => send(node, msg),
            None => {
                for &node in ctx.view.members.keys().filter(|&&n| n != ctx.me) {
                    send(node, msg.clone());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use roost_cluster::{Incarnation, View};

    use super::*;

    fn view(epoch: u64, members: &[u32]) -> View {
        View {
            epoch: EpochId(epoch),
            members: members
                .iter()
                .map(|&n| (NodeId(n), 1 as Incarnation))
                .collect::<BTreeMap<_, _>>(),
        }
    }

    fn ctx<'a>(me: u32, nodes: &'a [NodeId], view: &'a View) -> Context<'a> {
        Context {
            now_ms: 0,
            me: NodeId(me),
            nodes,
            view,
            member: view.members.contains_key(&NodeId(me)),
            serving: true,
        }
    }

    #[test]
    fn every_member_must_report_and_a_new_view_starts_over() {
        let nodes = [NodeId(0), NodeId(1), NodeId(2)];
        let v1 = view(1, &[0, 1, 2]);
        let mut sent = Vec::new();
        let mut r = Recoveries::new();
        r.note(&ctx(0, &nodes, &v1), true, &mut |to, m| sent.push((to, m)));
        assert_eq!(sent.len(), 2, "told both others");
        assert!(!r.all_recovered(&ctx(0, &nodes, &v1)));
        let from1 = Recovered {
            epoch: EpochId(1),
            done: [NodeId(1)].into(),
        };
        sent.clear();
        r.on_message(
            &ctx(0, &nodes, &v1),
            NodeId(1),
            from1,
            true,
            &mut |to, m| sent.push((to, m)),
        )
        .unwrap();
        assert_eq!(sent.len(), 1, "node 1 knew less: told");
        assert!(!r.all_recovered(&ctx(0, &nodes, &v1)), "node 2 not heard");
        let from2 = Recovered {
            epoch: EpochId(1),
            done: [NodeId(1), NodeId(2)].into(),
        };
        r.on_message(&ctx(0, &nodes, &v1), NodeId(2), from2, true, &mut |_, _| {})
            .unwrap();
        assert!(r.all_recovered(&ctx(0, &nodes, &v1)));
        // A new view: nobody is known done, this node included until noted.
        let v2 = view(2, &[0, 1]);
        r.note(&ctx(0, &nodes, &v2), false, &mut |_, _| {});
        assert!(!r.all_recovered(&ctx(0, &nodes, &v2)));
        r.note(&ctx(0, &nodes, &v2), true, &mut |_, _| {});
        assert!(!r.all_recovered(&ctx(0, &nodes, &v2)));
    }

    #[test]
    fn reports_of_other_epochs_or_malformed_ones_are_refused() {
        let nodes = [NodeId(0), NodeId(1)];
        let v = view(3, &[0, 1]);
        let mut r = Recoveries::new();
        let old = Recovered {
            epoch: EpochId(2),
            done: [NodeId(1)].into(),
        };
        assert_eq!(
            r.on_message(&ctx(0, &nodes, &v), NodeId(1), old, true, &mut |_, _| {}),
            Err(RecoveredRefusal::OtherEpoch)
        );
        let not_self = Recovered {
            epoch: EpochId(3),
            done: [NodeId(0)].into(),
        };
        assert_eq!(
            r.on_message(
                &ctx(0, &nodes, &v),
                NodeId(1),
                not_self,
                true,
                &mut |_, _| {}
            ),
            Err(RecoveredRefusal::Malformed)
        );
        let unknown = Recovered {
            epoch: EpochId(3),
            done: [NodeId(1), NodeId(7)].into(),
        };
        assert_eq!(
            r.on_message(
                &ctx(0, &nodes, &v),
                NodeId(1),
                unknown,
                true,
                &mut |_, _| {}
            ),
            Err(RecoveredRefusal::Malformed)
        );
        assert!(
            !r.all_recovered(&ctx(0, &nodes, &v)),
            "node 1 never counted"
        );
    }
}
