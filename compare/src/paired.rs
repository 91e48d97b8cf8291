//! `LEASEHOLD_COMPARE_ONLY=throughput-paired`: the 64-task uncontended
//! throughput of leasehold against raw fred with the bare scripts, in many
//! short phases that alternate on clients connected once.
//!
//! The 1 s rounds of `LEASEHOLD_COMPARE_ONLY=throughput` compare phases
//! a few seconds apart (each contender connects and closes its clients
//! between them), and on this VM the host's load moves by more than the
//! changes being measured within that time: one run's per-round ratios
//! spread over 0.6–1.15. Here each pair is two 250 ms phases back to back
//! (the order alternating), on clients that stay connected, so the two
//! sides of a ratio see nearly the same machine. The report gives the
//! median of the per-pair ratios with a bootstrap 95 % interval, and the
//! ratio of the summed rates; then each side's client CPU time per lock +
//! unlock, summed over its phases (the two sides' phases see nearly the
//! same machine, so this ratio moves less than the 1 s rounds' readings).
//!
//! `LEASEHOLD_COMPARE_ROUNDS` pairs (default 60, about 40 s);
//! `LEASEHOLD_COMPARE_CLIENTS` clients per side (default 4).

use std::time::Duration;

use crate::contender::{Handle, Kind};
use crate::server::RedisServer;
use crate::{cpu_ns, throughput_on};

/// One phase of one side.
const PHASE: Duration = Duration::from_millis(250);

/// Resamples for the interval of the median.
const RESAMPLES: usize = 4_000;

/// See the module docs.
pub async fn run(server: &RedisServer, pairs: usize, clients: usize) {
    let sides = [Kind::Leasehold, Kind::RawFredBare];
    let mut handles: Vec<Vec<Handle>> = Vec::new();
    for kind in sides {
        let mut these = Vec::with_capacity(clients);
        for _ in 0..clients {
            these.push(Handle::connect(kind, &server.url()).await);
        }
        handles.push(these);
    }
    // Warm-up: one phase each (script loads, first records, the pools).
    for (i, kind) in sides.into_iter().enumerate() {
        throughput_on(&handles[i], kind, PHASE, usize::MAX).await;
    }
    let mut ratios = Vec::with_capacity(pairs);
    let mut sums = [0.0f64; 2];
    // Per side: lock + unlock pairs, and the client's CPU ns.
    let mut work = [(0u64, 0u64); 2];
    for pair in 0..pairs {
        let mut rates = [0.0f64; 2];
        let order = if pair % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            let cpu = cpu_ns();
            let (ops, took) = throughput_on(&handles[i], sides[i], PHASE, pair).await;
            rates[i] = ops as f64 / took.as_secs_f64();
            work[i].0 += ops;
            work[i].1 += cpu_ns().saturating_sub(cpu);
        }
        sums[0] += rates[0];
        sums[1] += rates[1];
        ratios.push(rates[0] / rates[1]);
    }
    for these in &handles {
        for h in these {
            h.close().await;
        }
    }
    let median = median(&mut ratios.clone());
    let (low, high) = bootstrap(&ratios);
    let (min, max) = ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), r| (lo.min(*r), hi.max(*r)));
    println!(
        "## Uncontended throughput, 64 tasks on {clients} clients per side: leasehold / raw fred with the bare scripts, {pairs} pairs of 250 ms phases back to back\n"
    );
    println!("| median of the per-pair ratios | bootstrap 95 % interval of the median | min–max | summed rates: leasehold / raw bare (pairs/s per phase) | ratio of the sums |");
    println!("| ---: | --- | --- | --- | ---: |");
    println!(
        "| **{median:.3}** | {low:.3}–{high:.3} | {min:.2}–{max:.2} | {:.0} / {:.0} | {:.3} |",
        sums[0] / pairs as f64,
        sums[1] / pairs as f64,
        sums[0] / sums[1]
    );
    let cpu_us = |(ops, ns): (u64, u64)| ns as f64 / 1_000.0 / ops.max(1) as f64;
    let (lease, bare) = (cpu_us(work[0]), cpu_us(work[1]));
    println!();
    println!("| client CPU µs / pair: leasehold / raw bare | ratio |");
    println!("| --- | ---: |");
    println!("| {lease:.1} / {bare:.1} | {:.2} |", lease / bare);
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// The 2.5th and 97.5th percentiles of the median of resamples (with
/// replacement) of `values`. A fixed-seed xorshift: the same ratios give
/// the same interval.
fn bootstrap(values: &[f64]) -> (f64, f64) {
    if values.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut medians = Vec::with_capacity(RESAMPLES);
    let mut sample = vec![0.0; values.len()];
    for _ in 0..RESAMPLES {
        for slot in sample.iter_mut() {
            *slot = values[(next() % values.len() as u64) as usize];
        }
        medians.push(median(&mut sample));
    }
    medians.sort_by(f64::total_cmp);
    (
        medians[RESAMPLES * 25 / 1000],
        medians[RESAMPLES * 975 / 1000],
    )
}
