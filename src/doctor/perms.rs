//! The `perm.*` checks: may the connected user send what the crate sends?
//!
//! With `ACL DRYRUN <user> <command> <args>` (Redis 7+, for a user allowed
//! to run it; the user from `ACL WHOAMI`) every command is asked about
//! with the very keys and channels a lock of the client would use (those
//! of the private lock `leasehold:doctor:{<uuid>}`), and nothing runs.
//! Otherwise each is probed with a form that has no effect: `EVAL "return
//! 1" 0`; `EXISTS` and `PEXPIRE … 1` on the private lock's names (none
//! exists); `PUBLISH` on its channel (nobody listens); `CLIENT ID`,
//! `CLIENT LIST`, and `CLIENT KILL USER` naming a user that does not
//! exist. `SUBSCRIBE` cannot be probed that way: it is settled by the
//! self-test's waiter (woken through it, or not).

use fred::clients::Client as FredClient;
use fred::types::Value;

use super::probe::{self, args, cmd, cmd_at, Target};
use super::{Check, Status};
use crate::client::Client;

pub(super) const CHANNELS: &str = "perm.channels";

/// `return 1`, whose SHA-1 is [`RETURN_1_SHA`].
const RETURN_1: &str = "return 1";
const RETURN_1_SHA: &str = "e0e1f9fabfc9d4800c877a703b823ac0578ff8db";

/// The names of the private lock, as every kind would use them.
#[derive(Debug, Clone)]
pub(super) struct Private {
    /// The lock's name (before the client's key prefix).
    pub(super) name: String,
    pub(super) key: String,
    pub(super) channel: String,
    pub(super) taken: String,
    pub(super) record: String,
    pub(super) queue: String,
    pub(super) timeouts: String,
    pub(super) token: String,
    pub(super) client_record: String,
    /// The fair lock's alive key of this client (`fair_lock/alive.rs`).
    pub(super) alive: String,
}

/// The permission checks, and what the self-test needs to know of them.
#[derive(Debug)]
pub(super) struct Perms {
    pub(super) checks: Vec<Check>,
    pub(super) private: Private,
    /// Why the self-test must not run (a permission it needs is refused).
    pub(super) blocked: Option<String>,
    /// SUBSCRIBE could not be asked about (no `ACL DRYRUN`).
    subscribe_unknown: bool,
}

/// The answer to one question.
#[derive(Debug)]
enum Answer {
    Allowed,
    Refused(String),
    Unknown(String),
    /// No harmless form to probe with: not asked.
    Skipped,
}

