//! SHA-1 (FIPS 180-4) as a `const fn`, so that each script's hash for EVALSHA is computed by
//! the compiler: hashing the scripts' ~26 KB of source at run time (`redis::Script::new`)
//! was about a third of the instructions of an uncontended run (bench/results.md).
//! Not for anything secret: Redis names cached scripts by this hash.

/// The SHA-1 of `data` in lower-case hex, as Redis prints it.
pub const fn sha1_hex(data: &[u8]) -> [u8; 40] {
    let digest = sha1(data);
    let mut hex = [0u8; 40];
    let mut i = 0;
    while i < 20 {
        hex[2 * i] = nibble(digest[i] >> 4);
        hex[2 * i + 1] = nibble(digest[i] & 0xf);
        i += 1;
    }
    hex
}

const fn nibble(n: u8) -> u8 {
    if n < 10 { b'0' + n } else { b'a' + n - 10 }
}

/// The padded message's byte at `i`: the data, 0x80, zeros, then its length in bits.
const fn padded(data: &[u8], total: usize, i: usize) -> u8 {
    if i < data.len() {
        data[i]
    } else if i == data.len() {
        0x80
    } else if i >= total - 8 {
        let bits = (data.len() as u64).wrapping_mul(8);
        (bits >> ((total - 1 - i) * 8)) as u8
    } else {
        0
    }
}

const fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let total = (data.len() + 9).div_ceil(64) * 64;
    let mut block = 0;
    while block * 64 < total {
        let mut w = [0u32; 80];
        let mut t = 0;
        while t < 16 {
            let at = block * 64 + t * 4;
            w[t] = u32::from_be_bytes([
                padded(data, total, at),
                padded(data, total, at + 1),
                padded(data, total, at + 2),
                padded(data, total, at + 3),
            ]);
            t += 1;
        }
        while t < 80 {
            w[t] = (w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16]).rotate_left(1);
            t += 1;
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        t = 0;
        while t < 80 {
            let (f, k) = if t < 20 {
                ((b & c) | (!b & d), 0x5A827999)
            } else if t < 40 {
                (b ^ c ^ d, 0x6ED9EBA1)
            } else if t < 60 {
                ((b & c) | (b & d) | (c & d), 0x8F1BBCDC)
            } else {
                (b ^ c ^ d, 0xCA62C1D6)
            };
            let next = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(w[t]);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = next;
            t += 1;
        }
        h[0] = h[0].wrapping_add(a);
        h[1] = h[1].wrapping_add(b);
        h[2] = h[2].wrapping_add(c);
        h[3] = h[3].wrapping_add(d);
        h[4] = h[4].wrapping_add(e);
        block += 1;
    }
    let mut out = [0u8; 20];
    let mut i = 0;
    while i < 5 {
        let bytes = h[i].to_be_bytes();
        out[4 * i] = bytes[0];
        out[4 * i + 1] = bytes[1];
        out[4 * i + 2] = bytes[2];
        out[4 * i + 3] = bytes[3];
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::sha1_hex;

    /// Agrees with the redis crate's hash (what EVALSHA needed before) at every length
    /// around the padding's edges, and with the FIPS examples.
    #[test]
    fn agrees_with_redis_script_hash() {
        let hex = |d: &[u8]| String::from_utf8(sha1_hex(d).to_vec()).unwrap();
        assert_eq!(hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        let text: String = (0..300)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        for len in 0..text.len() {
            let s = &text[..len];
            assert_eq!(hex(s.as_bytes()), redis::Script::new(s).get_hash(), "{len}");
        }
    }
}
