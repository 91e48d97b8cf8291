//! The Python peer, python-redis-lock: its virtualenv and its driver
//! (`compare/peers/python_redis_lock.py`, documented at its top).
//!
//! The venv lives at `compare/.venv` (gitignored). When it is missing or
//! cannot import the peer, the report creates it with `python3 -m venv`
//! (`LEASEHOLD_COMPARE_PYTHON` names another interpreter) and installs
//! `compare/peers/requirements.txt` with its pip. If that fails, the peer is
//! skipped and the report says why; nothing else depends on it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::json::Json;

pub struct Python {
    python: PathBuf,
    driver: PathBuf,
    /// "python-redis-lock 4.0.1 (redis-py 8.1.0, CPython 3.11.7)".
    pub versions: String,
}

/// What one run of the driver's `hot` scenario reported.
pub struct HotRun {
    /// Acquisitions per contender inside the window.
    pub acquisitions: Vec<u64>,
    pub handoffs: u64,
    /// Every acquisition, also those completed after the deadline; each
    /// ran the critical section (one `GET`, one `SET`).
    pub critical_sections: u64,
}

fn dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Finds or makes the venv; `Err` says why the peer is skipped.
pub fn prepare() -> Result<Python, String> {
    let venv = dir().join(".venv");
    let python = venv.join("bin").join("python");
    let driver = dir().join("peers").join("python_redis_lock.py");
    if let Ok(versions) = versions(&python, &driver) {
        return Ok(Python {
            python,
            driver,
            versions,
        });
    }
    let base = std::env::var("LEASEHOLD_COMPARE_PYTHON").unwrap_or_else(|_| "python3".into());
    eprintln!(
        "python-redis-lock: setting up compare/.venv ({base} -m venv, pip install -r compare/peers/requirements.txt)"
    );
    if !python.exists() {
        run(Command::new(&base).arg("-m").arg("venv").arg(&venv))
            .map_err(|e| format!("`{base} -m venv compare/.venv` failed: {e}"))?;
    }
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
        ])
        .arg(dir().join("peers").join("requirements.txt")))
    .map_err(|e| format!("pip could not install python-redis-lock: {e}"))?;
    let versions = versions(&python, &driver)?;
    Ok(Python {
        python,
        driver,
        versions,
    })
}

/// Runs a setup command; `Err` is the last line it printed.
fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&out.stderr);
    let last = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output");
    Err(format!("{} ({last})", out.status))
}

fn versions(python: &Path, driver: &Path) -> Result<String, String> {
    if !python.exists() {
        return Err("no venv".into());
    }
    let out = Command::new(python)
        .arg(driver)
        .arg("version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "the driver's `version` failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let v = Json::parse(String::from_utf8_lossy(&out.stdout).trim())?;
    let field = |k: &str| v.get(k).and_then(Json::str).unwrap_or("?").to_owned();
    Ok(format!(
        "{} {} (redis-py {}, CPython {})",
        field("library"),
        field("version"),
        field("redis_py"),
        field("python")
    ))
}

impl Python {
    /// The hot-lock scenario: `contenders` processes on lock `name`, for
    /// `window`; the counter key must exist (set to 0) beforehand.
    pub async fn hot(
        &self,
        url: &str,
        name: &str,
        counter: &str,
        contenders: usize,
        window: Duration,
    ) -> Result<HotRun, String> {
        let out = tokio::process::Command::new(&self.python)
            .arg(&self.driver)
            .arg("hot")
            .args(["--url", url, "--name", name, "--counter", counter])
            .args(["--contenders", &contenders.to_string()])
            .args(["--seconds", &format!("{:.3}", window.as_secs_f64())])
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| format!("could not run the driver: {e}"))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let v = Json::parse(stdout.trim()).map_err(|e| {
            format!(
                "driver output unreadable ({e}; exit {}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            )
        })?;
        if let Some(e) = v.get("error").and_then(Json::str) {
            return Err(e.to_owned());
        }
        let num = |k: &str| {
            v.get(k)
                .and_then(Json::num)
                .ok_or_else(|| format!("driver output lacks {k}"))
        };
        let acquisitions = v
            .get("acquisitions")
            .and_then(Json::arr)
            .ok_or("driver output lacks acquisitions")?
            .iter()
            .map(|a| a.num().map(|n| n as u64).ok_or("bad acquisitions"))
            .collect::<Result<Vec<u64>, _>>()?;
        Ok(HotRun {
            acquisitions,
            handoffs: num("handoffs")? as u64,
            critical_sections: num("critical_sections")? as u64,
        })
    }
}
