//! The membership's safety properties, as checkers any protocol's simulation
//! includes (they look only at views and leases, never at the protocol):
//! * [`ViewAgreement`]: two installs of one epoch have the same members;
//! * [`LeaseSafety`]: after every event, no node serves in an epoch older
//!   than an installed view that excludes it (a removed node stopped serving
//!   before it was removed).
//!
//! And one liveness property, for runs that end in calm
//! ([`super::SimConfig::calm_tail_ms`]): [`ServesAtEnd`], every node is up
//! and serving in one view at the end (a cluster that lost a majority, or
//! all of its nodes, at once recovers).

use roost_net::EpochId;

use super::core::{Checker, Violation, World};
use crate::protocol::Protocol;

#[derive(Debug, Clone, Copy, Default)]
pub struct ViewAgreement;

impl<P: Protocol, H> Checker<P, H> for ViewAgreement {
    fn after_event(&mut self, world: &World<'_, P>, _: &H) -> Result<(), Violation> {
        for (node, _, view) in world.installs {
            let first = world
                .views
                .get(&view.epoch)
                .expect("the core records every install before checking");
            if first != view {
                return Err(Violation::new(
                    "view agreement",
                    world.now_ms,
                    format!(
                        "{node} installed {} as {:?}, another node as {:?}",
                        view.epoch, view.members, first.members
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, Default)]
pub struct LeaseSafety;

impl<P: Protocol, H> Checker<P, H> for LeaseSafety {
    fn after_event(&mut self, world: &World<'_, P>, _: &H) -> Result<(), Violation> {
        for slot in world.nodes {
            let Some(node) = slot.node() else { continue };
            if !node.serving(world.now_ms) {
                continue;
            }
            let epoch = node.epoch();
            let excluded = world
                .views
                .range(EpochId(epoch.0 + 1)..)
                .find(|(_, view)| !view.contains(slot.id(), slot.incarnation()));
            if let Some((later, _)) = excluded {
                return Err(Violation::new(
                    "lease safety",
                    world.now_ms,
                    format!("{} serves in {epoch}, but {later} excludes it", slot.id()),
                ));
            }
        }
        Ok(())
    }
}

/// The membership checkers every protocol's simulation should include.
pub type MembershipCheckers = (ViewAgreement, LeaseSafety);

pub fn membership_checkers() -> MembershipCheckers {
    (ViewAgreement, LeaseSafety)
}

/// At the end of the run every node is up, a member of one and the same
/// view, and serving. Only meaningful with a calm tail long enough for the
/// last restarts to rejoin ([`super::SimConfig::calm_tail_ms`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct ServesAtEnd;

impl<P: Protocol, H> Checker<P, H> for ServesAtEnd {
    fn after_event(&mut self, _: &World<'_, P>, _: &H) -> Result<(), Violation> {
        Ok(())
    }

    fn at_end(&mut self, world: &World<'_, P>, _: &H) -> Result<(), Violation> {
        let fail = |detail: String| Err(Violation::new("serves at end", world.now_ms, detail));
        let mut epoch = None;
        for slot in world.nodes {
            let Some(node) = slot.node() else {
                return fail(format!("{} is down", slot.id()));
            };
            if !node.serving(world.now_ms) {
                let view = node.membership().view();
                return fail(format!(
                    "{} (incarnation {}) does not serve in {} {:?}",
                    slot.id(),
                    slot.incarnation(),
                    view.epoch,
                    view.members
                ));
            }
            match epoch {
                None => epoch = Some(node.epoch()),
                Some(e) if e != node.epoch() => {
                    return fail(format!(
                        "{} serves in {}, another in {e}",
                        slot.id(),
                        node.epoch()
                    ))
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
}
