//! Each planted bug, in the smallest scenario that shows it, caught by
//! the checkers of the test network.

mod common;

use common::{n, w, Net};
use roost_commit::{Body, CommitBugs, CommitConfig};

#[test]
fn committed_before_every_ack_is_caught() {
    let scenario = |bugs| {
        let mut net = Net::with(3, CommitConfig::default(), bugs);
        net.commit(1, vec![w("x", 1, "a")], &[2, 3]).unwrap();
        net.deliver_first(|m| m.to == n(2));
        net.deliver_first(|m| matches!(m.msg.body, Body::RAck(_)));
        net.run();
        net.violations.clone()
    };
    assert!(scenario(CommitBugs::default()).is_empty());
    let bad = scenario(CommitBugs {
        committed_before_all_acks: true,
        ..CommitBugs::default()
    });
    assert!(
        bad.iter().any(|v| v.contains("committed but follower n3")),
        "{bad:?}"
    );
}

#[test]
fn follower_applying_out_of_pipeline_order_is_caught() {
    let scenario = |bugs| {
        let mut net = Net::with(2, CommitConfig::default(), bugs);
        net.commit(1, vec![w("x", 1, "a")], &[2]).unwrap();
        net.commit(1, vec![w("y", 1, "b")], &[2]).unwrap();
        net.commit(1, vec![w("z", 1, "c")], &[2]).unwrap();
        net.deliver(0);
        net.deliver(1); // slot 3 before slot 2
        net.run();
        net.violations.clone()
    };
    assert!(scenario(CommitBugs::default()).is_empty());
    let bad = scenario(CommitBugs {
        follower_ignores_pipeline_order: true,
        ..CommitBugs::default()
    });
    // Slot 3 applied first and acked: its cumulative R-ACK speaks for
    // slot 2, which the follower then takes for a duplicate. Slot 2 is
    // reported committed while the follower never applied it.
    assert!(
        bad.iter().any(|v| v.contains("committed but follower n2")),
        "{bad:?}"
    );
}
