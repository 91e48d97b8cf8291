//! The door a primitive sends a lease's mutation through: what to send,
//! never how it is made exactly-once.
//!
//! A primitive says which script, with *its own* keys and arguments, and
//! marks where the script wants two of the engine's values:
//!
//! * [`Request::publish`]: the command the scripts publish with
//!   (`publish` or `spublish`, the connection's choice);
//! * [`Request::expected_holds`]: the hold count the client counts for
//!   the lease before this request, which a script's check before the
//!   record compares with Redis (`script.rs`, "A check before the
//!   record"), or its sentinel when the client must read its record
//!   anyway (a call of the client had an unknown outcome:
//!   `Conn::records_optional`): `-1` before an acquire, `0` before a
//!   release.
//!
//! The engine alone turns it into a [`Call`]: fills those places, adds
//! the request record (the last key), the record's TTL and the request id
//! (the last two arguments), and from then on sends, re-sends, fences,
//! reads the reply and settles it (`call.rs`, `hold.rs`). Three doors, by
//! what the request is for:
//!
//! * a lease's acquire or release: [`Request::for_lease`] (the engine
//!   numbers it), or [`Request::for_lease_once`] for a request a job may
//!   send again as the same request ([`RequestId`]: a fair waiter's leave);
//! * a call that changes no lease (a count, a force unlock):
//!   `Engine::run_once` / `Engine::force_unlock`, with a request record of
//!   its own;
//! * a script that needs no record (a copy is harmless: `call.rs` lists
//!   which): [`Request::run_plain`].

use std::sync::OnceLock;

use fred::types::{FromValue, Key, Value};
use smallvec::SmallVec;

use super::call::{int_arg, static_arg, Call};
use super::conn::Conn;
use super::lease::Lease;
use super::script::Script;

/// What a primitive sends for a lease (see the module docs).
#[derive(Debug)]
pub(crate) struct Request {
    script: &'static Script,
    keys: Vec<Key>,
    args: Vec<Value>,
    /// The arguments the engine fills, by index.
    places: SmallVec<[(usize, Place); 2]>,
}

/// An argument the engine fills.
#[derive(Clone, Copy, Debug)]
enum Place {
    Publish,
    Expected(Before),
}

/// The id of a request sent more than once as one request (a job that
/// runs again): the engine picks it when the request is first sent
/// ([`Request::for_lease_once`]).
#[derive(Debug, Default)]
pub(crate) struct RequestId(OnceLock<u64>);

/// What a request's expected hold count comes before (it picks the
/// sentinel that tells the script's check to read the record anyway).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Before {
    /// An acquire: sentinel `-1`.
    Acquire,
    /// A release: sentinel `0`.
    Release,
}

impl Request {
    /// A request for `script` with the primitive's own `keys`.
    pub(crate) fn new(script: &'static Script, keys: impl IntoIterator<Item = Key>) -> Request {
        let keys = keys.into_iter();
        let mut all = Vec::with_capacity(keys.size_hint().0 + 1);
        all.extend(keys);
        Request {
            script,
            keys: all,
            // The plain lock's release and the record's two (the fair
            // lock's acquire, with 8, grows it once).
            args: Vec::with_capacity(7),
            places: SmallVec::new(),
        }
    }

    /// The next argument.
    pub(crate) fn arg(mut self, arg: impl Into<Value>) -> Request {
        self.args.push(arg.into());
        self
    }

    /// The next arguments.
    pub(crate) fn args(mut self, args: impl IntoIterator<Item = Value>) -> Request {
        self.args.extend(args);
        self
    }

    /// The next argument, a whole number (small ones go as static
    /// strings: `call::int_arg`).
    pub(crate) fn int(self, n: i64) -> Request {
        self.arg(int_arg(n))
    }

    /// The next argument: the command the scripts publish with.
    pub(crate) fn publish(mut self) -> Request {
        self.places.push((self.args.len(), Place::Publish));
        self.args.push(Value::Null);
        self
    }

    /// The next argument: the publish command if `announce`, else empty
    /// (a script that publishes only when told).
    pub(crate) fn publish_if(self, announce: bool) -> Request {
        if announce {
            self.publish()
        } else {
            self.arg(static_arg(""))
        }
    }

    /// The next argument: the holds the client counts for the lease
    /// before this request (see the module docs).
    pub(crate) fn expected_holds(mut self, before: Before) -> Request {
        self.places.push((self.args.len(), Place::Expected(before)));
        self.args.push(Value::Null);
        self
    }

