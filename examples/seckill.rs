//! A flash sale ("seckill") across OS processes, guarded by one leasehold
//! lock.
//!
//! The coordinator puts `--stock` items on sale, then starts `--processes`
//! copies of itself as workers. Each worker runs `--tasks` tasks that
//! together make their share of `--attempts` purchase attempts: lock,
//! read the stock, sell one if any is left, unlock. The stock is read and
//! written with plain GET/SET, so only the lock keeps the count right.
//!
//! ```text
//! cargo run --example seckill                     # private redis-server
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example seckill -- --processes 8
//! cargo run --example seckill -- --redlock 3      # a Redlock over 3 servers
//! ```
//!
//! With no `REDIS_URL`, a private `redis-server` is started on a free
//! loopback port and stopped at exit. The exit code is non-zero if more or
//! fewer items were sold than were on sale.
//!
//! With `--redlock N` (N odd, at least 3) the lock is a `RedLock` over N
//! more private `redis-server`s started here (the stock stays where it
//! was). Once half the stock is sold, the coordinator kills one of those
//! servers with SIGKILL. The sale goes on with a majority of the lock
//! servers, and still sells exactly the stock.

use leasehold_testkit::server;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use leasehold::fred::interfaces::KeysInterface;
use leasehold::{Client, Error, LockGuard, MultiGuard, RedLock};

const STOCK_KEY: &str = "seckill:stock";
const SOLD_KEY: &str = "seckill:sold";
const OVERSOLD_KEY: &str = "seckill:oversold";
const LOCK_NAME: &str = "seckill:lock";

#[derive(Debug, Clone)]
struct Args {
    processes: u32,
    stock: i64,
    attempts: u64,
    tasks: u64,
    worker: bool,
    url: Option<String>,
    /// `--redlock N`: the lock is a RedLock over N private servers.
    redlock: Option<usize>,
    /// Worker only: the RedLock's servers.
    lock_urls: Vec<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        processes: 4,
        stock: 200,
        attempts: 1600,
        tasks: 8,
        worker: false,
        url: None,
        redlock: None,
        lock_urls: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--processes" => {
                args.processes = value()?.parse().map_err(|e| format!("--processes: {e}"))?
            }
            "--stock" => args.stock = value()?.parse().map_err(|e| format!("--stock: {e}"))?,
            "--attempts" => {
                args.attempts = value()?.parse().map_err(|e| format!("--attempts: {e}"))?
            }
            "--tasks" => args.tasks = value()?.parse().map_err(|e| format!("--tasks: {e}"))?,
            "--url" => args.url = Some(value()?),
            "--redlock" => {
                args.redlock = Some(value()?.parse().map_err(|e| format!("--redlock: {e}"))?)
            }
            "--lock-urls" => args.lock_urls = value()?.split(',').map(str::to_owned).collect(),
            "--worker" => args.worker = true,
            "-h" | "--help" => {
                return Err(
                    "usage: seckill [--processes N] [--stock N] [--attempts N] [--tasks N] [--redlock N]"
                        .into(),
                )
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.processes == 0 || args.tasks == 0 {
        return Err("--processes and --tasks must be at least 1".into());
    }
    if args.redlock.is_some_and(|n| n < 3 || n % 2 == 0) {
        return Err("--redlock needs an odd number of servers, at least 3".into());
    }
    Ok(args)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = match parse_args() {
        Ok(args) => args,
        Err(msg) => {
            eprintln!("{msg}");
            std::process::exit(2);
        }
    };
    if args.worker {
        return worker(args).await;
    }
    coordinator(args).await
}

