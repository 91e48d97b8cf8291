//! The read-write lock (Redisson `RReadWriteLock`): many readers or one
//! writer.
//!
//! # When to use
//!
//! Use a [`ReadWriteLock`] when a resource is read far more often than it
//! is written and readers may overlap: a configuration, a cached catalogue,
//! a file other services read. Readers hold [`ReadLock`]s together; a
//! [`WriteLock`] excludes readers and other writers. If most holders write,
//! or holds are short, a plain [`Lock`](crate::Lock) is cheaper (one field,
//! no per-hold keys). Readers are preferred: under a steady stream of
//! overlapping readers a writer may wait long (see *Writer starvation*).
//!
//! # Keys, channel and scripts
//!
//! For lock `name` (after the client's key prefix), exactly as Redisson
//! lays it out, so Java and Rust services can share one lock:
//!
//! * the hash at `name`: field `mode` (`read` or `write`); a reader's
//!   field `<client-uuid>:<owner-id>` holds its read count; the writer's
//!   field `<client-uuid>:<owner-id>:write` its write count;
//! * one string per read hold, `{name}:<client-uuid>:<owner-id>:rwlock_timeout:<n>`
//!   for n = 1..count (value `1`, expiring with the hold's lease). A Java
//!   read unlock sets the hash's TTL to the longest of *every* holder's
//!   timeout keys, and deletes the hash if none lives; so ours exist and
//!   are renewed with the hash. (`name:…` instead of `{name}:…` when the
//!   name has braces: Redisson's `suffixName`.)
//! * the channel `redisson_rwlock:{name}` (Redisson's `prefixName`): a read
//!   unlock that frees the lock publishes `0` (wakes one local waiter), a
//!   write unlock `1` (wakes every local waiter, readers and writers).
//! * a request record `leasehold_latch:{name}:<field>` per owner and mode, kept
//!   for the request record TTL (see `core/call.rs`).
//!
//! Scripts beside this file: `read_acquire.lua`, `read_release.lua`,
//! `write_acquire.lua`, `write_release.lua` (recorded: idempotent by request
//! id; both releases start with the helpers `timeouts.lua` and
//! `take_holds.lua`), `force_unlock.lua`, `is_locked.lua`, and the watchdog's
//! `renew_read.lua` / `renew_read_node.lua`. Write holds are renewed like a
//! plain lock's (`lock/scripts/renew.lua` on the write field); read holds
//! with the hash *and* the owner's timeout keys, as Redisson's
//! `ReadLockTask` does.
//!
//! # Waiting, dropping, cancelling
//!
//! The engine's wait loop and hold rules (`core/wait.rs`, `core/hold.rs`),
//! as for [`Lock`](crate::Lock): a dropped acquire holds nothing and leaves
//! the local queue, a dropped guard releases in the background, a stale
//! guard gives back nothing. Readers and writers of one client wait on the
//! same channel subscription.
//!
//! # Re-entry: downgrade yes, upgrade no
//!
//! An owner holding the write lock may take it again and may take the read
//! lock too (a downgrade: give the write guard back and keep reading). An
//! owner holding a read lock who asks for the write lock waits for its own
//! read hold to go, which, as in Redisson (#4796), never happens while it
//! keeps the read guard:
//!
//! * [`WriteLock::lock`] and [`WriteLock::lock_with_lease`] see the live
//!   read guard on this client and return [`Error::InvalidArgument`] at
//!   once, instead of hanging;
//! * the bounded variants ([`WriteLock::try_lock`], `try_lock_for`,
//!   `try_lock_until`, `try_lock_with_lease`) wait until their deadline and
//!   return `Ok(None)` — unless the read guard is given back meanwhile (by
//!   another task it was moved to), when they take the write lock.
//!
//! # Where leasehold differs from Redisson, and why
//!
//! The engine's rule is that an acquire or renewal only *raises* the
//! hash's TTL, and a release sets it to what the remaining holds need.
//!
//! * Write re-entry raises the TTL to the lease; Redisson adds the lease to
//!   the TTL left (a thousand nested 10 s holds would keep a dead holder's
//!   lock for hours). Read acquires raise it, as Redisson does.
//! * A read release leaves the owner's remaining timeout keys set to what
//!   its remaining holds need, recreating any that expired (Redisson only
//!   deletes the top one), so a Java read unlock keeps the hash for them.
//! * A read release in mode `write` (the writer also reading) leaves the
//!   hash's TTL alone; Redisson sets it to the read holds' timeout keys,
//!   which can cut the write lease short.
//! * A write release that leaves the owner's read holds sets the hash's
//!   TTL to what they need and publishes `1`, so readers waiting elsewhere
//!   get in at once; Redisson keeps the write lease's TTL and publishes
//!   nothing (its readers wait for that TTL).
//! * Renewals raise the hash and timeout keys and never lower them;
//!   Redisson's set them to the watchdog timeout.
//! * Force unlock also deletes the holders' timeout keys; Redisson leaves
//!   them to expire.
//!
//! # Writer starvation
//!
//! New readers are let in whenever the mode is `read`, even while a writer
//! waits, so a stream of overlapping readers can keep a writer out for as
//! long as it lasts. leasehold does not add writer preference: a marker
//! that stops new readers would be ignored by Java readers and would
//! deadlock a Java reader re-entering its read lock. Keep read holds
//! short, or bound writers with `try_lock_for`.
//! `tests/rw_lock.rs` measures how long a writer waits under such a stream
//! (printed, not asserted).
//!
//! # Java and Rust on one lock: the limits
//!
//! A Java reader's watchdog sets the hash's TTL to its own lease (30 s by
//! default), which can cut a longer *fixed* read lease of a Rust reader
//! short if the Java reader then dies without unlocking; a Redisson
//! older than 3.44 renews every holder's timeout keys the same way. Keep
//! fixed read leases at or under the Java watchdog timeout on locks shared
//! with Java, or use the watchdog (no fixed lease) on both sides.

