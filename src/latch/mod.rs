//! The count-down latch (Redisson `RCountDownLatch`).
//!
//! # When to use
//!
//! Use a [`CountDownLatch`] to make tasks in any process wait until N
//! things have happened: N services have started, N shards are loaded, N
//! workers are done. It holds nothing (no lease, no owner): anyone may count
//! down, and a process that dies without counting down leaves the count
//! where it was. To keep N things from running at once, use a
//! [`Semaphore`](crate::Semaphore); for one at a time, a
//! [`Lock`](crate::Lock).
//!
//! # Keys, channel and scripts
//!
//! Latch `name` (after the client's key prefix) is, as in Redisson:
//!
//! | key | type | contents |
//! | --- | --- | --- |
//! | `name` | string | the count; deleted when it reaches zero |
//! | `redisson_countdownlatch__channel__{name}` | channel | `0`: the count reached zero; `1`: a count was set, or the latch deleted |
//!
//! The channel always gets braces, even when the name has some (Redisson's
//! rule for this one object). For a name like `{a}b` the channel then
//! lies in another hash slot than the key, and a cluster refuses a script
//! that declares both (`CROSSSLOT`; Redisson's own scripts fail there). On
//! a cluster, when the slots differ, leasehold's scripts leave the
//! channel out and the client publishes right after the script, as a
//! separate command; everywhere else the script publishes, atomically.
//!
//! Scripts beside this file: `try_set_count.lua`, `count_down.lua` and
//! `delete.lua`, latched (one latch key per call: a count-down whose reply
//! was lost is sent again and never counts twice, a delete's copy never
//! deletes a count set after it). The count is read with `GET`.
//!
//! # Waiting
//!
//! [`wait`](CountDownLatch::wait) is the engine's wait loop
//! (`core/wait.rs`) over a read: read the count; not zero: subscribe, read
//! again, sleep until a message or the client's recheck interval, repeat.
//! Any message (`0` or `1`) wakes every local waiter to read the count.
//! A deleted latch counts as zero. Redisson's `await` fixes: it never
//! blocks on a lost message (the recheck interval bounds every sleep) nor
//! on a deleted latch (which publishes `1`, not `0`).

use std::sync::Arc;
use std::time::Duration;

use crate::client::Client;

use crate::core::kind::{Key, Reply, Request, Value, Wake};
use crate::core::script::Script;
use crate::core::wait::{wait_for, Step};
use crate::error::{Error, Result};

/// A count-down latch, by name. Cheap to clone; nothing is sent until a
/// method is called.
///
/// Set the count once ([`try_set_count`](Self::try_set_count)); every
/// [`count_down`](Self::count_down) takes one off, and when it reaches
/// zero every [`wait`](Self::wait)ing task, in every process, is woken.
///
/// The key and channel are Redisson's `RCountDownLatch`'s, and Java
/// clients can share the latch. Unlike Redisson's `await`, a wait never
/// hangs on a lost message or a deleted latch: it re-reads the count at
/// least every recheck interval of the client.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// let boot = client.count_down_latch("boot");
/// boot.try_set_count(3).await?;
/// // … in three services, once each is up:
/// boot.count_down().await?;
/// // … anywhere:
/// boot.wait().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct CountDownLatch {
    client: Client,
    name: Arc<str>,
    key_str: Arc<str>,
    key: Key,
    channel: Arc<str>,
    channel_key: Key,
}

/// Set the count if the latch is not set. Recorded, one request record
/// per call.
static TRY_SET_COUNT: Script = Script::recorded(
    "latch.try_set_count",
    &[include_str!("scripts/try_set_count.lua")],
);
/// Take one off the count; publishes when it reaches zero. Recorded, one
/// request record per call.
static COUNT_DOWN: Script = Script::recorded(
    "latch.count_down",
    &[include_str!("scripts/count_down.lua")],
);
/// Delete the count; publishes when it deleted. Recorded, one request
/// record per call.
static DELETE: Script = Script::recorded("latch.delete", &[include_str!("scripts/delete.lua")]);

/// Any message on a latch channel (`0` or `1`) wakes every waiter.
fn wake_all(_: &[u8]) -> Wake {
    Wake::All
}

