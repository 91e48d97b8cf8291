//! A mutation with a request id, run to a definite outcome.
//!
//! # Why request ids
//!
//! A script sent on a connection that then fails (a timeout, a reset) may or
//! may not have run, and may even still run later (its bytes waiting in a
//! proxy or a socket buffer). Guessing from a read is unsafe: a read on the
//! new connection can overtake the old script, and counts read back are
//! only as good as the client's idea of what Redis held.
//!
//! So every mutating script is *recorded* (`scripts/record_prologue.lua`): it
//! carries a request id (rid) that only grows (one counter per client,
//! `Conn::rid`), and records "rid|reply" in a small request record beside
//! the lock for the request record TTL. A re-send of the same request replays the recorded reply instead of
//! running again, and a request older than the recorded one never runs. An
//! unknown outcome is therefore resolved by **sending the same request
//! again** until a reply arrives: the reply is the truth, whichever copy
//! ran. Replies carry the rid (a recorded script's first, a twin's last:
//! `Call::read`), so a reply meant for another command (a connection out
//! of step) is never taken for ours.
//!
//! # Every script and its rule
//!
//! fred sends a command again after a reconnect (and after a cluster
//! redirection), and [`Call::run`] sends a request again after a timeout.
//! So every script either is *recorded* (a copy replays the first run's
//! reply, an older request never runs after a newer one of the same
//! record) or is written so that a copy is harmless:
//!
//! | script | rule | why a copy is harmless |
//! | --- | --- | --- |
//! | `lock.acquire`, `fenced_lock.acquire`, `fair_lock.acquire`, `rw.read_acquire`, `rw.write_acquire`, `semaphore.acquire` | recorded (the lease's record) | replay |
//! | `lock.release` | recorded (the lease's record), but a first run proved by the count the client expects (`release_check.lua`) writes none | a copy finds the count its first run left: replay from the state; where that run freed the lock, "gone", read as freed only if the request may have been sent twice and the hold was not known lost (`core/script.rs`) |
//! | `fair_lock.release` | recorded (the lease's record), but a first run proved by the count the client expects (`fair_lock/scripts/release_check.lua`) writes none, as `lock.release` | a copy finds the count its first run left: replay from the state; where that run freed the lock and granted the head waiter, the field gone: "gone", read as `lock.release`'s, and nothing changes (no second grant or message; a hold taken since is never freed: the copy deletes nothing) |
//! | `rw.read_release`, `rw.write_release`, `semaphore.release` | recorded (the lease's record) | replay |
//! | `lock.force_unlock`, `fair_lock.force_unlock`, `rw.force_unlock` | recorded (a record per call, [`Call::run_once`]) | replay: a copy never frees a lock taken after the first run |
//! | `fair_lock.leave` | recorded (the lease's record; its rid taken under the turn, after the wait's tries) | replay; a copy that arrives after a later wait of the same owner tried never runs, so it cannot give back a grant that wait adopted |
//! | `latch.count_down`, `latch.try_set_count`, `latch.delete`, `semaphore.try_set_permits`, `semaphore.add_permits`, `semaphore.force_release_all` | recorded (a record per call) | replay |
//! | `lock.renew`, `lock.renew_packed`, `lock.renew_node_packed`, `rw.renew_read`, `rw.renew_read_node`, `semaphore.renew` | plain | a renewal only raises the TTL of a field that still exists; a late copy raises it to at most send time + watchdog timeout, which the holder's own signal never counts beyond |
//! | `fenced_lock.delete_token` | plain | deletes a counter only when no lock is held on the name; a second run finds nothing |
//! | `semaphore.available` (reclaims expired permits) | plain | reclaiming what has expired twice finds nothing the second time |
//! | `fair_lock.kick` | plain | at most one more `0` to a head waiter, which re-checks |
//! | `lock.holders`, `rw.is_locked` | read-only | nothing changes |
//!
//! # Bounds
//!
//! Re-sending stops after half the request record TTL; the outcome then stays
//! unknown, the caller gets the error, and whoever owns the call settles it
//! in the background (see `hold.rs`). The request record TTL
//! (`ClientBuilder::request_record_ttl`) defaults to three command
//! timeouts, at least 30 s.
//!
//! A copy can only reach Redis while its call is in progress: before a
//! reply that came after fred replaced a connection is returned, every
//! other connection of the client on that server is killed there
//! (`fence.rs`), so no byte still on its way to one of them is read. A
//! record is therefore needed only while its call lasts; once the call's
//! owner is done with it, the record is deleted (`forget.rs`). A record
//! whose call's outcome stayed unknown keeps its TTL. All of this holds
//! only while the fence is trusted (`fence.rs`, "When the fence is not
//! known to work"): otherwise every call is sent recorded and no record
//! is deleted early, so a late copy meets a newer request id for as long
//! as the record lives.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fred::types::{Key, Value};
use smallvec::SmallVec;
use tokio::time::Instant;