mod halves;

pub use halves::{Read, ReadLock, Write, WriteLock};

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;
use crate::core::kind::{
    ttl_ms, wake_all_on_one, Feature, Key, Kind, Lease, Policy, Renewal, Request, Spec, Try, Value,
};
use crate::core::script::Script;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::handle::reads::holders_of;
use crate::handle::Holder;
use crate::handle::LockHandle;
use crate::naming::{concat, prefix_name};
use crate::owner::Owner;

/// A distributed read-write lock, by name: many readers or one writer.
/// Cheap to clone; nothing is sent until a method of [`read`](Self::read)
/// or [`write`](Self::write) is called.
///
/// Both halves are reentrant per [`Owner`] (by default the current tokio
/// task), keep a watchdog-renewed or fixed lease, and hand out
/// [`LockGuard`]s with [`lost`](LockGuard::lost). Waiters of one client
/// are woken by each release: one per read unlock that frees the lock, all
/// of them (readers and writers) per write unlock. Across clients there is
/// no queue.
///
/// # When to use
///
/// When a resource is read far more often than written and readers may
/// overlap: a configuration, a cached catalogue, a file other services
/// read. If most holders write, or holds are short, a plain
/// [`Lock`](crate::Lock) is cheaper (one hash field; a read hold also
/// keeps a timeout key per hold).
///
/// # Re-entry: downgrade yes, upgrade no
///
/// The writer may take the write lock again and may take the read lock (a
/// downgrade: take the read lock, give the write guard back, keep
/// reading; other readers then get in). A reader asking for the write lock
/// would wait for its own read hold, which never goes while it keeps the
/// guard (Redisson #4796). So [`WriteLock::lock`] and
/// [`WriteLock::lock_with_lease`] return [`Error::InvalidArgument`] at
/// once when the current owner has a live read guard on this lock in this
/// client; the bounded variants ([`WriteLock::try_lock_for`] and the
/// rest) wait until their deadline and return `Ok(None)`, unless the read
/// guard is given back meanwhile (by a task it was moved to).
///
/// # Writer starvation
///
/// Readers are preferred: new readers get in whenever the lock is in read
/// mode, even while a writer waits, so a stream of overlapping readers
/// keeps a writer out for as long as it lasts (`tests/rw_lock.rs`
/// measures it; in one run the writer waited until a 3 s stream of
/// readers ended). There is
/// no writer preference: a marker stopping new readers would be ignored by
/// Java readers and would deadlock a Java reader re-entering its read
/// lock. Keep read holds short, or bound writers with `try_lock_for`.
///
/// # Sharing a lock with Java (Redisson)
///
/// The keys, fields, timeout keys, channel and messages are Redisson's
/// `RReadWriteLock` layout, so Java and Rust readers and writers exclude
/// each other. Where leasehold behaves differently (never shortening a
/// live hold's lease; publishing on a downgrade; cleaning up timeout keys
/// on a force unlock), the Redisson side sees only longer TTLs or extra
/// wake-ups. One limit remains: a Java reader's watchdog sets the hash's
/// TTL to its own lease (30 s by default), which can cut a longer *fixed*
/// Rust read lease short if that Java reader then dies without unlocking.
/// On locks shared with Java, keep fixed read leases at or under the Java
/// watchdog timeout, or let the watchdog keep them.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let rw = client.read_write_lock("config");
/// let r1 = rw.read().lock().await?;
/// let r2 = client.read_write_lock("config").read().try_lock().await?; // readers share
/// drop(r2);
/// r1.unlock().await?;
/// let w = rw.write().lock().await?; // excludes every reader and writer
/// w.unlock().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ReadWriteLock {
    names: Arc<Names>,
}

