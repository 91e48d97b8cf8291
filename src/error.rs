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
///         Error::Lost { .. } => "the lease was lost mid-work: the work was cancelled",
///         Error::Shutdown => "the client is gone",
///         Error::NoRuntime | Error::RuntimeGone => "call it from a live tokio runtime",
///         Error::Redis(_) => "Redis failed: retry later",
///         Error::ReplicasMissing { .. } => "replicas lag: the lock was not taken",
///         Error::NoQuorum { .. } => "too few RedLock servers answered: nothing is held",
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

    /// The lease was lost while [`Lock::with`](crate::Lock::with) ran its
    /// work (expired, force-unlocked, or its renewal could not be
    /// confirmed): the work was cancelled, or its output dropped if it had
    /// just finished, since it may have run partly without the lock.
    #[error("the lease on lock `{name}` was lost while the work ran; the work was cancelled")]
    Lost {
        /// The lock's key, prefix included.
        name: String,
    },

    /// The [`Client`](crate::Client) was shut down.
    #[error("the leasehold client was shut down")]
    Shutdown,

    /// The call was made outside a tokio runtime (for example polled by
    /// another executor). Nothing was sent. Call it from within a tokio
    /// runtime, or use the `blocking` API.
    #[error("leasehold must be called from within a tokio runtime; nothing was sent")]
    NoRuntime,

    /// The tokio runtime the [`Client`](crate::Client) was built on has shut
    /// down, taking the client's connections with it. Nothing was sent.
    /// Build a new client on a live runtime.
    #[error(
        "the tokio runtime this leasehold client was built on has shut down; build a new client"
    )]
    RuntimeGone,

    /// leasehold's own invariant was broken: Redis answered a request with
    /// something leasehold's scripts never send (a fresh request reported
    /// as overtaken by a newer one of its owner, a script reply of the
    /// wrong shape). Not a fault of Redis or of the network, and not
    /// retried: please report it as a bug, with the message.
    #[error("leasehold invariant broken (please report this as a bug): {0}")]
    Protocol(String),

    /// Redis, or the connection to it, failed.
    ///
    /// An acquire or unlock whose outcome stays unknown (the connection
    /// failed and could not be asked again in time) returns it; the outcome
    /// is then settled in the background: a hold the acquire may have taken
    /// is given back, a release is sent again. Every lock script carries a
    /// request id, so whichever copy runs, a hold is never counted twice;
    /// see [`Error::is_outcome_unknown`].
    #[error("redis error: {0}")]
    Redis(#[from] fred::error::Error),

    /// The server, or the user the client connects as, cannot run what was
    /// asked safely, and nothing was sent that changes anything: a
    /// permission the user lacks (the lock channels, scripts, the key
    /// prefix), a server older than a primitive needs, or a server kind
    /// that cannot run lock scripts atomically. The message names what is
    /// missing.
    #[error("unsupported: {0}")]
    Unsupported(String),

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

    /// A [`RedLock`](crate::RedLock) could not reach a majority of its
    /// servers: fewer than a majority answered its last round (acquired or
    /// found the lock busy) before the wait ran out, or failures that
    /// cannot pass (clients shut down) left no majority. Nothing is held:
    /// every server that acquired was released. `servers` says what each
    /// server answered.
    #[error("{}", describe_no_quorum(.name, *.quorum, .servers))]
    NoQuorum {
        /// The lock's name.
        name: String,
        /// Servers needed: N/2 + 1.
        quorum: usize,
        /// What each server answered in the last round, in the order the
        /// clients were given.
        servers: Vec<ServerResult>,
    },

    /// This wait closed a wait-for cycle across clients (each member holds
    /// a lock the next one waits for) and was the youngest wait of it, so
    /// it was given up for the others to proceed
    /// ([`ClientBuilder::detect_deadlocks`](crate::ClientBuilder::detect_deadlocks)).
    /// Nothing was acquired; the locks this owner already holds are still
    /// held: release one of them, or the cycle stays.
    #[error("deadlock: the wait for `{name}` closes a wait-for cycle and was given up: {cycle}")]
    Deadlock {
        /// The lock this wait was for (its key, prefix included).
        name: String,
        /// The cycle.
        cycle: Box<crate::Deadlock>,
    },
}

/// What one server answered in a [`RedLock`](crate::RedLock)'s last round (see
/// [`Error::NoQuorum`]).
///
/// # Example
///
/// ```no_run
/// # async fn f(red: leasehold::RedLock) {
/// if let Err(leasehold::Error::NoQuorum { servers, .. }) = red.try_lock().await {
///     for s in &servers {
///         eprintln!("server {} (client {}): {}", s.server, s.client, s.outcome);
///     }
/// }
/// # }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub struct ServerResult {
    /// The server's position in the clients given to
    /// [`RedLock::new`](crate::RedLock::new).
    pub server: usize,
    /// Its client's id ([`Client::id`](crate::Client::id)).
    pub client: uuid::Uuid,
    /// What it answered.
    pub outcome: ServerOutcome,
}

