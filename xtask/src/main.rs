//! `cargo xtask`: the README's two commands, on a machine with only Rust.
//!
//! ```text
//! cargo xtask demo [ARGS…]   the seckill demo: cargo run --example seckill -- ARGS…
//! cargo xtask test [ARGS…]   the whole test suite, then the feature-gated runs
//!                            and the Redisson interop run
//! cargo xtask interop [ARGS…] only the Redisson interop run
//! cargo xtask help           usage
//! ```
//!
//! Both first make sure the programs the run starts are there: on the
//! PATH, or where `LEASEHOLD_REDIS_SERVER` / `LEASEHOLD_REDIS_CLI` point
//! (the harness in `testkit/` reads the same variables). When one is
//! missing and xtask runs as root on a machine with `apt-get` (a fresh
//! Debian or Ubuntu), it installs the package; otherwise it prints one line
//! saying what to install and exits with 1.
//!
//! `cargo xtask test` also runs `tests/redisson_interop.rs` against the real
//! Redisson 4.7.0: it finds `java` and `javac` (installing
//! `openjdk-17-jdk-headless` the same way), builds the Redisson classpath
//! (`REDISSON_CLASSPATH`, else `../shared/redisson/redisson-4.7.0-locks.jar`
//! beside the repository plus the Debian jars its README lists, installed
//! with apt-get when missing), compiles the driver in `interop/java/` into
//! `target/interop/classes` and hands both to that run through
//! `LEASEHOLD_JAVA`, `LEASEHOLD_INTEROP_CLASSPATH` and
//! `LEASEHOLD_INTEROP_REQUIRED=1` (the other runs get none of them, so the
//! interop tests run once). `LEASEHOLD_INTEROP=skip` leaves the interop run
//! out, and says so.
//!
//! `cargo xtask` is an alias in `.cargo/config.toml`.

use std::env;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{self, Command, ExitStatus};
use std::time::Instant;

/// A `cargo test` run that needs a cargo feature, after the workspace run.
struct FeatureRun {
    /// Value of `--features` (none if empty).
    features: &'static str,
    /// Arguments that pick the tests, e.g. `["--test", "tls"]`.
    select: &'static [&'static str],
    /// Built with `--profile scale` (Cargo.toml: optimized at level 1,
    /// without debug assertions; about half the cold build of `--release`).
    optimized: bool,
    /// Runs the Redisson interop tests: gets the Java environment and shows
    /// the tests' output (their figures).
    interop: bool,
}

/// One `cargo test` run of `cargo xtask test`.
struct TestRun {
    /// The `cargo` arguments.
    args: Vec<OsString>,
    /// Gets the Java environment ([`FeatureRun::interop`]).
    interop: bool,
    /// Runs against this server of the matrix (`LEASEHOLD_REDIS_SERVER`
    /// and `LEASEHOLD_REDIS_CLI` set to its binaries).
    server: Option<(PathBuf, PathBuf)>,
}

/// The servers of the compatibility matrix beside Debian's redis-server
/// (the workspace run): folder under `../shared/servers/` (or
/// `LEASEHOLD_SERVERS_DIR`), server binary, cli binary, the test files
/// run on it. A folder that is missing is reported and skipped;
/// `LEASEHOLD_SERVER_MATRIX=skip` skips the matrix.
const MATRIX: &[(&str, &str, &str, &[&str])] = &[
    ("redis-6.2.14", "redis-server", "redis-cli", MATRIX_TESTS),
    (
        "redis-7.4.1",
        "redis-server",
        "redis-cli",
        MATRIX_TESTS_NEAR,
    ),
    ("valkey-8.0.1", "valkey-server", "valkey-cli", MATRIX_TESTS),
];

/// The tests that say something about the server, run on each server of
/// the matrix: the lock family's scripts, the fair lock's queue and its
/// alive keys (scripts that read undeclared keys), cluster with failover,
/// the probes at connect, the holes of issue 44 (ACL rules differ by
/// version), the doctor. Left to the workspace run: tests of the client's
/// own logic (mutual exclusion under load, re-entrance, waiting, the
/// watchdog, the fair handoff, faults over a proxy, reconnects, unknown
/// outcomes, hostile input, the random history, multi-locks, Redlock) and
/// Sentinel.
/// The list was cut from 17 files to 10 when CI reached 41 minutes (stop
/// 49: 2,449 s), to keep it under 40. Redis 7.4.1, the nearest to the
/// workspace run's 7.0.15, runs only [`MATRIX_TESTS_NEAR`].
const MATRIX_TESTS: &[&str] = &[
    "fair_lock",
    "idle_waiters",
    "fenced_lock",
    "rw_lock",
    "semaphore",
    "latch",
    "cluster",
    "servers",
    "unchecked",
    "doctor",
];

