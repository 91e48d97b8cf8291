//! Counts the commands clients send, with `MONITOR`.
//!
//! `INFO commandstats` also counts the commands a Lua script runs, so it
//! cannot tell one EVALSHA round trip from the five commands inside it.
//! `MONITOR` marks script commands with `[0 lua]`; every other line is one
//! command a client sent, i.e. one request on the wire.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub struct Monitor {
    stop: Arc<AtomicBool>,
    counts: Arc<Mutex<Counts>>,
    thread: Option<JoinHandle<()>>,
    stream: TcpStream,
}

#[derive(Default, Clone, Debug)]
pub struct Counts {
    /// Commands sent by clients, by name.
    pub by_command: BTreeMap<String, u64>,
    /// Commands run inside scripts.
    pub in_scripts: u64,
}

impl Counts {
    pub fn requests(&self) -> u64 {
        self.by_command.values().sum()
    }

    pub fn minus(&self, before: &Counts) -> Counts {
        let mut by_command = BTreeMap::new();
        for (k, v) in &self.by_command {
            let d = v - before.by_command.get(k).copied().unwrap_or(0);
            if d > 0 {
                by_command.insert(k.clone(), d);
            }
        }
        Counts {
            by_command,
            in_scripts: self.in_scripts - before.in_scripts,
        }
    }

    /// `evalsha×2, set×1`.
    pub fn summary(&self) -> String {
        self.by_command
            .iter()
            .map(|(k, v)| format!("{k}×{v}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Monitor {
    pub fn start(port: u16) -> Monitor {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("monitor connect");
        stream.write_all(b"MONITOR\r\n").expect("MONITOR");
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .expect("timeout");
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut first = String::new();
        reader.read_line(&mut first).expect("MONITOR reply");
        assert!(first.starts_with("+OK"), "MONITOR: {first}");
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Mutex::new(Counts::default()));
        let thread = {
            let stop = stop.clone();
            let counts = counts.clone();
            std::thread::spawn(move || {
                let mut line = String::new();
                while !stop.load(Ordering::Acquire) {
                    line.clear();
                    match reader.read_line(&mut line) {
                        Ok(0) => return,
                        Ok(_) => {}
                        Err(_) => continue, // read timeout: check `stop`
                    }
                    // +1700000000.000000 [0 127.0.0.1:5000] "evalsha" "…"
                    let Some(rest) = line.split_once(' ').map(|(_, r)| r) else {
                        continue;
                    };
                    let is_script = rest.starts_with("[0 lua]") || rest.contains(" lua]");
                    let name = rest
                        .split_once("] \"")
                        .and_then(|(_, r)| r.split('"').next())
                        .unwrap_or("?")
                        .to_ascii_lowercase();
                    let mut c = counts.lock().expect("counts");
                    if is_script {
                        c.in_scripts += 1;
                    } else {
                        *c.by_command.entry(name).or_default() += 1;
                    }
                }
            })
        };
        Monitor {
            stop,
            counts,
            thread: Some(thread),
            stream,
        }
    }

    /// Counts so far. Call after a short pause so that the monitor stream
    /// has caught up (see [`Monitor::settle`]).
    pub fn counts(&self) -> Counts {
        self.counts.lock().expect("counts").clone()
    }

    /// Lets the monitor stream catch up with commands already executed.
    pub async fn settle() {
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
