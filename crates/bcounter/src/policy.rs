//! The rights-transfer policy: when to ask for rights, whom, how much, and how
//! much a donor gives. Pure logic: it sees a [`RightsView`] and the time the
//! caller passes in, and answers with requests; no clocks, no IO, no
//! randomness. Safety never depends on it (a transfer is only ever made from
//! rights the donor holds); availability does, which is why the public
//! implementations' policy bugs went unnoticed (donors tried in ascending
//! order, a throttle that never throttled). Each rule here has a test.

use thiserror::Error;

use crate::replica::ReplicaId;
use crate::request::{RequestMode, TransferRequest};

/// What one replica knows about another's rights, as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerRights {
    pub replica: ReplicaId,
    /// What this replica believes the peer holds; may be stale or negative.
    pub believed_rights: i128,
    /// `R[peer][me]` as this replica knows it: what a request to that peer
    /// must carry (§IV-D).
    pub transferred_to_me: u64,
}

/// The policy's whole input about the counter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RightsView {
    pub me: ReplicaId,
    pub local_rights: u64,
    pub peers: Vec<PeerRights>,
}

impl RightsView {
    /// Peers with positive believed rights, most rights first; ties go to the
    /// lower replica id so the choice is deterministic. (AntidoteDB's manager
    /// sorts ascending, so it asks the poorest replica first.)
    pub fn donors_by_rights(&self) -> Vec<PeerRights> {
        let mut donors: Vec<PeerRights> = self
            .peers
            .iter()
            .copied()
            .filter(|peer| peer.believed_rights > 0)
            .collect();
        donors.sort_by(|a, b| {
            b.believed_rights
                .cmp(&a.believed_rights)
                .then(a.replica.cmp(&b.replica))
        });
        donors
    }

    fn request_to(&self, donor: &PeerRights, amount: u64, mode: RequestMode) -> TransferRequest {
        TransferRequest {
            requester: self.me,
            donor: donor.replica,
            amount,
            seen_transferred: donor.transferred_to_me,
            mode,
        }
    }
}

/// A transfer policy. Requester side: [`proactive`](Self::proactive) runs
/// periodically, [`on_shortfall`](Self::on_shortfall) when an operation lacks
/// rights. Donor side: [`donation`](Self::donation).
pub trait TransferPolicy {
    /// Background provisioning: the request to send now, if any.
    fn proactive(&mut self, view: &RightsView, now_ms: u64) -> Option<TransferRequest>;

    /// An operation needs `needed` rights and `view.local_rights` are held.
    /// Synchronous requests come in the order to try them (ask the next only
    /// if the previous did not cover the need).
    fn on_shortfall(&mut self, view: &RightsView, needed: u64, now_ms: u64)
        -> Vec<TransferRequest>;

    /// How many rights a donor holding `donor_rights` gives for `request`.
    /// The counter caps the answer at `donor_rights` whatever the policy says.
    fn donation(&self, request: &TransferRequest, donor_rights: u64) -> u64;
}

/// A bad [`RateLimit`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum RateLimitError {
    #[error("a rate limit needs a burst of at least one request")]
    ZeroBurst,
    #[error("a rate limit needs an interval of at least 1 ms")]
    ZeroInterval,
}

/// At most `burst` requests at once, then one per `interval_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    burst: u32,
    interval_ms: u64,
}

impl RateLimit {
    pub fn new(burst: u32, interval_ms: u64) -> Result<RateLimit, RateLimitError> {
        if burst == 0 {
            return Err(RateLimitError::ZeroBurst);
        }
        if interval_ms == 0 {
            return Err(RateLimitError::ZeroInterval);
        }
        Ok(RateLimit { burst, interval_ms })
    }

    pub fn burst(&self) -> u32 {
        self.burst
    }

    pub fn interval_ms(&self) -> u64 {
        self.interval_ms
    }
}

/// A refused request: try again at `retry_at_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
#[error("rate limited until {retry_at_ms} ms")]
pub struct RateLimited {
    pub retry_at_ms: u64,
}

/// A token bucket on the caller's clock. Guarantee (tested): over any window
/// of `w` ms it grants at most `burst + w / interval_ms` requests. A clock
/// that goes backwards earns nothing (AntidoteDB's timers never expired
/// because of a sign error in exactly this comparison).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimiter {
    limit: RateLimit,
    tokens: u32,
    /// When the tokens were last topped up; `None` before the first call.
    refilled_at_ms: Option<u64>,
}

impl RateLimiter {
    pub fn new(limit: RateLimit) -> RateLimiter {
        RateLimiter {
            limit,
            tokens: limit.burst,
            refilled_at_ms: None,
        }
    }

    /// Takes a token if one is available at `now_ms`.
    pub fn try_acquire(&mut self, now_ms: u64) -> Result<(), RateLimited> {
        self.refill(now_ms);
        if self.tokens == 0 {
            let refilled_at_ms = self.refilled_at_ms.unwrap_or(now_ms);
            return Err(RateLimited {
                retry_at_ms: refilled_at_ms.saturating_add(self.limit.interval_ms),
            });
        }
        self.tokens = self.tokens.checked_sub(1).expect("checked non-zero above");
        Ok(())
    }

