//! `leasehold doctor`: is this deployment safe for locks? Builds a
//! leasehold client (a 3 s watchdog, so the self-test sees a renewal in
//! about a second; no client record, so nothing is written outside the
//! self-test's private lock), runs [`leasehold::Client::doctor_with`] and
//! prints its report: one line per check, or one JSON document.
//!
//! Exit status: 0 every check ok, 1 a warning or a check that could not
//! be made, 2 a failure (or no connection at all).

use std::process::ExitCode;
use std::time::Duration;

use leasehold::{Client, DoctorOptions};
use serde_json::json;

use crate::Result;

/// The watchdog timeout of the doctor's client: renewals every second.
const WATCHDOG: Duration = Duration::from_secs(3);
/// Its command timeout (and connect timeout).
const COMMAND_TIMEOUT: Duration = Duration::from_secs(5);

/// What the `doctor` subcommand was given.
pub(crate) struct Args<'a> {
    pub(crate) url: &'a str,
    pub(crate) json: bool,
    pub(crate) key_prefix: Option<&'a str>,
    pub(crate) self_test: bool,
}

pub(crate) async fn doctor(args: Args<'_>) -> Result<ExitCode> {
    let mut builder = Client::builder()
        .url(args.url)
        .watchdog_timeout(WATCHDOG)
        .command_timeout(COMMAND_TIMEOUT)
        .client_record(false)
        // Report on a user or server a locking client would refuse.
        .report_only(true)
        .app_name("leasehold-doctor");
    if let Some(prefix) = args.key_prefix {
        builder = builder.key_prefix(prefix);
    }
    let client = match builder.build().await {
        Ok(client) => client,
        Err(e) => {
            let found = format!("cannot connect: {e}");
            let advice = "check the URL, the credentials and that Redis is reachable";
            if args.json {
                let check =
                    json!({"name": "connect", "status": "fail", "found": found, "advice": advice});
                println!("{}", json!({"exit_code": 2, "checks": [check]}));
            } else {
                println!("fail  connect  {found}  → {advice}");
            }
            return Ok(ExitCode::from(2));
        }
    };
    let options = DoctorOptions::new().self_test(args.self_test);
    let report = client.doctor_with(&options).await;
    let _ = client.shutdown().await;
    let report = report?;
    if args.json {
        println!("{}", report.to_json());
    } else {
        print!("{report}");
    }
    Ok(ExitCode::from(report.exit_code()))
}
