//! How holds end: a release's reply applied to the record, a field found
//! gone, a lease declared lost, a shutdown's drain. Every path that gives
//! holds back or loses them ends here.
//!
//! # Guarantees
//!
//! * **One path for every release.** An unlock, a dropped guard's
//!   background release and a settled release all apply their reply
//!   through [`Lease::apply_release`]: counted, read by the kind, applied
//!   to the record ([`Lease::released`]), then the kind's follow-up.
//! * **A copy's "gone" means freed only when it can.** A release that
//!   finds the field gone counts as freed by an earlier copy of the same
//!   request only if there may have been one and the hold was not known
//!   lost: under the signal's deadline the key cannot have expired before
//!   the copy ran.
//! * **An ended incarnation frees nothing newer.** A field found gone
//!   ([`Lease::field_gone`]) ends its incarnation: its holds are no longer
//!   counted, the watchdog stops renewing it, and its guards are told
//!   last, once the record is settled. A loss is reported (counted, and a
//!   `WARN` event) once.
//! * **A refused try of the owner** proves its field gone only for a kind
//!   that says so, and only for the incarnation it was sent in
//!   ([`Lease::busy_seen`]).
//! * **Lost without proof keeps the holds counted.** A lease declared lost
//!   because a renewal was not confirmed in time ([`Lease::declare_lost`])
//!   tells its guards, but their releases are still sent.
//! * **A drain gives everything back once.** Shutdown ([`Lease::drain`])
//!   hands the caller every hold under a new incarnation: guards dropped
//!   later give back nothing.

use std::time::Duration;

use tokio::time::Instant;

use super::Lease;
use crate::core::call::Reply;
use crate::core::kind::ReleaseReply;
use crate::core::stats::KeyName;

// === impl Lease ===

impl Lease {
    /// Applies a release script's raw reply (without the request id):
    /// counted, read by the kind, applied to the record (see
    /// [`released`](Self::released)), then the kind's follow-up
    /// ([`Kind::after_release`](crate::core::kind::Kind::after_release)). Every path that gives holds back (an
    /// unlock, a dropped guard's background release, a settled release)
    /// ends here.
    pub(crate) fn apply_release(
        &self,
        raw: &Reply,
        count: u32,
        sent: Instant,
        ttl: Duration,
    ) -> ReleaseReply {
        self.stats.released();
        let reply = match self.kind.release_reply(raw) {
            // Freed by a copy of this request only if there may have been
            // one, and the hold was not known lost: the signal's deadline
            // is a lower bound of the key's expiry, so under it the key
            // cannot have expired before the copy ran.
            ReleaseReply::Gone if raw.may_be_copy() && !self.state.lock().signal.is_lost() => {
                ReleaseReply::Freed
            }
            ReleaseReply::Gone => ReleaseReply::NotHeld,
            reply => reply,
        };
        self.released(reply, count, sent, ttl);
        self.kind.after_release(self, raw);
        reply
    }

    /// Applies a release's reply: `count` holds given back, the key's TTL
    /// set to `ttl` at `sent` if holds remain.
    pub(crate) fn released(&self, reply: ReleaseReply, count: u32, sent: Instant, ttl: Duration) {
        match reply {
            ReleaseReply::NotHeld | ReleaseReply::Gone => {
                self.field_gone("a release found the field gone");
            }
            ReleaseReply::Remaining => {
                let mut s = self.state.lock();
                s.holds = s.holds.saturating_sub(count);
                s.signal.cut(sent + ttl);
            }
            ReleaseReply::Freed => {
                let mut s = self.state.lock();
                // Whatever else we counted is gone with the key.
                s.holds = 0;
                s.incarnation += 1;
                s.signal.mark_lost();
            }
        }
    }

    /// The field is known gone from Redis: its incarnation ends, its guards
    /// are told, its holds are no longer counted.
    pub(crate) fn field_gone(&self, why: &str) {
        let (signal, deregister) = {
            let mut s = self.state.lock();
            if s.holds == 0 && s.signal.is_lost_flag() {
                return;
            }
            // Reported once per loss: not again after `declare_lost`.
            if s.holds > 0 && !s.signal.is_lost_flag() {
                self.report_lost(why);
            }
            s.incarnation += 1;
            s.holds = 0;
            (s.signal.clone(), self.unregister())
        };
        if deregister {
            self.watchdog.deregister(self);
        }
        // Guards are told last, once the record is settled.
        signal.mark_lost();
    }

    /// This owner's own try, sent in `incarnation`, was refused: for a
    /// kind whose refusal proves the try's field is missing (see
    /// [`Kind::busy_proves_gone`](crate::core::kind::Kind::busy_proves_gone)), the holds of that incarnation are gone.
    /// Tries of the owner run under the turn, one at a time, so the reply
    /// follows every earlier call of this record.
    pub(crate) fn busy_seen(&self, incarnation: u64) {
        if !self.kind.busy_proves_gone() {
            return;
        }
        let gone = {
            let s = self.state.lock();
            s.incarnation == incarnation && s.holds > 0
        };
        if gone {
            self.field_gone("the owner's own try found its field gone");
        }
    }

    /// Declares the lease lost without knowing the field is gone (a renewal
    /// could not be confirmed in time). Holds stay counted: their releases
    /// are still sent.
    pub(crate) fn declare_lost(&self, why: &str) {
        let (signal, deregister) = {
            let s = self.state.lock();
            if s.signal.is_lost_flag() {
                return;
            }
            self.report_lost(why);
            (s.signal.clone(), self.unregister())
        };
        if deregister {
            self.watchdog.deregister(self);
        }
        signal.mark_lost();
    }

    /// Counts a loss of a held lease and says so (a `WARN` event).
    fn report_lost(&self, why: &str) {
        self.stats.lost();
        tracing::warn!(lock = %KeyName(self.key_bytes()), owner = self.owner, why, "lease lost");
    }

    /// Shutdown: every hold is given back by the caller (returned: how
    /// many, and the incarnation to give them back under); the guards are
    /// told, and their own releases will give back nothing.
    pub(crate) fn drain(&self) -> (u32, u64) {
        let (holds, incarnation, signal, deregister) = {
            let mut s = self.state.lock();
            let holds = std::mem::take(&mut s.holds);
            s.watched = 0;
            s.fixed.clear();
            // Guards dropped later give back nothing: the drain does, under
            // the new incarnation.
            s.incarnation += 1;
            (holds, s.incarnation, s.signal.clone(), self.unregister())
        };
        if deregister {
            self.watchdog.deregister(self);
        }
        signal.mark_lost();
        (holds, incarnation)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::core::lease::tests::held_lease;
    use crate::core::lease::Term;

    /// A refused try of the owner itself ends the holds of the incarnation
    /// it was sent in, and only those.
    #[tokio::test]
    async fn a_refused_own_try_ends_the_holds_it_was_sent_under() {
        let (_table, lease, start, signal) = held_lease();
        let began = lease.begin_call();
        lease.busy_seen(began);
        assert!(signal.is_lost());
        // A refusal sent in an incarnation that ended since says nothing
        // of the newer holds.
        let (newer, _) = lease.acquired(1, Term::Watchdog, start, Duration::from_secs(30));
        lease.busy_seen(began);
        assert!(!newer.is_lost());
        lease.lease().watchdog.deregister(lease.lease());
    }
}
