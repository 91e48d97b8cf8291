//! The crate's one error type.

/// What can go wrong with a lock.
///
/// `Error` is `Send + Sync + 'static` and implements [`std::error::Error`],
/// so `?` converts it into `anyhow::Error` or `Box<dyn Error>`.
///
/// # Example
///
/// ```
/// use leasehold::Error;
///
/// fn describe(e: &Error) -> &'static str {
///     match e {
///         Error::InvalidArgument(_) => "fix the call",
///         Error::NotHeld { .. } => "the lease was lost: redo the work under a new lock",
///         Error::Shutdown => "the client is gone",
///         Error::Redis(_) => "Redis failed: retry later",
///         Error::ReplicasMissing { .. } => "replicas lag: the lock was not taken",
///         _ => "unknown",
///     }
/// }
/// assert_eq!(describe(&Error::Shutdown), "the client is gone");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A bad argument (empty lock name, zero lease, …). Returned before
    /// anything is sent to Redis.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The lock is not held by this guard's owner any more: its lease
    /// expired, or someone force-unlocked it. Nothing was changed.
    #[error("lock `{name}` is not held by this owner (lease expired or force-unlocked)")]
    NotHeld {
        /// The lock's key, prefix included.
        name: String,
    },

    /// The [`Client`](crate::Client) was shut down.
    #[error("the leasehold client was shut down")]
    Shutdown,

    /// Redis, or the connection to it, failed.
    ///
    /// For an acquire or an unlock, a connection or timeout error means the
    /// outcome is unknown: the command may or may not have run. leasehold
    /// never re-sends a lock script blindly, so a hold is never counted
    /// twice; see [`Error::is_outcome_unknown`].
    #[error("redis error: {0}")]
    Redis(#[from] fred::error::Error),

    /// Fewer replicas than required acknowledged an acquire in time
    /// ([`ClientBuilder::wait_for_replicas`](crate::ClientBuilder::wait_for_replicas)).
    /// The hold was given back: the caller does not hold the lock.
    #[error("only {acked} of {wanted} replicas acknowledged the lock `{name}` in time")]
    ReplicasMissing {
        /// The lock's key, prefix included.
        name: String,
        /// Replicas required.
        wanted: u32,
        /// Replicas that acknowledged.
        acked: u32,
    },
}

impl Error {
    /// Whether the command's effect is unknown: the connection dropped or the
    /// command timed out after it may have reached Redis.
    ///
    /// # Example
    ///
    /// ```
    /// assert!(!leasehold::Error::Shutdown.is_outcome_unknown());
    /// ```
    pub fn is_outcome_unknown(&self) -> bool {
        match self {
            Error::Redis(e) => outcome_unknown(e),
            _ => false,
        }
    }

    /// Whether the error is a connection problem that may pass (a dropped
    /// or stalled connection, a reconnect in progress): waiting calls retry
    /// those until their deadline.
    pub(crate) fn is_transient(&self) -> bool {
        use fred::error::ErrorKind;
        match self {
            Error::Redis(e) => {
                outcome_unknown(e)
                    || matches!(e.kind(), ErrorKind::Routing | ErrorKind::Backpressure)
            }
            _ => false,
        }
    }

    pub(crate) fn invalid(what: impl Into<String>) -> Error {
        Error::InvalidArgument(what.into())
    }
}

/// Whether a failed command may still have run: the connection dropped or
/// the command timed out after it may have been written.
pub(crate) fn outcome_unknown(e: &fred::error::Error) -> bool {
    use fred::error::ErrorKind;
    matches!(
        e.kind(),
        ErrorKind::IO | ErrorKind::Timeout | ErrorKind::Canceled | ErrorKind::Unknown
    )
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
