//! Criterion benches of the disk queue's segment recovery (`scan_segment`, what a restart
//! runs over each segment file) on 16 MiB segments, the default segment size:
//!
//! - `clean`: whole records of 4 KiB, no damage (the common restart);
//! - `flipped_byte`: the same with one byte of the first record flipped, so recovery
//!   resynchronizes over the rest of the file;
//! - `crafted`: a damaged record followed by 8-byte pairs of record magic and a length
//!   reaching the end of the file (payload bytes are client bytes, so a torn record can
//!   hold these), then one valid record. Checking each of the 2 million candidates over
//!   its length would hash ~16 TiB.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use tailgate::exporter::scan_segment;

const SEGMENT_MAGIC: &[u8; 8] = b"TGQSEG1\n";
const RECORD_MAGIC: u32 = 0x5147_5452;
const SEGMENT_BYTES: usize = 16 << 20;

fn record(payload: &[u8], items: u32) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&len.to_le_bytes());
    hasher.update(&items.to_le_bytes());
    hasher.update(payload);
    let mut out = Vec::with_capacity(16 + payload.len());
    for field in [RECORD_MAGIC, len, items, hasher.finalize()] {
        out.extend_from_slice(&field.to_le_bytes());
    }
    out.extend_from_slice(payload);
    out
}

fn clean() -> Vec<u8> {
    let mut data = SEGMENT_MAGIC.to_vec();
    let mut i = 0u32;
    while data.len() < SEGMENT_BYTES {
        let payload: Vec<u8> = (0..4096u32).map(|b| (b ^ i) as u8).collect();
        data.extend_from_slice(&record(&payload, i));
        i += 1;
    }
    data
}

fn crafted() -> Vec<u8> {
    let tail = record(&[7; 100], 3);
    let mut data = SEGMENT_MAGIC.to_vec();
    data.extend_from_slice(&[0; 16]);
    let pairs = (SEGMENT_BYTES - data.len() - tail.len()) / 8;
    let end = data.len() + pairs * 8 + tail.len();
    for _ in 0..pairs {
        let len = (end - data.len() - 16) as u32;
        data.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
        data.extend_from_slice(&len.to_le_bytes());
    }
    data.extend_from_slice(&tail);
    data
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("segment_recovery");
    group.sample_size(10);
    let clean = clean();
    let mut flipped = clean.clone();
    flipped[SEGMENT_MAGIC.len() + 100] ^= 1;
    let crafted = crafted();
    for (name, data) in [
        ("clean", &clean),
        ("flipped_byte", &flipped),
        ("crafted", &crafted),
    ] {
        group.throughput(Throughput::Bytes(data.len() as u64));
        group.bench_function(name, |b| {
            b.iter(|| black_box(scan_segment(black_box(data))))
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
