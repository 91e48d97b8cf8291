//! Observability: `Client::stats()` counts, the engine's `tracing` spans
//! and events, and (with `--features metrics`) the `metrics` counters.
//!
//! The tracing subscriber and the metrics recorder are process-wide, so
//! every test names its locks uniquely and looks only for those names;
//! metric counts are summed over the tests running beside it, so they are
//! checked as lower bounds.

use leasehold_testkit as support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use support::fixture::{client, client_with, eventually, within};
use support::{Proxy, RedisServer};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

const BOUND: Duration = Duration::from_secs(20);

/// The fields of one span (at its close) or event, as text.
#[derive(Clone, Debug, Default)]
struct Fields {
    name: String,
    values: HashMap<&'static str, String>,
}

/// Keeps every closed span and every event it sees.
#[derive(Debug, Default)]
struct Capture {
    spans: Mutex<Vec<Fields>>,
    events: Mutex<Vec<Fields>>,
}

/// The `Layer` feeding a `Capture`.
struct CaptureLayer(Arc<Capture>);

/// The process-wide capture (installed once, as the global subscriber).
fn capture() -> Arc<Capture> {
    static CAPTURE: OnceLock<Arc<Capture>> = OnceLock::new();
    CAPTURE
        .get_or_init(|| {
            let capture = Arc::new(Capture::default());
            let subscriber = tracing_subscriber::registry().with(CaptureLayer(capture.clone()));
            tracing::subscriber::set_global_default(subscriber)
                .expect("no other global subscriber in this test binary");
            capture
        })
        .clone()
}

impl Capture {
    /// Closed spans named `name` whose `lock` field is `lock`.
    fn spans(&self, name: &str, lock: &str) -> Vec<Fields> {
        self.spans
            .lock()
            .unwrap()
            .iter()
            .filter(|s| s.name == name && s.values.get("lock").map(String::as_str) == Some(lock))
            .cloned()
            .collect()
    }

    /// Events with message `message` whose `lock` field is `lock`.
    fn events(&self, message: &str, lock: &str) -> Vec<Fields> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| {
                e.values.get("message").map(String::as_str) == Some(message)
                    && e.values.get("lock").map(String::as_str) == Some(lock)
            })
            .cloned()
            .collect()
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.values.insert(field.name(), value.to_owned());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.values.insert(field.name(), format!("{value:?}"));
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for CaptureLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = Fields {
            name: attrs.metadata().name().to_owned(),
            ..Fields::default()
        };
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(fields) = span.extensions_mut().get_mut::<Fields>() {
                values.record(fields);
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields {
            name: event.metadata().name().to_owned(),
            ..Fields::default()
        };
        fields
            .values
            .insert("level", event.metadata().level().to_string());
        event.record(&mut fields);
        self.0.events.lock().unwrap().push(fields);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            if let Some(fields) = span.extensions_mut().remove::<Fields>() {
                self.0.spans.lock().unwrap().push(fields);
            }
        }
    }
}

