//! The persistent sending queue (`sending_queue.storage: file_storage/<name>`): batches are
//! written to disk before `export` returns and delivered from there by `num_consumers`
//! workers, so that they survive a restart, a crash, or a destination outage longer than
//! memory allows. The file format and its guarantees are in [`super::segment`].
//!
//! ```text
//! export(batch) ──> append to segment (fsync if configured) ──> Ok; batch dropped
//!                   (waits while queue_size batches or max_size_mib are on disk)
//! consumers ──> read next record ──> retry loop ──> transport ──> mark done (ack file)
//! ```
//!
//! Accounting (DESIGN.md, decision 3): a batch handed to `export` is on disk when `export`
//! returns `Ok`; its memory-budget charge is released then. From disk each batch ends in
//! exactly one of sent / failed (counted as today) or stays on disk for the next start. A
//! damaged record is reported (`exporter.queue.corrupt`), counted in
//! `tailgate_exporter_queue_corrupt_records_total`, and skipped. At shutdown consumers
//! deliver until the queue is empty or the deadline; what is left stays on disk and is not
//! counted as dropped. Delivery is at least once: a batch delivered just before a crash
//! (before its ack was written) is delivered again after the restart.
//!
//! Opening: the directory's lock may be held for a while by a process still shutting down
//! (`file_storage.timeout`), and recovery reads every segment. Both block, so the store is
//! opened on the blocking pool while the exporter starts; `export` waits until it is open.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::deliver::BatchDelivery;
use super::error::ExportError;
use super::metrics::DiskQueueMetrics;
use super::outcome::Outcome;
use super::queue::join_or_abort;
use super::segment::{self, Corruption, RecordRef, Store, StoreError, StoreOptions};
use super::state::Shared;
use super::transport::Transport;
use crate::config::{ComponentId, FileStorageConfig};
use crate::limiter::MemoryBudget;
use crate::payload::Payload;

/// How long a failed disk write waits before it is tried again.
const WRITE_RETRY: Duration = Duration::from_secs(1);

/// The queue directory of exporter `id` for `signal` under `base`: the canonical id
/// (`otlp_grpc/tempo` for `otlp/tempo`) with every byte outside `[A-Za-z0-9._-]` written
/// `~xx` (hex), so that distinct ids never share a directory.
pub(crate) fn queue_dir(base: &Path, id: &ComponentId, signal: &str) -> PathBuf {
    let canonical = match &id.name {
        Some(name) => format!("{}/{name}", id.kind),
        None => id.kind.clone(),
    };
    let mut name = String::with_capacity(canonical.len());
    for byte in canonical.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-') {
            name.push(char::from(byte));
        } else {
            name.push_str(&format!("~{byte:02x}"));
        }
    }
    base.join(name).join(signal)
}

/// Where opening the store stands.
#[derive(Clone)]
enum Opening {
    /// The store is being opened (waiting for its lock, or scanning), off the async workers.
    Pending,
    /// Open; consumers are running.
    Ready(Arc<QueueInner>),
    /// It could not be opened; the reason was logged once.
    Failed(Arc<str>),
}

/// The persistent queue of one exporter and signal.
pub(crate) struct DiskQueue<P> {
    state: watch::Receiver<Opening>,
    opener: Mutex<Option<JoinHandle<()>>>,
    /// Filled by the opener once the store is open.
    consumers: Arc<Mutex<Vec<JoinHandle<()>>>>,
    _payload: PhantomData<fn() -> P>,
}

/// What the exporter handles and the consumers share.
struct QueueInner {
    // A std mutex: held only inside blocking tasks or for in-memory bookkeeping, never
    // across an await.
    store: Mutex<Store>,
    dir: PathBuf,
    /// Notified when a record is appended.
    available: Notify,
    /// Notified when a record is done (room may have been freed).
    room: Notify,
    /// Charged for batches read back from disk while they are delivered.
    budget: Option<Arc<MemoryBudget>>,
    metrics: DiskQueueMetrics,
    disk_bytes: Arc<AtomicU64>,
    /// True while disk writes fail (logged on the transitions only).
    write_failing: AtomicBool,
}