/// The matrix's tests on a server of the workspace run's major version
/// (Redis 7.4.1 beside 7.0.15): what a minor version changes (the probes
/// at connect, ACL rules, the doctor, the cluster), not the scripts, which
/// the 7.0 run covers (about 2 minutes less of CI).
const MATRIX_TESTS_NEAR: &[&str] = &["servers", "unchecked", "doctor", "cluster"];

/// The feature-gated test runs of `cargo xtask test`, in order. A feature
/// with its own tests is one more line here.
const FEATURE_RUNS: &[FeatureRun] = &[
    FeatureRun {
        features: "tls-rustls",
        select: &["--test", "tls"],
        optimized: false,
        interop: false,
    },
    FeatureRun {
        features: "blocking",
        select: &["--test", "blocking"],
        optimized: false,
        interop: false,
    },
    // The blocking API's doc examples (their names contain "blocking"):
    // the workspace run builds without the feature.
    FeatureRun {
        features: "blocking",
        select: &["--doc", "blocking"],
        optimized: false,
        interop: false,
    },
    // The `metrics` recorder test (the other observability tests run in
    // the workspace run too).
    FeatureRun {
        features: "metrics",
        select: &["--test", "observability"],
        optimized: false,
        interop: false,
    },
    // Renewal at scale with the 1 s watchdog issue 9 asks for: 10,000
    // leases on a cluster through a slot migration. An optimized build
    // (the debug run above uses a 3 s watchdog: a debug client on a
    // 2-core machine misses 167 ms call bounds whenever the test bursts).
    FeatureRun {
        features: "",
        select: &["--test", "cluster_scale"],
        optimized: true,
        interop: false,
    },
    // Against the real Redisson 4.7.0 (a Java driver beside a leasehold
    // client on one redis-server), with the figures shown.
    FeatureRun {
        features: "",
        select: &["--test", "redisson_interop"],
        optimized: false,
        interop: true,
    },
];

/// Workspace members `cargo xtask test` leaves out: `leasehold-compare` is a
/// benchmark report with no tests, and it builds the peer lock crates.
const EXCLUDED: &[&str] = &["leasehold-compare"];

/// An external program a run starts.
struct Tool {
    /// Name looked up on the PATH.
    command: &'static str,
    /// Environment variable that the harness reads instead of the PATH.
    env: Option<&'static str>,
    /// Debian/Ubuntu package that provides it.
    apt: &'static str,
    /// Homebrew formula that provides it.
    brew: &'static str,
}

/// Every server the demo and the tests start (and the sentinels).
const REDIS_SERVER: Tool = Tool {
    command: "redis-server",
    env: Some("LEASEHOLD_REDIS_SERVER"),
    apt: "redis-server",
    brew: "redis",
};

/// `redis-cli --cluster create` joins the cluster harness's nodes.
const REDIS_CLI: Tool = Tool {
    command: "redis-cli",
    env: Some("LEASEHOLD_REDIS_CLI"),
    apt: "redis-tools",
    brew: "redis",
};

/// The TLS test makes its private CA and certificates with `openssl`.
const OPENSSL: Tool = Tool {
    command: "openssl",
    env: None,
    apt: "openssl",
    brew: "openssl",
};

/// The `leasehold` tool's `watch` test draws its table in a real terminal
/// (`cli/tests/cli.rs`; it skips, saying so, without tmux).
const TMUX: Tool = Tool {
    command: "tmux",
    env: None,
    apt: "tmux",
    brew: "tmux",
};

const USAGE_HEAD: &str = "\
cargo xtask: the README's two commands

usage:
  cargo xtask demo [ARGS…]  the seckill demo: cargo run --example seckill -- ARGS…
  cargo xtask test [ARGS…]  the whole test suite; ARGS go to every run:";

const USAGE_TAIL: &str =
    "  cargo xtask interop [ARGS…]  only the Redisson interop run (the last above)
  cargo xtask help          this text

Both first make sure redis-server (test: also redis-cli, openssl, tmux) is on
the PATH or where LEASEHOLD_REDIS_SERVER / LEASEHOLD_REDIS_CLI point. If one
is missing and this runs as root with apt-get, it runs `apt-get update` and
`apt-get install -y` for it; otherwise it says what to install and exits 1.
The demo needs no redis-server when REDIS_URL is set.

