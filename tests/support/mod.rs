//! Test support: real `redis-server` processes (one server, a cluster,
//! Sentinel), a fault-injecting proxy, and shared test steps.
// `unused_imports`: a test file that uses only one of the re-exports would
// otherwise warn about the other.
#![allow(dead_code, unreachable_pub, unused_imports)]

pub mod cluster;
pub mod proxy;
pub mod sentinel;
pub mod server;

pub use proxy::Proxy;
pub use server::RedisServer;

pub mod fixture;
