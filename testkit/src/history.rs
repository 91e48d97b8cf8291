//! Histories of critical sections, and the check that mutual exclusion held.
//!
//! A test records one [`Section`] per critical section: which lock, which
//! owner, the fencing token it took inside (an `INCR` while holding the
//! lock), when it started (after the lock was acquired and the token
//! taken), when it ended (before the unlock was sent), and when its holder
//! was told the lease was lost, if it was.
//!
//! [`check`] then finds every pair of sections that broke the promise
//! "while a guard is not lost, nobody else holds the lock": two sections of
//! *different* owners on the same lock whose *trusted* spans overlap, where
//! a section is trusted from its start until it ended or its holder was told
//! `lost`, whichever came first. It also checks that fencing tokens grow in
//! the order trusted sections started.
//!
//! # Example
//!
//! ```
//! use std::time::{Duration, Instant};
//! use leasehold_testkit::history::{check, Section};
//!
//! let t0 = Instant::now();
//! let at = |ms| t0 + Duration::from_millis(ms);
//! let a = Section::new("orders", "a", 1, at(0), at(10));
//! let b = Section::new("orders", "b", 2, at(20), at(30));
//! assert!(check(&[a.clone(), b]).is_ok());
//! let overlapping = Section::new("orders", "b", 2, at(5), at(30));
//! assert_eq!(check(&[a, overlapping]).unwrap_err().len(), 1);
//! ```

use std::time::Instant;

/// One critical section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// The lock's name.
    pub lock: String,
    /// Who held it: sections of one owner may overlap (re-entry).
    pub owner: String,
    /// The fencing token taken inside the section.
    pub token: u64,
    /// When the acquire that led to the section was called (its script may
    /// have run any time from then until `start`).
    pub requested: Instant,
    /// When the section began (lock held, token taken).
    pub start: Instant,
    /// When it ended (before the unlock).
    pub end: Instant,
    /// When its holder was told the lease was lost, if it was.
    pub lost_at: Option<Instant>,
}

/// Why a history is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Violation {
    /// Two owners trusted the same lock at the same time.
    Overlap(Section, Section),
    /// A trusted section started after another but took a smaller token.
    TokenOrder(Section, Section),
}

impl Section {
    /// A section that was never told lost.
    pub fn new(lock: &str, owner: &str, token: u64, start: Instant, end: Instant) -> Section {
        Section {
            lock: lock.to_owned(),
            owner: owner.to_owned(),
            token,
            requested: start,
            start,
            end,
            lost_at: None,
        }
    }

    /// The same section, whose acquire was called at `at`.
    pub fn requested_at(mut self, at: Instant) -> Section {
        self.requested = at.min(self.start);
        self
    }

    /// The same section, told lost at `at`.
    pub fn lost_at(mut self, at: Instant) -> Section {
        self.lost_at = Some(at);
        self
    }

    /// The end of the span the holder could trust: the end, or when it was
    /// told lost if that came first.
    pub fn trusted_until(&self) -> Instant {
        match self.lost_at {
            Some(lost) if lost < self.end => lost.max(self.start),
            _ => self.end,
        }
    }
}

/// An override the holders cannot know of at once: the lock was
/// force-unlocked by someone else. The force-unlock was sent at `at` and
/// answered at `done`; its delete ran somewhere in between.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Override {
    /// The lock's name.
    pub lock: String,
    /// When the force-unlock was sent.
    pub at: Instant,
    /// When its reply arrived.
    pub done: Instant,
}

/// [`check`], after cutting short every section whose hold the override of
/// its lock may have deleted: a section whose acquire was called before the
/// override's reply and which was still trusted when the override was sent
/// is trusted only until `max(start, at)`.
pub fn check_with(sections: &[Section], overrides: &[Override]) -> Result<(), Vec<Violation>> {
    let cut: Vec<Section> = sections
        .iter()
        .map(|s| {
            let first = overrides
                .iter()
                .filter(|o| o.lock == s.lock && s.requested < o.done && o.at < s.trusted_until())
                .map(|o| o.at.max(s.start))
                .min();
            match first {
                Some(at) => s.clone().lost_at(at.min(s.lost_at.unwrap_or(at))),
                None => s.clone(),
            }
        })
        .collect();
    check(&cut)
}

