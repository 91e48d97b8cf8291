//! Futures boxed where they are built.
//!
//! `Box::pin(f())` builds the future on the stack and then copies it into
//! the box, all of it: an acquire's try and a release are large (fred's
//! command future is built inline in them, not boxed on its own:
//! `script.rs`), so on the hot path the copy was a large share of the
//! client's memory traffic (BENCHMARKS.md, "Sizes behind the code").
//! Writing the result of
//! the call into fresh uninitialised memory instead (`Box::write` into
//! `Box::new_uninit`) lets the compiler hand the box to the call as its
//! return slot, and the future is built in place. No `unsafe` is involved:
//! if the compiler does not see it, the copy is made as before.

use std::future::Future;
use std::pin::Pin;

/// `Box::pin(make())`, with the future built in its box (see the module
/// docs). `make` is best a closure that builds the future it returns
/// (an `async` block, a call of an `async fn`), not one that moves a
/// future built before.
#[inline(always)]
pub(crate) fn boxed_in_place<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}