impl QueueInner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn publish_disk_bytes(&self) {
        let bytes = self.disk_bytes.load(Ordering::Acquire);
        self.metrics.set_disk_bytes(bytes);
    }

    fn report(&self, exporter: &str, corruption: &Corruption) {
        self.metrics.record_corrupt();
        tracing::error!(
            event = "exporter.queue.corrupt",
            exporter,
            file = %corruption.file.display(),
            offset = corruption.offset,
            reason = corruption.reason,
            "damaged record in the persistent queue skipped; its items are lost",
        );
    }

    /// Marks `record` done, in a blocking task.
    async fn ack(self: &Arc<Self>, exporter: &str, record: RecordRef) {
        let inner = self.clone();
        let result = tokio::task::spawn_blocking(move || inner.lock().ack(record)).await;
        match result {
            Ok(Ok(())) => {}
            Ok(Err(error)) => tracing::warn!(
                event = "exporter.queue.ack_failed",
                exporter,
                error = %error,
                "could not record a delivery on disk; it may be delivered again after a restart",
            ),
            Err(error) => tracing::warn!(
                event = "exporter.queue.ack_failed",
                exporter,
                error = %error,
            ),
        }
        self.publish_disk_bytes();
        self.room.notify_waiters();
    }
}

/// What opening the store needs, moved into the opener task.
struct OpenPlan {
    base: PathBuf,
    dir: PathBuf,
    permissions: u32,
    options: StoreOptions,
    budget: Option<Arc<MemoryBudget>>,
    capacity: usize,
    consumers: usize,
}

impl<P: Payload> DiskQueue<P> {
    /// Starts opening (and recovering) the queue of exporter `id` under
    /// `storage.directory`, and returns at once: the directory's lock is waited for (up to
    /// `storage.timeout`) and the directory scanned on a blocking-pool thread, never on an
    /// async worker. Once open, records an earlier run left undelivered are queued first,
    /// counted in `tailgate_exporter_queue_replayed_items_total`, damaged ones are reported,
    /// and `consumers` workers start delivering with `delivery`. Until then [`push`] waits;
    /// if the store cannot be opened, the reason is logged once
    /// (`exporter.queue.open_failed`) and every [`push`] is refused.
    ///
    /// [`push`]: Self::push
    ///
    /// # Errors
    ///
    /// [`StoreError::Missing`] when `storage.directory` does not exist and may not be
    /// created.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime.
    pub(crate) fn start<T: Transport<Request = Bytes>>(
        delivery: &Arc<BatchDelivery<T>>,
        id: &ComponentId,
        storage: &FileStorageConfig,
        budget: Option<Arc<MemoryBudget>>,
        capacity: usize,
        consumers: usize,
    ) -> Result<Self, StoreError> {
        let base = &storage.directory;
        if !storage.create_directory && !base.is_dir() {
            return Err(StoreError::Missing { path: base.clone() });
        }
        let plan = OpenPlan {
            base: base.clone(),
            dir: queue_dir(base, id, P::SIGNAL.as_str()),
            permissions: storage.directory_permissions,
            options: StoreOptions {
                fsync: storage.fsync,
                max_bytes: storage.max_size,
                max_records: capacity,
                // Small enough that a few segments fit the limit, so that space freed by
                // delivery is given back (a segment is deleted only when all of it is done).
                segment_bytes: (storage.max_size / 4).clamp(64 << 10, segment::SEGMENT_BYTES),
                lock_timeout: storage.timeout,
            },
            budget,
            capacity,
            consumers,
        };
        let (state_tx, state) = watch::channel(Opening::Pending);
        let handles = Arc::new(Mutex::new(Vec::new()));
        let opener = tokio::spawn(open::<P, T>(
            delivery.clone(),
            plan,
            state_tx,
            handles.clone(),
        ));
        Ok(Self {
            state,
            opener: Mutex::new(Some(opener)),
            consumers: handles,
            _payload: PhantomData,
        })
    }

