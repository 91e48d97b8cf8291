//! What keeps a client's connections open: every handle of the client
//! (`Client` and its clones, through the locks made from them) and every
//! hold a guard or permit owns.
//!
//! When the last of them goes without `shutdown`, the connections close in
//! the background, **after** every background job is done (bounded by the
//! command timeout): the release of a guard dropped a moment before, the
//! queue leave of a waiter cancelled as its task ended. Closing first would
//! leave that lock held (or that waiter queued) for its whole lease, which
//! is what ending a task that owns its client usually does.
//!
//! A hold keeps them open too, so a guard that outlives its client (the
//! client was dropped first) is still renewed, and its unlock or drop
//! still gives it back.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Engine;

/// One reason to keep the engine's connections open (see the module
/// docs). Made from a live one only: a client's first, then clones, and a
/// hold's, made while its acquire runs on behalf of a client handle.
pub(crate) struct Open(Arc<Engine>);

impl Open {
    /// One more reason: a client handle, or a hold (see the type's docs
    /// for when one may be made).
    pub(crate) fn new(engine: Arc<Engine>) -> Open {
        engine.users.fetch_add(1, Ordering::Relaxed);
        Open(engine)
    }

    /// The engine.
    pub(crate) fn engine(&self) -> &Arc<Engine> {
        &self.0
    }
}

impl std::ops::Deref for Open {
    type Target = Engine;

    fn deref(&self) -> &Engine {
        &self.0
    }
}

impl Clone for Open {
    fn clone(&self) -> Open {
        Open::new(self.0.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        if self.0.users.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.close_when_idle();
        }
    }
}

impl std::fmt::Debug for Open {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Open")
            .field("users", &self.0.users.load(Ordering::Relaxed))
            .finish()
    }
}
