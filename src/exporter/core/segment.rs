//! The persistent queue's files: append-only segments of checksummed records and the read
//! position. Synchronous: the async layer (`disk_queue.rs`) calls it from blocking
//! tasks, under one mutex.
//!
//! A queue directory holds:
//!
//! ```text
//! lock                        locked (flock) by the process using the directory
//! ack                         the read position: every record before it is done
//! 00000000000000000001.seg    segments, numbered from 1 in write order
//! ```
//!
//! A segment starts with the 8-byte magic `TGQSEG1\n`, then records, each:
//!
//! ```text
//! magic  u32 LE  0x5147_5452 ("RTGQ" on disk)
//! len    u32 LE  payload length in bytes
//! items  u32 LE  spans or data points in the payload
//! crc    u32 LE  CRC-32 (IEEE, `crc32fast`) of len, items and payload
//! payload        the encoded OTLP export request
//! ```
//!
//! The `ack` file is the position `(segment u64 LE, offset u64 LE)` followed by the CRC-32 of
//! those 16 bytes; it is replaced atomically (write `ack.tmp`, rename).
//!
//! Guarantees:
//! - A record is only ever appended; a segment written by an earlier process is never
//!   written again (each start opens a new segment), so a torn write can only be a tail.
//! - A record is *done* when delivered or dropped (counted). The read position advances
//!   over done records in order; records done out of order (several consumers) are
//!   remembered in memory, and a segment file is deleted once all its records are done.
//!   After a crash, records after the persisted position are delivered again: delivery is
//!   at least once.
//! - A record whose magic, length or CRC is wrong, or a truncated tail, is reported as a
//!   [`Corruption`] with its file and offset and skipped; scanning resumes at the next
//!   valid record. A segment whose records are all done or corrupt is deleted, so one
//!   corruption is reported once.

use std::collections::{BTreeMap, VecDeque};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use super::crc_ranges::crcs_with_prefix;

/// The first bytes of every segment file.
const SEGMENT_MAGIC: &[u8; 8] = b"TGQSEG1\n";
/// The first bytes of every record.
const RECORD_MAGIC: u32 = 0x5147_5452;
/// Bytes of a record before its payload.
pub(crate) const RECORD_HEADER: u64 = 16;
/// Bytes of the `ack` file.
const ACK_LEN: usize = 20;
/// The default segment size: a segment is closed and a new one started past this.
pub(crate) const SEGMENT_BYTES: u64 = 16 << 20;

/// A failure of the queue's files.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file operation failed.
    #[error("{action} {}: {source}", path.display())]
    Io {
        /// What was being done: `create`, `write`, `read`, ...
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The system error.
        #[source]
        source: io::Error,
    },
    /// The directory does not exist and may not be created.
    #[error(
        "directory {} does not exist: create it, or set create_directory: true on the file_storage extension",
        path.display()
    )]
    Missing {
        /// The directory.
        path: PathBuf,
    },
    /// Another process holds the directory's lock.
    #[error(
        "queue directory {} is locked by another process (waited {}): give each tailgate its own directory",
        path.display(),
        humantime::format_duration(*waited)
    )]
    Locked {
        /// The queue directory.
        path: PathBuf,
        /// How long the lock was waited for (`timeout`).
        waited: Duration,
    },
}

fn io_error<'p>(action: &'static str, path: &'p Path) -> impl FnOnce(io::Error) -> StoreError + 'p {
    move |source| StoreError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// A record found damaged; reported once, counted, and skipped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Corruption {
    /// The segment (or ack) file.
    pub(crate) file: PathBuf,
    /// Byte offset of the damaged record in the file.
    pub(crate) offset: u64,
    /// What is wrong.
    pub(crate) reason: &'static str,
}

/// Where a record lives; enough to read it back and mark it done.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct RecordRef {
    /// The segment number.
    pub(crate) segment: u64,
    /// Byte offset of the record header in the segment.
    pub(crate) offset: u64,
    /// Payload length.
    pub(crate) len: u32,
    /// Items (spans, data points) in the payload.
    pub(crate) items: u32,
}

impl RecordRef {
    fn end(&self) -> u64 {
        self.offset + RECORD_HEADER + u64::from(self.len)
    }
}

/// Limits and durability of a store.
#[derive(Clone, Debug)]
pub(crate) struct StoreOptions {
    /// fsync every append before it returns, and the ack file on each change.
    pub(crate) fsync: bool,
    /// The most bytes of segment files; appends past it are refused (the caller waits).
    pub(crate) max_bytes: u64,
    /// The most records not yet done; appends past it are refused.
    pub(crate) max_records: usize,
    /// Start a new segment once the current one would grow past this.
    pub(crate) segment_bytes: u64,
    /// How long `open` waits for the directory's lock.
    pub(crate) lock_timeout: Duration,
}

/// What `open` found.
#[derive(Debug)]
pub(crate) struct Recovered {
    /// Records left undone by an earlier process, now queued first.
    pub(crate) records: usize,
    /// Their items.
    pub(crate) items: u64,
    /// Damaged records (and a damaged ack file), each skipped.
    pub(crate) corrupt: Vec<Corruption>,
}

/// One segment file present on disk.
#[derive(Debug)]
struct SegmentMeta {
    path: PathBuf,
    bytes: u64,
    /// Records in it not yet done.
    live: usize,
}

