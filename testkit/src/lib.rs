//! Test harness for [leasehold]: real `redis-server` processes on free
//! loopback ports, killed when dropped, and a TCP proxy that injects
//! faults.
//!
//! * [`RedisServer`]: one private server (its own temp dir, no
//!   persistence), restartable on the same port.
//! * [`cluster::RedisCluster`]: a Redis Cluster made of such servers, with
//!   failover and slot migration helpers.
//! * [`sentinel::SentinelSetup`]: a primary, a replica and three sentinels.
//! * [`Proxy`]: a loopback proxy with pass / delay / black-hole modes,
//!   connection cuts and lost replies.
//! * [`fixture`]: small steps shared by tests (clients, server counters,
//!   bounded waits that catch hangs).
//!
//! Everything here talks to 127.0.0.1 only.
//!
//! # Example
//!
//! ```no_run
//! let server = leasehold_testkit::RedisServer::start();
//! assert_eq!(server.cmd(&["PING"]), "PONG");
//! ```

pub mod cluster;
pub mod fixture;
pub mod history;
pub mod proxy;
pub mod sentinel;
pub mod server;

pub use proxy::Proxy;
pub use server::RedisServer;