use super::backoff::Backoff;
use super::conn::Conn;
use super::script::Script;
use crate::error::{outcome_unknown, server_busy};

type FredResult<T> = Result<T, fred::error::Error>;

/// One recorded script call.
#[derive(Debug)]
pub(crate) struct Call {
    script: &'static Script,
    keys: Vec<Key>,
    args: Vec<Value>,
    rid: u64,
    /// Whether [`run`](Self::run) has sent it (a later run sends a copy).
    sent: AtomicBool,
    /// Whether it is sent as the recorded script, not as its twin without
    /// the record (`script.rs`, "Sent without the record"): from the
    /// start if the script has no twin or the client reads records, and
    /// for good once the twin has answered that its check proved nothing.
    recorded: AtomicBool,
}

impl Clone for Call {
    fn clone(&self) -> Call {
        Call {
            script: self.script,
            keys: self.keys.clone(),
            args: self.args.clone(),
            rid: self.rid,
            sent: AtomicBool::new(self.sent.load(Ordering::Relaxed)),
            recorded: AtomicBool::new(self.recorded.load(Ordering::Relaxed)),
        }
    }
}

/// A script's reply without the rid: a few integers, kept inline (the
/// lock scripts reply with two or three), so reading one allocates nothing
/// (a longer reply spills to the heap); and, for a script that names
/// something in its reply (the fair lock's release names the waiter it
/// granted the lock to), one string after them. Derefs to the integers.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Reply {
    ints: SmallVec<[i64; 4]>,
    text: Option<Box<str>>,
    /// Replayed from the request record: it tells Redis as it was when
    /// the request first ran, not as it is now.
    replayed: bool,
    /// The request may have reached Redis more than once (see
    /// [`may_be_copy`](Self::may_be_copy)).
    copied: bool,
}

impl Reply {
    /// Whether the reply was replayed from the request record (a re-sent
    /// request that had already run): it describes Redis at the first
    /// run, so nothing may be concluded from it about what happened since.
    pub(crate) fn is_replay(&self) -> bool {
        self.replayed
    }

    /// Whether this reply may answer a copy of the request rather than
    /// its first run: the request was sent again (by [`Call::run`] after a
    /// timeout, or by a settle job running the call again), or fred
    /// replaced a command connection while it was under way (fred sends
    /// what was in flight again on the new one) or before it with no call
    /// checked since (the guess errs towards a copy). A script that finds its
    /// work done and cannot tell by whom (the lock's and the fair lock's
    /// release finding the field gone, `lock/scripts/release_check.lua`,
    /// `fair_lock/scripts/release_check.lua`) takes the copy's first run
    /// to have done it only then.
    pub(crate) fn may_be_copy(&self) -> bool {
        self.copied
    }

    /// The string the reply ended with, if any. A request record's replay of a
    /// re-sent request keeps only the integers, so this is a hint: the
    /// integers are the reply.
    pub(crate) fn text(&self) -> Option<&str> {
        self.text.as_deref()
    }
}