/// Checks a history (in any order). `Ok` when no two owners trusted one
/// lock at once and tokens grew with trusted sections; otherwise every
/// violation found.
pub fn check(sections: &[Section]) -> Result<(), Vec<Violation>> {
    let mut by_lock: std::collections::BTreeMap<&str, Vec<&Section>> = Default::default();
    for s in sections {
        by_lock.entry(s.lock.as_str()).or_default().push(s);
    }
    let mut violations = Vec::new();
    for (_, mut sections) in by_lock {
        sections.sort_by_key(|s| (s.start, s.token));
        for (i, a) in sections.iter().enumerate() {
            for b in &sections[i + 1..] {
                // Sorted by start: once b starts after a's trusted span,
                // no later section can overlap a.
                if b.start >= a.trusted_until() {
                    if a.owner != b.owner && b.token < a.token && b.lost_at.is_none() {
                        violations.push(Violation::TokenOrder((*a).clone(), (*b).clone()));
                    }
                    continue;
                }
                if a.owner != b.owner && b.start < b.trusted_until() {
                    violations.push(Violation::Overlap((*a).clone(), (*b).clone()));
                }
            }
        }
    }
    if violations.is_empty() {
        Ok(())
    } else {
        Err(violations)
    }
}

/// Pairs the log of a handoff between tasks that take a lock in turns
/// (turn `k`, then `k + 1`, ...). Given each turn's `(k, acquired,
/// unlocked)` in any order, returns `(unlocked of turn k, acquired of turn
/// k + 1)` for every turn whose next turn was logged, in turn order: a
/// handoff's latency is the second minus the first.
///
/// # Example
///
/// ```
/// use leasehold_testkit::history::handoffs;
///
/// let log = [(2, 30, 40), (1, 0, 10), (3, 55, 60)];
/// assert_eq!(handoffs(log), vec![(10, 30), (40, 55)]);
/// ```
pub fn handoffs<T: Copy>(log: impl IntoIterator<Item = (u64, T, T)>) -> Vec<(T, T)> {
    let mut acquired = std::collections::BTreeMap::new();
    let mut unlocked = std::collections::BTreeMap::new();
    for (k, a, u) in log {
        acquired.insert(k, a);
        unlocked.insert(k, u);
    }
    unlocked
        .iter()
        .filter_map(|(k, u)| acquired.get(&(k + 1)).map(|a| (*u, *a)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn disjoint_sections_pass() {
        let t = Instant::now();
        let h = [
            Section::new("l", "a", 1, at(t, 0), at(t, 10)),
            Section::new("l", "b", 2, at(t, 10), at(t, 20)),
            Section::new("l", "a", 3, at(t, 25), at(t, 30)),
        ];
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn overlap_of_two_owners_is_found() {
        let t = Instant::now();
        let a = Section::new("l", "a", 1, at(t, 0), at(t, 10));
        let b = Section::new("l", "b", 2, at(t, 9), at(t, 20));
        assert_eq!(
            check(&[b.clone(), a.clone()]),
            Err(vec![Violation::Overlap(a, b)])
        );
    }

    #[test]
    fn one_owner_may_overlap_itself() {
        let t = Instant::now();
        let h = [
            Section::new("l", "a", 1, at(t, 0), at(t, 20)),
            Section::new("l", "a", 2, at(t, 5), at(t, 10)),
        ];
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn other_locks_do_not_conflict() {
        let t = Instant::now();
        let h = [
            Section::new("l", "a", 1, at(t, 0), at(t, 20)),
            Section::new("m", "b", 1, at(t, 5), at(t, 10)),
        ];
        assert_eq!(check(&h), Ok(()));
    }

    #[test]
    fn a_holder_told_lost_in_time_is_not_a_violation() {
        let t = Instant::now();
        let a = Section::new("l", "a", 1, at(t, 0), at(t, 50)).lost_at(at(t, 10));
        let b = Section::new("l", "b", 2, at(t, 12), at(t, 20));
        assert_eq!(check(&[a, b]), Ok(()));
    }

    #[test]
    fn a_holder_told_lost_too_late_is_a_violation() {
        let t = Instant::now();
        let a = Section::new("l", "a", 1, at(t, 0), at(t, 50)).lost_at(at(t, 15));
        let b = Section::new("l", "b", 2, at(t, 12), at(t, 20));
        assert_eq!(
            check(&[a.clone(), b.clone()]),
            Err(vec![Violation::Overlap(a, b)])
        );
    }

    #[test]
    fn the_later_section_told_lost_at_once_does_not_count() {
        let t = Instant::now();
        let a = Section::new("l", "a", 1, at(t, 0), at(t, 50));
        // b believed it held for no time at all.
        let b = Section::new("l", "b", 2, at(t, 12), at(t, 20)).lost_at(at(t, 12));
        assert_eq!(check(&[a, b]), Ok(()));
    }

    #[test]
    fn tokens_must_grow_with_trusted_sections() {
        let t = Instant::now();
        let a = Section::new("l", "a", 5, at(t, 0), at(t, 10));
        let b = Section::new("l", "b", 4, at(t, 11), at(t, 20));
        assert_eq!(
            check(&[a.clone(), b.clone()]),
            Err(vec![Violation::TokenOrder(a, b)])
        );
    }

    #[test]
    fn a_force_unlock_cuts_the_sections_it_overrode() {
        let t = Instant::now();
        let a = Section::new("l", "a", 1, at(t, 0), at(t, 50));
        let b = Section::new("l", "b", 2, at(t, 12), at(t, 20));
        let o = Override {
            lock: "l".into(),
            at: at(t, 10),
            done: at(t, 11),
        };
        assert_eq!(
            check_with(&[a.clone(), b.clone()], std::slice::from_ref(&o)),
            Ok(())
        );
        // An override of another lock, or one after the overlap began,
        // excuses nothing.
        let other = Override {
            lock: "m".into(),
            at: at(t, 10),
            done: at(t, 11),
        };
        assert!(check_with(&[a.clone(), b.clone()], &[other]).is_err());
        let late = Override {
            lock: "l".into(),
            at: at(t, 15),
            done: at(t, 16),
        };
        assert!(check_with(&[a.clone(), b.clone()], &[late]).is_err());
        // A hold whose acquire ran before the delete but whose section began
        // after it (a slow reply) was overridden too.
        let slow = Section::new("l", "a", 1, at(t, 12), at(t, 30)).requested_at(at(t, 5));
        let c = Section::new("l", "b", 2, at(t, 14), at(t, 20));
        assert_eq!(
            check_with(&[slow.clone(), c.clone()], std::slice::from_ref(&o)),
            Ok(())
        );
        // One called after the override's reply was not.
        let fresh = Section::new("l", "a", 1, at(t, 12), at(t, 30)).requested_at(at(t, 11));
        assert!(check_with(&[fresh, c], &[o]).is_err());
    }

    #[test]
    fn an_overlap_far_down_the_list_is_found() {
        let t = Instant::now();
        let long = Section::new("l", "a", 1, at(t, 0), at(t, 100));
        let mut h = vec![long.clone()];
        for i in 0..5 {
            h.push(Section::new("l", "a", 2 + i, at(t, 10 + i), at(t, 11 + i)));
        }
        let late = Section::new("l", "b", 9, at(t, 90), at(t, 95));
        h.push(late.clone());
        assert_eq!(check(&h), Err(vec![Violation::Overlap(long, late)]));
    }
}
