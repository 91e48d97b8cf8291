//! The Lua scripts that change lock state, as handles holding their source
//! and SHA-1.
//!
//! Every change to a lock hash goes through one of these scripts, so each
//! change is atomic on the server. The sources live beside this file as
//! `.lua` files (diffable, and runnable with `redis-cli --eval`); each one
//! states its keys, arguments, reply and retry policy in its header.
//!
//! Scripts are sent with `EVALSHA`. The one error that proves a script did
//! not run is `NOSCRIPT` (the server's script cache is empty, e.g. after a
//! restart); only then is the script loaded and sent again. Any other
//! failure is returned to the caller, whose retry policy is the script's
//! own (see each `.lua` header).

use fred::clients::Client as FredClient;
use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::{FromValue, Key, Value};

/// A Lua script: its source and the SHA-1 that `EVALSHA` names it by.
#[derive(Debug)]
pub(crate) struct Script {
    name: &'static str,
    source: &'static str,
    sha1: String,
}

/// The four lock scripts, hashed once per process.
#[derive(Debug)]
pub(crate) struct Scripts {
    /// Take or re-enter a lock. Never retried.
    pub(crate) acquire: Script,
    /// Give back holds; publishes the unlock message when freed. Never retried.
    pub(crate) release: Script,
    /// Extend a batch of leases. Idempotent; retried only by the next cycle.
    pub(crate) renew: Script,
    /// Delete a lock whoever holds it. Not retried.
    pub(crate) force_unlock: Script,
}

impl Scripts {
    /// The process-wide script handles.
    pub(crate) fn get() -> &'static Scripts {
        static SCRIPTS: std::sync::OnceLock<Scripts> = std::sync::OnceLock::new();
        SCRIPTS.get_or_init(|| Scripts {
            acquire: Script::new("acquire", include_str!("scripts/acquire.lua")),
            release: Script::new("release", include_str!("scripts/release.lua")),
            renew: Script::new("renew", include_str!("scripts/renew.lua")),
            force_unlock: Script::new("force_unlock", include_str!("scripts/force_unlock.lua")),
        })
    }
}

impl Scripts {
    /// Loads every script into the server's cache (`SCRIPT LOAD`), so the
    /// first calls need no NOSCRIPT round trip.
    pub(crate) async fn load_all(&self, client: &FredClient) -> Result<(), fred::error::Error> {
        for script in [
            &self.acquire,
            &self.release,
            &self.renew,
            &self.force_unlock,
        ] {
            client.script_load::<(), _>(script.source).await?;
        }
        Ok(())
    }
}

impl Script {
    fn new(name: &'static str, source: &'static str) -> Script {
        Script {
            name,
            source,
            sha1: fred::util::sha1_hash(source),
        }
    }

    /// `SCRIPT LOAD` on the server, or on every primary of a cluster.
    async fn load(&self, client: &FredClient) -> Result<(), fred::error::Error> {
        if client.is_clustered() {
            client.script_load_cluster::<(), _>(self.source).await
        } else {
            client.script_load::<(), _>(self.source).await
        }
    }

    /// Runs the script with `EVALSHA`, loading it first if the server
    /// answers `NOSCRIPT` (which proves it did not run).
    pub(crate) async fn run<R: FromValue>(
        &self,
        client: &FredClient,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> Result<R, fred::error::Error> {
        // Keys and arguments are reference-counted: the clones for a
        // NOSCRIPT retry copy no bytes.
        let args = Value::Array(args);
        match client
            .evalsha::<R, _, _, _>(self.sha1.as_str(), keys.clone(), args.clone())
            .await
        {
            Err(error) if error.details().starts_with("NOSCRIPT") => {
                tracing::debug!(script = self.name, "NOSCRIPT: loading the script");
                self.load(client).await?;
                client.evalsha(self.sha1.as_str(), keys, args).await
            }
            result => result,
        }
    }
}
