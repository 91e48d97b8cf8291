//! Lua scripts as handles holding their source and SHA-1.
//!
//! Every change to lock state goes through a script, so each change is
//! atomic on the server. Sources live as `.lua` files beside their
//! primitive (diffable, runnable with `redis-cli --eval`); each states its
//! keys, arguments, reply and retry policy in its header.
//!
//! Scripts are sent with `EVALSHA`. The one error that proves a script did
//! not run is `NOSCRIPT` (the server's script cache is empty, e.g. after a
//! restart); only then is the script loaded and sent again.
//!
//! A *latched* script is a mutation made idempotent by request id: its
//! body is wrapped between `scripts/latch_prologue.lua` and
//! `scripts/latch_epilogue.lua` at compile time, so a re-send of the same
//! request replays the recorded reply instead of running twice (see
//! `call.rs`).

use fred::clients::Client as FredClient;
use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::{FromValue, Key, Value};

type FredResult<T> = Result<T, fred::error::Error>;

/// A Lua script: its source and the SHA-1 that `EVALSHA` names it by.
#[derive(Debug)]
pub(crate) struct Script {
    name: &'static str,
    source: String,
    sha1: String,
}

const LATCH_PROLOGUE: &str = include_str!("scripts/latch_prologue.lua");
const LATCH_EPILOGUE: &str = include_str!("scripts/latch_epilogue.lua");

impl Script {
    /// A script sent as it is.
    pub(crate) fn plain(name: &'static str, source: &'static str) -> Script {
        Script::new(name, source.to_owned())
    }

    /// A mutation: `body` defines `local function body()`, which returns an
    /// array of integers starting with a status >= 0; the script is
    /// idempotent by request id (its last key is the latch, its last two
    /// arguments the latch TTL and the request id).
    pub(crate) fn latched(name: &'static str, body: &'static str) -> Script {
        Script::new(name, format!("{LATCH_PROLOGUE}{body}{LATCH_EPILOGUE}"))
    }

    fn new(name: &'static str, source: String) -> Script {
        let sha1 = fred::util::sha1_hash(&source);
        Script { name, source, sha1 }
    }

    /// The full source, as sent.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    /// The script's name, for logs.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// `SCRIPT LOAD` on the server, or on every primary of a cluster.
    pub(crate) async fn load(&self, client: &FredClient) -> FredResult<()> {
        if client.is_clustered() {
            client
                .script_load_cluster::<(), _>(self.source.as_str())
                .await
        } else {
            client.script_load::<(), _>(self.source.as_str()).await
        }
    }

    /// Runs the script with `EVALSHA`, loading it first if the server
    /// answers `NOSCRIPT` (which proves it did not run).
    pub(crate) async fn run<R: FromValue>(
        &self,
        client: &FredClient,
        keys: Vec<Key>,
        args: Vec<Value>,
    ) -> FredResult<R> {
        // Keys and arguments are reference-counted: the clones kept for a
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