impl std::ops::Deref for Reply {
    type Target = [i64];

    fn deref(&self) -> &[i64] {
        &self.ints
    }
}

impl FromIterator<i64> for Reply {
    fn from_iter<I: IntoIterator<Item = i64>>(iter: I) -> Reply {
        Reply {
            ints: iter.into_iter().collect(),
            text: None,
            replayed: false,
            copied: false,
        }
    }
}

/// How a call ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    /// It ran (now, or when first sent); its reply without the rid.
    Ran(Reply),
    /// A newer request of the same owner and lock ran first: this one did
    /// not and never will.
    Stale,
}

/// First pause before re-sending.
const RESEND_FIRST: Duration = Duration::from_millis(10);
/// Longest pause between re-sends.
const RESEND_MAX: Duration = Duration::from_millis(500);

/// The status a twin without the record answers when its check did not
/// prove the request's first run (`scripts/proved_gate.lua`): nothing
/// changed, send the recorded script. Never a body's status (those are
/// >= 0).
const UNPROVED: i64 = -2;

impl Call {
    /// A call of `script` with its own `keys` and `args` (built by
    /// `request.rs`, which sizes them for what is appended here): the
    /// request record, its TTL and `rid`, as the script expects.
    pub(crate) fn from_vecs(
        conn: &Conn,
        script: &'static Script,
        mut keys: Vec<Key>,
        mut args: Vec<Value>,
        record: &Key,
        rid: u64,
    ) -> Call {
        keys.push(record.clone());
        args.push(conn.request_record_ttl_ms().into());
        args.push(Value::Integer(rid as i64));
        Call {
            script,
            keys,
            args,
            rid,
            sent: AtomicBool::new(false),
            // The primitive tells its check the count it expects only while
            // records are optional (`Conn::records_optional`).
            recorded: AtomicBool::new(
                script.proved().is_none() || !conn.request_records_optional(),
            ),
        }
    }

    /// Runs a recorded `script` that changes no lease (a semaphore's or a
    /// latch's count) to a definite outcome, as [`run`](Self::run) does.
    /// Its request record is its own (`leasehold_latch:{key}:<client>:call:<rid>`,
    /// in `key`'s slot), so concurrent calls never see each other's
    /// request ids. Returns the reply without the rid.
    ///
    /// Cancel safety: dropped once sent, the script ran at most once.
    pub(crate) async fn run_once(
        conn: &Conn,
        request: super::request::Request,
        key: &str,
        client: &str,
    ) -> crate::Result<Reply> {
        let rid = conn.rid();
        let record = crate::naming::request_record_key(key, &format!("{client}:call:{rid}"));
        let call = request.for_record(conn, &record, rid);
        match call.run(conn, Instant::now()).await? {
            Settled::Ran(reply) => {
                call.forget_request_record(conn);
                Ok(reply)
            }
            Settled::Stale => Err(crate::Error::protocol("a one-off call was reported stale")),
        }
    }

    /// Its keys and arguments as sent, for tests.
    #[cfg(test)]
    pub(crate) fn parts(&self) -> (&[Key], &[Value]) {
        (&self.keys, &self.args)
    }

    /// The request id.
    pub(crate) fn rid(&self) -> u64 {
        self.rid
    }

    /// The call has ended for good (its reply is in, and no job will run
    /// it again): its request record (its last key), if it may have
    /// written one, is handed to the record batches (`forget.rs`). It may
    /// have if it was sent as the recorded script at least once. A call
    /// only ever sent as the twin without the record (`script.rs`, "Sent
    /// without the record") wrote none; and it ran while no call of the
    /// client had an unknown outcome within a record TTL, so any older
    /// record of its owner went with its own call, or has expired.
    pub(crate) fn forget_request_record(&self, conn: &Conn) {
        if let Some(record) = self.keys.last() {
            if self.recorded.load(Ordering::Relaxed) {
                conn.forget_request_record(record.clone(), self.rid);
            }
        }
    }