/// Stats move with each event: an acquire, contention (a `try_lock`, a
/// bounded wait that times out, a wait that gets the lock), releases,
/// renewals, and a lease lost after another client's force-unlock —
/// counted once, not again when the holder's unlock finds it gone.
#[tokio::test]
async fn stats_count_acquires_contention_releases_and_losses() {
    let server = RedisServer::start();
    let a = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(3))).await;
    let b = client(&server).await;
    let name = "obs:stats";
    assert_eq!(a.stats(), leasehold::Stats::default());

    let held = a.lock(name).lock().await.unwrap();
    let s = a.stats();
    assert_eq!((s.acquisitions, s.busy_attempts, s.waits), (1, 0, 0));

    // Contention: one try, then a bounded wait that runs out.
    assert!(b.lock(name).try_lock().await.unwrap().is_none());
    let s = b.stats();
    assert_eq!(
        (s.acquisitions, s.busy_attempts, s.timeouts, s.waits),
        (0, 1, 1, 0)
    );
    let lock = b.lock(name);
    let waited = lock.try_lock_for(Duration::from_millis(300));
    assert!(within(BOUND, "a bounded wait", waited)
        .await
        .unwrap()
        .is_none());
    let s = b.stats();
    assert!(s.busy_attempts >= 3, "{s:?}");
    assert_eq!((s.timeouts, s.waits, s.subscriptions), (2, 1, 1));
    assert!(s.wait_time > Duration::ZERO);

    // A waiter gets the lock when the holder unlocks.
    let waiter = tokio::spawn({
        let lock = b.lock(name);
        async move { lock.lock().await }
    });
    eventually(BOUND, "the waiter subscribes", || {
        b.stats().subscriptions == 2 && b.stats().channels == 1
    })
    .await;
    held.unlock().await.unwrap();
    let got = within(BOUND, "the waiter's lock", waiter)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(a.stats().releases, 1);
    let s = b.stats();
    assert_eq!((s.acquisitions, s.waits), (1, 2));
    got.unlock().await.unwrap();
    assert_eq!(b.stats().releases, 1);
    eventually(BOUND, "the channel is left", || b.stats().channels == 0).await;

    // Renewals, then a loss: b force-unlocks a's lease; a's watchdog finds
    // it gone. a's own unlock then finds nothing and counts no more.
    let held = a.lock(name).lock().await.unwrap();
    eventually(BOUND, "a renewal", || a.stats().renewals >= 1).await;
    assert!(b.lock(name).force_unlock().await.unwrap());
    within(BOUND, "the loss is noticed", held.lost()).await;
    assert_eq!(a.stats().leases_lost, 1);
    assert!(matches!(
        held.unlock().await,
        Err(leasehold::Error::NotHeld { .. })
    ));
    let s = a.stats();
    assert_eq!((s.leases_lost, s.acquisitions), (1, 2));
    assert_eq!(b.stats().leases_lost, 0);

    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// A black-holed connection: renewals get no answer, are counted as
/// failures (in the client's stats and the watchdog's count), and the
/// lease is declared lost once.
#[tokio::test]
async fn stats_count_renewal_failures() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.addr()).await;
    let a = leasehold::Client::builder()
        .url(&proxy.url())
        .watchdog_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap();
    let held = a.lock("obs:failures").lock().await.unwrap();
    proxy.blackhole();
    within(BOUND, "the lease is declared lost", held.lost()).await;
    let s = a.stats();
    assert!(s.renewal_failures >= 1, "{s:?}");
    assert_eq!(s.leases_lost, 1);
    assert!(a.watchdog().renewal_failures() >= s.renewal_failures);
    // Heal the link: cut the connections that lost bytes, reconnect.
    proxy.pass();
    proxy.cut_all();
    drop(held);
    within(BOUND, "shutdown", a.shutdown()).await.ok();
}