    /// The call the engine sends for `lease` as the request `id` (chosen
    /// when first sent, then kept: a job run again sends the same request).
    pub(crate) fn for_lease_once(self, lease: &Lease, id: &RequestId) -> Call {
        let rid = *id.0.get_or_init(|| lease.conn.rid());
        self.for_lease(lease, rid)
    }

    /// The call for a request that changes no lease: `record` its own
    /// request record, `rid` its id (`Call::run_once`).
    pub(crate) fn for_record(self, conn: &Conn, record: &Key, rid: u64) -> Call {
        let (script, keys, args) = self.filled(conn, None);
        Call::from_vecs(conn, script, keys, args, record, rid)
    }

    /// Runs a script that needs no request record (a copy of it is
    /// harmless), its places filled.
    pub(crate) async fn run_plain<R: FromValue>(
        self,
        conn: &Conn,
    ) -> Result<R, fred::error::Error> {
        let (script, keys, args) = self.filled(conn, None);
        script.run(&conn.redis, &keys, &args).await
    }

    /// The call the engine sends for `lease` under request id `rid`.
    pub(crate) fn for_lease(self, lease: &Lease, rid: u64) -> Call {
        let (script, keys, args) = self.filled(&lease.conn, Some(lease));
        Call::from_vecs(
            &lease.conn,
            script,
            keys,
            args,
            &lease.request_record(),
            rid,
        )
    }

    /// The script, keys and arguments with every place filled: the
    /// publish command, and the holds the client counts for `lease` (a
    /// request without a lease has none to expect; read only where a
    /// place asks for them).
    fn filled(self, conn: &Conn, lease: Option<&Lease>) -> (&'static Script, Vec<Key>, Vec<Value>) {
        let Request {
            script,
            keys,
            mut args,
            places,
        } = self;
        for (at, place) in places {
            args[at] = match place {
                Place::Publish => conn.publish_arg(),
                Place::Expected(before) => {
                    debug_assert!(lease.is_some(), "no lease, no expected holds");
                    int_arg(match (lease, conn.request_records_optional(), before) {
                        (Some(lease), true, _) => i64::from(lease.holds()),
                        (_, _, Before::Acquire) => -1,
                        (_, _, Before::Release) => 0,
                    })
                }
            };
        }
        (script, keys, args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The engine fills the places a primitive marked, and adds the
    /// lease's request record, its TTL and the request id last.
    #[test]
    fn the_engine_fills_the_places_and_adds_the_record() {
        static SCRIPT: Script = Script::plain("t.request", "return 1");
        let (_table, lease) = crate::core::lease::tests::offline_lease();
        let call = Request::new(&SCRIPT, [Key::from("k")])
            .arg(7)
            .publish()
            .expected_holds(Before::Acquire)
            .publish_if(false)
            .expected_holds(Before::Release)
            .for_lease(&lease, 42);
        let (keys, args) = call.parts();
        assert_eq!(keys, [Key::from("k"), lease.request_record()]);
        let expected = |sentinel| {
            if lease.conn.request_records_optional() {
                int_arg(i64::from(lease.holds()))
            } else {
                int_arg(sentinel)
            }
        };
        assert_eq!(
            args,
            [
                Value::Integer(7),
                lease.conn.publish_arg(),
                expected(-1),
                static_arg(""),
                expected(0),
                Value::Integer(lease.conn.request_record_ttl_ms()),
                Value::Integer(42),
            ]
        );
    }

    /// What only the engine may build: no primitive's file (its folder:
    /// the lock family, semaphore, latch, multi-locks) names a request
    /// id, a request record, the expected-count rule, the publish command,
    /// a call of its own or a call's outcome (the fair lock's leave is the
    /// engine's `Once`). No exception.
    #[test]
    fn no_primitive_builds_the_exactly_once_protocol() {
        const ENGINE_ONLY: &[&str] = &[
            ".rid()",
            "request_record(",
            "record_key(",
            "request_records_optional(",
            "publish_arg(",
            "publish_command(",
            "Call::",
            "forget_request_record(",
            "for_lease",
            "for_record(",
            "RequestId",
            "Settled",
        ];
        let sources = crate::core::kind::tests::primitive_sources();
        assert!(sources.len() > 12, "read {} files", sources.len());
        let mut found = Vec::new();
        for (_, rel, source) in &sources {
            for (n, line) in source.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                for needle in ENGINE_ONLY {
                    if code.contains(needle) {
                        found.push(format!("src/{rel}:{}: {}", n + 1, line.trim()));
                    }
                }
            }
        }
        assert!(
            found.is_empty(),
            "the protocol built outside the engine:\n{}",
            found.join("\n")
        );
    }
}
