//! Lua scripts as handles holding their source and SHA-1.
//!
//! Every change to lock state goes through a script, so each change is
//! atomic on the server. Sources live as `.lua` files beside their
//! primitive (diffable, runnable with `redis-cli --eval`); each states its
//! keys, arguments, reply and retry policy in its header.
//!
//! Scripts are sent with `EVALSHA`. The one error that proves a script did
//! not run is `NOSCRIPT` (the server's script cache is empty, e.g. after a
//! restart); only then is the script loaded and sent again.
//!
//! A *recorded* script is a mutation made idempotent by request id: its
//! body is wrapped between `scripts/record_prologue.lua` and
//! `scripts/record_epilogue.lua` at compile time, so a re-send of the same
//! request replays the recorded reply instead of running twice (see
//! `call.rs`).
//!
//! # A check before the record
//!
//! Most tries of a busy lock are refused, and a refused try changes
//! nothing. A recorded script may start with a check
//! ([`Script::recorded_after`]) that answers such a try before the record
//! is read, and writes none: a busy try then costs the check's reads only
//! (the plain lock's: `PTTL`, `HGET`), not the record's `GET` and
//! `SET`. Nothing is lost: a refused try has no effect to replay, and a
//! copy of it that runs later is either refused again or, the state
//! changed, goes through the record like any request.
//!
//! The check may also skip the record when what it read shows Redis
//! holding exactly what the client counts (`read_record`, `write_record`
//! false): the plain lock's acquire (no key, or the field at the client's
//! count) neither reads nor writes it, since a copy of it that already ran
//! left the field at one more, which the check answers from the state as
//! a replay (`early_replay`); nor does its release (the field at the
//! client's count): a copy of it that already ran left the field at the
//! count less what it gave back (a replay from the state), or, where it
//! freed the lock, the field gone. That last case cannot tell "freed by a
//! copy" from "lost before the request ran", so the script answers
//! "gone" (`ReleaseReply::Gone`), and the engine settles it: freed if the
//! request may have been sent more than once (`Reply::may_be_copy`: sent
//! again, or fred replaced a connection while it was under way) and the
//! hold was not known lost (its signal's deadline is a lower bound of the
//! key's expiry), not held otherwise. The one case read wrong is a hold
//! removed from outside (a `DEL`, an eviction, a restart without
//! persistence) in the moment between a release's first run and its
//! copy: `unlock()` then says released where the lock was taken from it,
//! which no one can tell afterwards (the watchdog would have said lost at
//! its next renewal). A copy of an older request cannot arrive once its
//! call has ended (`fence.rs`), and while a call of the client has an
//! unknown outcome the client asks for the record to be read and written
//! (`Conn::records_optional`). An uncontended lock + unlock then costs 8
//! Redis commands, the scripts' own work, instead of 12.
//!
//! The fair lock's release follows the same rule
//! (`fair_lock/scripts/release_check.lua`, which says why it is safe
//! there): its first run may also grant the lock to the head waiter, and
//! a copy that finds the field gone changes nothing, so it never grants
//! again nor frees a hold taken since. Its "gone" names no granted waiter
//! (the first run's reply did): the waiter is told by the message the
//! first run published. An uncontended fair lock + unlock costs 9
//! commands (10 when the release wrote its record).
//!
//! Even a copy that did run the body twice would leave Redis as the client
//! believes: the record is skipped only while Redis holds exactly what the
//! client counts (no field before an acquire, the counted holds before a
//! release), and the body then moves it to exactly what the client will
//! count from the reply it gets (one hold; one fewer).
//!
//! # Sent without the record
//!
//! When the check proves most first runs (the plain lock's acquire and
//! release, the fair lock's release, while nothing of the client has an
//! unknown outcome), even
//! carrying the record's key and TTL is waste: two more bulk strings per
//! call for fred to encode and Redis to parse. Such a script
//! ([`Script::proved_after`]) has a twin, the check and the body without
//! the record (`scripts/proved_early.lua`, `scripts/proved_gate.lua`,
//! `scripts/proved_epilogue.lua`), sent with the same keys and arguments
//! less the record's key and TTL. Its reply carries the request id last,
//! as the string it was sent as, where the recorded script's has it first
//! as a number: Redis then neither parses it nor shifts the reply to put
//! it in front. If its check does not prove the first run, the twin
//! changes nothing and answers so (`{-2, rid}`), and the client sends the
//! recorded script with the same request id
//! ([`Call::run`](super::call::Call::run)). A copy of
//! the twin cannot run after that: the fence has killed any connection it
//! could be on before its answer was read (`fence.rs`), and on the
//! connection that answered, Redis ran every earlier copy first. An
//! uncontended lock + unlock sends 4 bulk strings fewer.
//!
//! # Cluster redirections
//!
//! fred 10.1 follows an `ASK` redirection by writing `ASKING` to the
//! target node and reading the *next frame* of that connection as its
//! reply (`send_asking_with_policy`): with other commands in flight there,
//! that frame answers one of them, and the commands behind it get each
//! other's replies. Request ids catch it (`call.rs`), so nothing wrong is
//! believed, but the calls hit fail. Scripts that may meet a slot on the
//! move therefore avoid fred's `ASK` path:
//!
//! * node batches of renewals declare no key and go to a node by address
//!   ([`Script::run_on`]): nothing can redirect them;
//! * the leases such a batch reports as not served there, if fred still
//!   maps their slot to that node (the slot is migrating), are renewed in a
//!   `MULTI`/`EXEC` transaction ([`Script::run_in_transaction`]), whose
//!   `ASK` fred follows on a drained connection (`ASKING`, then the
//!   transaction), so no reply goes astray.
//!
//! Acquires and releases of a lock whose slot is migrating still take
//! fred's path; request ids make that safe (a reply for another request
//! is never taken) at the cost of re-sending.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use fred::bytes_utils::Str;
use fred::clients::Client as FredClient;
use fred::interfaces::{ClientLike, LuaInterface, TransactionInterface};
use fred::types::config::{Options, Server};
use fred::types::{ClusterHash, CustomCommand, FromValue, Key, Value};