    /// The open store, waiting while it is being opened.
    async fn ready(&self, shared: &Shared, items: usize) -> Result<Arc<QueueInner>, ExportError> {
        let mut state = self.state.clone();
        let opened = tokio::select! {
            biased;
            () = shared.closed() => None,
            state = state.wait_for(|s| !matches!(s, Opening::Pending)) => {
                state.ok().map(|s| s.clone())
            }
        };
        match opened {
            Some(Opening::Ready(inner)) => Ok(inner),
            Some(Opening::Failed(message)) => {
                shared.refuse(items);
                Err(ExportError::QueueUnavailable {
                    items,
                    message: message.to_string(),
                })
            }
            Some(Opening::Pending) | None => {
                shared.refuse(items);
                Err(ExportError::ShutDown { items })
            }
        }
    }

    /// Writes `batch` to disk, waiting while the store is being opened, while the queue is
    /// full (backpressure), or while the disk write fails, and drops it from memory.
    ///
    /// # Errors
    ///
    /// [`ExportError::ShutDown`] once shutdown has begun before the batch was written, and
    /// [`ExportError::QueueUnavailable`] when the store could not be opened (both counted
    /// in `otelcol_exporter_enqueue_failed_*`).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a cancelled call may still have written the batch, which is then
    /// delivered (the caller, believing otherwise, might send it twice).
    pub(crate) async fn push(&self, shared: &Shared, batch: P) -> Result<(), ExportError> {
        let items = batch.item_count();
        let inner = self.ready(shared, items).await?;
        loop {
            let room = inner.room.notified();
            tokio::pin!(room);
            room.as_mut().enable();
            if shared.is_closed() {
                shared.refuse(items);
                return Err(ExportError::ShutDown { items });
            }
            let writer = inner.clone();
            let request = batch.request().clone();
            let count = u32::try_from(items).unwrap_or(u32::MAX);
            let written =
                tokio::task::spawn_blocking(move || writer.lock().append(&request, count)).await;
            let failure = match written {
                Ok(Ok(Some(_))) => {
                    if inner.write_failing.swap(false, Ordering::Relaxed) {
                        tracing::info!(
                            event = "exporter.queue.write_recovered",
                            exporter = %shared.id(),
                        );
                    }
                    inner.metrics.record_persisted(items);
                    inner.publish_disk_bytes();
                    inner.available.notify_waiters();
                    // The batch, and its memory-budget charge, are released here.
                    drop(batch);
                    return Ok(());
                }
                Ok(Ok(None)) => {
                    // Full: wait for a delivery to free room, or for shutdown.
                    tokio::select! {
                        biased;
                        () = shared.closed() => {}
                        () = room => {}
                    }
                    continue;
                }
                Ok(Err(error)) => error.to_string(),
                Err(error) => error.to_string(),
            };
            if !inner.write_failing.swap(true, Ordering::Relaxed) {
                tracing::error!(
                    event = "exporter.queue.write_failed",
                    exporter = %shared.id(),
                    error = %failure,
                    retry_in = %humantime::format_duration(WRITE_RETRY),
                    "cannot write to the persistent queue; export waits until it can",
                );
            }
            tokio::select! {
                biased;
                () = shared.closed() => {}
                () = tokio::time::sleep(WRITE_RETRY) => {}
            }
        }
    }

