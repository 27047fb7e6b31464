//! The key layout: `prefix:{<key>}:<algorithm>`.
//!
//! The part in braces is a Redis Cluster *hash tag*: Redis hashes only the bytes between the first
//! `{` and the first `}` after it, so every structure of one key (one per algorithm) lands in the
//! same slot, whatever the algorithm suffix. The suffix keeps the algorithms apart: a token bucket
//! never reads a fixed window's hash as its own.
//!
//! A tag must not end early or be empty (an empty tag `{}` makes Redis hash the whole name, and a
//! key's structures could land in different slots), so the key is escaped: `{`, `}` and `%`
//! become `%7B`, `%7D` and `%25`, and the empty key becomes `%` (which no other key's escaping
//! produces, since every other `%` is followed by two hex digits). The escaping is one-to-one:
//! different keys never share a name.

use std::fmt;

/// The longest key accepted, in bytes (before escaping): 1 KiB.
pub const MAX_KEY_LEN: usize = 1024;

/// The longest prefix accepted, in bytes.
pub const MAX_PREFIX_LEN: usize = 256;

/// A key longer than [`MAX_KEY_LEN`].
///
/// # Examples
///
/// ```
/// use tollgate::redis::{KeyTooLong, MAX_KEY_LEN};
/// let err = KeyTooLong { len: 2000 };
/// assert_eq!(err.to_string(), format!("key: 2000 bytes; the accepted range is 0..={MAX_KEY_LEN} bytes"));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyTooLong {
    /// The key's length in bytes.
    pub len: usize,
}

impl fmt::Display for KeyTooLong {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "key: {} bytes; the accepted range is 0..={MAX_KEY_LEN} bytes",
            self.len
        )
    }
}

impl std::error::Error for KeyTooLong {}

/// Whether `prefix` is a valid key prefix: at most [`MAX_PREFIX_LEN`] bytes, without `{` or `}`
/// (which would move the hash tag).
pub(crate) fn valid_prefix(prefix: &[u8]) -> bool {
    prefix.len() <= MAX_PREFIX_LEN && !prefix.iter().any(|&b| b == b'{' || b == b'}')
}

/// The Redis key of `key`'s structure for the algorithm `suffix`: `prefix:{escaped key}:suffix`.
pub(crate) fn name(prefix: &[u8], key: &[u8], suffix: &str) -> Result<Vec<u8>, KeyTooLong> {
    if key.len() > MAX_KEY_LEN {
        return Err(KeyTooLong { len: key.len() });
    }
    let mut out = Vec::with_capacity(prefix.len() + key.len() + suffix.len() + 8);
    out.extend_from_slice(prefix);
    out.extend_from_slice(b":{");
    if key.is_empty() {
        out.push(b'%');
    }
    for &b in key {
        match b {
            b'{' => out.extend_from_slice(b"%7B"),
            b'}' => out.extend_from_slice(b"%7D"),
            b'%' => out.extend_from_slice(b"%25"),
            _ => out.push(b),
        }
    }
    out.extend_from_slice(b"}:");
    out.extend_from_slice(suffix.as_bytes());
    Ok(out)
}

/// The hash tag Redis Cluster hashes for `name`: the bytes between the first `{` and the first
/// `}` after it, when there are any; otherwise the whole name.
#[cfg(test)]
fn hash_tag(name: &[u8]) -> &[u8] {
    if let Some(open) = name.iter().position(|&b| b == b'{') {
        if let Some(len) = name[open + 1..].iter().position(|&b| b == b'}') {
            if len > 0 {
                return &name[open + 1..open + 1 + len];
            }
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_keys_are_kept_and_tagged() {
        assert_eq!(name(b"rl", b"user-1", "tb").unwrap(), b"rl:{user-1}:tb");
        assert_eq!(hash_tag(b"rl:{user-1}:tb"), b"user-1");
    }

    #[test]
    fn braces_percent_and_the_empty_key_are_escaped() {
        assert_eq!(name(b"p", b"", "fw").unwrap(), b"p:{%}:fw");
        assert_eq!(name(b"p", b"a{b}c%", "fw").unwrap(), b"p:{a%7Bb%7Dc%25}:fw");
        assert_eq!(name(b"p", b"%", "fw").unwrap(), b"p:{%25}:fw");
    }

    #[test]
    fn keys_up_to_one_kib_are_accepted() {
        assert!(name(b"p", &[b'x'; MAX_KEY_LEN], "tb").is_ok());
        assert_eq!(
            name(b"p", &[b'x'; MAX_KEY_LEN + 1], "tb"),
            Err(KeyTooLong {
                len: MAX_KEY_LEN + 1
            })
        );
    }

    #[test]
    fn prefixes_with_braces_or_too_long_are_refused() {
        assert!(valid_prefix(b"tollgate"));
        assert!(valid_prefix(b""));
        assert!(!valid_prefix(b"a{b"));
        assert!(!valid_prefix(b"a}b"));
        assert!(!valid_prefix(&[b'p'; MAX_PREFIX_LEN + 1]));
    }

    proptest! {
        /// Every structure of one key shares one tag (one cluster slot), the tag is never empty,
        /// and different keys never share a name.
        #[test]
        fn one_tag_per_key_and_one_name_per_key(
            a in proptest::collection::vec(any::<u8>(), 0..40),
            b in proptest::collection::vec(any::<u8>(), 0..40),
        ) {
            let names: Vec<Vec<u8>> = ["tb", "lm", "fw"].iter().map(|s| name(b"pre", &a, s).unwrap()).collect();
            let tag = hash_tag(&names[0]).to_vec();
            prop_assert!(!tag.is_empty());
            prop_assert!(tag.len() < names[0].len());
            for n in &names {
                prop_assert_eq!(hash_tag(n), &tag[..]);
            }
            if a != b {
                prop_assert_ne!(name(b"pre", &a, "tb").unwrap(), name(b"pre", &b, "tb").unwrap());
            }
        }
    }
}