/// What both halves of one read-write lock share. Set once, at creation.
#[derive(Debug)]
struct Names {
    client: Client,
    /// The name given (without the key prefix).
    name: Arc<str>,
    /// The hash's key.
    key_str: Arc<str>,
    key: Key,
    /// `redisson_rwlock:{key}`.
    channel: Arc<str>,
    channel_key: Key,
    /// `{key}` (`key` if it has braces): the start of every holder's
    /// timeout keys.
    key_prefix: Key,
}

/// Which half of the lock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
}

/// The engine's view of read holds.
#[derive(Debug)]
struct ReadKind;

/// The engine's view of write holds.
#[derive(Debug)]
struct WriteKind;

/// Take or re-enter a read hold. Recorded: re-sent with the same request id.
static READ_ACQUIRE: Script = Script::recorded(
    "rw.read_acquire",
    &[include_str!("scripts/read_acquire.lua")],
);
/// Give back read holds; publishes the unlock message when freed. Recorded.
static READ_RELEASE: Script = Script::recorded(
    "rw.read_release",
    &[
        include_str!("scripts/timeouts.lua"),
        include_str!("scripts/take_holds.lua"),
        include_str!("scripts/read_release.lua"),
    ],
);
/// Take or re-enter the write hold. Recorded.
static WRITE_ACQUIRE: Script = Script::recorded(
    "rw.write_acquire",
    &[include_str!("scripts/write_acquire.lua")],
);
/// Give back write holds; publishes the unlock message when freed.
/// Recorded.
static WRITE_RELEASE: Script = Script::recorded(
    "rw.write_release",
    &[
        include_str!("scripts/timeouts.lua"),
        include_str!("scripts/take_holds.lua"),
        include_str!("scripts/write_release.lua"),
    ],
);
/// Delete whoever holds it. Not retried.
static FORCE_UNLOCK: Script = Script::recorded(
    "rw.force_unlock",
    &[include_str!("scripts/force_unlock.lua")],
);
/// Whether anyone holds it. Read-only.
static IS_LOCKED: Script = Script::plain("rw.is_locked", include_str!("scripts/is_locked.lua"));
/// The watchdog's batch of read leases per slot (also one hold's
/// renewal).
static RENEW_READ: Script = Script::renewal(
    "rw.renew_read",
    concat!(
        include_str!("scripts/read_timeouts.lua"),
        include_str!("scripts/renew_read.lua")
    ),
);
/// The watchdog's batch of read leases per Redis 7 cluster node.
static RENEW_READ_NODE: Script = Script::node_renewal(
    "rw.renew_read_node",
    concat!(
        include_str!("scripts/read_timeouts.lua"),
        include_str!("scripts/renew_read_node.lua")
    ),
);

