//! Writing protobuf varints into a `Vec<u8>`: the one loop every hand-written encoder here
//! shares (prost's `encode_varint` goes through the generic `BufMut` calls, which cost more
//! than the few bytes a varint takes).

/// Appends `value` as a protobuf varint (1 to 10 bytes, least significant group first).
#[inline]
pub(crate) fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario: values at each varint length boundary, written here and by prost.
    /// Guarantees: the bytes are prost's.
    #[test]
    fn writes_what_prost_writes() {
        for value in [
            0,
            1,
            127,
            128,
            16_383,
            16_384,
            u64::from(u32::MAX),
            u64::MAX,
        ] {
            let mut ours = Vec::new();
            put_varint(&mut ours, value);
            let mut theirs = Vec::new();
            prost::encoding::encode_varint(value, &mut theirs);
            assert_eq!(ours, theirs, "{value}");
        }
    }
}