/// The engine's spans and events, seen by a `tracing` layer: an `acquire`
/// span per acquire with the lock name, owner, outcome and attempts, a
/// `release` span, the watchdog's `renewal` spans, and a `lease lost`
/// warning with the lock name and owner.
#[tokio::test]
async fn tracing_sees_acquire_release_renewal_and_loss() {
    let capture = capture();
    let server = RedisServer::start();
    let a = client_with(&server, |b| b.watchdog_timeout(Duration::from_secs(3))).await;
    let b = client(&server).await;
    let name = "obs:trace";
    let owner = leasehold::Owner::current().id().to_string();

    let held = a.lock(name).lock().await.unwrap();
    let spans = capture.spans("acquire", name);
    assert_eq!(spans.len(), 1, "{spans:?}");
    let acquire = &spans[0].values;
    assert_eq!(acquire["outcome"], "acquired");
    assert_eq!(acquire["owner"], owner);
    assert_eq!(acquire["attempts"], "1");
    assert!(acquire.contains_key("wait_ms"));

    // A contended acquire that times out, then one that waits and gets it.
    assert!(b.lock(name).try_lock().await.unwrap().is_none());
    let waiter = tokio::spawn({
        let lock = b.lock(name);
        async move { lock.lock().await }
    });
    eventually(BOUND, "the waiter subscribes", || {
        b.stats().subscriptions == 1
    })
    .await;
    held.unlock().await.unwrap();
    let got = within(BOUND, "the waiter's lock", waiter)
        .await
        .unwrap()
        .unwrap();
    got.unlock().await.unwrap();
    let outcomes: Vec<(String, u32)> = capture
        .spans("acquire", name)
        .iter()
        .map(|s| {
            (
                s.values["outcome"].clone(),
                s.values["attempts"].parse().unwrap(),
            )
        })
        .collect();
    assert!(
        outcomes.contains(&("timeout".to_owned(), 1)),
        "{outcomes:?}"
    );
    assert!(
        outcomes.iter().any(|(o, n)| o == "acquired" && *n >= 2),
        "{outcomes:?}"
    );
    let releases = capture.spans("release", name);
    assert!(releases.len() >= 2, "{releases:?}");
    assert!(releases.iter().all(|r| r.values["outcome"] == "freed"));
    assert!(releases.iter().any(|r| r.values["owner"] == owner));

    // A cancelled acquire says so.
    let held = b.lock(name).lock().await.unwrap();
    let lock = a.lock(name);
    let cancelled = lock.try_lock_for(Duration::from_secs(60));
    assert!(tokio::time::timeout(Duration::from_millis(200), cancelled)
        .await
        .is_err());
    let spans = capture.spans("acquire", name);
    assert!(
        spans.iter().any(|s| s.values["outcome"] == "cancelled"),
        "{spans:?}"
    );
    held.unlock().await.unwrap();

    // Renewal cycles, then a loss noticed by the watchdog (another thread).
    let held = a.lock(name).lock().await.unwrap();
    eventually(BOUND, "a renewal span", || {
        capture
            .spans
            .lock()
            .unwrap()
            .iter()
            .any(|s| s.name == "renewal" && s.values.get("calls").is_some_and(|c| c != "0"))
    })
    .await;
    assert!(b.lock(name).force_unlock().await.unwrap());
    within(BOUND, "the loss is noticed", held.lost()).await;
    let lost = capture.events("lease lost", name);
    assert_eq!(lost.len(), 1, "{lost:?}");
    assert_eq!(lost[0].values["level"], "WARN");
    assert_eq!(lost[0].values["owner"], owner);
    drop(held);

    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}

/// With `--features metrics`, the counts reach the `metrics` recorder
/// (lower bounds: other tests of this binary count too).
#[cfg(feature = "metrics")]
#[tokio::test]
async fn metrics_recorder_sees_the_counts() {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder
        .install()
        .expect("the only recorder of this binary");

    let server = RedisServer::start();
    let a = client(&server).await;
    let b = client(&server).await;
    let name = "obs:metrics";
    let held = a.lock(name).lock().await.unwrap();
    let lock = b.lock(name);
    let waited = lock.try_lock_for(Duration::from_millis(200));
    assert!(within(BOUND, "a bounded wait", waited)
        .await
        .unwrap()
        .is_none());
    held.unlock().await.unwrap();
    let got = b.lock(name).lock().await.unwrap();
    got.unlock().await.unwrap();

    let mut counters: HashMap<String, u64> = HashMap::new();
    let mut waits: Vec<f64> = Vec::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let name = key.key().name().to_owned();
        match value {
            DebugValue::Counter(n) => *counters.entry(name).or_default() += n,
            DebugValue::Histogram(values) if name == "leasehold_wait_seconds" => {
                waits.extend(values.into_iter().map(|v| v.into_inner()))
            }
            _ => {}
        }
    }
    let at_least = |metric: &str, n: u64| {
        let got = counters.get(metric).copied().unwrap_or(0);
        assert!(got >= n, "{metric}: {got} < {n}; {counters:?}");
    };
    at_least("leasehold_acquisitions_total", 2);
    at_least("leasehold_busy_attempts_total", 2);
    at_least("leasehold_acquire_timeouts_total", 1);
    at_least("leasehold_waits_total", 1);
    at_least("leasehold_subscriptions_total", 1);
    at_least("leasehold_releases_total", 2);
    assert!(!waits.is_empty(), "no wait-time sample");
    assert!(waits.iter().all(|w| *w >= 0.0));

    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
}