/// A latch's channel: `redisson_countdownlatch__channel__{<key>}` (braces
/// always added: Redisson's rule for it).
pub(crate) fn channel_of(key: &str) -> String {
    format!("redisson_countdownlatch__channel__{{{key}}}")
}

// === impl Client ===

impl Client {
    /// A handle to the count-down latch called `name` (the key prefix is
    /// added). Cheap; nothing is sent until it is used. An empty name is
    /// reported as [`Error::InvalidArgument`] by every call on the latch.
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let latch = client.count_down_latch("boot");
    /// assert_eq!(latch.name(), "boot");
    /// # Ok(()) }
    /// ```
    pub fn count_down_latch(&self, name: &str) -> CountDownLatch {
        let key = self.key(name);
        let channel = channel_of(&key);
        CountDownLatch {
            client: self.clone(),
            name: name.into(),
            key: Key::from(key.as_str()),
            key_str: key.into(),
            channel_key: Key::from(channel.as_str()),
            channel: channel.into(),
        }
    }
}

// === impl CountDownLatch ===

impl CountDownLatch {
    /// The name given to [`Client::count_down_latch`] (without the key
    /// prefix).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.count_down_latch("a").name(), "a");
    /// # }
    /// ```
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The Redis key of the count (prefix included).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// let key = client.count_down_latch("a").key().to_owned();
    /// # }
    /// ```
    pub fn key(&self) -> &str {
        &self.key_str
    }

    /// The channel: `redisson_countdownlatch__channel__{<key>}` (braces
    /// always added, as Redisson does).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # fn f(client: leasehold::Client) {
    /// assert_eq!(client.count_down_latch("a").channel(), "redisson_countdownlatch__channel__{a}");
    /// # }
    /// ```
    pub fn channel(&self) -> &str {
        &self.channel
    }

    /// Sets the count if the latch is not set (a latch that reached zero
    /// is not set: it can be set again). Returns whether it was set
    /// (`false`: a count is already running; nothing changed).
    /// [`Error::InvalidArgument`] if `count` is over `i64::MAX`.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped once the call was sent, the count may or
    /// may not have been set (at most once).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let latch = client.count_down_latch("boot");
    /// assert!(latch.try_set_count(3).await?);
    /// assert!(!latch.try_set_count(5).await?); // already running
    /// # Ok(()) }
    /// ```
    pub async fn try_set_count(&self, count: u64) -> Result<bool> {
        let count = i64::try_from(count)
            .map_err(|_| Error::invalid(format!("count {count} is over i64::MAX")))?;
        let reply = self
            .mutate(&TRY_SET_COUNT, Some(Value::Integer(count)))
            .await?;
        let set = reply.first() == Some(&1);
        if set {
            self.publish_apart("1").await?;
        }
        Ok(set)
    }

    /// Takes one off the count; when it reaches zero the latch is deleted
    /// and every waiter is woken. Counting down a latch that is not set
    /// does nothing.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped once the call was sent, the count may or
    /// may not have gone down (at most once: no copy of the call runs
    /// twice).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// client.count_down_latch("boot").count_down().await?;
    /// # Ok(()) }
    /// ```
    pub async fn count_down(&self) -> Result<()> {
        let reply = self.mutate(&COUNT_DOWN, None).await?;
        if reply.first() == Some(&2) {
            self.publish_apart("0").await?;
        }
        Ok(())
    }

    /// Deletes the latch, as Redisson's `delete`: the count is gone
    /// (the latch can be set again) and, if there was one, `1` is
    /// published on the channel, so every waiter re-reads the count,
    /// finds none and goes on. Returns whether there was a count to
    /// delete. Runs once even if fred re-sends it after a reconnect: a
    /// copy arriving later never deletes a count set after the first run.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped once the call was sent, the latch may or
    /// may not have been deleted (at most once).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let latch = client.count_down_latch("boot");
    /// if latch.delete().await? {
    ///     latch.try_set_count(3).await?; // start over
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn delete(&self) -> Result<bool> {
        let reply = self.mutate(&DELETE, None).await?;
        let deleted = reply.first() == Some(&1);
        if deleted {
            self.publish_apart("1").await?;
        }
        Ok(deleted)
    }