/// Renewal of read leases: the hash and the owner's timeout keys
/// (Redisson's `ReadLockTask`); each entry is written by
/// `ReadKind::renew_entry`.
static READ_RENEWAL: Renewal = Renewal {
    slot: &RENEW_READ,
    node: Some(&RENEW_READ_NODE),
    packed: None,
};

/// Redisson's `suffixName` stem: `{key}`, or `key` when it has braces.
fn key_prefix(key: &str) -> String {
    if key.contains('{') {
        key.to_owned()
    } else {
        format!("{{{key}}}")
    }
}

/// The timeout-key prefix of read field `field` on `key`:
/// `{key}:<field>:rwlock_timeout` (hold n's key appends `:<n>`).
fn timeout_prefix(key: &Key, field: &str) -> String {
    let key: Cow<'_, str> = String::from_utf8_lossy(key.as_bytes());
    format!("{}:{field}:{READ_TIMEOUT_MARK}", key_prefix(&key))
}

/// What a read hold's timeout key says after its field (Redisson's):
/// `{key}:<field>:rwlock_timeout:<n>`.
pub(crate) const READ_TIMEOUT_MARK: &str = "rwlock_timeout";

// === impl Client ===

impl Client {
    /// A handle to the read-write lock called `name` (the key prefix is
    /// added). Cheap; nothing is sent until it is used. An empty name is
    /// reported as [`Error::InvalidArgument`] by every call on it.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let rw = client.read_write_lock("config");
    /// assert_eq!(rw.name(), "config");
    /// assert_eq!(rw.channel(), "redisson_rwlock:{config}");
    /// # Ok(()) }
    /// ```
    pub fn read_write_lock(&self, name: &str) -> ReadWriteLock {
        let key = self.key(name);
        let channel = prefix_name("redisson_rwlock", &key);
        ReadWriteLock {
            names: Arc::new(Names {
                client: self.clone(),
                name: name.into(),
                key: Key::from(key.as_str()),
                key_prefix: Key::from(key_prefix(&key)),
                key_str: key.into(),
                channel_key: Key::from(channel.as_str()),
                channel: channel.into(),
            }),
        }
    }
}

// === impl ReadWriteLock ===

impl ReadWriteLock {
    /// The read half: shared with other readers.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.read_write_lock("config").read().lock().await?;
    /// # Ok(()) }
    /// ```
    pub fn read(&self) -> ReadLock {
        LockHandle::from_raw(Read::new(self.names.clone()))
    }

    /// The write half: excludes readers and other writers.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let guard = client.read_write_lock("config").write().lock().await?;
    /// # Ok(()) }
    /// ```
    pub fn write(&self) -> WriteLock {
        LockHandle::from_raw(Write::new(self.names.clone()))
    }

    /// The name given to [`Client::read_write_lock`] (without the key
    /// prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.read_write_lock("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.names.name
    }

    /// The Redis key of the lock hash (prefix included).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// let key = client.read_write_lock("a").key().to_owned();
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.names.key_str
    }

    /// The channel releases are announced on: `redisson_rwlock:{<key>}`,
    /// or `redisson_rwlock:<key>` if the key contains `{`.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.read_write_lock("a{b}").channel(), "redisson_rwlock:a{b}");
    /// # }
    /// ```
    pub fn channel(&self) -> &str {
        &self.names.channel
    }
}

// === impl Names ===

impl Names {
    fn check(&self) -> Result<()> {
        self.client.engine().check()?;
        if self.name.is_empty() {
            return Err(Error::invalid("lock name is empty"));
        }
        // Its scripts name the read holds' timeout keys inside Lua.
        self.client.engine().require(Feature::UndeclaredKeys)
    }

    /// What an acquire of `mode` by `owner` (holding `field`) takes.
    fn spec<'a>(&'a self, mode: Mode, owner: Owner, field: &'a str) -> Spec<'a> {
        Spec {
            kind: mode.kind(),
            owner: owner.id(),
            key: &self.key,
            channel: &self.channel,
            field,
            release_channel: self.channel_key.as_bytes(),
            keys: &[],
        }
    }

