//! [`Holder`]: one holder of a lock, as the `holders` verb reports it (read
//! by each kind: `lock/holders.rs` parses the hash every kind keeps).

use std::time::Duration;

/// One holder of a lock, as [`LockHandle::holders`](crate::LockHandle::holders) read it.
///
/// # Example
///
/// ```no_run
/// # async fn f(client: leasehold::Client) -> leasehold::Result<()> {
/// for h in client.lock("orders:42").holders().await? {
///     match (h.client, h.owner) {
///         (Some(client), Some(owner)) => println!("client {client}, owner {owner}: {} holds", h.holds),
///         _ => println!("field {:?}: {} holds", h.field, h.holds),
///     }
///     println!("  lease left: {:?}", h.remaining_lease);
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The hash field as stored (invalid UTF-8 replaced):
    /// `<client-uuid>:<owner-id>` for leasehold and Redisson holders.
    pub field: String,
    /// The holder's client uuid ([`Client::id`](crate::Client::id), or a
    /// Redisson client's id), when the field is `<uuid>:<decimal id>`.
    pub client: Option<uuid::Uuid>,
    /// The owner id after the uuid: an [`Owner`](crate::Owner)'s
    /// [`id`](crate::Owner::id) for leasehold, a Java thread id for
    /// Redisson. `None` when the field has another shape.
    pub owner: Option<u64>,
    /// The hold count (reentrant holds); 0 if the value is not a number.
    pub holds: u64,
    /// How long the lock's key lives unless renewed (shared by every
    /// holder: it is the key's TTL); `None` if the key has no expiry.
    pub remaining_lease: Option<Duration>,
}