    /// Runs the call to a definite outcome: sends it, and after a
    /// connection error or timeout sends the same request again (with
    /// back-off) until a reply arrives or half the request record TTL has passed.
    /// Errors that prove the script did not run (a script error, a wrong
    /// reply shape from a server that is not ours) are returned at once.
    ///
    /// `first_sent`: when this request was first sent (by an earlier run,
    /// or about now): the give-up bound counts from it, as the request record's
    /// life does.
    ///
    /// Cancel safe in the sense that matters: dropping it leaves the call's
    /// outcome unknown, and running the same `Call` again later resolves it.
    pub(crate) async fn run(&self, conn: &Conn, first_sent: Instant) -> FredResult<Settled> {
        let give_up = first_sent + conn.settings.record_ttl / 2;
        let mut pauses = Backoff::new(RESEND_FIRST, RESEND_MAX);
        'send: loop {
            let error = 'attempt: {
                // A sweep failed earlier (`fence.rs`, "dirty"): a replaced
                // connection may still deliver a copy of a twin sent on it,
                // which reads no record. Nothing is sent until it is dead; the
                // refusal pauses and gives up as an unanswered send does.
                if conn.fence.dirty() {
                    if let Err(e) = conn.fence.sweep(&conn.redis).await {
                        break 'attempt fred::error::Error::new(
                            fred::error::ErrorKind::IO,
                            format!(
                                "not sent: a replaced connection could not be killed yet ({e})"
                            ),
                        );
                    }
                }
                let copy = self.sent.swap(true, Ordering::Relaxed);
                let sweeps = conn.fence.sweeps();
                let twin = match self.script.proved() {
                    Some(twin) if !self.recorded.load(Ordering::Relaxed) => Some(twin),
                    _ => None,
                };
                let sent = match twin {
                    // The keys and arguments less the record's key (the last
                    // key) and TTL (the last argument but one).
                    Some(twin) => {
                        let (args, rid) = self.args.split_at(self.args.len() - 1);
                        let args = &args[..args.len() - 1];
                        let keys = &self.keys[..self.keys.len() - 1];
                        twin.run_with::<Value>(&conn.redis, keys, args, rid).await
                    }
                    None => {
                        self.script
                            .run::<Value>(&conn.redis, &self.keys, &self.args)
                            .await
                    }
                };
                match sent {
                    Ok(reply) => match self.read(reply, twin.is_some()) {
                        Ok(Settled::Ran(reply))
                            if twin.is_some() && reply.first() == Some(&UNPROVED) =>
                        {
                            // The twin's check proved nothing and changed
                            // nothing: the recorded script, same request id,
                            // once no copy of the twin can run any more.
                            conn.check_fence().await;
                            self.recorded.store(true, Ordering::Relaxed);
                            continue 'send;
                        }
                        Ok(mut outcome) => {
                            // fred may have sent it again on a new connection:
                            // the old one dies on the server first (`fence.rs`).
                            let moved = conn.check_fence().await;
                            if let Settled::Ran(reply) = &mut outcome {
                                // fred sends what was in flight again after a
                                // reconnect: a connection replaced since the
                                // last sweep (perhaps before this send: the
                                // guess errs towards a copy), or swept by
                                // another call's check since this send.
                                reply.copied = copy || moved || conn.fence.sweeps() != sweeps;
                            }
                            return Ok(outcome);
                        }
                        Err(e) => {
                            // Not our reply: the connection is out of step with
                            // its replies. Start it afresh, then ask again.
                            conn.suspect("a reply answered another request");
                            e
                        }
                    },
                    Err(e) if e.kind() == &fred::error::ErrorKind::Timeout => {
                        conn.suspect("a request timed out");
                        e
                    }
                    // Unknown, or refused for now (loading, busy, a slot
                    // moving): the same request is safe to send again.
                    Err(e) if outcome_unknown(&e) || server_busy(&e) => e,
                    Err(e) => return Err(e),
                }
            };
            let pause = pauses.next();
            if conn.is_closed() || Instant::now() + pause >= give_up {
                tracing::warn!(script = self.script.name(), rid = self.rid, error = %error, "outcome still unknown");
                // A copy may still be on its way: newer requests read
                // their records (`Conn::records_optional`).
                conn.unsettled();
                return Err(error);
            }
            tracing::debug!(script = self.script.name(), rid = self.rid, error = %error, "outcome unknown: sending the request again");
            tokio::time::sleep(pause).await;
        }
    }

    /// Checks that `reply` answers this request: the recorded script's
    /// reply starts with the rid, a number (negated for a replay); the
    /// twin's (`twin`) ends with it, the string it was sent as ("-" in
    /// front for a replay: `scripts/proved_epilogue.lua`).
    fn read(&self, reply: Value, twin: bool) -> FredResult<Settled> {
        let out_of_step = |what: String| {
            fred::error::Error::new(
                fred::error::ErrorKind::IO,
                format!("{} (rid {}): {what}", self.script.name(), self.rid),
            )
        };
        let Value::Array(items) = reply else {
            return Err(out_of_step(format!("reply is not an array: {reply:?}")));
        };
        // The twin's rid is its last item (a string: `Value::as_i64` reads
        // it); the recorded script's is its first.
        let (rid_item, items) = match (twin, items.split_last()) {
            (true, Some((rid, rest))) => (Some(rid), rest),
            _ => (None, &items[..]),
        };
        // A last item that is a string and not a number is the reply's
        // text (see `Reply`).
        let text = match items.split_last() {
            Some((last @ (Value::String(_) | Value::Bytes(_)), _)) if last.as_i64().is_none() => {
                last.as_str().map(|t| Box::from(&*t))
            }
            _ => None,
        };
        let numbers = &items[..items.len() - usize::from(text.is_some())];
        let mut ints = numbers.iter().map(|item| {
            item.as_i64()
                .ok_or_else(|| out_of_step(format!("reply item {item:?}")))
        });
        let rid = match rid_item {
            Some(item) => Some(
                item.as_i64()
                    .ok_or_else(|| out_of_step(format!("request id {item:?}")))?,
            ),
            None => ints.next().transpose()?,
        };
        // A replay from the request record carries the rid negated.
        let replayed = rid.is_some_and(|rid| rid < 0);
        let rest = Reply {
            ints: ints.collect::<FredResult<_>>()?,
            text,
            replayed,
            copied: false,
        };
        match rid {
            Some(rid) if rid.unsigned_abs() == self.rid => {
                if rest.first() == Some(&-1) {
                    Ok(Settled::Stale)
                } else {
                    Ok(Settled::Ran(rest))
                }
            }
            _ => Err(out_of_step(format!(
                "reply {rid:?}, {rest:?} is not for this request"
            ))),
        }
    }
}