    /// Takes `mode` for the current owner (see the module docs). `wait:
    /// None` waits forever.
    async fn acquire(
        &self,
        mode: Mode,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        self.check()?;
        let owner = Owner::current();
        if mode == Mode::Write && wait.is_none() && self.reads_held(owner) {
            return Err(Error::invalid(format!(
                "the current owner holds a read lock on `{}`: its write lock would wait for that \
                 read hold forever (a read lock cannot be upgraded); give the read guard back \
                 first, or wait with a deadline (try_lock_for)",
                self.key_str
            )));
        }
        let field = self.client.field(owner.id(), mode.suffix());
        let spec = self.spec(mode, owner, &field);
        let hold = self.client.engine().acquire(spec, lease, wait).await?;
        Ok(hold.map(|hold| LockGuard::new(hold, self.client.key_prefix().len(), owner)))
    }

    /// Whether `owner` has a live read guard on this lock in this client.
    fn reads_held(&self, owner: Owner) -> bool {
        let field = self.client.field(owner.id(), Mode::Read.suffix());
        // A name too long for a record has no holds; nor does a read record
        // while another kind's release of the field is on its way.
        let spec = self.spec(Mode::Read, owner, &field);
        self.client.engine().live_holds(&spec) > 0
    }

    async fn is_locked(&self, mode: Mode) -> Result<bool> {
        self.check()?;
        let locked: i64 = self
            .client
            .engine()
            .conn()
            .eval(
                &IS_LOCKED,
                std::slice::from_ref(&self.key),
                &[mode.as_str().into()],
            )
            .await?;
        Ok(locked == 1)
    }

    /// The holders of `mode`: the writer's field is its owner's with
    /// `:write` after it; every other field but `mode` is a reader's.
    async fn holders(&self, mode: Mode) -> Result<Vec<Holder>> {
        self.check()?;
        let suffix = Mode::Write.suffix();
        holders_of(&self.client, &self.key, |field| match mode {
            Mode::Write => field.strip_suffix(suffix),
            Mode::Read => (field != "mode" && !field.ends_with(suffix)).then_some(field),
        })
        .await
    }

    async fn force_unlock(&self, mode: Mode) -> Result<bool> {
        self.check()?;
        let engine = self.client.engine();
        let reply = engine
            .force_unlock(
                Request::new(
                    &FORCE_UNLOCK,
                    [
                        self.key.clone(),
                        self.channel_key.clone(),
                        self.key_prefix.clone(),
                    ],
                )
                .arg(mode.as_str())
                .arg(mode.message())
                .publish(),
                (&self.key, &self.key_str),
                &self.client.id().to_string(),
            )
            .await?;
        Ok(reply.first() == Some(&1))
    }
}

// === impl Mode ===

impl Mode {
    /// Appended to `<uuid>:<owner-id>` to make the hash field.
    fn suffix(self) -> &'static str {
        match self {
            Mode::Read => "",
            Mode::Write => ":write",
        }
    }

    /// The hash's `mode` value.
    fn as_str(self) -> &'static str {
        match self {
            Mode::Read => "read",
            Mode::Write => "write",
        }
    }

    /// What a release freeing this mode publishes.
    fn message(self) -> &'static str {
        match self {
            Mode::Read => "0",
            Mode::Write => "1",
        }
    }

    /// The kind of this mode's leases.
    fn kind(self) -> &'static dyn Kind {
        match self {
            Mode::Read => &ReadKind,
            Mode::Write => &WriteKind,
        }
    }
}

// === impl ReadKind, WriteKind ===

/// The key prefix shared by every holder's timeout keys on `lease`'s key.
fn holders_prefix(lease: &Lease) -> Key {
    let key: Cow<'_, str> = String::from_utf8_lossy(lease.key_bytes());
    Key::from(key_prefix(&key))
}