/// What one server answered (see [`ServerResult`]).
///
/// # Example
///
/// ```
/// let o = leasehold::ServerOutcome::Busy;
/// assert_eq!(o.to_string(), "held by another owner");
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum ServerOutcome {
    /// It acquired. The hold was released again, since the round failed.
    Acquired,
    /// Another owner holds the lock there.
    Busy,
    /// No answer in time: not within the server timeout, or not before the
    /// round was decided. Also used for an answer that came too late to
    /// leave the majority any validity. A hold taken late was given back.
    TimedOut,
    /// It failed: the server is unreachable, or its client was shut down.
    Failed(Box<Error>),
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
                    || server_busy(e)
                    || matches!(
                        e.kind(),
                        ErrorKind::Routing | ErrorKind::Backpressure | ErrorKind::Cluster
                    )
            }
            _ => false,
        }
    }

    pub(crate) fn invalid(what: impl Into<String>) -> Error {
        Error::InvalidArgument(what.into())
    }

    pub(crate) fn protocol(what: impl Into<String>) -> Error {
        Error::Protocol(what.into())
    }

    /// A [`Redis`](Error::Redis) I/O error of this crate's own (a connection
    /// it knows is down), as a caller would get one from fred.
    pub(crate) fn disconnected(what: impl Into<String>) -> Error {
        Error::Redis(fred::error::Error::new(
            fred::error::ErrorKind::IO,
            what.into(),
        ))
    }

    /// A [`Redis`](Error::Redis) timeout of this crate's own (a bound it
    /// put on a wait for a reply), as a caller would get one from fred.
    pub(crate) fn timed_out(what: impl Into<String>) -> Error {
        Error::Redis(fred::error::Error::new(
            fred::error::ErrorKind::Timeout,
            what.into(),
        ))
    }
}

/// Whether a failed command may still have run: the connection dropped or
/// the command timed out after it may have been written. A reply from the
/// server (an error code such as `NOSCRIPT` or `ERR`) is a definite
/// outcome, although fred files most of them under `ErrorKind::Unknown`.
pub(crate) fn outcome_unknown(e: &fred::error::Error) -> bool {
    use fred::error::ErrorKind;
    match e.kind() {
        ErrorKind::IO | ErrorKind::Timeout | ErrorKind::Canceled => true,
        ErrorKind::Unknown => server_code(e).is_none(),
        _ => false,
    }
}

/// The server's error code (`NOSCRIPT`, `ERR`, `BUSY` …) when `e` is an
/// error reply from Redis.
pub(crate) fn server_code(e: &fred::error::Error) -> Option<&str> {
    let code = e.details().split_whitespace().next()?;
    (code.len() >= 2 && code.bytes().all(|b| b.is_ascii_uppercase())).then_some(code)
}

/// Whether the server refused the command for now without running it
/// (loading, busy with a script, a slot moving, a failover): sending it
/// again later is right.
pub(crate) fn server_busy(e: &fred::error::Error) -> bool {
    matches!(
        server_code(e),
        Some("LOADING" | "BUSY" | "TRYAGAIN" | "MASTERDOWN" | "CLUSTERDOWN" | "READONLY")
    )
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

// === impl ServerOutcome ===

impl std::fmt::Display for ServerOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ServerOutcome::Acquired => f.write_str("acquired"),
            ServerOutcome::Busy => f.write_str("held by another owner"),
            ServerOutcome::TimedOut => f.write_str("no answer in time"),
            ServerOutcome::Failed(e) => write!(f, "failed: {e}"),
        }
    }
}

/// The text of [`Error::NoQuorum`]: counts, then each server's answer.
fn describe_no_quorum(name: &str, quorum: usize, servers: &[ServerResult]) -> String {
    let acquired = servers
        .iter()
        .filter(|s| matches!(s.outcome, ServerOutcome::Acquired))
        .count();
    let each: Vec<String> = servers
        .iter()
        .map(|s| format!("server {} (client {}): {}", s.server, s.client, s.outcome))
        .collect();
    format!(
        "redlock `{name}` not acquired: {acquired} of {} servers acquired (given back), {quorum} needed; {}",
        servers.len(),
        each.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::Error;

    /// leasehold's own invariant breaches are their own variant, neither a
    /// Redis error nor an unknown outcome (they are not retried), and say
    /// they are a bug.
    #[test]
    fn an_invariant_breach_is_not_a_redis_error() {
        let e = Error::protocol("a fresh acquire was reported stale");
        assert!(matches!(e, Error::Protocol(_)));
        assert!(!e.is_outcome_unknown() && !e.is_transient());
        assert!(e.to_string().contains("bug"), "{e}");
    }
}