/// How questions are asked.
enum Asker<'a> {
    DryRun { redis: &'a FredClient, user: String },
    Probe { redis: &'a FredClient },
}

// === impl Private ===

impl Private {
    pub(super) fn new(client: &Client) -> Private {
        let name = format!("leasehold:doctor:{{{}}}", uuid::Uuid::new_v4());
        let lock = client.lock(&name);
        let key = lock.key().to_owned();
        let channel = lock.channel().to_owned();
        let taken = crate::core::takes::taken_channel(&channel)
            .map(String::from)
            .unwrap_or_default();
        let field = client.field(0, "");
        let record = crate::naming::request_record_key(&key, &field);
        let record = String::from_utf8_lossy(record.as_bytes()).into_owned();
        Private {
            queue: client.fair_lock(&name).queue_key().to_owned(),
            timeouts: client.fair_lock(&name).timeout_key().to_owned(),
            token: client.fenced_lock(&name).token_key().to_owned(),
            client_record: format!("leasehold:client:{{{}}}", uuid::Uuid::new_v4()),
            alive: crate::naming::prefix_name("leasehold_alive", &key)
                + ":"
                + &client.id().to_string(),
            name,
            key,
            channel,
            taken,
            record,
        }
    }
}

// === impl Asker ===

impl Asker<'_> {
    fn how(&self) -> String {
        match self {
            Asker::DryRun { user, .. } => format!("user `{user}`, by ACL DRYRUN"),
            Asker::Probe { .. } => "probed (no ACL DRYRUN)".to_owned(),
        }
    }

    /// May the user run `command` (with `key` for routing, if any)?
    /// `probe` is the harmless form sent without DRYRUN (`None`: not
    /// probed).
    async fn ask(&self, command: &[&str], key: Option<&str>, probe: Option<&[&str]>) -> Answer {
        match self {
            Asker::DryRun { redis, user } => {
                let mut all = vec!["DRYRUN", user.as_str()];
                all.extend_from_slice(command);
                match dryrun(redis, key, all).await {
                    Ok(reply) if reply == "OK" => Answer::Allowed,
                    Ok(reply) => Answer::Refused(reply),
                    Err(e) => Answer::Unknown(e.details().to_owned()),
                }
            }
            Asker::Probe { redis } => {
                let Some(probe) = probe else {
                    return Answer::Skipped;
                };
                let (name, rest) = probe.split_first().expect("a command");
                let name: &'static str = match *name {
                    "EVAL" => "EVAL",
                    "EVALSHA" => "EVALSHA",
                    "SCRIPT" => "SCRIPT",
                    "EXISTS" => "EXISTS",
                    "PEXPIRE" => "PEXPIRE",
                    "PUBLISH" => "PUBLISH",
                    "SPUBLISH" => "SPUBLISH",
                    "CLIENT" => "CLIENT",
                    _ => return Answer::Skipped,
                };
                let reply = match key {
                    Some(key) => cmd_at::<Value>(redis, key, name, args(rest)).await,
                    None => cmd::<Value>(redis, None, name, args(rest)).await,
                };
                match reply {
                    Ok(_) => Answer::Allowed,
                    Err(e) if probe::refused(&e) => Answer::Refused(e.details().to_owned()),
                    // `CLIENT KILL USER <nobody>`: checked, then found no such user.
                    Err(e) if e.details().contains("No such user") => Answer::Allowed,
                    // `EVALSHA` reaching a node that has not loaded the
                    // script (a cluster): the ACL let it through first.
                    Err(e) if e.details().starts_with("NOSCRIPT") => Answer::Allowed,
                    Err(e) => Answer::Unknown(e.details().to_owned()),
                }
            }
        }
    }
}

/// `ACL DRYRUN …`, routed to `key`'s node if given.
async fn dryrun(
    redis: &FredClient,
    key: Option<&str>,
    all: Vec<&str>,
) -> probe::FredResult<String> {
    match key {
        Some(key) => cmd_at(redis, key, "ACL", args(&all)).await,
        None => cmd(redis, None, "ACL", args(&all)).await,
    }
}

/// Finds how to ask: `ACL DRYRUN` if this user may run it.
async fn asker(redis: &FredClient) -> Asker<'_> {
    let Ok(user) = cmd::<String>(redis, None, "ACL", args(&["WHOAMI"])).await else {
        return Asker::Probe { redis };
    };
    match cmd::<String>(redis, None, "ACL", args(&["DRYRUN", &user, "PING"])).await {
        Ok(reply) if reply == "OK" => Asker::DryRun { redis, user },
        _ => Asker::Probe { redis },
    }
}

/// One group of questions: (label, dry-run form, probe form, routing key).
type Question<'a> = (&'a str, Vec<&'a str>, Option<Vec<&'a str>>, Option<&'a str>);

/// Asks every question; returns the refused and the unknown labels.
async fn ask_all(asker: &Asker<'_>, questions: &[Question<'_>]) -> (Vec<String>, Vec<String>) {
    let mut refused = Vec::new();
    let mut unknown = Vec::new();
    for (label, command, probe, key) in questions {
        match asker.ask(command, *key, probe.as_deref()).await {
            Answer::Allowed | Answer::Skipped => {}
            Answer::Refused(why) => refused.push(format!("{label}: {}", short(&why))),
            Answer::Unknown(why) => unknown.push(format!("{label} ({why})")),
        }
    }
    (refused, unknown)
}

