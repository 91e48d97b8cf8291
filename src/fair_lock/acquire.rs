//! The fair lock's acquire: the engine's wait loop on the waiter's own
//! channel, with the queue kept on the side (refresh, leave; `queue.rs`).

use std::sync::Arc;
use std::time::Duration;

use fred::types::Value;

use super::kind::{scripts, FairKind, LINGER, TAG};
use super::queue::{self, now_ms, Leave, Queued, THREAD_WAIT};
use super::FairLock;
use crate::core::acquire::{acquire, Spec};
use crate::core::call::Call;
use crate::core::hold::Hold;
use crate::core::latch_key;
use crate::core::lease::{Lease, LeaseInit};
use crate::core::pubsub::wake_one;
use crate::error::{Error, Result};
use crate::guard::LockGuard;
use crate::owner::Owner;

// === impl FairLock ===

impl FairLock {
    /// Waits in the queue (see the module docs). `wait: None` waits
    /// forever; zero tries once without queueing.
    pub(crate) async fn acquire(
        &self,
        lease: Option<Duration>,
        wait: Option<Duration>,
    ) -> Result<Option<LockGuard>> {
        self.check()?;
        let engine = self.client.engine();
        let owner = Owner::current();
        let field = self.client.field(owner.id(), "");
        let waits = wait != Some(Duration::ZERO);
        let own_channel: Arc<str> = format!("{}:{field}", self.channel).into();
        let init = || LeaseInit {
            kind: &FairKind,
            latch: latch_key(&self.key_str, &field),
            field: field.as_str().into(),
            channel: self.names.channel.clone(),
        };
        let spec = Spec {
            key: &self.names.key,
            tag: TAG,
            owner: owner.id(),
            init: &init,
            channel: &own_channel,
            policy: wake_one,
            lease,
            wait,
        };
        let thread_wait = THREAD_WAIT.as_millis() as i64;
        let build = |lease: &Lease, lease_ms: i64, rid: u64| {
            Call::new(
                &lease.conn,
                &scripts().acquire,
                vec![
                    self.names.key.clone(),
                    self.names.queue.clone(),
                    self.names.timeouts.clone(),
                ],
                vec![
                    lease_ms.into(),
                    Value::String(lease.field.clone()),
                    now_ms().into(),
                    thread_wait.into(),
                    i64::from(waits).into(),
                ],
                &lease.latch,
                rid,
            )
        };
        if !waits {
            let hold = acquire(engine, spec, &build).await?;
            return Ok(hold.map(|h| self.guard(h, owner)));
        }
        // The waiter's channel stays subscribed from now until a moment
        // after the hold it gets ends, so an owner that locks again and
        // again queues and is told with one script call each.
        let pin = engine.pubsub.pin(&own_channel, wake_one).await;
        // Dropped from here on, the waiter leaves the queue.
        let lease_ref = engine.leases.get(
            &engine.conn,
            &engine.watchdog,
            &self.names.key,
            owner.id(),
            TAG,
            &init,
        );
        let field_str = lease_ref.field.clone();
        let mut queued = Queued {
            engine: engine.clone(),
            job: Some(Leave {
                lease: lease_ref,
                names: self.names.clone(),
            }),
        };
        let outcome = {
            let acquiring = acquire(engine, spec, &build);
            let refreshing =
                queue::refresh(&engine.conn, &self.names.timeouts, &field_str, &own_channel);
            tokio::select! {
                outcome = acquiring => outcome,
                never = refreshing => match never {},
            }
        };
        match &outcome {
            Ok(Some(hold)) => {
                queued.disarm();
                let signal = hold.signal();
                tokio::spawn(async move {
                    signal.lost().await;
                    tokio::time::sleep(LINGER).await;
                    drop(pin);
                });
            }
            // The client or its runtime is gone: the background job (on a
            // fresh connection if need be) leaves the queue.
            Err(Error::Shutdown | Error::NoRuntime | Error::RuntimeGone) => drop(queued),
            _ => queued.leave_now().await,
        }
        Ok(outcome?.map(|h| self.guard(h, owner)))
    }

    fn guard(&self, hold: Hold, owner: Owner) -> LockGuard {
        LockGuard::new(hold, self.name.clone(), self.key_str.clone(), owner)
    }
}