    /// Lets the consumers deliver until the queue is empty or `deadline`
    /// ([`Shared::shutdown`] has closed intake and set the deadline), then syncs the files.
    /// What is not delivered stays on disk for the next start. A store still being opened
    /// at the deadline is given up.
    pub(crate) async fn drain(&self, shared: &Shared, deadline: Instant) {
        let opener = self.opener.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(opener) = opener {
            join_or_abort(opener, deadline).await;
        }
        let Opening::Ready(inner) = self.state.borrow().clone() else {
            return;
        };
        inner.available.notify_waiters();
        let handles =
            std::mem::take(&mut *self.consumers.lock().unwrap_or_else(|e| e.into_inner()));
        for handle in handles {
            join_or_abort(handle, deadline).await;
        }
        let syncing = inner.clone();
        let synced = tokio::task::spawn_blocking(move || {
            let mut store = syncing.lock();
            store.sync().map(|()| store.live())
        })
        .await;
        match synced {
            Ok(Ok(left)) => tracing::info!(
                event = "exporter.queue.closed",
                exporter = %shared.id(),
                directory = %inner.dir.display(),
                batches_on_disk = left,
                disk_bytes = inner.disk_bytes.load(Ordering::Acquire),
            ),
            Ok(Err(error)) => tracing::warn!(
                event = "exporter.queue.sync_failed",
                exporter = %shared.id(),
                error = %error,
            ),
            Err(error) => tracing::warn!(
                event = "exporter.queue.sync_failed",
                exporter = %shared.id(),
                error = %error,
            ),
        }
    }
}

/// Opens the store off the async workers, then starts the consumers and publishes the
/// outcome.
async fn open<P: Payload, T: Transport<Request = Bytes>>(
    delivery: Arc<BatchDelivery<T>>,
    plan: OpenPlan,
    state: watch::Sender<Opening>,
    handles: Arc<Mutex<Vec<JoinHandle<()>>>>,
) {
    let shared = delivery.shared().clone();
    let OpenPlan {
        base,
        dir,
        permissions,
        options,
        budget,
        capacity,
        consumers,
    } = plan;
    let opening_dir = dir.clone();
    let max_bytes = options.max_bytes;
    // The lock wait sleeps and the scan reads every segment: both block, so they run on
    // the blocking pool.
    let opened = tokio::task::spawn_blocking(move || {
        create_dir(&base, permissions)?;
        if let Some(parent) = opening_dir.parent() {
            create_dir(parent, permissions)?;
        }
        Store::open(&opening_dir, options)
    })
    .await;
    let (store, recovered) = match opened {
        Ok(Ok(opened)) => opened,
        Ok(Err(error)) => {
            fail(&shared, &dir, &state, error.to_string());
            return;
        }
        Err(error) => {
            fail(&shared, &dir, &state, error.to_string());
            return;
        }
    };
    let live = store.live_counter();
    let disk_bytes = store.disk_bytes_counter();
    let inner = Arc::new(QueueInner {
        store: Mutex::new(store),
        dir: dir.clone(),
        available: Notify::new(),
        room: Notify::new(),
        budget,
        metrics: shared.metrics().disk_queue(),
        disk_bytes,
        write_failing: AtomicBool::new(false),
    });
    for corruption in &recovered.corrupt {
        inner.report(shared.id(), corruption);
    }
    inner.metrics.record_replayed(recovered.items);
    inner.metrics.set_disk_limit(max_bytes);
    inner.publish_disk_bytes();
    let weak = Arc::downgrade(&inner);
    shared.metrics().observe_queue(
        capacity,
        Box::new(move || weak.upgrade().map(|_| live.load(Ordering::Acquire))),
    );
    tracing::info!(
        event = "exporter.queue.opened",
        exporter = %shared.id(),
        directory = %dir.display(),
        replayed_batches = recovered.records,
        replayed_items = recovered.items,
        corrupt_records = recovered.corrupt.len(),
        disk_bytes = inner.disk_bytes.load(Ordering::Acquire),
    );
    // No await from here on: an abort of this task either spawns every consumer or none.
    let spawned: Vec<_> = (0..consumers)
        .map(|_| tokio::spawn(consume::<P, T>(delivery.clone(), inner.clone())))
        .collect();
    handles
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(spawned);
    let _ = state.send_replace(Opening::Ready(inner));
}

/// The store could not be opened: logged once; every later push is refused.
fn fail(shared: &Shared, dir: &Path, state: &watch::Sender<Opening>, message: String) {
    tracing::error!(
        event = "exporter.queue.open_failed",
        exporter = %shared.id(),
        directory = %dir.display(),
        error = %message,
        "the persistent sending queue cannot be opened; exports to this exporter are refused",
    );
    let _ = state.send_replace(Opening::Failed(message.into()));
}

