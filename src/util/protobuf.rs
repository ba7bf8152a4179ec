//! The one piece of protobuf almanac reads: the length-delimited values of one field of a message (the
//! Cursor CLI's root blob lists its message blobs' ids that way). Exposed to rule files' SQL as
//! `protobuf_bytes_hex(data, field)` (`rules::views::register_functions`); no schema, no nesting.

/// The length-delimited (wire type 2) values of field `field` of the message `buf`, in order; other
/// fields are skipped. An error names what is malformed.
pub fn field_bytes(buf: &[u8], field: u64) -> Result<Vec<&[u8]>, String> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < buf.len() {
        let key = varint(buf, &mut at)?;
        let (number, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                varint(buf, &mut at)?;
            }
            1 => at = skip(buf, at, 8)?,
            2 => {
                let len = varint(buf, &mut at)?;
                let len = usize::try_from(len).map_err(|_| "a length past the end".to_string())?;
                let end = skip(buf, at, len)?;
                if number == field {
                    out.push(&buf[at..end]);
                }
                at = end;
            }
            5 => at = skip(buf, at, 4)?,
            other => return Err(format!("wire type {other} at byte {at} is not read")),
        }
    }
    Ok(out)
}

fn skip(buf: &[u8], at: usize, len: usize) -> Result<usize, String> {
    at.checked_add(len)
        .filter(|end| *end <= buf.len())
        .ok_or_else(|| {
            format!(
                "a value at byte {at} runs past the end ({} bytes)",
                buf.len()
            )
        })
}

fn varint(buf: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *buf
            .get(*at)
            .ok_or_else(|| format!("a varint runs past the end at byte {at}"))?;
        *at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err(format!("a varint longer than 10 bytes ends at byte {at}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_values_of_one_field_are_listed_in_order_and_others_skipped() {
        // field 1: "ab"; field 3 varint 300; field 1: 32 bytes; field 2: "x"; field 4 fixed32.
        let mut buf = vec![0x0a, 2, b'a', b'b', 0x18, 0xac, 0x02, 0x0a, 32];
        buf.extend([7u8; 32]);
        buf.extend([0x12, 1, b'x', 0x25, 1, 2, 3, 4]);
        let ones = field_bytes(&buf, 1).unwrap();
        assert_eq!(ones.len(), 2);
        assert_eq!(ones[0], b"ab");
        assert_eq!(ones[1], &[7u8; 32][..]);
        assert_eq!(field_bytes(&buf, 2).unwrap(), vec![&b"x"[..]]);
        assert!(field_bytes(&buf, 9).unwrap().is_empty());
    }

    #[test]
    fn a_truncated_message_is_an_error_not_a_panic() {
        assert!(field_bytes(&[0x0a, 5, b'a'], 1).is_err());
        assert!(field_bytes(&[0x0a], 1).is_err());
        assert!(field_bytes(&[0x0b], 1).is_err());
        assert!(field_bytes(&[0xff; 11], 1).is_err());
        assert!(field_bytes(&[], 1).unwrap().is_empty());
    }
}
