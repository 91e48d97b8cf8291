//! Test support: a real `redis-server` harness and a fault-injecting proxy.
// `unused_imports`: a test file that uses only one of the re-exports would
// otherwise warn about the other.
#![allow(dead_code, unreachable_pub, unused_imports)]

pub mod proxy;
pub mod server;

pub use proxy::Proxy;
pub use server::RedisServer;

pub mod fixture;