type FredResult<T> = Result<T, fred::error::Error>;

/// A Lua script: its source and the SHA-1 that `EVALSHA` names it by.
///
/// Made in a `static` (every constructor is a `const fn`): the source is
/// kept as the pieces it is written in, joined and hashed on first use.
#[derive(Debug)]
pub(crate) struct Script {
    name: &'static str,
    /// The source, in the order it is sent ([`Script::made`]).
    pieces: Pieces,
    /// The twin's, if it has one ([`Script::proved_after`]).
    twin_pieces: Option<Pieces>,
    /// The source and its SHA-1, made on first use.
    made: OnceLock<Made>,
    /// The twin sent without the request record, made on first use.
    twin: OnceLock<Box<Script>>,
    /// `SCRIPT LOAD`s done, through any client: calls that meet
    /// `NOSCRIPT` together (a restarted node, many per-slot renewals at
    /// once) load the script once. Read before each send (one atomic load,
    /// where a map by client would hash its id on every call); a load
    /// through another client (perhaps of another server) can make a call
    /// skip its own, so a call loads again on a second `NOSCRIPT`
    /// ([`LOADS_PER_CALL`]).
    loads: AtomicU64,
    loading: tokio::sync::Mutex<()>,
}

/// A source as the pieces it is joined from (unused ones empty).
type Pieces = [Piece; 6];

/// One piece of a script: one source, or a kind's files in order (its
/// helpers, then its check or body), kept apart for the lint of what they
/// share (`core/lua_lint.rs`).
#[derive(Clone, Copy, Debug)]
enum Piece {
    One(&'static str),
    Files(&'static [&'static str]),
}

impl Piece {
    fn files(&self) -> Vec<&'static str> {
        match *self {
            Piece::One(source) => vec![source],
            Piece::Files(files) => files.to_vec(),
        }
    }
}

const NONE: Piece = Piece::One("");

/// The first lines of every recorded script: every variable its pieces
/// share, declared once, with the value that reads and writes the request
/// record (so a check that sets none of them sends the request the safe
/// way). No piece declares one of these, and no piece reads a variable
/// another piece declared (`lua_lint`, checked for every script by the
/// tests of each primitive): a kind's check hands the engine's pieces
/// `early`, `early_replay`, `read_record` and `write_record`, and hands
/// its body what it read as fields of `found`.
pub(crate) const SHARED: &str = shared_lua!();