/// Creates `dir` and its parents with `mode` (minus the umask).
fn create_dir(dir: &Path, mode: u32) -> Result<(), StoreError> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(mode)
        .create(dir)
        .map_err(|source| StoreError::Io {
            action: "create",
            path: dir.to_owned(),
            source,
        })
}

/// One consumer: takes records in order and delivers them until the queue is closed and
/// has nothing unread, or the shutdown deadline passes.
async fn consume<P: Payload, T: Transport<Request = Bytes>>(
    delivery: Arc<BatchDelivery<T>>,
    inner: Arc<QueueInner>,
) {
    let shared = delivery.shared().clone();
    let mut deadline = shared.deadline();
    loop {
        let available = inner.available.notified();
        tokio::pin!(available);
        available.as_mut().enable();
        let next = inner.lock().take();
        let Some(record) = next else {
            if shared.is_closed() {
                return;
            }
            tokio::select! {
                biased;
                () = shared.closed() => {}
                () = available => {}
            }
            continue;
        };
        if matches!(*deadline.borrow(), Some(at) if Instant::now() >= at) {
            return; // the record stays on disk
        }
        let path = inner.lock().segment_path(record.segment);
        let read = tokio::task::spawn_blocking(move || segment::read_record(&path, record)).await;
        let request = match read {
            Ok(Ok(request)) => request,
            Ok(Err(Ok(corruption))) => {
                inner.report(shared.id(), &corruption);
                inner.ack(shared.id(), record).await;
                continue;
            }
            Ok(Err(Err(error))) => {
                // Unreadable: skipped like a damaged record, so the queue is not stuck.
                let corruption = Corruption {
                    file: inner.lock().segment_path(record.segment),
                    offset: record.offset,
                    reason: "record cannot be read",
                };
                tracing::warn!(event = "exporter.queue.read_failed", exporter = %shared.id(), error = %error);
                inner.report(shared.id(), &corruption);
                inner.ack(shared.id(), record).await;
                continue;
            }
            Err(_) => return, // the runtime is shutting down
        };
        let mut batch = P::from_request(Bytes::from(request), record.items as usize);
        if let Some(budget) = &inner.budget {
            batch = batch.charged(budget);
        }
        let outcome = delivery.attempt(&batch, &mut deadline).await;
        if matches!(outcome, Outcome::ShutDown) {
            return; // the deadline passed: the record stays on disk for the next start
        }
        shared.record(batch.item_count(), &outcome);
        drop(batch);
        inner.ack(shared.id(), record).await;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;

    fn id(written: &str, kind: &str, name: Option<&str>) -> ComponentId {
        ComponentId {
            written: written.to_owned(),
            kind: kind.to_owned(),
            name: name.map(str::to_owned),
        }
    }

    /// Scenario: ids that a naive `/`→`_` replacement would merge, and an alias.
    /// Guarantees: distinct ids get distinct directories; `otlp/x` and `otlp_grpc/x` (one
    /// exporter) share one; the signal is the last component.
    #[test]
    fn queue_dirs_are_distinct_per_id() {
        let base = Path::new("/q");
        let a = queue_dir(base, &id("otlp_grpc/x", "otlp_grpc", Some("x")), "traces");
        let b = queue_dir(
            base,
            &id("otlp/grpc_x", "otlp_grpc", Some("grpc_x")),
            "traces",
        );
        let c = queue_dir(base, &id("otlp/x", "otlp_grpc", Some("x")), "traces");
        assert_ne!(a, b);
        assert_eq!(a, c);
        assert_eq!(a, Path::new("/q/otlp_grpc~2fx/traces"));
        let spaces = queue_dir(base, &id("otlp/a b", "otlp_grpc", Some("a b")), "metrics");
        assert_eq!(spaces, Path::new("/q/otlp_grpc~2fa~20b/metrics"));
    }
}
