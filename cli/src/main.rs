//! `leasehold`: the operator tool. Every lock-family object on a Redis,
//! who holds it, who waits, the client records, deadlocks, force unlock.
//!
//! ```text
//! leasehold inspect [--url URL] [--json] [PATTERN]    # URL defaults to $REDIS_URL
//! leasehold deadlocks [--url URL] [--json]            # exit 3 when a cycle exists
//! leasehold clients [--url URL] [--json]
//! leasehold unlock --force [--url URL] NAME
//! leasehold watch [--url URL] [PATTERN]
//! leasehold doctor [--url URL] [--json] [--key-prefix P] [--no-self-test]   # exit 0 / 1 / 2
//! ```
//!
//! Objects are found by their key layout (see `inspect.rs`), holders'
//! apps, hosts and pids from the client records leasehold clients keep
//! (`leasehold:client:{<uuid>}`); a holder without a record (a Redisson
//! service, a client that died) is shown as foreign. Reads only, apart
//! from `unlock --force` and `doctor`'s self-test on its private lock.

mod doctor;
mod inspect;
#[cfg(test)]
mod own_protocol;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Arg, ArgAction, ArgMatches, Command};
use fred::interfaces::ClientLike;
use fred::prelude::{Client as Redis, Config};
use serde_json::json;

use inspect::now_ms;
use leasehold::{LockObject, ObjectKind};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn cli() -> Command {
    let url = Arg::new("url")
        .long("url")
        .env("REDIS_URL")
        .help("Redis URL (redis://, redis-cluster://, redis-sentinel://); default $REDIS_URL")
        .value_name("URL");
    let json = Arg::new("json")
        .long("json")
        .action(ArgAction::SetTrue)
        .help("one JSON object per line");
    let pattern = Arg::new("pattern")
        .value_name("PATTERN")
        .default_value("*")
        .help("glob over object names (* ? [..])");
    Command::new("leasehold")
        .about(
            "Operate leasehold / Redisson locks on a Redis: who holds what, who waits, deadlocks",
        )
        .version(env!("CARGO_PKG_VERSION"))
        .subcommand_required(true)
        .subcommand(
            Command::new("inspect")
                .about("every lock-family object matching PATTERN: kind, TTL, holders, waiters")
                .arg(url.clone())
                .arg(json.clone())
                .arg(pattern.clone()),
        )
        .subcommand(
            Command::new("deadlocks")
                .about("wait-for cycles across every client; exit status 3 when there is one")
                .arg(url.clone())
                .arg(json.clone()),
        )
        .subcommand(
            Command::new("clients")
                .about("the client records: app, host, pid, version, long waits")
                .arg(url.clone())
                .arg(json),
        )
        .subcommand(
            Command::new("unlock")
                .about("force-unlock NAME (any kind), waking its waiters; says what it freed")
                .arg(
                    Arg::new("force")
                        .long("force")
                        .required(true)
                        .action(ArgAction::SetTrue)
                        .help("required: this frees the object whoever holds it"),
                )
                .arg(url.clone())
                .arg(Arg::new("name").value_name("NAME").required(true)),
        )
        .subcommand(
            Command::new("watch")
                .about("the inspect table, refreshed in place every second (Ctrl-C ends)")
                .arg(url.clone())
                .arg(pattern),
        )
        .subcommand(
            Command::new("doctor")
                .about("is this Redis safe for locks? one line per check: ok / warn / fail / skip")
                .long_about(
                    "Checks the server for leasehold's locks; one line per check:\n\
                     \x20 ok|warn|fail|skip  name  found  → advice\n\n\
                     server kind and version; the user's permissions (scripts, keys, lock\n\
                     channels, CLIENT LIST/KILL, INFO); eviction (maxmemory-policy); persistence;\n\
                     replication and WAIT; a cluster's slots and replicas; PING round trip; clock\n\
                     offset; then a live self-test on a private lock leasehold:doctor:{<uuid>}\n\
                     (lock, re-enter, a waiter woken by pub/sub, a watchdog renewal) that leaves\n\
                     no key behind. Nothing else is written. A check whose commands are refused\n\
                     is `skip` (not checked).\n\n\
                     Exit status: 0 all ok, 1 a warning or a check not made, 2 a failure.",
                )
                .arg(url)
                .arg(
                    Arg::new("json")
                        .long("json")
                        .action(ArgAction::SetTrue)
                        .help("the report as one JSON document: {\"exit_code\",\"checks\":[{\"name\",\"status\",\"found\",\"advice\"}]}"),
                )
                .arg(
                    Arg::new("key-prefix")
                        .long("key-prefix")
                        .value_name("PREFIX")
                        .help("the key prefix your clients use (ClientBuilder::key_prefix): its keys' permissions are checked"),
                )
                .arg(
                    Arg::new("no-self-test")
                        .long("no-self-test")
                        .action(ArgAction::SetTrue)
                        .help("skip the live self-test: read-only checks only, nothing written"),
                ),
        )
}

