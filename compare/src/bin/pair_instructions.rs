//! `N` uncontended lock + unlock pairs from one task, leasehold or the bare
//! fred baseline (the same two `EVALSHA` calls with the same keys and
//! arguments as `contender.rs`'s `raw_args`), against a loopback
//! `redis-server` it starts. Run under callgrind by `compare/instructions.sh`,
//! which takes the difference of two runs (`N` and `2N`) as the cost of `N`
//! pairs: start-up and shutdown cancel out. Instruction counts do not depend
//! on the machine's load, so a change to the lock path shows up in them
//! even where the throughput rounds are too noisy to tell.
//!
//! `pair_instructions leasehold|raw N`

use fred::interfaces::{ClientLike, LuaInterface};
use fred::types::config::Config;
use fred::types::Value;
use leasehold_testkit::server::RedisServer;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (side, n) = match (args.get(1).map(String::as_str), args.get(2)) {
        (Some(side @ ("leasehold" | "raw")), Some(n)) => (side.to_owned(), n.parse::<u64>()),
        _ => {
            eprintln!("usage: pair_instructions leasehold|raw N");
            std::process::exit(2);
        }
    };
    let n = n.expect("N: a number of pairs");
    let server = RedisServer::start();
    let url = server.url();
    if side == "leasehold" {
        let client = leasehold::Client::connect(&url).await.expect("connect");
        for _ in 0..n {
            // As users write it, and as the comparison report does.
            let guard = client.lock("pairs").lock().await.expect("lock");
            guard.unlock().await.expect("unlock");
        }
        let _ = client.shutdown().await;
    } else {
        let redis =
            fred::clients::Client::new(Config::from_url(&url).expect("url"), None, None, None);
        redis.init().await.expect("connect");
        let (acquire, release) = leasehold::__bench::lock_scripts();
        let acquire: String = redis.script_load(acquire).await.expect("load");
        let release: String = redis.script_load(release).await.expect("load");
        let task = tokio::task::try_id()
            .map(|t| t.to_string())
            .unwrap_or_default();
        for rid in 0..n {
            let (name, field) = ("pairs", format!("raw-1:{task}"));
            let latch = format!("leasehold_latch:{{{name}}}:{field}");
            let reply: Value = redis
                .evalsha(
                    acquire.as_str(),
                    vec![name.to_owned(), latch.clone()],
                    vec![
                        "30000".to_owned(),
                        field.clone(),
                        "30000".to_owned(),
                        (2 * rid + 1).to_string(),
                    ],
                )
                .await
                .expect("acquire");
            assert!(leasehold_compare_acquired(&reply), "raw acquire: {reply:?}");
            let freed: Vec<i64> = redis
                .evalsha(
                    release.as_str(),
                    vec![
                        name.to_owned(),
                        format!("redisson_lock__channel:{{{name}}}"),
                        latch,
                    ],
                    vec![
                        "30000".to_owned(),
                        field,
                        "1".to_owned(),
                        "publish".to_owned(),
                        "30000".to_owned(),
                        (2 * rid + 2).to_string(),
                    ],
                )
                .await
                .expect("release");
            assert!(
                freed.get(1).is_some_and(|&s| s > 0),
                "raw release: {freed:?}"
            );
        }
        let _ = redis.quit().await;
    }
}

/// An `acquire.lua` reply that means "now held": `{rid, 1, count}`.
fn leasehold_compare_acquired(reply: &Value) -> bool {
    matches!(reply, Value::Array(items) if matches!(items.get(1), Some(Value::Integer(1))))
}