/// Sets up the sale, runs the workers, prints the summary.
async fn coordinator(args: Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (_server, url) = match std::env::var("REDIS_URL") {
        Ok(url) => (None, url),
        Err(_) => {
            let server = server::RedisServer::start();
            let url = server.url();
            println!("started a private redis-server at {url}");
            (Some(server), url)
        }
    };
    // `--redlock N`: N more private servers for the lock alone.
    let lock_servers: Vec<server::RedisServer> = (0..args.redlock.unwrap_or(0))
        .map(|_| server::RedisServer::start())
        .collect();
    let lock_urls: Vec<String> = lock_servers.iter().map(|s| s.url()).collect();
    if !lock_urls.is_empty() {
        println!(
            "started {} lock servers: {}",
            lock_urls.len(),
            lock_urls.join(" ")
        );
    }
    let client = leasehold::Client::connect(&url).await?;
    let redis = client.redis();
    let () = redis.set(STOCK_KEY, args.stock, None, None, false).await?;
    let _: i64 = redis.del(vec![SOLD_KEY, OVERSOLD_KEY]).await?;

    let started = Instant::now();
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for i in 0..u64::from(args.processes) {
        // Spread the attempts: the first `rest` workers make one more.
        let share = args.attempts / u64::from(args.processes)
            + u64::from(i < args.attempts % u64::from(args.processes));
        let mut command = Command::new(&exe);
        command
            .args(["--worker", "--url", &url])
            .args([
                "--attempts",
                &share.to_string(),
                "--tasks",
                &args.tasks.to_string(),
            ])
            .stdout(Stdio::piped());
        if !lock_urls.is_empty() {
            command.args(["--lock-urls", &lock_urls.join(",")]);
        }
        children.push(tokio::task::spawn_blocking(move || {
            command.spawn().and_then(|child| child.wait_with_output())
        }));
    }
    // With a RedLock: kill one lock server once half the stock is sold.
    let killer = (!lock_servers.is_empty()).then(|| {
        let (redis, half) = (redis.clone(), args.stock / 2);
        tokio::spawn(async move {
            let mut servers = lock_servers;
            loop {
                let sold: Option<i64> = redis.get(SOLD_KEY).await.ok().flatten();
                if sold.unwrap_or(0) >= half {
                    servers[0].kill();
                    println!(
                        "killed lock server 0 ({}) at {} sold",
                        servers[0].url(),
                        sold.unwrap_or(0)
                    );
                    return (servers, sold.unwrap_or(0));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    });
    let mut totals = WorkerReport::default();
    for child in children {
        let out = child.await??;
        if !out.status.success() {
            let stderr = String::from_utf8_lossy(&out.stderr);
            return Err(format!("a worker failed: {}\n{stderr}", out.status).into());
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let report = text
            .lines()
            .find_map(WorkerReport::parse)
            .ok_or("a worker printed no report")?;
        totals.add(&report);
    }
    let wall = started.elapsed();
    let killed_at = match killer {
        Some(killer) if killer.is_finished() => Some(killer.await?.1),
        Some(killer) => {
            killer.abort();
            None
        }
        None => None,
    };

    let stock_left: i64 = redis.get(STOCK_KEY).await?;
    let sold_in_redis: Option<i64> = redis.get(SOLD_KEY).await?;
    let oversold: Option<i64> = redis.get(OVERSOLD_KEY).await?;
    client.shutdown().await?;

    println!();
    println!("| seckill | value |");
    println!("| --- | --- |");
    match (args.redlock, killed_at) {
        (Some(n), Some(at)) => {
            println!("| lock | RedLock over {n} servers, one killed at {at} sold |")
        }
        (Some(n), None) => println!("| lock | RedLock over {n} servers |"),
        (None, _) => println!("| lock | one leasehold Lock |"),
    }
    println!("| processes | {} |", args.processes);
    println!("| tasks per process | {} |", args.tasks);
    println!("| stock on sale | {} |", args.stock);
    println!("| attempts | {} |", totals.attempts);
    println!("| sold | {} |", totals.sold);
    println!("| stock left | {stock_left} |");
    println!("| lock waits (try_lock found it busy) | {} |", totals.waits);
    if args.redlock.is_some() {
        println!("| unlocks that found the hold lost | {} |", totals.lost);
    }
    println!("| mean time to acquire | {:.2?} |", totals.mean_acquire());
    println!("| wall time | {wall:.2?} |");
    println!(
        "| lock acquisitions per second | {:.0} |",
        totals.attempts as f64 / wall.as_secs_f64()
    );

    let expected = args.stock.min(args.attempts as i64).max(0);
    let ok = totals.sold as i64 == expected
        && sold_in_redis.unwrap_or(0) == expected
        && stock_left == args.stock.max(0) - expected
        && oversold.is_none();
    if ok {
        println!("\nOK: exactly {expected} sold, stock never below zero.");
        Ok(())
    } else {
        Err(format!(
            "WRONG: sold {} (redis {:?}), stock left {stock_left}, oversold flag {oversold:?}",
            totals.sold, sold_in_redis
        )
        .into())
    }
}

/// The lock the workers sell under: one `Lock`, or a `RedLock`.
#[derive(Clone)]
enum SaleLock {
    One(leasehold::Lock),
    Red(RedLock),
}

/// A hold of either.
enum SaleGuard {
    One(LockGuard),
    Red(MultiGuard),
}

impl SaleLock {
    /// The guard, and whether it had to wait (the first try found it busy).
    async fn take(&self) -> Result<(SaleGuard, bool), Error> {
        Ok(match self {
            SaleLock::One(lock) => match lock.try_lock().await? {
                Some(g) => (SaleGuard::One(g), false),
                None => (SaleGuard::One(lock.lock().await?), true),
            },
            SaleLock::Red(red) => match red.try_lock().await {
                Ok(Some(g)) => (SaleGuard::Red(g), false),
                // Busy, or a majority did not answer this one round (a
                // server down, or slow): wait, retrying rounds.
                Ok(None) | Err(Error::NoQuorum { .. }) => (SaleGuard::Red(red.lock().await?), true),
                Err(e) => return Err(e),
            },
        })
    }
}

impl SaleGuard {
    async fn unlock(self) -> Result<(), Error> {
        match self {
            SaleGuard::One(g) => g.unlock().await,
            SaleGuard::Red(g) => g.unlock().await,
        }
    }
}

/// One process's share of the attempts.
async fn worker(args: Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url = args.url.clone().ok_or("--worker needs --url")?;
    let client = Client::connect(&url).await?;
    let mut lock_clients = Vec::new();
    for url in &args.lock_urls {
        // A short command timeout: a killed server's client gives up its
        // background work sooner when the worker exits.
        let c = Client::builder()
            .url(url)
            .command_timeout(Duration::from_secs(1))
            .build()
            .await?;
        lock_clients.push(c);
    }
    let lock = if lock_clients.is_empty() {
        SaleLock::One(client.lock(LOCK_NAME))
    } else {
        SaleLock::Red(RedLock::new(lock_clients.clone(), LOCK_NAME))
    };
    let mut tasks = Vec::new();
    for t in 0..args.tasks {
        let attempts = args.attempts / args.tasks + u64::from(t < args.attempts % args.tasks);
        let (client, lock) = (client.clone(), lock.clone());
        tasks.push(tokio::spawn(async move {
            let redis = client.redis();
            let mut report = WorkerReport::default();
            for _ in 0..attempts {
                let asked = Instant::now();
                let (guard, waited) = lock.take().await?;
                report.waits += u64::from(waited);
                report.acquire_time += asked.elapsed();
                report.attempts += 1;
                let stock: i64 = redis.get(STOCK_KEY).await?;
                if stock > 0 {
                    let () = redis.set(STOCK_KEY, stock - 1, None, None, false).await?;
                    let _: i64 = redis.incr(SOLD_KEY).await?;
                    report.sold += 1;
                } else if stock < 0 {
                    let _: i64 = redis.incr(OVERSOLD_KEY).await?;
                }
                if let Err(e) = guard.unlock().await {
                    // A RedLock guard that lost its majority (a member on
                    // the killed server, and another missing) reports it
                    // here; the final count says whether the sale was right.
                    eprintln!("unlock: {e}");
                    report.lost += 1;
                }
            }
            Ok::<_, Error>(report)
        }));
    }
    let mut total = WorkerReport::default();
    for task in tasks {
        total.add(&task.await??);
    }
    client.shutdown().await?;
    for c in &lock_clients {
        // The killed server's client cannot say goodbye: do not wait long.
        let _ = tokio::time::timeout(Duration::from_secs(2), c.shutdown()).await;
    }
    println!("{}", total.line());
    Ok(())
}

#[derive(Debug, Default)]
struct WorkerReport {
    attempts: u64,
    sold: u64,
    waits: u64,
    /// Unlocks that reported the hold lost.
    lost: u64,
    acquire_time: Duration,
}

impl WorkerReport {
    fn add(&mut self, other: &WorkerReport) {
        self.attempts += other.attempts;
        self.sold += other.sold;
        self.waits += other.waits;
        self.lost += other.lost;
        self.acquire_time += other.acquire_time;
    }

    fn mean_acquire(&self) -> Duration {
        self.acquire_time / self.attempts.max(1) as u32
    }

    fn line(&self) -> String {
        format!(
            "REPORT attempts={} sold={} waits={} lost={} acquire_us={}",
            self.attempts,
            self.sold,
            self.waits,
            self.lost,
            self.acquire_time.as_micros()
        )
    }

    fn parse(line: &str) -> Option<WorkerReport> {
        let rest = line.strip_prefix("REPORT ")?;
        let mut report = WorkerReport::default();
        for pair in rest.split_whitespace() {
            let (k, v) = pair.split_once('=')?;
            let v: u64 = v.parse().ok()?;
            match k {
                "attempts" => report.attempts = v,
                "sold" => report.sold = v,
                "waits" => report.waits = v,
                "lost" => report.lost = v,
                "acquire_us" => report.acquire_time = Duration::from_micros(v),
                _ => {}
            }
        }
        Some(report)
    }
}