/// The segment being appended to.
#[derive(Debug)]
struct Active {
    index: u64,
    file: File,
    len: u64,
}

/// A queue directory, opened and locked.
#[derive(Debug)]
pub(crate) struct Store {
    dir: PathBuf,
    options: StoreOptions,
    /// Held for the lock; released when the store is dropped (or the process dies).
    _lock: File,
    segments: BTreeMap<u64, SegmentMeta>,
    active: Option<Active>,
    /// Every record not yet passed by the read position, with whether it is done.
    pending: BTreeMap<(u64, u64), (RecordRef, bool)>,
    /// Records not yet handed to a consumer, in order.
    unread: VecDeque<RecordRef>,
    /// Everything before this position is done (as last written to `ack`).
    position: (u64, u64),
    /// Records not yet done.
    undone: usize,
    /// `undone`, shared with the queue-size gauge.
    live: Arc<AtomicUsize>,
    /// Bytes of segment files (shared with the disk gauge).
    disk_bytes: Arc<AtomicU64>,
}

impl Store {
    /// Opens (creating if needed) the queue directory `dir`, whose parent must exist, and
    /// recovers the records an earlier process left undone. Blocks (sleeping) up to
    /// `options.lock_timeout` for the directory's lock: call it on a blocking thread.
    ///
    /// # Errors
    ///
    /// [`StoreError`] when the directory cannot be created or locked, or a file cannot be
    /// read, written or deleted. Damaged records are not errors: they are returned in
    /// [`Recovered::corrupt`].
    pub(crate) fn open(dir: &Path, options: StoreOptions) -> Result<(Self, Recovered), StoreError> {
        fs::create_dir_all(dir).map_err(io_error("create", dir))?;
        let lock = lock(dir, options.lock_timeout)?;
        let mut corrupt = Vec::new();
        let ack_path = dir.join("ack");
        let position = match fs::read(&ack_path) {
            Ok(bytes) => match decode_ack(&bytes) {
                Some(position) => position,
                None => {
                    // Replaying everything duplicates what was delivered but loses nothing.
                    corrupt.push(Corruption {
                        file: ack_path.clone(),
                        offset: 0,
                        reason: "ack file damaged; replaying every segment",
                    });
                    (0, 0)
                }
            },
            Err(error) if error.kind() == io::ErrorKind::NotFound => (0, 0),
            Err(error) => return Err(io_error("read", &ack_path)(error)),
        };

        let mut found = Vec::new();
        for entry in fs::read_dir(dir).map_err(io_error("list", dir))? {
            let entry = entry.map_err(io_error("list", dir))?;
            let name = entry.file_name();
            let Some(index) = name
                .to_str()
                .and_then(|name| name.strip_suffix(".seg"))
                .and_then(|stem| stem.parse::<u64>().ok())
            else {
                continue;
            };
            found.push((index, entry.path()));
        }
        found.sort();

        let mut store = Self {
            dir: dir.to_owned(),
            options,
            _lock: lock,
            segments: BTreeMap::new(),
            active: None,
            pending: BTreeMap::new(),
            unread: VecDeque::new(),
            position,
            undone: 0,
            live: Arc::default(),
            disk_bytes: Arc::default(),
        };
        let mut recovered = Recovered {
            records: 0,
            items: 0,
            corrupt: Vec::new(),
        };
        let mut last_index = position.0;
        for (index, path) in found {
            last_index = last_index.max(index);
            if index < position.0 {
                remove(&path)?;
                continue;
            }
            let data = fs::read(&path).map_err(io_error("read", &path))?;
            let (records, damaged) = scan(&data);
            corrupt.extend(damaged.into_iter().map(|(offset, reason)| Corruption {
                file: path.clone(),
                offset,
                reason,
            }));
            let start = if index == position.0 { position.1 } else { 0 };
            let mut live = 0;
            for (offset, len, items) in records {
                if offset < start {
                    continue;
                }
                let record = RecordRef {
                    segment: index,
                    offset,
                    len,
                    items,
                };
                store.pending.insert((index, offset), (record, false));
                store.unread.push_back(record);
                store.undone += 1;
                recovered.records += 1;
                recovered.items += u64::from(items);
                live += 1;
            }
            if live == 0 {
                remove(&path)?;
                continue;
            }
            store.segments.insert(
                index,
                SegmentMeta {
                    path,
                    bytes: data.len() as u64,
                    live,
                },
            );
        }
        recovered.corrupt = corrupt;
        store.open_segment(last_index + 1)?;
        store.publish();
        Ok((store, recovered))
    }

    /// Records not yet done, shared: the queue-size gauge reads it.
    pub(crate) fn live_counter(&self) -> Arc<AtomicUsize> {
        self.live.clone()
    }

    /// Bytes of segment files, shared.
    pub(crate) fn disk_bytes_counter(&self) -> Arc<AtomicU64> {
        self.disk_bytes.clone()
    }

    /// Records not yet done (unread or being delivered).
    pub(crate) fn live(&self) -> usize {
        self.undone
    }