/// A refusal's reason, without the words every one of them has.
fn short(why: &str) -> String {
    let why = why.trim_start_matches("NOPERM ");
    let why = why
        .strip_prefix("this user has no permissions to ")
        .or_else(|| why.strip_prefix("This user has no permissions to "))
        .unwrap_or(why);
    if why.contains("channel") {
        "channel refused".to_owned()
    } else if why.contains(" key") {
        "key refused".to_owned()
    } else if let Some(command) = why.strip_prefix("run the ") {
        format!("{} refused", command.trim_end_matches(" command"))
    } else {
        why.to_owned()
    }
}

/// The verdict of a group: `fail_status` if anything was refused.
fn verdict(
    name: &str,
    how: &str,
    allowed: &str,
    refused: &[String],
    unknown: &[String],
    fail_status: Status,
    advice: &str,
) -> Check {
    if !refused.is_empty() {
        Check::new(
            name,
            fail_status,
            format!("{how}: refused {}", refused.join(", ")),
        )
        .advise(advice)
    } else if !unknown.is_empty() {
        Check::not_checked(
            name,
            format!("{how}: {allowed} allowed; unknown: {}", unknown.join(", ")),
        )
    } else {
        Check::ok(name, format!("{how}: {allowed} allowed"))
    }
}

/// Every `perm.*` check, on the private lock's names.
pub(super) async fn check(client: &Client, target: &Target) -> Perms {
    let redis = client.redis();
    let p = Private::new(client);
    let asker = asker(redis).await;
    let how = asker.how();
    let mut checks = Vec::new();
    let mut blocked = Vec::new();

    // Scripts.
    let scripts: Vec<Question<'_>> = vec![
        (
            "EVAL",
            vec!["EVAL", RETURN_1, "0"],
            Some(vec!["EVAL", RETURN_1, "0"]),
            None,
        ),
        (
            "EVALSHA",
            vec!["EVALSHA", RETURN_1_SHA, "0"],
            Some(vec!["EVALSHA", RETURN_1_SHA, "0"]),
            None,
        ),
        (
            "SCRIPT LOAD",
            vec!["SCRIPT", "LOAD", RETURN_1],
            Some(vec!["SCRIPT", "LOAD", RETURN_1]),
            None,
        ),
    ];
    let (refused, unknown) = ask_all(&asker, &scripts).await;
    if !refused.is_empty() {
        blocked.push("scripts");
    }
    checks.push(verdict(
        "perm.scripts",
        &how,
        "EVALSHA, EVAL, SCRIPT LOAD",
        &refused,
        &unknown,
        Status::Fail,
        "every lock operation is a Lua script (EVALSHA, loaded with SCRIPT LOAD or EVAL): no lock \
         works; allow +evalsha +eval +script|load (or +@scripting)",
    ));

    // Keys: the lock's hash and its request record (declared by every
    // lock script), then the fair and fenced locks' keys, the client record.
    let (k, rec) = (p.key.as_str(), p.record.as_str());
    let core: Vec<Question<'_>> = vec![
        (
            "the lock (HINCRBY)",
            vec!["HINCRBY", k, "f", "1"],
            Some(vec!["PEXPIRE", k, "1"]),
            Some(k),
        ),
        ("the lock (PEXPIRE)", vec!["PEXPIRE", k, "1"], None, Some(k)),
        (
            "the lock (read)",
            vec!["HGET", k, "f"],
            Some(vec!["EXISTS", k]),
            Some(k),
        ),
        ("the lock (DEL)", vec!["DEL", k], None, Some(k)),
        (
            "the request record (write)",
            vec!["SET", rec, "1", "PX", "1"],
            Some(vec!["PEXPIRE", rec, "1"]),
            Some(rec),
        ),
        (
            "the request record (read)",
            vec!["GET", rec],
            Some(vec!["EXISTS", rec]),
            Some(rec),
        ),
        (
            "EVALSHA declaring both",
            vec!["EVALSHA", RETURN_1_SHA, "2", k, rec],
            None,
            Some(k),
        ),
    ];
    let (refused, unknown) = ask_all(&asker, &core).await;
    let mut keys = verdict(
        "perm.keys",
        &how,
        &format!("the lock `{k}` and its request record `{rec}`"),
        &refused,
        &unknown,
        Status::Fail,
        &format!(
            "every lock script declares the lock's key ({}) and its request record \
             `leasehold_latch:…` (not under the prefix): allow read and write on both (e.g. \
             `~{}*` and `~leasehold_latch:*`)",
            if client.key_prefix().is_empty() {
                "no key prefix set: the lock's name itself".to_owned()
            } else {
                format!("after the key prefix `{}`", client.key_prefix())
            },
            client.key_prefix()
        ),
    );
    if !refused.is_empty() {
        blocked.push("keys");
    }
    let (q, t, tok, cr, alive) = (
        p.queue.as_str(),
        p.timeouts.as_str(),
        p.token.as_str(),
        p.client_record.as_str(),
        p.alive.as_str(),
    );
    let extra: Vec<Question<'_>> = vec![
        (
            "FairLock queue",
            vec!["RPUSH", q, "f"],
            Some(vec!["PEXPIRE", q, "1"]),
            Some(q),
        ),
        (
            "FairLock timeouts",
            vec!["ZADD", t, "1", "f"],
            Some(vec!["PEXPIRE", t, "1"]),
            Some(t),
        ),
        (
            "FencedLock token",
            vec!["INCR", tok],
            Some(vec!["PEXPIRE", tok, "1"]),
            Some(tok),
        ),
        (
            "client record",
            vec!["HSET", cr, "f", "v"],
            Some(vec!["PEXPIRE", cr, "1"]),
            Some(cr),
        ),
        (
            "FairLock alive key",
            vec!["SET", alive, "1", "PX", "1"],
            Some(vec!["PEXPIRE", alive, "1"]),
            Some(alive),
        ),
    ];
    let (more_refused, more_unknown) = ask_all(&asker, &extra).await;
    if keys.status == Status::Ok && !more_unknown.is_empty() {
        keys.status = Status::NotChecked;
        keys.found = format!("{}; unknown: {}", keys.found, more_unknown.join(", "));
    }
    if !more_refused.is_empty() {
        keys.found = format!("{}; refused {}", keys.found, more_refused.join(", "));
        if keys.status < Status::Warn {
            keys.status = Status::Warn;
        }
        let advice = "FairLock needs `~redisson_lock_queue:*` and `~redisson_lock_timeout:*`, \
             FencedLock `~redisson_lock_token:*` (Redisson's names, not under the key prefix); \
             the client record `~leasehold:client:*` (else build clients with client_record(false): \
             operators' tools and deadlock detection then do not see them); \
             `~leasehold_alive:*` lets a client keep its fair waiters alive with one key per lock \
             (else each waiter refreshes its own place: 2.5 Redis commands a second per waiter)";
        keys.advice = Some(match keys.advice.take() {
            Some(a) => format!("{a}; {advice}"),
            None => advice.to_owned(),
        });
    }
    checks.push(keys);

    // Channels.
    let (publish, subscribe) = if target.publish == "spublish" {
        ("SPUBLISH", "SSUBSCRIBE")
    } else {
        ("PUBLISH", "SUBSCRIBE")
    };
    let (c, tk) = (p.channel.as_str(), p.taken.as_str());
    let mut channel_qs: Vec<Question<'_>> = vec![
        (
            publish,
            vec![publish, c, "0"],
            Some(vec![publish, c, "0"]),
            Some(c),
        ),
        (subscribe, vec![subscribe, c], None, Some(c)),
    ];
    if !tk.is_empty() {
        channel_qs.push((publish, vec![publish, tk, "0"], None, Some(tk)));
        channel_qs.push((subscribe, vec![subscribe, tk], None, Some(tk)));
    }
    let (refused, unknown) = ask_all(&asker, &channel_qs).await;
    if !refused.is_empty() {
        blocked.push("channels");
    }
    // Without DRYRUN only PUBLISH was probed: SUBSCRIBE (and the take
    // channel) are settled by the self-test (`settle_subscribe`).
    let subscribe_unknown =
        matches!(asker, Asker::Probe { .. }) && refused.is_empty() && unknown.is_empty();
    let mut channels = verdict(
        CHANNELS,
        &how,
        &format!("{publish} and {subscribe} on `{c}` and `{tk}`"),
        &refused,
        &unknown,
        Status::Fail,
        "a release deletes the lock and then fails at PUBLISH inside its script (the caller gets \
         an error), and waiters are never woken (they wait for their re-check bound); allow \
         `&redisson_lock__channel:*` and `&leasehold_lock__taken:*` (or allchannels)",
    );
    if subscribe_unknown {
        channels.status = Status::NotChecked;
        channels.advice = Some(
            "SUBSCRIBE cannot be probed without subscribing: the self-test's waiter settles it \
             (or run as a user allowed ACL DRYRUN)"
                .to_owned(),
        );
        channels.found =
            format!("{how}: {publish} on `{c}` allowed; {subscribe} and `{tk}` not probed");
    }
    checks.push(channels);

    // The fence.
    let nobody = format!("leasehold-doctor-nobody-{}", uuid::Uuid::new_v4());
    let fence: Vec<Question<'_>> = vec![
        (
            "CLIENT ID",
            vec!["CLIENT", "ID"],
            Some(vec!["CLIENT", "ID"]),
            None,
        ),
        (
            "CLIENT LIST",
            vec!["CLIENT", "LIST", "TYPE", "normal"],
            Some(vec!["CLIENT", "LIST", "TYPE", "normal"]),
            None,
        ),
        (
            "CLIENT KILL",
            vec!["CLIENT", "KILL", "ID", "1"],
            Some(vec!["CLIENT", "KILL", "USER", &nobody]),
            None,
        ),
    ];
    let (refused, unknown) = ask_all(&asker, &fence).await;
    checks.push(verdict(
        "perm.fence",
        &how,
        "CLIENT ID, CLIENT LIST, CLIENT KILL",
        &refused,
        &unknown,
        Status::Warn,
        "without them a copy of a request stuck on a connection the client replaced can still \
         run after its call ended, until its request record's TTL (at least 30 s), instead of \
         never; allow +client|id +client|list +client|kill +client|setname",
    ));

    // INFO.
    checks.push(match target.info_refused() {
        None => Check::ok("perm.info", "INFO allowed"),
        Some(why) => Check::new("perm.info", Status::Warn, format!("INFO refused ({why})")).advise(
            "leasehold reads the server version from INFO when it connects; without it, it \
             assumes Redis 7+ (sharded pub/sub on a cluster); allow +info",
        ),
    });

    // The names are the private lock's: shown short.
    let uuid = p
        .name
        .trim_start_matches("leasehold:doctor:{")
        .trim_end_matches('}');
    let id = client.id().to_string();
    for c in &mut checks {
        c.found = c.found.replace(uuid, "…").replace(&id, "<client-uuid>");
    }
    Perms {
        checks,
        private: p,
        blocked: (!blocked.is_empty()).then(|| format!("refused: {}", blocked.join(", "))),
        subscribe_unknown,
    }
}

/// Settles `perm.channels` once the self-test ran: without `ACL DRYRUN`,
/// SUBSCRIBE is known to be allowed only if the self-test's waiter was
/// woken through it.
pub(super) fn settle_subscribe(check: &mut Check, perms: &Perms, wakeup: Option<Status>) {
    if !perms.subscribe_unknown {
        return;
    }
    match wakeup {
        Some(Status::Ok) => {
            check.status = Status::Ok;
            check.advice = None;
            check.found = check.found.replace(
                "not probed",
                "not probed, but the self-test's waiter was woken through them",
            );
        }
        Some(Status::Fail) => {
            check.advice = Some(
                "the self-test's waiter was not woken through its subscription: see selftest.wakeup"
                    .to_owned(),
            );
        }
        _ => {}
    }
}