fn main() -> ExitCode {
    let matches = cli().get_matches();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return fail(e.into()),
    };
    match runtime.block_on(run(matches)) {
        Ok(code) => code,
        Err(e) => fail(e),
    }
}

fn fail(e: Box<dyn std::error::Error + Send + Sync>) -> ExitCode {
    eprintln!("leasehold: {e}");
    ExitCode::from(1)
}

async fn run(matches: ArgMatches) -> Result<ExitCode> {
    let (name, sub) = matches.subcommand().expect("a subcommand is required");
    let url = sub
        .get_one::<String>("url")
        .ok_or("no Redis URL: give --url or set REDIS_URL")?;
    if name == "doctor" {
        return doctor::doctor(doctor::Args {
            url,
            json: sub.get_flag("json"),
            key_prefix: sub.get_one::<String>("key-prefix").map(String::as_str),
            self_test: !sub.get_flag("no-self-test"),
        })
        .await;
    }
    let redis = connect(url).await?;
    let json = sub
        .try_get_one::<bool>("json")
        .ok()
        .flatten()
        .copied()
        .unwrap_or(false);
    let code = match name {
        "inspect" => {
            let pattern = sub.get_one::<String>("pattern").expect("default");
            let objects = leasehold::inspect(&redis, pattern).await?;
            if json {
                for o in &objects {
                    println!("{}", inspect::to_json(o));
                }
            } else {
                print!("{}", inspect::table(&objects));
            }
            ExitCode::SUCCESS
        }
        "deadlocks" => deadlocks(&redis, json).await?,
        "clients" => {
            clients(&redis, json).await?;
            ExitCode::SUCCESS
        }
        "unlock" => {
            let target = sub.get_one::<String>("name").expect("required");
            println!("{}", unlock(&redis, target).await?);
            ExitCode::SUCCESS
        }
        "watch" => {
            let pattern = sub.get_one::<String>("pattern").expect("default");
            watch(&redis, pattern).await?
        }
        _ => unreachable!("clap knows the subcommands"),
    };
    let _ = redis.quit().await;
    Ok(code)
}

async fn connect(url: &str) -> Result<Redis> {
    let config = Config::from_url(url)?;
    let redis = fred::types::Builder::from_config(config)
        .with_connection_config(|c| c.connection_timeout = Duration::from_secs(5))
        // No read waits forever on a connection that went silent.
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(10))
        .set_policy(fred::types::config::ReconnectPolicy::new_constant(1, 100))
        .build()?;
    redis.init().await?;
    Ok(redis)
}

async fn deadlocks(redis: &Redis, json: bool) -> Result<ExitCode> {
    let cycles = leasehold::deadlocks_on(redis).await?;
    for cycle in &cycles {
        if json {
            let members: Vec<_> = cycle
                .members
                .iter()
                .map(|m| json!({"field": m.field, "app": m.app, "holds": m.holds, "waits_for": m.waits_for}))
                .collect();
            println!("{}", json!({ "cycle": members }));
        } else {
            println!("deadlock ({} members):", cycle.members.len());
            for m in &cycle.members {
                println!(
                    "  {} ({}) holds {} and waits for {}",
                    m.field,
                    m.app.as_deref().unwrap_or("foreign"),
                    m.holds,
                    m.waits_for
                );
            }
        }
    }
    if cycles.is_empty() {
        if !json {
            println!("no deadlock");
        }
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(3))
    }
}