    /// Bytes of segment files on disk.
    pub(crate) fn disk_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.bytes).sum()
    }

    /// Appends a record holding `payload` and `items`, fsynced when configured. Returns
    /// `Ok(None)` without writing when the queue is full (by records or bytes); a record
    /// is always accepted into an empty queue, whatever its size.
    ///
    /// # Errors
    ///
    /// When the write fails; the segment is then cut back to its last whole record.
    pub(crate) fn append(
        &mut self,
        payload: &[u8],
        items: u32,
    ) -> Result<Option<RecordRef>, StoreError> {
        let len = u32::try_from(payload.len()).map_err(|_| StoreError::Io {
            action: "write",
            path: self.dir.clone(),
            source: io::Error::new(io::ErrorKind::InvalidInput, "batch larger than 4 GiB"),
        })?;
        let size = RECORD_HEADER + u64::from(len);
        let live = self.live();
        let (active_index, active_len, active_live) = match &self.active {
            Some(active) => (
                active.index,
                active.len,
                self.segments.get(&active.index).map_or(0, |s| s.live),
            ),
            None => (0, 0, 0),
        };
        // Start a new segment when this one is full, or when everything in it is done (so
        // that its space is given back at once).
        let roll = active_len > SEGMENT_MAGIC.len() as u64
            && (active_len + size > self.options.segment_bytes || active_live == 0);
        let reclaim = if roll && active_live == 0 {
            active_len
        } else {
            0
        };
        let added = size + if roll { SEGMENT_MAGIC.len() as u64 } else { 0 };
        let fits = live < self.options.max_records
            && self.disk_bytes() - reclaim + added <= self.options.max_bytes;
        if live > 0 && !fits {
            return Ok(None);
        }
        if roll {
            self.seal()?;
            self.open_segment(active_index + 1)?;
        }
        let Some(active) = self.active.as_mut() else {
            return Err(StoreError::Io {
                action: "write",
                path: self.dir.clone(),
                source: io::Error::other("no open segment"),
            });
        };
        let path = self
            .segments
            .get(&active.index)
            .map(|s| s.path.clone())
            .unwrap_or_default();
        let mut record = Vec::with_capacity(size as usize);
        record.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
        record.extend_from_slice(&len.to_le_bytes());
        record.extend_from_slice(&items.to_le_bytes());
        record.extend_from_slice(&checksum(len, items, payload).to_le_bytes());
        record.extend_from_slice(payload);
        let written = active.file.write_all(&record).and_then(|()| {
            if self.options.fsync {
                active.file.sync_data()
            } else {
                Ok(())
            }
        });
        if let Err(error) = written {
            // Cut a partial write off, so that the next record starts on a boundary.
            let _ = active.file.set_len(active.len);
            return Err(io_error("write", &path)(error));
        }
        let record = RecordRef {
            segment: active.index,
            offset: active.len,
            len,
            items,
        };
        active.len += size;
        if let Some(meta) = self.segments.get_mut(&record.segment) {
            meta.bytes += size;
            meta.live += 1;
        }
        self.pending
            .insert((record.segment, record.offset), (record, false));
        self.unread.push_back(record);
        self.undone += 1;
        self.publish();
        Ok(Some(record))
    }

    /// The next record to deliver, in write order; `None` when all are handed out.
    pub(crate) fn take(&mut self) -> Option<RecordRef> {
        self.unread.pop_front()
    }

    /// The path of segment `index`.
    pub(crate) fn segment_path(&self, index: u64) -> PathBuf {
        segment_path(&self.dir, index)
    }

    /// Marks `record` done (delivered, or dropped and counted): advances and persists the
    /// read position over done records, and deletes segments with nothing left to deliver.
    ///
    /// # Errors
    ///
    /// When the ack file cannot be written or a segment deleted; the in-memory state is
    /// updated regardless, so the worst outcome is a redelivery after a restart.
    pub(crate) fn ack(&mut self, record: RecordRef) -> Result<(), StoreError> {
        match self.pending.get_mut(&(record.segment, record.offset)) {
            Some((_, done)) if !*done => {
                *done = true;
                self.undone -= 1;
            }
            _ => return Ok(()), // unknown or already done
        }
        let active = self.active.as_ref().map(|a| a.index);
        let mut delete = None;
        if let Some(meta) = self.segments.get_mut(&record.segment) {
            meta.live = meta.live.saturating_sub(1);
            if meta.live == 0 && Some(record.segment) != active {
                delete = Some(record.segment);
            }
        }
        let before = self.position;
        while let Some(entry) = self.pending.first_entry() {
            let (first, done) = *entry.get();
            if !done {
                break;
            }
            entry.remove();
            self.position = (first.segment, first.end());
        }
        let mut result = Ok(());
        if self.position != before {
            result = self.write_ack();
        }
        if let Some(index) = delete
            && let Some(meta) = self.segments.remove(&index)
        {
            let removed = remove(&meta.path);
            if result.is_ok() {
                result = removed;
            }
        }
        self.publish();
        result
    }

    /// fsyncs the open segment and the ack file (at shutdown).
    ///
    /// # Errors
    ///
    /// When fsync fails.
    pub(crate) fn sync(&mut self) -> Result<(), StoreError> {
        if let Some(active) = &self.active {
            let path = self.segment_path(active.index);
            active.file.sync_all().map_err(io_error("fsync", &path))?;
        }
        self.write_ack_with(true)
    }

    fn publish(&self) {
        self.live.store(self.live(), Ordering::Release);
        self.disk_bytes.store(self.disk_bytes(), Ordering::Release);
    }

    fn write_ack(&self) -> Result<(), StoreError> {
        self.write_ack_with(self.options.fsync)
    }

    fn write_ack_with(&self, fsync: bool) -> Result<(), StoreError> {
        let tmp = self.dir.join("ack.tmp");
        let path = self.dir.join("ack");
        let mut bytes = [0u8; ACK_LEN];
        bytes[..8].copy_from_slice(&self.position.0.to_le_bytes());
        bytes[8..16].copy_from_slice(&self.position.1.to_le_bytes());
        let crc = crc32fast::hash(&bytes[..16]);
        bytes[16..].copy_from_slice(&crc.to_le_bytes());
        let mut file = File::create(&tmp).map_err(io_error("create", &tmp))?;
        file.write_all(&bytes).map_err(io_error("write", &tmp))?;
        if fsync {
            file.sync_data().map_err(io_error("fsync", &tmp))?;
        }
        fs::rename(&tmp, &path).map_err(io_error("rename", &tmp))?;
        if fsync {
            File::open(&self.dir)
                .and_then(|dir| dir.sync_all())
                .map_err(io_error("fsync", &self.dir))?;
        }
        Ok(())
    }

    /// Closes the open segment; deletes it when nothing in it is left to deliver.
    fn seal(&mut self) -> Result<(), StoreError> {
        let Some(active) = self.active.take() else {
            return Ok(());
        };
        let path = self.segment_path(active.index);
        if self.options.fsync {
            active.file.sync_all().map_err(io_error("fsync", &path))?;
        }
        if self
            .segments
            .get(&active.index)
            .is_some_and(|s| s.live == 0)
            && let Some(meta) = self.segments.remove(&active.index)
        {
            remove(&meta.path)?;
        }
        Ok(())
    }

    fn open_segment(&mut self, index: u64) -> Result<(), StoreError> {
        let path = self.segment_path(index);
        let mut file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(&path)
            .map_err(io_error("create", &path))?;
        file.write_all(SEGMENT_MAGIC)
            .map_err(io_error("write", &path))?;
        if self.options.fsync {
            file.sync_all().map_err(io_error("fsync", &path))?;
            File::open(&self.dir)
                .and_then(|dir| dir.sync_all())
                .map_err(io_error("fsync", &self.dir))?;
        }
        let len = SEGMENT_MAGIC.len() as u64;
        self.segments.insert(
            index,
            SegmentMeta {
                path,
                bytes: len,
                live: 0,
            },
        );
        self.active = Some(Active { index, file, len });
        Ok(())
    }
}