/// A release of `count` holds of `lease` by `script` (`read_release.lua`
/// or `write_release.lua`: their `keys` differ, their arguments do not).
fn release_request(
    script: &'static Script,
    keys: impl IntoIterator<Item = Key>,
    lease: &Lease,
    count: u32,
    ttl_ms: i64,
) -> Request {
    Request::new(script, keys)
        .arg(ttl_ms)
        .arg(Value::String(lease.field()))
        .arg(i64::from(count))
        .publish()
}

impl Kind for ReadKind {
    fn acquire(&self, lease: &Lease, at: &Try<'_>) -> Request {
        Request::new(
            &READ_ACQUIRE,
            [
                lease.key(),
                Key::from(timeout_prefix(&lease.key(), &lease.field())),
            ],
        )
        .arg(at.lease_ms)
        .arg(Value::String(lease.field()))
        .arg(Value::from(concat([&lease.field(), Mode::Write.suffix()])))
    }

    fn release(&self, lease: &Lease, count: u32, ttl_ms: i64) -> Request {
        let keys = [
            lease.key(),
            lease.channel(),
            Key::from(timeout_prefix(&lease.key(), &lease.field())),
            holders_prefix(lease),
        ];
        release_request(&READ_RELEASE, keys, lease, count, ttl_ms)
    }

    fn renewal(&self) -> &'static Renewal {
        &READ_RENEWAL
    }

    /// The hash and the owner's timeout keys, the field, and the entry's
    /// own TTL: fixed read leases are renewed too, up to their end (see
    /// `renews_fixed`).
    fn renew_entry(&self, lease: &Lease, keys: &mut Vec<Key>, args: &mut Vec<Value>, node: bool) {
        let prefix = timeout_prefix(&lease.key(), &lease.field());
        if node {
            args.push(Value::Bytes(lease.key().inner().clone()));
            args.push(Value::from(prefix));
        } else {
            keys.push(lease.key());
            keys.push(Key::from(prefix));
        }
        args.push(Value::String(lease.field()));
        args.push(Value::Integer(ttl_ms(lease.renew_ttl())));
    }

    fn wakes(&self) -> Policy {
        wake_all_on_one
    }

    /// Read leases with a fixed term are renewed up to their end: a
    /// Redisson reader sharing the hash *sets* its TTL to Redisson's
    /// watchdog timeout on every renewal, and if that reader's process
    /// dies the hash would expire under our hold before its end.
    fn renews_fixed(&self) -> bool {
        true
    }

    fn excludes(&self, mine: &Lease, other: &Lease) -> bool {
        // Taking a read hold proves no other owner writes; other readers
        // may well be in.
        other.kind.id() == WriteKind.id() && other.owner != mine.owner
    }
}

impl Kind for WriteKind {
    fn acquire(&self, lease: &Lease, at: &Try<'_>) -> Request {
        Request::new(&WRITE_ACQUIRE, [lease.key()])
            .arg(at.lease_ms)
            .arg(Value::String(lease.field()))
    }

    fn release(&self, lease: &Lease, count: u32, ttl_ms: i64) -> Request {
        let keys = [lease.key(), lease.channel(), holders_prefix(lease)];
        release_request(&WRITE_RELEASE, keys, lease, count, ttl_ms)
    }

    fn renewal(&self) -> &'static Renewal {
        &crate::lock::HASH_RENEWAL
    }

    fn wakes(&self) -> Policy {
        wake_all_on_one
    }

    fn excludes(&self, mine: &Lease, other: &Lease) -> bool {
        // Taking the write hold proves every other owner's read and write
        // holds gone; the owner's own read holds may stay (downgrade).
        (other.kind.id() == ReadKind.id() || other.kind.id() == WriteKind.id())
            && other.owner != mine.owner
    }
}

/// Each script's pieces share only what they declare together
/// (`core/lua_lint.rs`).
#[cfg(test)]
mod lua_lint {
    use super::*;

    #[test]
    fn pieces_share_only_what_they_declare() {
        crate::core::lua_lint::check(&[
            &FORCE_UNLOCK,
            &IS_LOCKED,
            &READ_ACQUIRE,
            &READ_RELEASE,
            &RENEW_READ,
            &RENEW_READ_NODE,
            &WRITE_ACQUIRE,
            &WRITE_RELEASE,
        ]);
    }
}
