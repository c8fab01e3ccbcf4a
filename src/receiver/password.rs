//! Checking a password against an htpasswd hash ([`PasswordHash`]), and comparing
//! credentials in constant time.
//!
//! bcrypt comes from the `bcrypt` crate; Apache's MD5 (`$apr1$`, and `$1$`) is written here
//! over the `md-5` crate, as no maintained crate has it; `{SHA}` is SHA-1 from `ring`.

use base64::Engine as _;
use md5::{Digest as _, Md5};

use crate::config::PasswordHash;

/// The alphabet crypt(3) writes its checksums in, 6 bits per character.
const CRYPT_ALPHABET: &[u8] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// True when `password` matches `hash`. bcrypt costs tens of milliseconds by design: see
/// [`is_costly`], and call it off the async workers.
pub(super) fn verify(hash: &PasswordHash, password: &[u8]) -> bool {
    match hash {
        // A hash the crate cannot read was refused when the config was loaded; an error
        // here can only mean "no match".
        PasswordHash::Bcrypt(hash) => bcrypt::verify(password, hash).unwrap_or(false),
        PasswordHash::Md5Crypt {
            apr1,
            salt,
            checksum,
        } => constant_time_eq(
            md5_crypt(password, salt.as_bytes(), *apr1).as_bytes(),
            checksum.as_bytes(),
        ),
        PasswordHash::Sha1(digest) => {
            let computed = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, password);
            constant_time_eq(computed.as_ref(), digest)
        }
    }
}

/// True for the kinds whose check is slow on purpose (bcrypt), which the authenticator
/// runs on a blocking thread and remembers once it succeeded.
pub(super) fn is_costly(hash: &PasswordHash) -> bool {
    matches!(hash, PasswordHash::Bcrypt(_))
}

/// `a == b` in a time that depends on their lengths only, not on where they differ.
pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    // Lengths of credentials are not secret enough to hide (a token's length is fixed by
    // whoever made it), so unequal lengths answer at once.
    if a.len() != b.len() {
        return false;
    }
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(difference) == 0
}

/// The 22-character checksum of the MD5-based crypt (`$1$`, or Apache's `$apr1$`, whose
/// only difference is the prefix mixed in) of `password` with `salt` (at most 8 bytes used).
fn md5_crypt(password: &[u8], salt: &[u8], apr1: bool) -> String {
    let magic: &[u8] = if apr1 { b"$apr1$" } else { b"$1$" };
    let salt = &salt[..salt.len().min(8)];

    let mut alternate = Md5::new();
    alternate.update(password);
    alternate.update(salt);
    alternate.update(password);
    let alternate = alternate.finalize();

    let mut context = Md5::new();
    context.update(password);
    context.update(magic);
    context.update(salt);
    let mut left = password.len();
    while left > 0 {
        let take = left.min(16);
        context.update(&alternate[..take]);
        left -= take;
    }
    let mut bits = password.len();
    while bits != 0 {
        if bits & 1 == 1 {
            context.update([0u8]);
        } else {
            context.update(&password[..1]);
        }
        bits >>= 1;
    }
    let mut digest: [u8; 16] = context.finalize().into();

    // 1000 rounds, to slow down guessing (the algorithm's fixed cost).
    for round in 0..1000 {
        let mut context = Md5::new();
        if round % 2 == 1 {
            context.update(password);
        } else {
            context.update(digest);
        }
        if round % 3 != 0 {
            context.update(salt);
        }
        if round % 7 != 0 {
            context.update(password);
        }
        if round % 2 == 1 {
            context.update(digest);
        } else {
            context.update(password);
        }
        digest = context.finalize().into();
    }

    let mut out = String::with_capacity(22);
    let mut push = |value: u32, chars: usize| {
        let mut value = value;
        for _ in 0..chars {
            out.push(char::from(CRYPT_ALPHABET[(value & 0x3f) as usize]));
            value >>= 6;
        }
    };
    let d = |i: usize| u32::from(digest[i]);
    for (a, b, c) in [(0, 6, 12), (1, 7, 13), (2, 8, 14), (3, 9, 15), (4, 10, 5)] {
        push((d(a) << 16) | (d(b) << 8) | d(c), 4);
    }
    push(d(11), 2);
    out
}

/// The user and password of an HTTP Basic `Authorization` value (`Basic base64(user:pw)`,
/// the scheme in any case), or `None` when it is not one.
pub(super) fn basic_credentials(value: &[u8]) -> Option<(String, Vec<u8>)> {
    let (scheme, encoded) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded.trim_ascii())
        .ok()?;
    let colon = decoded.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(decoded[..colon].to_vec()).ok()?;
    Some((user, decoded[colon + 1..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(line: &str) -> PasswordHash {
        let mut htpasswd = crate::config::Htpasswd::default();
        htpasswd.add(line).expect("valid line");
        htpasswd.get("u").expect("user u").clone()
    }

    /// Scenario: the password "password" against a hash of each kind (vectors from
    /// `openssl passwd -apr1`, `openssl passwd -1`, `openssl sha1 | base64`, and a
    /// published bcrypt `$2y$` hash), and a wrong password against each.
    /// Guarantees: the right password matches every kind, the wrong one none; only bcrypt
    /// counts as costly.
    #[test]
    fn verifies_each_kind() {
        let hashes = [
            "u:$apr1$r31.....$ARC3pREO82RIm0aQ2zszC0",
            "u:$1$saltsalt$qjXMvbEw8oaL.CzflDtaK/",
            "u:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=",
            "u:$2y$05$bvIG6Nmid91Mu9RcmmWZfO5HJIMCT8riNW0hEp8f6/FuA2/mHZFpe",
        ];
        for line in hashes {
            let hash = parsed(line);
            assert!(verify(&hash, b"password"), "{line}");
            assert!(!verify(&hash, b"passwore"), "{line}");
            assert!(!verify(&hash, b""), "{line}");
            assert_eq!(is_costly(&hash), line.contains("$2y$"));
        }
    }

    /// Scenario: Basic values: well formed, scheme in another case, a password holding a
    /// colon, another scheme, bad base64, no colon.
    /// Guarantees: user and password are split at the first colon; anything else is None.
    #[test]
    fn reads_basic_credentials() {
        let encode = |text: &str| base64::engine::general_purpose::STANDARD.encode(text);
        let value = format!("Basic {}", encode("alice:pa:ss"));
        assert_eq!(
            basic_credentials(value.as_bytes()),
            Some(("alice".to_owned(), b"pa:ss".to_vec()))
        );
        let value = format!("bAsIc {}", encode("bob:"));
        assert_eq!(
            basic_credentials(value.as_bytes()),
            Some(("bob".to_owned(), Vec::new()))
        );
        for bad in [
            format!("Bearer {}", encode("alice:x")),
            "Basic !!!".to_owned(),
            format!("Basic {}", encode("alice")),
            "Basic".to_owned(),
        ] {
            assert_eq!(basic_credentials(bad.as_bytes()), None, "{bad}");
        }
    }

    /// Scenario: equal, unequal and different-length byte strings.
    /// Guarantees: only equal ones compare equal.
    #[test]
    fn compares_in_constant_time() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
        assert!(constant_time_eq(b"", b""));
    }
}