/// The path of segment `index` in `dir`.
fn segment_path(dir: &Path, index: u64) -> PathBuf {
    dir.join(format!("{index:020}.seg"))
}

fn remove(path: &Path) -> Result<(), StoreError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(io_error("delete", path)(error)),
    }
}

/// Takes the directory's lock, retrying until `timeout`.
fn lock(dir: &Path, timeout: Duration) -> Result<File, StoreError> {
    let path = dir.join("lock");
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(io_error("create", &path))?;
    // std's Instant and a thread sleep: the disk queue opens the store on the blocking
    // pool (`spawn_blocking`), never on an async worker, and tokio's (possibly paused) clock
    // does not govern this wait.
    let started = std::time::Instant::now();
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(file),
            Err(fs::TryLockError::WouldBlock) if started.elapsed() < timeout => {
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(fs::TryLockError::WouldBlock) => {
                return Err(StoreError::Locked {
                    path: dir.to_owned(),
                    waited: timeout,
                });
            }
            Err(fs::TryLockError::Error(error)) => return Err(io_error("lock", &path)(error)),
        }
    }
}

fn checksum(len: u32, items: u32, payload: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&len.to_le_bytes());
    hasher.update(&items.to_le_bytes());
    hasher.update(payload);
    hasher.finalize()
}

fn decode_ack(bytes: &[u8]) -> Option<(u64, u64)> {
    if bytes.len() != ACK_LEN {
        return None;
    }
    let crc = u32::from_le_bytes(bytes[16..20].try_into().ok()?);
    if crc32fast::hash(&bytes[..16]) != crc {
        return None;
    }
    let segment = u64::from_le_bytes(bytes[..8].try_into().ok()?);
    let offset = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    Some((segment, offset))
}

fn le_u32(data: &[u8], at: usize) -> Option<u32> {
    data.get(at..at + 4)
        .and_then(|bytes| bytes.try_into().ok())
        .map(u32::from_le_bytes)
}

/// The record at `at` in `data`: `(len, items)`, or why it is not a whole, valid record.
fn parse_at(data: &[u8], at: usize) -> Result<(u32, u32), &'static str> {
    if data.len() - at < RECORD_HEADER as usize {
        return Err("truncated record header (write cut short)");
    }
    let (Some(magic), Some(len), Some(items), Some(crc)) = (
        le_u32(data, at),
        le_u32(data, at + 4),
        le_u32(data, at + 8),
        le_u32(data, at + 12),
    ) else {
        return Err("truncated record header (write cut short)");
    };
    if magic != RECORD_MAGIC {
        return Err("bad record magic");
    }
    let start = at + RECORD_HEADER as usize;
    let Some(payload) = data.get(start..start + len as usize) else {
        return Err("record extends past the end of the file (write cut short, or bad length)");
    };
    if checksum(len, items, payload) != crc {
        return Err("checksum mismatch");
    }
    Ok((len, items))
}

/// A record found by [`scan`]: `(offset, len, items)`.
type ScannedRecord = (u64, u32, u32);

