//! htpasswd text as Apache's `htpasswd` writes it (the entries of a `basicauth`
//! extension): one `user:hash` per line, the hash telling its kind by its prefix.
//!
//! Parsed once, when the config is loaded; the receiver's authenticator checks passwords
//! against the parsed hashes (`receiver::password`). Messages name the line and the user,
//! never a hash.

use std::collections::BTreeMap;
use std::fmt;

use base64::Engine as _;

/// The alphabet of crypt(3) hashes and salts.
const CRYPT_ALPHABET: &[u8] = b"./0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// The entries of one or more htpasswd texts, by user. `Debug` lists the users only.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Htpasswd {
    entries: BTreeMap<String, PasswordHash>,
}

/// One user's password hash, of a kind `htpasswd` writes.
#[derive(Clone, PartialEq, Eq)]
pub enum PasswordHash {
    /// `$2y$`, `$2a$` or `$2b$`: bcrypt (`htpasswd -B`), the whole hash string.
    Bcrypt(String),
    /// `$apr1$salt$checksum` (`htpasswd -m`, Apache's MD5) or `$1$salt$checksum` (the same
    /// algorithm with the crypt(3) prefix).
    Md5Crypt {
        /// `$apr1$` (true) or `$1$` (false): the prefix is part of what is hashed.
        apr1: bool,
        /// The salt, at most 8 characters.
        salt: String,
        /// The 22-character checksum.
        checksum: String,
    },
    /// `{SHA}base64`: SHA-1 of the password, unsalted (`htpasswd -s`).
    Sha1([u8; 20]),
}

impl fmt::Debug for PasswordHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self {
            Self::Bcrypt(_) => "bcrypt",
            Self::Md5Crypt { apr1: true, .. } => "apr1",
            Self::Md5Crypt { apr1: false, .. } => "md5-crypt",
            Self::Sha1(_) => "sha1",
        };
        write!(f, "PasswordHash({kind})")
    }
}

impl fmt::Debug for Htpasswd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.entries.keys()).finish()
    }
}

/// A line of htpasswd text that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct HtpasswdError {
    /// The line, from 1.
    pub line: usize,
    /// What is wrong and how to fix it; names the user, never the hash.
    pub message: String,
}

impl Htpasswd {
    /// Adds the entries of `text`; a user already present takes the later line's hash.
    /// Blank lines and lines starting with `#` are skipped.
    ///
    /// # Errors
    ///
    /// The first line that is not `user:hash` with a hash of a kind listed in
    /// [`PasswordHash`] (crypt(3) DES hashes, `htpasswd -d`, and plain text are refused).
    pub fn add(&mut self, text: &str) -> Result<(), HtpasswdError> {
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let error = |message: String| HtpasswdError {
                line: index + 1,
                message,
            };
            let Some((user, rest)) = line.split_once(':') else {
                return Err(error(
                    "expected user:hash (as written by htpasswd -B)".to_owned(),
                ));
            };
            if user.is_empty() {
                return Err(error("the user name before ':' is empty".to_owned()));
            }
            // Fields after a second ':' (a comment some tools add) are not part of the hash.
            let hash = rest.split(':').next().unwrap_or(rest);
            let parsed = parse_hash(hash).map_err(|kind| {
                error(format!(
                    "the password of user {user:?} is {kind}; write it with htpasswd -B \
                     (bcrypt), -m (apr1) or -s (SHA-1)"
                ))
            })?;
            self.entries.insert(user.to_owned(), parsed);
        }
        Ok(())
    }

    /// The hash of `user`, if it has an entry.
    pub fn get(&self, user: &str) -> Option<&PasswordHash> {
        self.entries.get(user)
    }

    /// How many users have an entry.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no user has an entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The hash `hash` of a known kind, else what kind it is (for the message).