    fn refill(&mut self, now_ms: u64) {
        let Some(refilled_at_ms) = self.refilled_at_ms else {
            self.refilled_at_ms = Some(now_ms);
            return;
        };
        let Some(elapsed_ms) = now_ms.checked_sub(refilled_at_ms) else {
            return; // The clock went backwards: no tokens earned.
        };
        let earned = elapsed_ms / self.limit.interval_ms;
        if earned == 0 {
            return;
        }
        let room = u64::from(
            self.limit
                .burst
                .checked_sub(self.tokens)
                .expect("tokens never exceed the burst"),
        );
        if earned >= room {
            self.tokens = self.limit.burst;
            // A full bucket does not save up time for later.
            self.refilled_at_ms = Some(now_ms);
        } else {
            // `earned < room <= u32::MAX`, and the time consumed is at most
            // `elapsed_ms`, so neither conversion nor sum can overflow.
            let earned = u32::try_from(earned).expect("earned < room fits u32");
            self.tokens = self.tokens.checked_add(earned).expect("below the burst");
            let used_ms = elapsed_ms - elapsed_ms % self.limit.interval_ms;
            self.refilled_at_ms =
                Some(refilled_at_ms.checked_add(used_ms).expect("at most now_ms"));
        }
    }
}

/// Settings of [`ProactivePolicy`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProactiveConfig {
    /// Ask for rights in the background while holding fewer than this.
    pub threshold_rights: u64,
    /// What an operation short of rights does: `Sync` asks donors now, in
    /// order, while the operation waits (the Riak prototype's "exhaustive"
    /// mode); `Async` fails the operation at once and sends one rate-limited
    /// request for the shortfall (AntidoteDB's mode).
    pub shortfall_mode: RequestMode,
    /// Limits asynchronous requests (proactive and fail-fast). Synchronous
    /// requests are not limited: each one is a client's operation waiting.
    pub rate_limit: RateLimit,
}

/// The paper's policy (§IV-D): a replica below the threshold asks the replica
/// believed to hold the most rights for half the difference between their
/// rights; an asynchronous donor never gives more than half of what it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProactivePolicy {
    config: ProactiveConfig,
    limiter: RateLimiter,
}

impl ProactivePolicy {
    pub fn new(config: ProactiveConfig) -> ProactivePolicy {
        ProactivePolicy {
            config,
            limiter: RateLimiter::new(config.rate_limit),
        }
    }

    pub fn config(&self) -> &ProactiveConfig {
        &self.config
    }

    fn shortfall(view: &RightsView, needed: u64) -> Option<u64> {
        needed
            .checked_sub(view.local_rights)
            .filter(|&missing| missing > 0)
    }
}

impl TransferPolicy for ProactivePolicy {
    fn proactive(&mut self, view: &RightsView, now_ms: u64) -> Option<TransferRequest> {
        if view.local_rights >= self.config.threshold_rights {
            return None;
        }
        let donor = *view.donors_by_rights().first()?;
        let difference = donor
            .believed_rights
            .checked_sub(i128::from(view.local_rights))?;
        // Half the difference leaves both replicas with about the same rights.
        let amount = u64::try_from(difference / 2).unwrap_or(u64::MAX);
        if amount == 0 {
            return None;
        }
        // Asked last, so a token is spent only on a request that is sent.
        self.limiter.try_acquire(now_ms).ok()?;
        Some(view.request_to(&donor, amount, RequestMode::Async))
    }

    fn on_shortfall(
        &mut self,
        view: &RightsView,
        needed: u64,
        now_ms: u64,
    ) -> Vec<TransferRequest> {
        let Some(missing) = Self::shortfall(view, needed) else {
            return Vec::new();
        };
        let donors = view.donors_by_rights();
        match self.config.shortfall_mode {
            RequestMode::Sync => donors
                .iter()
                .map(|donor| view.request_to(donor, missing, RequestMode::Sync))
                .collect(),
            RequestMode::Async => {
                let Some(donor) = donors.first() else {
                    return Vec::new();
                };
                if self.limiter.try_acquire(now_ms).is_err() {
                    return Vec::new();
                }
                vec![view.request_to(donor, missing, RequestMode::Async)]
            }
        }
    }

    /// Asynchronous: at most half of what the donor holds, so provisioning
    /// one replica never strips another. Synchronous: up to everything held,
    /// because a waiting operation may need the donor's last right (with the
    /// half rule a single remaining right could never move).
    fn donation(&self, request: &TransferRequest, donor_rights: u64) -> u64 {
        let cap = match request.mode {
            RequestMode::Async => donor_rights / 2,
            RequestMode::Sync => donor_rights,
        };
        request.amount.min(cap)
    }
}