/// The records of a segment file's bytes, `(offset, len, items)`, and the damaged places,
/// `(offset, reason)`. After damage, scanning resumes at the next offset where a whole,
/// valid record starts.
///
/// Time is linear in the file's length plus `c log c` for the `c` places after the first
/// damage that look like a record (magic and a length within the file), whatever the
/// bytes: see [`valid_record_starts`].
pub(crate) fn scan(data: &[u8]) -> (Vec<ScannedRecord>, Vec<(u64, &'static str)>) {
    let mut records = Vec::new();
    let mut damaged = Vec::new();
    if !data.starts_with(SEGMENT_MAGIC) {
        if !data.is_empty() {
            damaged.push((0, "bad segment header"));
        }
        return (records, damaged);
    }
    // Found at the first damage, for the rest of the file.
    let mut resync_points: Option<Vec<usize>> = None;
    let mut at = SEGMENT_MAGIC.len();
    while at < data.len() {
        match parse_at(data, at) {
            Ok((len, items)) => {
                records.push((at as u64, len, items));
                at += RECORD_HEADER as usize + len as usize;
            }
            Err(reason) => {
                damaged.push((at as u64, reason));
                let points = resync_points.get_or_insert_with(|| valid_record_starts(data, at + 1));
                match points.get(points.partition_point(|&point| point <= at)) {
                    Some(&next) => at = next,
                    None => break,
                }
            }
        }
    }
    (records, damaged)
}

/// Every offset at or after `from` where a whole, valid record starts (what [`parse_at`]
/// accepts), in order.
///
/// The records found may overlap (a record's payload can hold bytes that form another);
/// the caller picks the first after each damaged place. Checking each candidate's CRC over
/// the length it claims would cost time quadratic in the file's length on crafted
/// payloads, so the CRCs come from one pass over the file ([`crcs_with_prefix`]).
fn valid_record_starts(data: &[u8], from: usize) -> Vec<usize> {
    let magic = RECORD_MAGIC.to_le_bytes();
    let header = RECORD_HEADER as usize;
    let mut candidates = Vec::new();
    let mut checks = Vec::new();
    // `find_iter` yields non-overlapping matches, which is every match: no proper suffix
    // of the magic ("RTGQ") is a prefix of it.
    let searched = data.get(from..).unwrap_or_default();
    for offset in memchr::memmem::find_iter(searched, &magic).map(|found| from + found) {
        if data.len() - offset < header {
            break;
        }
        let (Some(len), Some(crc)) = (le_u32(data, offset + 4), le_u32(data, offset + 12)) else {
            continue;
        };
        let start = offset + header;
        let Some(end) = start
            .checked_add(len as usize)
            .filter(|&end| end <= data.len())
        else {
            continue;
        };
        // The checksum covers `len` and `items`, then the payload.
        candidates.push((offset, crc));
        checks.push((crc32fast::hash(&data[offset + 4..offset + 12]), start..end));
    }
    crcs_with_prefix(data, &checks)
        .into_iter()
        .zip(candidates)
        .filter(|&(computed, (_, stored))| computed == stored)
        .map(|(_, (offset, _))| offset)
        .collect()
}

/// Reads `record` from `path` and checks it.
///
/// # Errors
///
/// `Err(Ok(corruption))` when the bytes are not the record that was written;
/// `Err(Err(error))` when the file cannot be read.
pub(crate) fn read_record(
    path: &Path,
    record: RecordRef,
) -> Result<Vec<u8>, Result<Corruption, StoreError>> {
    let file = File::open(path).map_err(|e| Err(io_error("open", path)(e)))?;
    let mut buffer = vec![0u8; RECORD_HEADER as usize + record.len as usize];
    if let Err(error) = file.read_exact_at(&mut buffer, record.offset) {
        if error.kind() == io::ErrorKind::UnexpectedEof {
            return Err(Ok(Corruption {
                file: path.to_owned(),
                offset: record.offset,
                reason: "record extends past the end of the file",
            }));
        }
        return Err(Err(io_error("read", path)(error)));
    }
    match parse_at(&buffer, 0) {
        Ok((len, items)) if len == record.len && items == record.items => {
            buffer.drain(..RECORD_HEADER as usize);
            Ok(buffer)
        }
        Ok(_) => Err(Ok(Corruption {
            file: path.to_owned(),
            offset: record.offset,
            reason: "record changed on disk",
        })),
        Err(reason) => Err(Ok(Corruption {
            file: path.to_owned(),
            offset: record.offset,
            reason,
        })),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // tests may unwrap
mod tests {
    use super::*;
    use std::ops::Range;

    /// Reopens the store in `dir` and asserts it recovers no record and no corruption.
    fn assert_reopens_empty(dir: &Path) {
        let (_, recovered) = Store::open(dir, options()).unwrap();
        assert_eq!(recovered.records, 0);
        assert!(recovered.corrupt.is_empty());
    }

    fn options() -> StoreOptions {
        StoreOptions {
            fsync: false,
            max_bytes: 1 << 30,
            max_records: 1000,
            segment_bytes: SEGMENT_BYTES,
            lock_timeout: Duration::from_millis(50),
        }
    }

    fn payload(i: u32) -> Vec<u8> {
        format!("request-{i}-{}", "x".repeat(i as usize % 50)).into_bytes()
    }

    /// Takes every unread record, reads it, and returns `(payload, items)`.
    fn drain(store: &mut Store, ack: bool) -> Vec<(Vec<u8>, u32)> {
        let mut out = Vec::new();
        while let Some(record) = store.take() {
            let path = store.segment_path(record.segment);
            out.push((read_record(&path, record).unwrap(), record.items));
            if ack {
                store.ack(record).unwrap();
            }
        }
        out
    }

    /// Takes, reads and acks every unread record; returns the payloads.
    fn drain_payloads(store: &mut Store) -> Vec<Vec<u8>> {
        drain(store, true).into_iter().map(|(p, _)| p).collect()
    }

    /// A new store in `dir` holding a record of `payload(i)`, `items` items, for each `i` of
    /// `payloads`; with the records' places.
    fn filled_store(dir: &Path, payloads: Range<u32>, items: u32) -> (Store, Vec<RecordRef>) {
        let (mut store, _) = Store::open(dir, options()).unwrap();
        let records = payloads
            .map(|i| store.append(&payload(i), items).unwrap().unwrap())
            .collect();
        (store, records)
    }

    /// Fills a store in `dir` as [`filled_store`] does and closes it, applies `damage` to the
    /// bytes of the segment holding record `damaged` (given that record), and reopens it.
    fn reopen_damaged(
        dir: &Path,
        payloads: Range<u32>,
        items: u32,
        damaged: usize,
        damage: impl FnOnce(&mut Vec<u8>, RecordRef),
    ) -> (Store, Recovered, Vec<RecordRef>) {
        let (store, records) = filled_store(dir, payloads, items);
        drop(store);
        let path = segment_path(dir, records[damaged].segment);
        let mut data = fs::read(&path).unwrap();
        damage(&mut data, records[damaged]);
        fs::write(&path, &data).unwrap();
        let (store, recovered) = Store::open(dir, options()).unwrap();
        (store, recovered, records)
    }

    fn segments(dir: &Path) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "seg"))
            .collect();
        paths.sort();
        paths
    }

    /// Scenario: 20 records appended, the store dropped without acking, and reopened.
    /// Guarantees: reading gives back every payload and item count in write order, both
    /// before and after the reopen; the reopen reports 20 recovered records and their items
    /// and no corruption.
    #[test]
    fn round_trip_and_recovery() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, recovered) = Store::open(dir.path(), options()).unwrap();
        assert_eq!(recovered.records, 0);
        for i in 0..20 {
            store.append(&payload(i), i).unwrap().unwrap();
        }
        assert_eq!(store.live(), 20);
        let first: Vec<_> = drain(&mut store, false);
        let expected: Vec<_> = (0..20).map(|i| (payload(i), i)).collect();
        assert_eq!(first, expected);
        drop(store);

        let (mut store, recovered) = Store::open(dir.path(), options()).unwrap();
        assert_eq!(recovered.records, 20);
        assert_eq!(recovered.items, (0..20u64).sum::<u64>());
        assert!(recovered.corrupt.is_empty());
        assert_eq!(drain(&mut store, true), expected);
        assert_eq!(store.live(), 0);
    }

    /// Scenario: 5 records, the last cut short in the middle of its payload (a crash during
    /// a write), then the store reopened twice.
    /// Guarantees: the first reopen recovers the 4 whole records and reports one corruption
    /// at the torn record's offset; once those 4 are acked the damaged segment is deleted,
    /// so the second reopen finds nothing and reports nothing.
    #[test]
    fn truncated_tail_is_reported_and_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let (store, records) = filled_store(dir.path(), 0..5, 1);
        drop(store);
        let last = records[4];
        let path = segment_path(dir.path(), last.segment);
        let file = OpenOptions::new().write(true).open(&path).unwrap();
        file.set_len(last.offset + RECORD_HEADER + 3).unwrap();

        let (mut store, recovered) = Store::open(dir.path(), options()).unwrap();
        assert_eq!(recovered.records, 4);
        assert_eq!(recovered.corrupt.len(), 1);
        assert_eq!(recovered.corrupt[0].file, path);
        assert_eq!(recovered.corrupt[0].offset, last.offset);
        assert_eq!(drain(&mut store, true).len(), 4);
        drop(store);

        assert_reopens_empty(dir.path());
    }

    /// Scenario: 3 records; one byte of the middle record's payload flipped; reopened.
    /// Also: a truncated header at the very end.
    /// Guarantees: the first and third records come back intact; the middle one is
    /// reported once (its offset, a checksum mismatch) and skipped; the torn header is
    /// reported as a second corruption.
    #[test]
    fn flipped_byte_is_skipped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, recovered, records) =
            reopen_damaged(dir.path(), 10..13, 7, 1, |data, middle| {
                let at = (middle.offset + RECORD_HEADER + 2) as usize;
                data[at] ^= 0x40;
                data.extend_from_slice(&RECORD_MAGIC.to_le_bytes()[..3]);
            });
        assert_eq!(recovered.records, 2);
        assert_eq!(
            recovered
                .corrupt
                .iter()
                .map(|c| (c.offset, c.reason))
                .collect::<Vec<_>>(),
            vec![
                (records[1].offset, "checksum mismatch"),
                (
                    records[2].end(),
                    "truncated record header (write cut short)"
                ),
            ]
        );
        assert_eq!(drain_payloads(&mut store), vec![payload(10), payload(12)]);
    }

    /// Scenario: a record's length field is overwritten with a huge value.
    /// Guarantees: the scan does not trust it: it reports the record and resynchronizes on
    /// the next valid record, which is recovered.
    #[test]
    fn bad_length_resynchronizes() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, recovered, records) =
            reopen_damaged(dir.path(), 0..3, 1, 0, |data, first| {
                let at = first.offset as usize + 4;
                data[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            });
        assert_eq!(recovered.corrupt.len(), 1);
        assert_eq!(recovered.corrupt[0].offset, records[0].offset);
        assert_eq!(drain_payloads(&mut store), vec![payload(1), payload(2)]);
    }

    /// Scenario: segments of at most 1 KiB and 40 records of 25 to 75 bytes.
    /// Guarantees: the writer rolls over to new segments; reading crosses segments in
    /// order; acking everything deletes every full segment, leaving only the open one.
    #[test]
    fn segments_roll_over_and_are_deleted_when_done() {
        let dir = tempfile::tempdir().unwrap();
        let small = StoreOptions {
            segment_bytes: 1024,
            ..options()
        };
        let (mut store, _) = Store::open(dir.path(), small).unwrap();
        for i in 0..40 {
            store.append(&payload(i), 1).unwrap().unwrap();
        }
        assert!(
            segments(dir.path()).len() >= 2,
            "{:?}",
            segments(dir.path())
        );
        assert_eq!(
            drain_payloads(&mut store),
            (0..40).map(payload).collect::<Vec<_>>()
        );
        assert_eq!(segments(dir.path()).len(), 1);
        assert_eq!(store.live(), 0);
    }

    /// Scenario: 10 records; records 0-3 and 6 acked (6 out of order), then reopened; then
    /// everything acked and reopened again.
    /// Guarantees: the persisted position covers exactly 0-3, so the reopen replays 4-9
    /// (6 again: at least once); after acking all, a reopen replays nothing.
    #[test]
    fn ack_position_persists_across_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = filled_store(dir.path(), 0..10, 1);
        let taken: Vec<RecordRef> = std::iter::from_fn(|| store.take()).collect();
        for record in taken[..4].iter().chain([&taken[6]]) {
            store.ack(*record).unwrap();
        }
        assert_eq!(store.live(), 5);
        drop(store);

        let (mut store, recovered) = Store::open(dir.path(), options()).unwrap();
        assert_eq!(recovered.records, 6);
        assert_eq!(
            drain_payloads(&mut store),
            (4..10).map(payload).collect::<Vec<_>>()
        );
        drop(store);

        assert_reopens_empty(dir.path());
    }

    /// Scenario: a byte budget of ~3 records and a record budget of 5.
    /// Guarantees: appends past either limit are refused (`None`) without writing; acking
    /// frees room; a record larger than the whole budget is accepted into an empty queue.
    #[test]
    fn limits_refuse_until_room() {
        let dir = tempfile::tempdir().unwrap();
        let limited = StoreOptions {
            max_bytes: 8 + 3 * (RECORD_HEADER + 100),
            max_records: 5,
            segment_bytes: 1 << 20,
            ..options()
        };
        let (mut store, _) = Store::open(dir.path(), limited.clone()).unwrap();
        let body = vec![7u8; 100];
        for _ in 0..3 {
            assert!(store.append(&body, 1).unwrap().is_some());
        }
        assert!(store.append(&body, 1).unwrap().is_none());
        assert_eq!(store.live(), 3);
        while let Some(record) = store.take() {
            store.ack(record).unwrap();
        }
        let huge = vec![1u8; 4096];
        assert!(
            store.append(&huge, 1).unwrap().is_some(),
            "empty queue takes it"
        );
        assert!(store.append(&body, 1).unwrap().is_none());
        let record = store.take().unwrap();
        store.ack(record).unwrap();
        assert!(store.append(&body, 1).unwrap().is_some());
        drop(store);

        let by_count = StoreOptions {
            max_records: 2,
            ..options()
        };
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = Store::open(dir.path(), by_count).unwrap();
        assert!(store.append(&body, 1).unwrap().is_some());
        assert!(store.append(&body, 1).unwrap().is_some());
        assert!(store.append(&body, 1).unwrap().is_none());
    }

    /// Scenario: a second store opened on a directory already open.
    /// Guarantees: it fails with `Locked` after the timeout instead of sharing the files.
    #[test]
    fn a_directory_is_used_by_one_store() {
        let dir = tempfile::tempdir().unwrap();
        let (_store, _) = Store::open(dir.path(), options()).unwrap();
        let error = Store::open(dir.path(), options()).unwrap_err();
        assert!(matches!(error, StoreError::Locked { .. }), "{error}");
    }

    /// Scenario: the ack file overwritten with garbage.
    /// Guarantees: reported as a corruption; every segment is replayed (nothing lost).
    #[test]
    fn damaged_ack_file_replays_everything() {
        let dir = tempfile::tempdir().unwrap();
        let (mut store, _) = filled_store(dir.path(), 0..4, 1);
        let first = store.take().unwrap();
        store.ack(first).unwrap();
        drop(store);
        fs::write(dir.path().join("ack"), b"garbage").unwrap();
        let (_, recovered) = Store::open(dir.path(), options()).unwrap();
        assert_eq!(recovered.records, 4);
        assert_eq!(recovered.corrupt.len(), 1);
    }

    /// The scan as it was before [`valid_record_starts`]: after damage, the first later
    /// offset where [`parse_at`] accepts a record, each checked over its whole length.
    fn naive_scan(data: &[u8]) -> (Vec<ScannedRecord>, Vec<(u64, &'static str)>) {
        let (mut records, mut damaged) = (Vec::new(), Vec::new());
        if !data.starts_with(SEGMENT_MAGIC) {
            return scan(data);
        }
        let mut at = SEGMENT_MAGIC.len();
        while at < data.len() {
            match parse_at(data, at) {
                Ok((len, items)) => {
                    records.push((at as u64, len, items));
                    at += RECORD_HEADER as usize + len as usize;
                }
                Err(reason) => {
                    damaged.push((at as u64, reason));
                    match (at + 1..data.len()).find(|&o| parse_at(data, o).is_ok()) {
                        Some(next) => at = next,
                        None => break,
                    }
                }
            }
        }
        (records, damaged)
    }

    /// A record as [`Store::append`] writes it.
    fn encoded(payload: &[u8], items: u32) -> Vec<u8> {
        let len = payload.len() as u32;
        let mut record = Vec::with_capacity(RECORD_HEADER as usize + payload.len());
        for field in [RECORD_MAGIC, len, items, checksum(len, items, payload)] {
            record.extend_from_slice(&field.to_le_bytes());
        }
        record.extend_from_slice(payload);
        record
    }

    /// A segment made to be slow to recover by checking each candidate over its length: the
    /// header, a damaged record (16 zero bytes), `pairs` 8-byte pairs of record magic and a
    /// length reaching the end of the file, then one valid record of `tail` bytes, which
    /// recovery must find after rejecting every pair.
    fn crafted(pairs: usize, tail: usize) -> Vec<u8> {
        let record = encoded(&vec![7u8; tail], 3);
        let mut data = SEGMENT_MAGIC.to_vec();
        data.extend_from_slice(&[0u8; 16]);
        let end = data.len() + pairs * 8 + record.len();
        for pair in 0..pairs {
            let start = data.len() + RECORD_HEADER as usize;
            data.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
            let len = (end - start) as u32;
            debug_assert!(pair < pairs);
            data.extend_from_slice(&len.to_le_bytes());
        }
        data.extend_from_slice(&record);
        data
    }

    /// Scenario: the crafted segment of [`crafted`] at 2 MiB (262,143 candidates reaching
    /// the end of the file; checking each over its length hashes about 256 GiB).
    /// Guarantees: recovery reports the damage once and finds the valid record at the end,
    /// as the check of each candidate over its length would, and returns (a quadratic
    /// search does not finish within the test run's time).
    #[test]
    fn crafted_candidates_do_not_make_recovery_quadratic() {
        let pairs = (2 << 20) / 8;
        let data = crafted(pairs, 100);
        let (records, damaged) = scan(&data);
        let last = (data.len() - RECORD_HEADER as usize - 100) as u64;
        assert_eq!(records, vec![(last, 100, 3)]);
        assert_eq!(
            damaged,
            vec![(SEGMENT_MAGIC.len() as u64, "bad record magic")]
        );
    }

    /// Scenario: small crafted segments (candidates reaching the end of the file), and
    /// segments of real records with damage of every kind at pseudo-random places: flipped
    /// bytes, overwritten lengths, cuts, record magic planted in payloads, records copied
    /// into payloads.
    /// Guarantees: the scan finds exactly the records and damage the check of each
    /// candidate over its length finds.
    #[test]
    fn resynchronizes_where_the_naive_search_does() {
        for pairs in [0, 1, 2, 7, 64] {
            for tail in [0, 1, 40] {
                let data = crafted(pairs, tail);
                assert_eq!(scan(&data), naive_scan(&data), "pairs {pairs}, tail {tail}");
            }
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for round in 0..400 {
            let mut data = SEGMENT_MAGIC.to_vec();
            for i in 0..(next() % 12) {
                let mut payload = payload(i as u32);
                payload.resize((next() % 80) as usize, (i % 251) as u8);
                if next() % 4 == 0 && payload.len() >= 24 {
                    // A whole record inside this payload.
                    let inner = encoded(&payload[..8], 1);
                    let at =
                        (next() as usize) % (payload.len() - inner.len().min(payload.len()) + 1);
                    let fit = inner.len().min(payload.len() - at);
                    payload[at..at + fit].copy_from_slice(&inner[..fit]);
                }
                data.extend_from_slice(&encoded(&payload, i as u32));
            }
            for _ in 0..(next() % 4) {
                if data.len() <= SEGMENT_MAGIC.len() {
                    break;
                }
                let at =
                    SEGMENT_MAGIC.len() + (next() as usize) % (data.len() - SEGMENT_MAGIC.len());
                match next() % 4 {
                    0 => data[at] ^= 1 << (next() % 8),
                    1 => data.truncate(at),
                    2 if at + 4 <= data.len() => {
                        data[at..at + 4].copy_from_slice(&RECORD_MAGIC.to_le_bytes());
                    }
                    _ if at + 8 <= data.len() => {
                        let len = (next() % 200) as u32;
                        data[at + 4..at + 8].copy_from_slice(&len.to_le_bytes());
                    }
                    _ => {}
                }
            }
            assert_eq!(scan(&data), naive_scan(&data), "round {round}");
        }
    }
}