The test command's last run is against the real Redisson 4.7.0: it needs
java and javac (openjdk-17-jdk-headless, installed the same way) and a
Redisson classpath: REDISSON_CLASSPATH, else
../shared/redisson/redisson-4.7.0-locks.jar beside the repository and the
Debian jars its README lists (installed the same way). Without them it
says what is missing and exits 1; LEASEHOLD_INTEROP=skip leaves that run
out.";

fn main() {
    let mut args = env::args_os().skip(1);
    let command = args.next();
    let rest: Vec<OsString> = args.collect();
    let name = command.map(|c| c.to_string_lossy().into_owned());
    let code = match name.as_deref() {
        None | Some("help" | "-h" | "--help") => {
            println!("{}", usage());
            0
        }
        Some("demo") => demo(&rest),
        Some("test") => test(&rest),
        Some("interop") => interop(&rest),
        Some(other) => {
            eprintln!(
                "error: unknown subcommand `{other}`; the subcommands are demo, test, interop and help"
            );
            2
        }
    };
    process::exit(code);
}

/// The usage text, with the test runs taken from `test_runs`.
fn usage() -> String {
    let mut text = String::from(USAGE_HEAD);
    for run in test_runs(&[]) {
        text.push_str("\n                              cargo ");
        text.push_str(&shell_words(&run.args));
    }
    text.push('\n');
    text.push_str(USAGE_TAIL);
    text
}

/// `cargo xtask demo`: runs the seckill example with `extra` as its
/// arguments and returns its exit code.
fn demo(extra: &[OsString]) -> i32 {
    if env::var_os("REDIS_URL").is_some() {
        println!("xtask: REDIS_URL is set, so the demo uses that server and needs no redis-server");
    } else if let Err(code) = ensure(&[&REDIS_SERVER]) {
        return code;
    }
    let mut args: Vec<OsString> = ["run", "--example", "seckill"].map(OsString::from).into();
    if !extra.is_empty() {
        args.push("--".into());
        args.extend(extra.iter().cloned());
    }
    match cargo(&args, "==>", None) {
        Ok(_) => 0,
        Err(code) => code,
    }
}