async fn clients(redis: &Redis, json: bool) -> Result<()> {
    let records = leasehold::client_records(redis).await?;
    let now = now_ms();
    if json {
        for r in &records {
            let waits: Vec<_> = r
                .waits
                .iter()
                .map(|w| json!({"field": w.field, "lock": w.lock, "waiting_ms": now.saturating_sub(w.since_ms)}))
                .collect();
            println!(
                "{}",
                json!({"id": r.id.to_string(), "app": r.app, "host": r.host, "pid": r.pid,
                       "version": r.version, "started_ms": r.started_ms,
                       "watchdog_ms": r.watchdog_ms, "waits": waits})
            );
        }
        return Ok(());
    }
    let mut rows = vec![[
        "CLIENT".to_owned(),
        "APP".to_owned(),
        "HOST".to_owned(),
        "PID".to_owned(),
        "VERSION".to_owned(),
        "UP".to_owned(),
        "WAITS".to_owned(),
    ]];
    for r in &records {
        let waits: Vec<String> = r
            .waits
            .iter()
            .map(|w| {
                format!(
                    "{} {}",
                    w.lock,
                    inspect::ms(now.saturating_sub(w.since_ms) as i64)
                )
            })
            .collect();
        rows.push([
            r.id.to_string(),
            r.app.clone().unwrap_or_default(),
            r.host.clone().unwrap_or_default(),
            r.pid.map(|p| p.to_string()).unwrap_or_default(),
            r.version.clone().unwrap_or_default(),
            r.started_ms
                .map(|s| inspect::ms(now.saturating_sub(s) as i64))
                .unwrap_or_default(),
            if waits.is_empty() {
                "-".to_owned()
            } else {
                waits.join(", ")
            },
        ]);
    }
    print!("{}", inspect::render(&rows));
    Ok(())
}

/// Frees `name` whatever its kind; says what it freed.
async fn unlock(redis: &Redis, name: &str) -> Result<String> {
    let Some(object) = leasehold::inspect_name(redis, name).await? else {
        return Ok(format!(
            "nothing to unlock: no lock-family object named `{name}`"
        ));
    };
    if object.kind == ObjectKind::SemaphoreOrLatch {
        // A semaphore with no permit out has nothing to free, and a latch
        // nobody waits on nobody to wake; deleting the count would wipe a
        // semaphore's free permits.
        return Ok(format!(
            "`{name}` is a bare count ({}): a semaphore with no permit out or a latch \
             nobody waits on; nothing to free, left as it is (to open it as a latch \
             anyway, delete the key)",
            object.count.unwrap_or(0)
        ));
    }
    let freed = inspect::force_unlock(redis, &object).await?;
    Ok(describe_freed(&object, freed))
}

fn describe_freed(o: &LockObject, freed: bool) -> String {
    if !freed {
        return format!("{} `{}` was not held: nothing freed", o.kind, o.name);
    }
    let holders: Vec<String> = o
        .holders
        .iter()
        .map(|h| format!("{} ({})", h.field, h.app.as_deref().unwrap_or("foreign")))
        .collect();
    let what = if o.kind == ObjectKind::Semaphore {
        format!("{} permit(s)", o.permits.len())
    } else if o.kind == ObjectKind::CountDownLatch {
        format!("count {}", o.count.unwrap_or(0))
    } else if holders.is_empty() {
        "no holder".to_owned()
    } else {
        format!("held by {}", holders.join(", "))
    };
    format!("freed {} `{}`: {}", o.kind, o.name, what)
}

async fn watch(redis: &Redis, pattern: &str) -> Result<ExitCode> {
    loop {
        let objects = leasehold::inspect(redis, pattern).await?;
        // Home, then clear: the table is redrawn in place.
        print!(
            "\x1b[H\x1b[2Jleasehold watch {pattern}  ({} objects, every 1 s, Ctrl-C ends)\n\n{}",
            objects.len(),
            inspect::table(&objects)
        );
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