/// A script's source and SHA-1.
#[derive(Debug)]
struct Made {
    source: String,
    /// Reference-counted: every call sends it without copying it.
    sha1: Str,
}

const RECORD_PROLOGUE: &str = include_str!("scripts/record_prologue.lua");
const RECORD_EARLY: &str = include_str!("scripts/record_early.lua");
const RECORD_EPILOGUE: &str = include_str!("scripts/record_epilogue.lua");
/// How many times one call may load its script after `NOSCRIPT`: a
/// second, never skipped, for a first skipped because a load through
/// another client came in between (see `Script::loads`).
const LOADS_PER_CALL: u32 = 2;

const PROVED_EARLY: &str = include_str!("scripts/proved_early.lua");
const PROVED_GATE: &str = include_str!("scripts/proved_gate.lua");
const PROVED_EPILOGUE: &str = include_str!("scripts/proved_epilogue.lua");
/// The watchdog's batch helpers, before every renewal script.
const RENEW_BATCH: &str = include_str!("scripts/renew_batch.lua");

impl Script {
    /// A script sent as it is.
    pub(crate) const fn plain(name: &'static str, source: &'static str) -> Script {
        Script::new(
            name,
            [Piece::One(source), NONE, NONE, NONE, NONE, NONE],
            None,
        )
    }

    /// A renewal script of the watchdog's batches: `source` after the
    /// batch's helpers (`scripts/renew_batch.lua`: the reply `gone` with
    /// the nonce first, `lost(i)`, `raise(key, ttl)`). Idempotent; not
    /// retried.
    pub(crate) const fn renewal(name: &'static str, source: &'static str) -> Script {
        Script::new(
            name,
            [
                Piece::One(RENEW_BATCH),
                Piece::One(source),
                NONE,
                NONE,
                NONE,
                NONE,
            ],
            None,
        )
    }

    /// A renewal script sent to a cluster node itself, whatever the slots
    /// of its keys (none declared). Like [`renewal`](Self::renewal), it
    /// has no `#!lua` line: a script without one may touch keys of several
    /// slots its node serves (Redis 6.2 to 7.4, Valkey 8), and runs where a
    /// flagged one is refused up front (a node over `maxmemory`, a
    /// `min-replicas` shortage, `MISCONF`: `PEXPIRE` may still run there).
    pub(crate) const fn node_renewal(name: &'static str, source: &'static str) -> Script {
        Script::renewal(name, source)
    }

