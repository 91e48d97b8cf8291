//! The wake-up queue's synchronisation (`queue.rs`, and only it): loom's
//! types under `cfg(leasehold_loom)`, for its model tests
//! (`RUSTFLAGS="--cfg leasehold_loom" cargo test --lib loom`),
//! the usual ones otherwise. Both sides have one API, parking_lot's and
//! futures-util's: `Mutex::lock` returns the guard, and
//! `AtomicWaker::register` takes the waker by reference.
//!
//! Loom's types work only inside `loom::model`: in a `cfg(leasehold_loom)`
//! build every test but the loom ones would panic, so `pubsub`'s other
//! tests are left out of it, and the run filters on `loom`.

#[cfg(not(leasehold_loom))]
pub(super) use futures_util::task::AtomicWaker;
#[cfg(not(leasehold_loom))]
pub(super) use parking_lot::Mutex;
#[cfg(not(leasehold_loom))]
pub(super) use std::sync::{atomic, Arc};

#[cfg(leasehold_loom)]
pub(super) use loom::sync::{atomic, Arc};
#[cfg(leasehold_loom)]
pub(super) use mocked::{AtomicWaker, Mutex};

#[cfg(leasehold_loom)]
mod mocked {
    use std::task::Waker;

    /// loom's mutex with parking_lot's `lock` (no poisoning to unwrap).
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Mutex<T> {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().unwrap()
        }
    }

    impl<T: Default> Default for Mutex<T> {
        fn default() -> Mutex<T> {
            Mutex::new(T::default())
        }
    }

    /// loom's `AtomicWaker` with futures-util's `register(&Waker)`.
    #[derive(Debug, Default)]
    pub(crate) struct AtomicWaker(loom::future::AtomicWaker);

    impl AtomicWaker {
        pub(crate) fn register(&self, waker: &Waker) {
            self.0.register_by_ref(waker);
        }

        pub(crate) fn wake(&self) {
            self.0.wake();
        }
    }
}