    /// The count (0 if the latch is not set or reached zero).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe (a read).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// let left = client.count_down_latch("boot").count().await?;
    /// # Ok(()) }
    /// ```
    pub async fn count(&self) -> Result<u64> {
        self.check()?;
        let count = self.client.engine().conn().get_int(&self.key).await?;
        Ok(count.unwrap_or(0).max(0) as u64)
    }

    /// Waits until the count is zero (or the latch is deleted). Returns at
    /// once if it already is.
    ///
    /// Woken by the latch's messages, and re-reads the count at least every
    /// recheck interval of the client
    /// ([`ClientBuilder::recheck_interval`](crate::ClientBuilder::recheck_interval)),
    /// so a lost message delays it by at most that.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a wait holds nothing. A dropped wait releases its
    /// subscription reference (the last one unsubscribes).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// client.count_down_latch("boot").wait().await?;
    /// # Ok(()) }
    /// ```
    pub async fn wait(&self) -> Result<()> {
        self.wait_until_zero(None).await.map(drop)
    }

    /// Waits up to `wait` until the count is zero. Returns whether it
    /// reached zero in time (`false` is not an error). `Duration::MAX`
    /// waits forever.
    ///
    /// # Cancel safety
    ///
    /// As for [`wait`](Self::wait).
    ///
    /// # Example
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
    /// if !client.count_down_latch("boot").wait_for(Duration::from_secs(5)).await? {
    ///     eprintln!("still booting after 5 s");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn wait_for(&self, wait: Duration) -> Result<bool> {
        self.wait_until_zero(Some(wait)).await
    }

    fn check(&self) -> Result<()> {
        self.client.engine().check()?;
        if self.name.is_empty() {
            return Err(Error::invalid("latch name is empty"));
        }
        Ok(())
    }

    /// Whether the channel lies in another hash slot than the key on a
    /// cluster: then scripts leave it out and the client publishes.
    fn channel_apart(&self) -> bool {
        self.client
            .engine()
            .conn()
            .apart(&self.key_str, &self.channel)
    }

    /// Publishes `message` from the client if the script could not.
    async fn publish_apart(&self, message: &'static str) -> Result<()> {
        if !self.channel_apart() {
            return Ok(());
        }
        let channel = self.channel.to_string();
        self.client.engine().publish(channel, message).await
    }

    /// Runs a latched script on the count (and the channel), with a latch
    /// key of its own (see `Call::run_once`).
    async fn mutate(&self, script: &'static Script, arg: Option<Value>) -> Result<Reply> {
        self.check()?;
        let engine = self.client.engine();
        let mut keys = vec![self.key.clone()];
        if !self.channel_apart() {
            keys.push(self.channel_key.clone());
        }
        engine
            .run_once(
                Request::new(script, keys).args(arg).publish(),
                &self.key_str,
                &self.client.id().to_string(),
            )
            .await
    }

    /// The wait loop (see the module docs): `Ok(true)` once the count is
    /// zero, `Ok(false)` when `wait` ran out.
    async fn wait_until_zero(&self, wait: Option<Duration>) -> Result<bool> {
        self.check()?;
        let engine = self.client.engine();
        let reached = wait_for(engine, &self.channel, wake_all, wait, || {
            let conn = engine.conn().clone();
            let key = self.key.clone();
            // Boxed: a fred call's future is large, and the wait loop would
            // otherwise carry it inline for the whole wait.
            Box::pin(async move {
                let count = conn.get_int(&key).await?;
                Ok(if count.unwrap_or(0) <= 0 {
                    Step::Done(())
                } else {
                    Step::Busy(None)
                })
            })
        })
        .await?;
        Ok(reached.is_some())
    }
}

/// Each script's pieces share only what they declare together
/// (`core/lua_lint.rs`).
#[cfg(test)]
mod lua_lint {
    use super::*;

    #[test]
    fn pieces_share_only_what_they_declare() {
        crate::core::lua_lint::check(&[&COUNT_DOWN, &DELETE, &TRY_SET_COUNT]);
    }
}