    /// A mutation: `body` (its files in order: helpers, then the body)
    /// defines `local function body()`, which returns an array of integers
    /// starting with a status >= 0; the script is idempotent by request id
    /// (its last key is the request record, its last two arguments the
    /// request record TTL and the request id).
    pub(crate) const fn recorded(name: &'static str, body: &'static [&'static str]) -> Script {
        let pieces = [
            Piece::One(SHARED),
            Piece::One(RECORD_PROLOGUE),
            Piece::Files(body),
            Piece::One(RECORD_EPILOGUE),
            NONE,
            NONE,
        ];
        Script::new(name, pieces, None)
    }

    /// A mutation whose `check` (its files in order) runs before its
    /// record is read. The check sets `early` (declared in [`SHARED`]):
    /// the reply of a try that changes nothing (a lock someone else
    /// holds), answered at once, the rid in front, without reading or
    /// writing the record (a copy of such a try that runs again is
    /// answered by the same check, or, the state changed, goes on like any
    /// request), with `early_replay` true when it answers a copy that
    /// already ran (the rid goes in front negated); and `read_record`,
    /// `write_record`: false when what it read makes the record needless.
    /// It hands the body what it read as fields of `found`.
    pub(crate) const fn recorded_after(
        name: &'static str,
        check: &'static [&'static str],
        body: &'static [&'static str],
    ) -> Script {
        let pieces = [
            Piece::One(SHARED),
            Piece::Files(check),
            Piece::One(RECORD_EARLY),
            Piece::One(RECORD_PROLOGUE),
            Piece::Files(body),
            Piece::One(RECORD_EPILOGUE),
        ];
        Script::new(name, pieces, None)
    }

    /// [`recorded_after`](Self::recorded_after), with a twin sent without
    /// the request record when the client expects the check to prove the
    /// request's first run (see "Sent without the record" above).
    pub(crate) const fn proved_after(
        name: &'static str,
        check: &'static [&'static str],
        body: &'static [&'static str],
    ) -> Script {
        let mut script = Script::recorded_after(name, check, body);
        script.twin_pieces = Some([
            Piece::One(SHARED),
            Piece::Files(check),
            Piece::One(PROVED_EARLY),
            Piece::One(PROVED_GATE),
            Piece::Files(body),
            Piece::One(PROVED_EPILOGUE),
        ]);
        script
    }

    /// The twin sent without the request record, if the script has one.
    pub(crate) fn proved(&self) -> Option<&Script> {
        let pieces = self.twin_pieces?;
        Some(
            self.twin
                .get_or_init(|| Box::new(Script::new(self.name, pieces, None))),
        )
    }

    /// The source a call sends while the client's count is known: the
    /// twin's, if the script has one (for the raw baselines and tests that
    /// send the script by hand).
    pub(crate) fn sent_source(&self) -> &str {
        self.proved().unwrap_or(self).source()
    }

    const fn new(name: &'static str, pieces: Pieces, twin_pieces: Option<Pieces>) -> Script {
        Script {
            name,
            pieces,
            twin_pieces,
            made: OnceLock::new(),
            twin: OnceLock::new(),
            loads: AtomicU64::new(0),
            loading: tokio::sync::Mutex::const_new(()),
        }
    }

    /// The source and its SHA-1, joined and hashed on first use.
    fn made(&self) -> &Made {
        self.made.get_or_init(|| {
            let source: String = self.pieces.iter().flat_map(Piece::files).collect();
            Made {
                sha1: fred::util::sha1_hash(&source).into(),
                source,
            }
        })
    }

    /// The files the script is joined from, in order, and its twin's, for
    /// the lint of what they share (`core/lua_lint.rs`).
    #[cfg(test)]
    pub(crate) fn pieces(&self) -> Vec<Vec<&'static str>> {
        let files = |p: Pieces| p.iter().flat_map(Piece::files).collect();
        let mut all = vec![files(self.pieces)];
        all.extend(self.twin_pieces.map(files));
        all
    }

    /// The SHA-1 that `EVALSHA` names the script by.
    fn sha1(&self) -> &Str {
        &self.made().sha1
    }

    /// The full source, as sent.
    pub(crate) fn source(&self) -> &str {
        &self.made().source
    }

    /// The script's name, for logs.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// `SCRIPT LOAD` on the server, or on every primary of a cluster.
    pub(crate) async fn load(&self, client: &FredClient) -> FredResult<()> {
        if client.is_clustered() {
            client.script_load_cluster::<(), _>(self.source()).await
        } else {
            client.script_load::<(), _>(self.source()).await
        }
    }

    /// Loads the script after a `NOSCRIPT` to a call sent when `seen`
    /// loads were done, unless another call loaded it meanwhile; with
    /// `seen` `None` (the call's second `NOSCRIPT`: the load it skipped was
    /// through another client), in any case.
    async fn reload(&self, client: &FredClient, seen: Option<u64>) -> FredResult<()> {
        let _loading = self.loading.lock().await;
        if seen.is_some_and(|seen| self.loads() != seen) {
            return Ok(());
        }
        tracing::debug!(script = self.name, "NOSCRIPT: loading the script");
        self.load(client).await?;
        self.loads.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Loads done so far.
    fn loads(&self) -> u64 {
        self.loads.load(Ordering::Acquire)
    }

    /// Runs the script with `EVALSHA`, loading it first if the server
    /// answers `NOSCRIPT` (which proves it did not run).
    pub(crate) async fn run<R: FromValue>(
        &self,
        client: &FredClient,
        keys: &[Key],
        args: &[Value],
    ) -> FredResult<R> {
        self.run_with(client, keys, args, &[]).await
    }

    /// [`run`](Self::run) with the arguments `args` then `more`.
    pub(crate) async fn run_with<R: FromValue>(
        &self,
        client: &FredClient,
        keys: &[Key],
        args: &[Value],
        more: &[Value],
    ) -> FredResult<R> {
        // Borrowed, and copied into each send: keys and arguments are
        // reference-counted, so a copy is one vector, not their bytes.
        // (`Value::Array` hands fred the vector as it is.)
        //
        // fred's future (large) is not boxed: it is built in place in
        // the caller's future, which the hot callers box once where it is
        // made (a try, `Acquiring::attempt`; a release, `Hold::release`).
        // A box of its own cost more than the copies it saved: an
        // allocation too large for the allocator's per-thread cache
        // (glibc's stops at 1 KiB) takes its arena's lock, and freed on
        // the other worker thread it is contended for (BENCHMARKS.md,
        // "Session of 2026-11-28, fifth").
        let send = || {
            client.evalsha::<R, _, _, _>(
                self.sha1().clone(),
                keys.to_vec(),
                Value::Array(args.iter().chain(more).cloned().collect()),
            )
        };
        self.loading(client, send).await
    }

    /// Sends with `send`, and after a `NOSCRIPT` (which proves the script
    /// did not run) loads the script and sends again, at most
    /// [`LOADS_PER_CALL`] times: the first load is skipped if another call
    /// loaded it since this one began, the second never is.
    ///
    /// Cancel safe as each send is: dropped, the script ran at most once
    /// (a send answered `NOSCRIPT` did not run), and a load under way is
    /// harmless to repeat.
    async fn loading<T, F: Future<Output = FredResult<T>>>(
        &self,
        client: &FredClient,
        mut send: impl FnMut() -> F,
    ) -> FredResult<T> {
        let seen = self.loads();
        let mut loads = 0;
        loop {
            match send().await {
                Err(error) if is_noscript(&error) && loads < LOADS_PER_CALL => {
                    // Boxed: rare, and as large as a send.
                    Box::pin(self.reload(client, (loads == 0).then_some(seen))).await?;
                    loads += 1;
                }
                result => return result,
            }
        }
    }

    /// Runs a script that declares no key on one cluster node, by address
    /// (a node batch: its keys are arguments, which the script checks one
    /// by one). Nothing can redirect it.
    pub(crate) async fn run_on<R: FromValue>(
        &self,
        client: &FredClient,
        node: &Server,
        args: Vec<Value>,
    ) -> FredResult<R> {
        let on_node = on_node(client, node);
        let argv = self.argv(Vec::new(), args);
        let evalsha = || CustomCommand::new_static("EVALSHA", ClusterHash::Random, false);
        let reply = self
            .loading(client, || {
                on_node.custom::<Value, Value>(evalsha(), argv.clone())
            })
            .await?;
        R::from_value(reply)
    }

    /// Runs the script as the one command of a `MULTI`/`EXEC` transaction:
    /// fred follows an `ASK` for a transaction on a drained connection
    /// (`ASKING`, then the transaction), so no reply goes astray. `keys`
    /// share one slot and are not empty.
    pub(crate) async fn run_in_transaction<R: FromValue>(
        &self,
        client: &FredClient,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> FredResult<R> {
        let slot = keys.first().map_or(0, |k| k.cluster_hash());
        let argv = self.argv(keys, args);
        let send = || async {
            let trx = client.multi();
            let evalsha = CustomCommand::new_static("EVALSHA", ClusterHash::Custom(slot), false);
            let () = trx.custom(evalsha, argv.clone()).await?;
            trx.exec::<Value>(true).await
        };
        match self.loading(client, send).await? {
            Value::Array(mut replies) if replies.len() == 1 => R::from_value(replies.remove(0)),
            other => Err(fred::error::Error::new(
                fred::error::ErrorKind::Protocol,
                format!("a one-command transaction answered {other:?}"),
            )),
        }
    }
}

impl Script {
    /// Runs the script with `EVAL` (its source sent each time: no
    /// `NOSCRIPT` to handle), by its declared `keys`, or on one cluster
    /// `node` by address with none. For housekeeping (`forget.rs`): in
    /// `INFO commandstats` it counts as `EVAL`, apart from the lock
    /// scripts' `EVALSHA`.
    pub(crate) async fn eval<R: FromValue>(
        &self,
        client: &FredClient,
        node: Option<&Server>,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> FredResult<R> {
        let argv = command_args(Value::String(self.source().into()), keys, args);
        let reply = match node {
            Some(node) => {
                let eval = CustomCommand::new_static("EVAL", ClusterHash::Random, false);
                Box::pin(on_node(client, node).custom::<Value, Value>(eval, argv)).await?
            }
            None => {
                let eval = CustomCommand::new_static("EVAL", ClusterHash::FirstKey, false);
                Box::pin(client.custom::<Value, Value>(eval, argv)).await?
            }
        };
        R::from_value(reply)
    }

    /// The arguments of `EVALSHA sha numkeys keys… args…` as a custom
    /// command takes them.
    fn argv(&self, keys: Vec<Key>, args: Vec<Value>) -> Vec<Value> {
        command_args(Value::String(self.sha1().clone()), keys, args)
    }
}

/// The arguments of `EVAL`/`EVALSHA`: the script (`head`: its source or
/// SHA-1), the key count, the keys, the arguments.
fn command_args(head: Value, keys: Vec<Key>, args: Vec<Value>) -> Vec<Value> {
    let mut argv = Vec::with_capacity(2 + keys.len() + args.len());
    argv.push(head);
    argv.push(Value::Integer(keys.len() as i64));
    argv.extend(keys.into_iter().map(Value::from));
    argv.extend(args);
    argv
}

/// `client`, sending to one server by address (a cluster node; on a
/// single server, that server): nothing can redirect what it sends.
pub(crate) fn on_node(
    client: &FredClient,
    node: &Server,
) -> fred::clients::WithOptions<FredClient> {
    client.with_options(&Options {
        cluster_node: Some(node.clone()),
        ..Options::default()
    })
}

/// The server's `NOSCRIPT`: the script did not run.
fn is_noscript(e: &fred::error::Error) -> bool {
    e.details().starts_with("NOSCRIPT")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each constructor joins its pieces in the order Redis must read them
    /// (no `#!lua` flags line in any of them; the helpers before the code that calls
    /// them), and names the script by the SHA-1 of exactly that source.
    #[test]
    fn sources_are_joined_in_order_and_named_by_their_sha1() {
        static PLAIN: Script = Script::plain("t.plain", "return 1");
        static RENEWAL: Script = Script::renewal("t.renewal", "return 2");
        static NODE: Script = Script::node_renewal("t.node", "return 3");
        static RECORDED: Script = Script::recorded("t.recorded", &["B"]);
        static AFTER: Script = Script::recorded_after("t.after", &["C"], &["B"]);
        static PROVED: Script = Script::proved_after("t.proved", &["C"], &["B"]);

        assert_eq!(PLAIN.source(), "return 1");
        assert_eq!(RENEWAL.source(), format!("{RENEW_BATCH}return 2"));
        assert_eq!(NODE.source(), format!("{RENEW_BATCH}return 3"));
        assert_eq!(
            RECORDED.source(),
            format!("{SHARED}{RECORD_PROLOGUE}B{RECORD_EPILOGUE}")
        );
        let recorded_after = format!("{SHARED}C{RECORD_EARLY}{RECORD_PROLOGUE}B{RECORD_EPILOGUE}");
        assert_eq!(AFTER.source(), recorded_after);
        assert_eq!(PROVED.source(), recorded_after);
        for script in [&PLAIN, &RENEWAL, &NODE, &RECORDED, &AFTER, &PROVED] {
            assert_eq!(script.sha1(), &fred::util::sha1_hash(script.source()));
        }
    }

    /// Only `proved_after` has a twin: the check, then the twin's gate and
    /// epilogue instead of the record's; it is what a call sends while the
    /// client's count is known, and it is made once.
    #[test]
    fn only_a_proved_script_has_a_twin_made_once() {
        static AFTER: Script = Script::recorded_after("t.after", &["C"], &["B"]);
        static PROVED: Script = Script::proved_after("t.proved", &["C"], &["B"]);

        assert!(AFTER.proved().is_none());
        assert_eq!(AFTER.sent_source(), AFTER.source());
        let twin = PROVED.proved().expect("a twin");
        assert_eq!(
            twin.source(),
            format!("{SHARED}C{PROVED_EARLY}{PROVED_GATE}B{PROVED_EPILOGUE}")
        );
        assert_eq!(twin.name(), "t.proved");
        assert!(twin.proved().is_none());
        assert_eq!(PROVED.sent_source(), twin.source());
        assert!(std::ptr::eq(twin, PROVED.proved().expect("a twin")));
        assert_ne!(twin.sha1(), PROVED.sha1());
    }
}