/// `cargo xtask test`: the workspace tests, then each feature-gated run;
/// stops at the first failing run and returns its exit code.
fn test(extra: &[OsString]) -> i32 {
    if let Err(code) = ensure(&[&REDIS_SERVER, &REDIS_CLI, &OPENSSL, &TMUX]) {
        return code;
    }
    let interop = match interop_env() {
        Ok(env) => env,
        Err(code) => return code,
    };
    let runs: Vec<TestRun> = test_runs(extra)
        .into_iter()
        .filter(|run| !run.interop || interop.is_some())
        .collect();
    let total = runs.len();
    let started = Instant::now();
    for (i, run) in runs.iter().enumerate() {
        let header = match &run.server {
            Some((server, _)) => format!("==> [{}/{total}] on {}", i + 1, server.display()),
            None => format!("==> [{}/{total}]", i + 1),
        };
        let server_env: Vec<(&str, OsString)>;
        let env = if run.interop {
            interop.as_deref()
        } else if let Some((server, cli)) = &run.server {
            server_env = vec![
                ("LEASEHOLD_REDIS_SERVER", server.clone().into_os_string()),
                ("LEASEHOLD_REDIS_CLI", cli.clone().into_os_string()),
            ];
            Some(&server_env[..])
        } else {
            None
        };
        match cargo(&run.args, &header, env) {
            Ok(secs) => println!("xtask: [{}/{total}] passed in {secs:.0} s", i + 1),
            Err(code) => {
                eprintln!("xtask: [{}/{total}] failed (exit code {code})", i + 1);
                return code;
            }
        }
    }
    println!(
        "xtask: all {total} test runs passed in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    0
}

/// `cargo xtask interop`: only the Redisson interop run of `cargo xtask
/// test`, with `extra` appended; returns its exit code.
fn interop(extra: &[OsString]) -> i32 {
    if let Err(code) = ensure(&[&REDIS_SERVER]) {
        return code;
    }
    let vars = match interop_env() {
        Ok(Some(vars)) => vars,
        Ok(None) => return 0,
        Err(code) => return code,
    };
    let runs: Vec<TestRun> = test_runs(extra)
        .into_iter()
        .filter(|run| run.interop)
        .collect();
    for run in &runs {
        if let Err(code) = cargo(&run.args, "==>", Some(&vars)) {
            return code;
        }
    }
    0
}

/// The `cargo` runs of `cargo xtask test`, `extra` appended to each.
fn test_runs(extra: &[OsString]) -> Vec<TestRun> {
    let mut workspace: Vec<OsString> = vec!["test".into(), "--workspace".into()];
    for package in EXCLUDED {
        workspace.push("--exclude".into());
        workspace.push((*package).into());
    }
    let mut runs = vec![TestRun {
        args: workspace,
        interop: false,
        server: None,
    }];
    for run in FEATURE_RUNS {
        let mut args: Vec<OsString> = vec!["test".into()];
        if run.optimized {
            args.push("--profile".into());
            args.push("scale".into());
        }
        if !run.features.is_empty() {
            args.push("--features".into());
            args.push(run.features.into());
        }
        args.extend(run.select.iter().map(OsString::from));
        runs.push(TestRun {
            args,
            interop: run.interop,
            server: None,
        });
    }
    runs.extend(matrix_runs());
    for run in &mut runs {
        run.args.extend(extra.iter().cloned());
    }
    runs
}

/// One run of its test files per server of [`MATRIX`] found.
fn matrix_runs() -> Vec<TestRun> {
    if env::var_os("LEASEHOLD_SERVER_MATRIX").is_some_and(|v| v == "skip") {
        println!("xtask: LEASEHOLD_SERVER_MATRIX=skip: the server matrix is NOT run");
        return Vec::new();
    }
    let dir = env::var_os("LEASEHOLD_SERVERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join("..").join("shared").join("servers"));
    let mut runs = Vec::new();
    for (folder, server, cli, tests) in MATRIX {
        let (server, cli) = (dir.join(folder).join(server), dir.join(folder).join(cli));
        if !server.is_file() || !cli.is_file() {
            println!(
                "xtask: server matrix: {} not found: {folder} is NOT tested",
                server.display()
            );
            continue;
        }
        let mut args: Vec<OsString> = vec!["test".into(), "-p".into(), "leasehold".into()];
        for test in *tests {
            args.push("--test".into());
            args.push((*test).into());
        }
        runs.push(TestRun {
            args,
            interop: false,
            server: Some((server, cli)),
        });
    }
    runs
}

/// Runs `cargo ARGS` in the workspace root after printing `header` and the
/// command on one line, with `interop` as its Java environment (without
/// one, the interop variables are removed so those tests skip). Returns
/// the seconds it took, or its exit code.
fn cargo(
    args: &[OsString],
    header: &str,
    interop: Option<&[(&str, OsString)]>,
) -> Result<f64, i32> {
    println!("{header} cargo {}", shell_words(args));
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let started = Instant::now();
    let mut command = Command::new(&cargo);
    command.args(args).current_dir(workspace_root());
    match interop {
        Some(vars) => {
            command.envs(vars.iter().map(|(k, v)| (k, v)));
        }
        None => {
            for var in INTEROP_VARS {
                command.env_remove(var);
            }
        }
    }
    match command.status() {
        Ok(status) if status.success() => Ok(started.elapsed().as_secs_f64()),
        Ok(status) => Err(exit_code(status)),
        Err(e) => {
            eprintln!("error: cannot run {}: {e}", cargo.to_string_lossy());
            Err(1)
        }
    }
}

/// The workspace root: the parent of this crate's directory.
fn workspace_root() -> PathBuf {
    // `cargo run` sets CARGO_MANIFEST_DIR for the binary too; the value
    // baked in at build time is the fallback for a directly run binary.
    let manifest = env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    match manifest.parent() {
        Some(root) => root.to_path_buf(),
        None => manifest,
    }
}

/// A child's exit code, or 128 + the signal that killed it (as a shell
/// reports it); never 0.
fn exit_code(status: ExitStatus) -> i32 {
    if let Some(code) = status.code() {
        return if code == 0 { 1 } else { code };
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return 128 + signal;
        }
    }
    1
}

/// `args` joined with spaces, each quoted if a shell would need it.
fn shell_words(args: &[OsString]) -> String {
    let words: Vec<String> = args
        .iter()
        .map(|a| {
            let a = a.to_string_lossy();
            let plain = !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_=./:,+@%".contains(c));
            if plain {
                a.into_owned()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect();
    words.join(" ")
}

/// Where a tool was found.
enum Located {
    At(PathBuf),
    Missing,
    /// Its environment variable is set but names no executable file.
    BadOverride(&'static str, OsString),
}

fn locate(tool: &Tool) -> Located {
    if let Some(var) = tool.env {
        if let Some(value) = env::var_os(var) {
            return match resolve(&value) {
                Some(path) => Located::At(path),
                None => Located::BadOverride(var, value),
            };
        }
    }
    match find_in_path(OsStr::new(tool.command)) {
        Some(path) => Located::At(path),
        None => Located::Missing,
    }
}

/// Resolves a program as `Command::new` does: a name with more than one
/// path component is a path, a bare name is searched on the PATH.
fn resolve(program: &OsStr) -> Option<PathBuf> {
    let path = Path::new(program);
    match path.components().count() {
        0 => None,
        1 => find_in_path(program),
        _ => is_executable(path).then(|| path.to_path_buf()),
    }
}

/// The first executable file called `name` in the PATH's directories.
fn find_in_path(name: &OsStr) -> Option<PathBuf> {
    let path = env::var_os("PATH")?;
    env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .flat_map(|dir| {
            let mut with_suffix = name.to_os_string();
            with_suffix.push(env::consts::EXE_SUFFIX);
            [dir.join(name), dir.join(with_suffix)]
        })
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    let Ok(meta) = path.metadata() else {
        return false;
    };
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        meta.is_file() && meta.permissions().mode() & 0o111 != 0
    }
    #[cfg(not(unix))]
    {
        meta.is_file()
    }
}

/// Makes sure every tool is there, installing the missing ones with
/// apt-get when running as root where apt-get exists. `Err` carries the
/// exit code to stop with; the reason has been printed.
fn ensure(tools: &[&Tool]) -> Result<(), i32> {
    let mut missing = Vec::new();
    for tool in tools {
        match locate(tool) {
            Located::At(_) => {}
            Located::Missing => missing.push(*tool),
            Located::BadOverride(var, value) => {
                eprintln!(
                    "error: {var}={} is not an executable file; point it at {} or unset it",
                    value.to_string_lossy(),
                    tool.command
                );
                return Err(1);
            }
        }
    }
    if !missing.is_empty() {
        if !(is_root() && find_in_path(OsStr::new("apt-get")).is_some()) {
            eprintln!("error: {}", install_hint(&missing));
            return Err(1);
        }
        apt_install(&missing)?;
    }
    let found: Vec<String> = tools
        .iter()
        .map(|tool| match locate(tool) {
            Located::At(path) => format!("{} ({})", tool.command, path.display()),
            _ => format!("{} (missing)", tool.command),
        })
        .collect();
    println!("xtask: using {}", found.join(", "));
    Ok(())
}

/// The one line that says what to install.
fn install_hint(missing: &[&Tool]) -> String {
    let names: Vec<&str> = missing.iter().map(|t| t.command).collect();
    let apt = unique(missing.iter().map(|t| t.apt));
    let brew = unique(missing.iter().map(|t| t.brew));
    let vars: Vec<&str> = missing.iter().filter_map(|t| t.env).collect();
    let (it, paths) = if missing.len() == 1 {
        ("it", "its path")
    } else {
        ("them", "their paths")
    };
    let mut line = format!(
        "{} not found; install {it} (Debian/Ubuntu: sudo apt-get install {}; macOS: brew install {})",
        names.join(", "),
        apt.join(" "),
        brew.join(" ")
    );
    if !vars.is_empty() {
        let paths = if vars.len() == 1 { "its path" } else { paths };
        line.push_str(&format!(" or set {} to {paths}", vars.join(", ")));
    }
    line
}

/// `items` without repeats, in first-seen order.
fn unique<'a>(items: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

/// Whether this process runs as root (effective uid 0), asked of `id -u`.
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `apt-get update`, then `apt-get install -y` the missing tools' packages;
/// checks that they are on the PATH afterwards.
fn apt_install(missing: &[&Tool]) -> Result<(), i32> {
    let names: Vec<&str> = missing.iter().map(|t| t.command).collect();
    let packages = unique(missing.iter().map(|t| t.apt));
    apt_get(&names.join(", "), &packages)?;
    for tool in missing {
        if !matches!(locate(tool), Located::At(_)) {
            eprintln!(
                "error: {} is still not on the PATH after apt-get install {}",
                tool.command, tool.apt
            );
            return Err(1);
        }
    }
    Ok(())
}

/// `apt-get update`, then `apt-get install -y PACKAGES`, saying that `what`
/// was not found.
fn apt_get(what: &str, packages: &[&str]) -> Result<(), i32> {
    println!(
        "xtask: {what} not found; installing as root: apt-get update && apt-get install -y {}",
        packages.join(" ")
    );
    let started = Instant::now();
    let steps: [Vec<&str>; 2] = [
        vec!["update", "-q"],
        [&["install", "-y", "-q"][..], packages].concat(),
    ];
    for args in steps {
        let status = Command::new("apt-get")
            .args(&args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .status();
        match status {
            Ok(s) if s.success() => {}
            Ok(s) => {
                let code = exit_code(s);
                eprintln!(
                    "error: apt-get {} failed (exit code {code})",
                    args.join(" ")
                );
                return Err(code);
            }
            Err(e) => {
                eprintln!("error: cannot run apt-get: {e}");
                return Err(1);
            }
        }
    }
    println!(
        "xtask: installed {} in {:.0} s",
        packages.join(" "),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

// --- the Redisson interop run ------------------------------------------------

/// What `cargo xtask test` hands to the interop run, and removes from the
/// others: the `java` to start, the driver's classpath (the compiled driver
/// and Redisson), and that a missing Java must fail the tests, not skip them.
const INTEROP_VARS: [&str; 3] = [
    "LEASEHOLD_JAVA",
    "LEASEHOLD_INTEROP_CLASSPATH",
    "LEASEHOLD_INTEROP_REQUIRED",
];

/// The JVM that runs the driver.
const JAVA: Tool = Tool {
    command: "java",
    env: Some("LEASEHOLD_JAVA"),
    apt: "openjdk-17-jdk-headless",
    brew: "openjdk@17",
};

/// Compiles the driver.
const JAVAC: Tool = Tool {
    command: "javac",
    env: None,
    apt: "openjdk-17-jdk-headless",
    brew: "openjdk@17",
};

/// Redisson's jar, relative to the repository's parent directory: the real
/// Redisson 4.7.0, built for Debian 12's jars (its README says how).
const REDISSON_JAR: &str = "shared/redisson/redisson-4.7.0-locks.jar";

/// Where Debian puts the jars below.
const DEBIAN_JAR_DIR: &str = "/usr/share/java";

/// The jars Redisson's lock classes run on, as Debian names them in
/// [`DEBIAN_JAR_DIR`] (`../shared/redisson/README.md`).
const DEBIAN_JARS: &[&str] = &[
    "netty-common",
    "netty-buffer",
    "netty-transport",
    "netty-codec",
    "netty-handler",
    "netty-resolver",
    "netty-resolver-dns",
    "netty-codec-dns",
    "netty-transport-native-epoll",
    "netty-transport-native-kqueue",
    "netty-transport-native-unix-common",
    "jackson-core",
    "jackson-databind",
    "jackson-annotations",
    "jackson-dataformat-yaml",
    "snakeyaml",
    "byte-buddy",
    "geronimo-jcache-1.0-spec",
    "reactive-streams",
    "slf4j-api",
    "slf4j-simple",
];

/// The Debian packages that provide [`DEBIAN_JARS`].
const DEBIAN_JAR_PACKAGES: &[&str] = &[
    "libnetty-java",
    "libjackson2-databind-java",
    "libjackson2-dataformat-yaml",
    "libyaml-snake-java",
    "libbyte-buddy-java",
    "libgeronimo-jcache-1.0-spec-java",
    "libreactive-streams-java",
    "libslf4j-java",
];

/// The driver's sources, relative to the workspace root.
const DRIVER_SOURCES: &str = "interop/java/src";

/// Gets the interop run ready: Java, the classpath, the compiled driver.
/// `Ok(None)` when `LEASEHOLD_INTEROP=skip` leaves the run out; `Err`
/// carries the exit code, the reason printed.
fn interop_env() -> Result<Option<Vec<(&'static str, OsString)>>, i32> {
    if env::var_os("LEASEHOLD_INTEROP").is_some_and(|v| v == "skip") {
        println!(
            "xtask: LEASEHOLD_INTEROP=skip: the Redisson interop tests (tests/redisson_interop.rs) are NOT run"
        );
        return Ok(None);
    }
    ensure(&[&JAVA, &JAVAC])?;
    let (Located::At(java), Located::At(javac)) = (locate(&JAVA), locate(&JAVAC)) else {
        return Err(1);
    };
    let redisson = redisson_classpath()?;
    let root = workspace_root();
    let classes = target_dir(&root).join("interop").join("classes");
    compile_driver(&javac, &root.join(DRIVER_SOURCES), &classes, &redisson)?;
    // `redisson` may already be a list (REDISSON_CLASSPATH): append to it
    // as text, not with `join_paths`, which refuses separators inside.
    let mut classpath = classes.into_os_string();
    classpath.push(if cfg!(windows) { ";" } else { ":" });
    classpath.push(redisson);
    Ok(Some(vec![
        ("LEASEHOLD_JAVA", java.into_os_string()),
        ("LEASEHOLD_INTEROP_CLASSPATH", classpath),
        ("LEASEHOLD_INTEROP_REQUIRED", "1".into()),
        // The run's point is its figures (wake-up latencies, acquisitions
        // per side): show the tests' output, as `-- --nocapture` would.
        ("RUST_TEST_NOCAPTURE", "1".into()),
    ]))
}

/// `REDISSON_CLASSPATH`, or Redisson's jar beside the repository joined
/// with the Debian jars (installed with apt-get as root when missing).
fn redisson_classpath() -> Result<OsString, i32> {
    if let Some(classpath) = env::var_os("REDISSON_CLASSPATH") {
        println!("xtask: Redisson from REDISSON_CLASSPATH");
        return Ok(classpath);
    }
    let root = workspace_root();
    let jar = root
        .parent()
        .map(|parent| parent.join(REDISSON_JAR))
        .unwrap_or_else(|| PathBuf::from(REDISSON_JAR));
    if !jar.is_file() {
        eprintln!(
            "error: the Redisson interop tests need Redisson 4.7.0 and it is not here: \
             set REDISSON_CLASSPATH (org.redisson:redisson:4.7.0 and its dependencies) \
             or put redisson-4.7.0-locks.jar at {} (LEASEHOLD_INTEROP=skip leaves the run out)",
            jar.display()
        );
        return Err(1);
    }
    let jars = |names: &[&str]| -> Vec<PathBuf> {
        names
            .iter()
            .map(|name| Path::new(DEBIAN_JAR_DIR).join(format!("{name}.jar")))
            .collect()
    };
    let missing = || -> Vec<&str> {
        DEBIAN_JARS
            .iter()
            .zip(jars(DEBIAN_JARS))
            .filter(|(_, path)| !path.is_file())
            .map(|(name, _)| *name)
            .collect()
    };
    if !missing().is_empty() {
        let what = format!("{DEBIAN_JAR_DIR}/{{{}}}.jar", missing().join(","));
        if !(is_root() && find_in_path(OsStr::new("apt-get")).is_some()) {
            eprintln!(
                "error: {what} not found; install them (Debian/Ubuntu: sudo apt-get install {}) \
                 or set REDISSON_CLASSPATH",
                DEBIAN_JAR_PACKAGES.join(" ")
            );
            return Err(1);
        }
        apt_get(&what, DEBIAN_JAR_PACKAGES)?;
        if !missing().is_empty() {
            eprintln!(
                "error: {DEBIAN_JAR_DIR}/{{{}}}.jar still missing after apt-get install",
                missing().join(",")
            );
            return Err(1);
        }
    }
    println!("xtask: Redisson from {}", jar.display());
    let mut entries = vec![jar];
    entries.extend(jars(DEBIAN_JARS));
    env::join_paths(entries).map_err(|e| {
        eprintln!("error: cannot build the Redisson classpath: {e}");
        1
    })
}

/// Cargo's target directory: `CARGO_TARGET_DIR`, else `target/` in `root`.
fn target_dir(root: &Path) -> PathBuf {
    match env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// Compiles every `.java` file under `sources` into `classes` with
/// `javac`, unless `classes` is newer than each of them.
fn compile_driver(
    javac: &Path,
    sources: &Path,
    classes: &Path,
    classpath: &OsStr,
) -> Result<(), i32> {
    let files = java_files(sources);
    if files.is_empty() {
        eprintln!("error: no .java files under {}", sources.display());
        return Err(1);
    }
    let stamp = classes.join(".compiled");
    let built = modified(&stamp);
    if built.is_some() && files.iter().all(|f| modified(f) < built) {
        println!("xtask: interop driver up to date in {}", classes.display());
        return Ok(());
    }
    if let Err(e) = std::fs::create_dir_all(classes) {
        eprintln!("error: cannot create {}: {e}", classes.display());
        return Err(1);
    }
    let started = Instant::now();
    let status = Command::new(javac)
        .arg("-encoding")
        .arg("UTF-8")
        .arg("-d")
        .arg(classes)
        .arg("-cp")
        .arg(classpath)
        .args(&files)
        .status();
    match status {
        Ok(s) if s.success() => {}
        Ok(s) => {
            eprintln!(
                "error: javac failed on the interop driver (exit code {})",
                exit_code(s)
            );
            return Err(exit_code(s));
        }
        Err(e) => {
            eprintln!("error: cannot run {}: {e}", javac.display());
            return Err(1);
        }
    }
    if let Err(e) = std::fs::write(&stamp, b"") {
        eprintln!("error: cannot write {}: {e}", stamp.display());
        return Err(1);
    }
    println!(
        "xtask: compiled the interop driver ({} files) into {} in {:.0} s",
        files.len(),
        classes.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The `.java` files under `dir`, recursively, sorted.
fn java_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return out;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(java_files(&path));
        } else if path.extension().is_some_and(|e| e == "java") {
            out.push(path);
        }
    }
    out.sort();
    out
}

/// A file's modification time, if it has one.
fn modified(path: &Path) -> Option<std::time::SystemTime> {
    path.metadata().and_then(|m| m.modified()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(run: &[OsString]) -> Vec<&str> {
        run.iter().map(|a| a.to_str().unwrap()).collect()
    }

    #[test]
    fn test_runs_are_the_workspace_then_each_feature_with_extra_args_on_each() {
        let runs = test_runs(&["--".into(), "--nocapture".into()]);
        let plain = runs.iter().filter(|run| run.server.is_none()).count();
        assert_eq!(plain, 1 + FEATURE_RUNS.len());
        // The matrix runs (servers found beside the repository) come last.
        assert!(runs[plain..].iter().all(|run| run.server.is_some()));
        assert_eq!(
            strings(&runs[0].args),
            [
                "test",
                "--workspace",
                "--exclude",
                "leasehold-compare",
                "--",
                "--nocapture"
            ]
        );
        assert_eq!(
            strings(&runs[1].args),
            [
                "test",
                "--features",
                "tls-rustls",
                "--test",
                "tls",
                "--",
                "--nocapture"
            ]
        );
    }

    #[test]
    fn every_matrix_test_is_a_test_file() {
        for test in MATRIX.iter().flat_map(|(.., tests)| tests.iter()) {
            let file = workspace_root().join("tests").join(format!("{test}.rs"));
            assert!(file.is_file(), "{} is missing", file.display());
        }
    }

    #[test]
    fn only_the_redisson_run_is_an_interop_run() {
        let runs = test_runs(&[]);
        let interop: Vec<Vec<&str>> = runs
            .iter()
            .filter(|run| run.interop)
            .map(|run| strings(&run.args))
            .collect();
        assert_eq!(interop, [["test", "--test", "redisson_interop"]]);
    }

    #[test]
    fn java_files_finds_the_driver() {
        let root = workspace_root();
        let files = java_files(&root.join(DRIVER_SOURCES));
        assert!(
            files
                .iter()
                .any(|f| f.ends_with("leasehold/interop/Driver.java")),
            "{files:?}"
        );
    }

    #[test]
    fn usage_lists_every_test_run() {
        let text = usage();
        assert!(text.contains("cargo test --workspace --exclude leasehold-compare"));
        assert!(text.contains("cargo test --features tls-rustls --test tls"));
        assert!(text.contains("cargo test --features blocking --test blocking"));
    }

    #[test]
    fn install_hint_is_one_line_naming_packages_once() {
        let line = install_hint(&[&REDIS_SERVER, &REDIS_CLI, &OPENSSL]);
        assert!(!line.contains('\n'));
        assert!(line.contains("sudo apt-get install redis-server redis-tools openssl;"));
        assert!(line.contains("brew install redis openssl)"));
        assert!(line.contains("LEASEHOLD_REDIS_SERVER, LEASEHOLD_REDIS_CLI to their paths"));
        let line = install_hint(&[&REDIS_SERVER]);
        assert_eq!(
            line,
            "redis-server not found; install it (Debian/Ubuntu: sudo apt-get install \
             redis-server; macOS: brew install redis) or set LEASEHOLD_REDIS_SERVER to its path"
        );
        assert!(!install_hint(&[&OPENSSL]).contains("LEASEHOLD"));
    }

    #[test]
    fn shell_words_quotes_only_what_needs_it() {
        let args: Vec<OsString> = ["run", "--processes", "8", "a b", "it's"]
            .map(OsString::from)
            .into();
        assert_eq!(shell_words(&args), r"run --processes 8 'a b' 'it'\''s'");
    }

    #[cfg(unix)]
    #[test]
    fn resolve_finds_paths_and_path_names_and_rejects_the_rest() {
        assert_eq!(
            resolve(OsStr::new("sh")).is_some(),
            find_in_path(OsStr::new("sh")).is_some()
        );
        assert_eq!(
            resolve(OsStr::new("/bin/sh")),
            Some(PathBuf::from("/bin/sh"))
        );
        assert_eq!(resolve(OsStr::new("")), None);
        assert_eq!(resolve(OsStr::new("/nonexistent/redis-server")), None);
        // A directory and a file without an execute bit are not programs.
        assert_eq!(resolve(OsStr::new("/")), None);
        let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
        assert_eq!(resolve(manifest.as_os_str()), None);
    }

    #[cfg(unix)]
    #[test]
    fn exit_code_passes_codes_and_maps_signals() {
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(9)), 137);
    }
}
