//! A worker pool across OS processes: one leasehold semaphore caps how
//! many jobs run at once, whichever process runs them.
//!
//! The coordinator sets `--permits` permits, then starts `--processes`
//! copies of itself as workers. Each worker runs `--tasks` tasks that
//! together run their share of `--jobs` jobs: take a permit, run the job
//! (a short sleep), give the permit back. Every job start is counted in
//! Redis, atomically: the jobs running now (`INCR`) and the permits taken
//! (`ZCARD` of the semaphore's zset), and the peak of both is kept.
//!
//! ```text
//! cargo run --example worker_pool                 # private redis-server
//! REDIS_URL=redis://127.0.0.1:6379 cargo run --example worker_pool -- --permits 5
//! ```
//!
//! With no `REDIS_URL`, a private `redis-server` is started on a free
//! loopback port and stopped at exit. The exit code is non-zero if more
//! jobs than permits ever ran at once.

use leasehold_testkit::server;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use leasehold::fred::interfaces::{KeysInterface, LuaInterface};

const POOL: &str = "worker-pool";
/// Jobs running now, and the peak seen (same hash slot as the pool).
const RUNNING_KEY: &str = "{worker-pool}:running";
const PEAK_KEY: &str = "{worker-pool}:peak";
const PERMITS_KEY: &str = "{worker-pool}:timeout";

/// A job starts: count it, and keep the peak of running jobs and of
/// permits taken. KEYS [running, peak, permits zset].
const START_JOB: &str = "local running = redis.call('incr', KEYS[1]) \
    local peak = math.max(running, redis.call('zcard', KEYS[3])) \
    if peak > tonumber(redis.call('get', KEYS[2]) or '0') then \
        redis.call('set', KEYS[2], peak) \
    end \
    return running";

#[derive(Debug, Clone)]
struct Args {
    processes: u32,
    permits: u64,
    jobs: u64,
    tasks: u64,
    job_ms: u64,
    worker: bool,
    url: Option<String>,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        processes: 3,
        permits: 4,
        jobs: 300,
        tasks: 6,
        job_ms: 5,
        worker: false,
        url: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--processes" => {
                args.processes = value()?.parse().map_err(|e| format!("--processes: {e}"))?
            }
            "--permits" => args.permits = number(value()?)?,
            "--jobs" => args.jobs = number(value()?)?,
            "--tasks" => args.tasks = number(value()?)?,
            "--job-ms" => args.job_ms = number(value()?)?,
            "--url" => args.url = Some(value()?),
            "--worker" => args.worker = true,
            "-h" | "--help" => {
                return Err(
                    "usage: worker_pool [--processes N] [--permits N] [--jobs N] \
                     [--tasks N] [--job-ms N]"
                        .into(),
                )
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    if args.processes == 0 || args.tasks == 0 || args.permits == 0 {
        return Err("--processes, --tasks and --permits must be at least 1".into());
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

/// Sets up the pool, runs the workers, prints the summary.
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
    let client = leasehold::Client::connect(&url).await?;
    let redis = client.redis();
    let _: i64 = redis
        .del(vec![POOL, PERMITS_KEY, RUNNING_KEY, PEAK_KEY])
        .await?;
    client.semaphore(POOL).try_set_permits(args.permits).await?;

    let started = Instant::now();
    let exe = std::env::current_exe()?;
    let mut children = Vec::new();
    for i in 0..u64::from(args.processes) {
        let share = args.jobs / u64::from(args.processes)
            + u64::from(i < args.jobs % u64::from(args.processes));
        let child = Command::new(&exe)
            .args(["--worker", "--url", &url])
            .args(["--jobs", &share.to_string()])
            .args(["--tasks", &args.tasks.to_string()])
            .args(["--job-ms", &args.job_ms.to_string()])
            .stdout(Stdio::piped())
            .spawn()?;
        children.push(child);
    }
    let mut jobs = 0;
    for child in children {
        let out = child.wait_with_output()?;
        if !out.status.success() {
            return Err(format!("a worker failed: {}", out.status).into());
        }
        let text = String::from_utf8_lossy(&out.stdout);
        jobs += text
            .lines()
            .find_map(|l| l.strip_prefix("REPORT jobs=")?.parse::<u64>().ok())
            .ok_or("a worker printed no report")?;
    }
    let wall = started.elapsed();

    let peak: Option<u64> = redis.get(PEAK_KEY).await?;
    let running: Option<i64> = redis.get(RUNNING_KEY).await?;
    let free = client.semaphore(POOL).available_permits().await?;
    client.shutdown().await?;
    let peak = peak.unwrap_or(0);

    println!();
    println!("| worker pool | value |");
    println!("| --- | --- |");
    println!("| processes | {} |", args.processes);
    println!("| tasks per process | {} |", args.tasks);
    println!("| permits | {} |", args.permits);
    println!("| jobs run | {jobs} |");
    println!("| maximum concurrency (in Redis) | {peak} |");
    println!("| permits free at the end | {free} |");
    println!("| wall time | {wall:.2?} |");

    if peak <= args.permits && jobs == args.jobs && free == args.permits {
        println!(
            "\nOK: at most {peak} of {} permits in use at once.",
            args.permits
        );
        Ok(())
    } else {
        Err(format!(
            "WRONG: peak {peak} for {} permits, {jobs} of {} jobs, {free} permits free, {running:?} still running",
            args.permits, args.jobs
        )
        .into())
    }
}

/// One process's share of the jobs.
async fn worker(args: Args) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url = args.url.clone().ok_or("--worker needs --url")?;
    let client = leasehold::Client::connect(&url).await?;
    let mut tasks = Vec::new();
    for t in 0..args.tasks {
        let jobs = args.jobs / args.tasks + u64::from(t < args.jobs % args.tasks);
        let client = client.clone();
        let job = Duration::from_millis(args.job_ms);
        tasks.push(tokio::spawn(async move {
            let pool = client.semaphore(POOL);
            let redis = client.redis();
            for _ in 0..jobs {
                let permit = pool.acquire().await?;
                let _: i64 = redis
                    .eval(START_JOB, vec![RUNNING_KEY, PEAK_KEY, PERMITS_KEY], ())
                    .await?;
                tokio::time::sleep(job).await; // the job
                let _: i64 = redis.decr(RUNNING_KEY).await?;
                permit.release().await?;
            }
            Ok::<_, leasehold::Error>(jobs)
        }));
    }
    let mut done = 0;
    for task in tasks {
        done += task.await??;
    }
    client.shutdown().await?;
    println!("REPORT jobs={done}");
    Ok(())
}