fn parse_hash(hash: &str) -> Result<PasswordHash, &'static str> {
    if ["$2y$", "$2a$", "$2b$"]
        .iter()
        .any(|prefix| hash.starts_with(prefix))
    {
        // $2y$NN$ then 53 characters of salt and checksum.
        let cost_ok = hash
            .get(4..6)
            .and_then(|cost| cost.parse::<u32>().ok())
            .is_some_and(|cost| (4..=31).contains(&cost));
        if hash.len() != 60 || !cost_ok || hash.as_bytes()[6] != b'$' {
            return Err("a malformed bcrypt hash");
        }
        return Ok(PasswordHash::Bcrypt(hash.to_owned()));
    }
    for (prefix, apr1) in [("$apr1$", true), ("$1$", false)] {
        let Some(rest) = hash.strip_prefix(prefix) else {
            continue;
        };
        let Some((salt, checksum)) = rest.split_once('$') else {
            return Err("a malformed MD5 hash");
        };
        let in_alphabet = |text: &str| text.bytes().all(|b| CRYPT_ALPHABET.contains(&b));
        if salt.is_empty() || salt.len() > 8 || checksum.len() != 22 || !in_alphabet(checksum) {
            return Err("a malformed MD5 hash");
        }
        return Ok(PasswordHash::Md5Crypt {
            apr1,
            salt: salt.to_owned(),
            checksum: checksum.to_owned(),
        });
    }
    if let Some(encoded) = hash.strip_prefix("{SHA}") {
        let digest = base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .ok()
            .and_then(|bytes| <[u8; 20]>::try_from(bytes).ok())
            .ok_or("a malformed {SHA} hash")?;
        return Ok(PasswordHash::Sha1(digest));
    }
    if hash.len() == 13 && hash.bytes().all(|b| CRYPT_ALPHABET.contains(&b)) {
        return Err("a crypt(3) DES hash (htpasswd -d), which is not supported");
    }
    Err("not a hash of a supported kind (or plain text)")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scenario: htpasswd text with a comment, a blank line, one user of each kind, and a
    /// user written twice.
    /// Guarantees: every kind is recognised with its parts, the later line wins, and
    /// `Debug` shows users but no hash.
    #[test]
    fn parses_each_kind() {
        let mut htpasswd = Htpasswd::default();
        htpasswd
            .add(
                "# users\n\nb:$2y$05$bvIG6Nmid91Mu9RcmmWZfO5HJIMCT8riNW0hEp8f6/FuA2/mHZFpe\n\
                 m:$apr1$r31.....$HqJZimcKQFAMYayBlzkrA/\r\n\
                 s:{SHA}W6ph5Mm5Pz8GgiULbPgzG37mj9g=\n\
                 s:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\n",
            )
            .expect("valid");
        assert_eq!(htpasswd.len(), 3);
        assert!(matches!(htpasswd.get("b"), Some(PasswordHash::Bcrypt(h)) if h.len() == 60));
        assert_eq!(
            htpasswd.get("m"),
            Some(&PasswordHash::Md5Crypt {
                apr1: true,
                salt: "r31.....".into(),
                checksum: "HqJZimcKQFAMYayBlzkrA/".into(),
            })
        );
        // sha1("test")
        let Some(PasswordHash::Sha1(digest)) = htpasswd.get("s") else {
            panic!("sha entry");
        };
        assert_eq!(digest[..4], [0xa9, 0x4a, 0x8f, 0xe5]);
        let debug = format!("{htpasswd:?} {:?}", htpasswd.get("b"));
        assert!(
            !debug.contains("$2y$") && !debug.contains("HqJZ"),
            "{debug}"
        );
        assert!(debug.contains("\"m\""));
    }

    /// Scenario: lines that are not usable: no colon, no user, a DES crypt hash, plain
    /// text, a truncated bcrypt hash.
    /// Guarantees: each is refused with its line number and a fix, and the message never
    /// carries the hash.
    #[test]
    fn refuses_unusable_lines() {
        for (text, line, says) in [
            ("alice", 1, "expected user:hash"),
            ("\n:$apr1$r31.....$HqJZimcKQFAMYayBlzkrA/", 2, "user name"),
            ("carol:rqXexS6ZhobKA", 1, "DES"),
            ("dave:hunter2", 1, "plain text"),
            ("erin:$2y$05$bvIG6Nmid91Mu9Rc", 1, "malformed bcrypt"),
        ] {
            let error = Htpasswd::default().add(text).expect_err(text);
            assert_eq!(error.line, line, "{text}");
            let message = error.to_string();
            assert!(message.contains(says), "{message}");
            for secret in ["rqXexS6ZhobKA", "hunter2", "bvIG6Nmid91Mu9Rc", "HqJZ"] {
                assert!(!message.contains(secret), "{message}");
            }
        }
    }
}