/// A script argument that is a string known at compile time (the publish
/// command, `""`): fred sends its bytes as they are, where `&str`'s `into()`
/// copies them into a new allocation on every call.
pub(crate) fn static_arg(s: &'static str) -> Value {
    Value::String(fred::bytes_utils::Str::from_static(s))
}

/// A whole-number script argument. The small ones every lock call sends
/// (hold counts, `0`, `-1`) go as static strings: fred would otherwise
/// format each integer on each send (its encoder counts the digits with a
/// floating-point `log10`). Others go as integers.
pub(crate) fn int_arg(n: i64) -> Value {
    const SMALL: [&str; 11] = ["-1", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match n {
        -1..=9 => static_arg(SMALL[(n + 1) as usize]),
        _ => Value::Integer(n),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(rid: u64) -> Call {
        let script: &'static Script = Box::leak(Box::new(Script::plain("test", "return 1")));
        Call {
            script,
            keys: Vec::new(),
            args: Vec::new(),
            rid,
            sent: AtomicBool::new(false),
            recorded: AtomicBool::new(true),
        }
    }

    fn reply(items: Vec<Value>) -> Value {
        Value::Array(items)
    }

    impl Call {
        fn read_recorded(&self, reply: Value) -> FredResult<Settled> {
            self.read(reply, false)
        }
    }

    #[test]
    fn small_whole_numbers_go_as_their_digits() {
        for n in [i64::MIN, -3, -1, 0, 1, 9, 10, 30_000, i64::MAX] {
            let arg = int_arg(n);
            assert_eq!(arg.as_i64(), Some(n), "{arg:?}");
        }
        assert_eq!(int_arg(-1), Value::String("-1".into()));
        assert_eq!(int_arg(10), Value::Integer(10));
    }

    #[test]
    fn static_strings_go_as_their_bytes() {
        for s in ["", "publish", "spublish"] {
            assert_eq!(static_arg(s), Value::from(s));
        }
    }

    #[test]
    fn a_twins_reply_ends_with_the_rid_as_a_string() {
        let read = call(7).read(
            reply(vec![1.into(), 2.into(), Value::String("7".into())]),
            true,
        );
        let Ok(Settled::Ran(r)) = read else {
            panic!("{read:?}")
        };
        assert_eq!(&r[..], &[1, 2]);
        assert!(!r.is_replay());
        // An early replay: "-" in front.
        let read = call(7).read(
            reply(vec![1.into(), 2.into(), Value::String("-7".into())]),
            true,
        );
        let Ok(Settled::Ran(r)) = read else {
            panic!("{read:?}")
        };
        assert!(r.is_replay());
        // The unproved answer: {-2, rid}.
        let read = call(7).read(reply(vec![(-2).into(), Value::String("7".into())]), true);
        assert_eq!(
            read.ok(),
            Some(Settled::Ran([UNPROVED].into_iter().collect()))
        );
        // Another request's, or a recorded script's shape: not ours.
        assert!(call(7)
            .read(
                reply(vec![1.into(), 2.into(), Value::String("8".into())]),
                true
            )
            .is_err());
        assert!(call(7)
            .read(reply(vec![7.into(), 1.into(), 2.into()]), true)
            .is_err());
    }

    #[test]
    fn a_reply_is_its_integers_after_the_rid() {
        let read = call(7).read_recorded(reply(vec![7.into(), 2.into(), 1.into()]));
        let Ok(Settled::Ran(r)) = read else {
            panic!("{read:?}")
        };
        assert_eq!(&r[..], &[2, 1]);
        assert_eq!(r.text(), None);
    }

    #[test]
    fn a_last_string_is_the_replys_text() {
        let field = "0b1c3d52-1111-4222-8333-944455556666:9";
        let items = vec![7.into(), 2.into(), 1.into(), Value::String(field.into())];
        let read = call(7).read_recorded(reply(items));
        let Ok(Settled::Ran(r)) = read else {
            panic!("{read:?}")
        };
        assert_eq!(&r[..], &[2, 1]);
        assert_eq!(r.text(), Some(field));
    }

    #[test]
    fn a_string_anywhere_else_is_not_our_reply() {
        let items = vec![7.into(), Value::String("x".into()), 1.into()];
        assert!(call(7).read_recorded(reply(items)).is_err());
        // Nor a reply that is only a string.
        assert!(call(7)
            .read_recorded(reply(vec![Value::String("x".into())]))
            .is_err());
    }

    #[test]
    fn another_requests_reply_or_a_stale_one_is_told_apart() {
        assert!(call(7)
            .read_recorded(reply(vec![8.into(), 2.into()]))
            .is_err());
        assert_eq!(
            call(7)
                .read_recorded(reply(vec![7.into(), (-1).into()]))
                .ok(),
            Some(Settled::Stale)
        );
    }
}
