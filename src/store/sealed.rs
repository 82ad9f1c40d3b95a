//! Destination credentials sealed at rest (docs/decisions.md §13, "Credentials at rest"): each
//! value is encrypted with ChaCha20-Poly1305 (`ring`, already here for rustls) under a key that is
//! not in the database, with a random nonce, and bound to its destination and field (the
//! associated data), so a sealed value copied to another row or field does not open.
//!
//! A stored value is `sealed:v1:KEYID:HEX`, KEYID the first four bytes of the key's SHA-256 (which
//! key opens it, for rotation and for errors), HEX the nonce then the ciphertext and its tag. A
//! value without the prefix is one written before values were sealed: read as it is, sealed at
//! the next write of its destination or by [`super::destinations::seal_all`].
//!
//! The key, 32 bytes written as 64 hex digits, comes from `CONVAPI_SECRET_KEY`, else from the file
//! `CONVAPI_SECRET_KEY_FILE` names, else (SQLite) from the file beside the database,
//! `convapi.db.key`, made with mode 0600 when a value is first sealed. PostgreSQL has no such
//! place: every node is given the key. A former key is still accepted for opening, from
//! `CONVAPI_SECRET_KEY_OLD` or the key file's name with `.old` added. Only `store::destinations`
//! and `store::sources` (a webhook source's secret, field `source secret` of the source's id)
//! seal and open; nothing on the conversions' path does.

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305, NONCE_LEN};
use sha2::{Digest, Sha256};

use super::engine::Conn;
use super::{Result, StoreError};

/// The variable holding the key itself (64 hex digits).
pub const KEY_VAR: &str = "CONVAPI_SECRET_KEY";
/// The variable naming a file that holds the key.
pub const KEY_FILE_VAR: &str = "CONVAPI_SECRET_KEY_FILE";
/// The variable holding a former key, accepted for opening only (rotation).
pub const OLD_KEY_VAR: &str = "CONVAPI_SECRET_KEY_OLD";

const PREFIX: &str = "sealed:v1:";

/// A key, with its id.
pub struct Key {
    id: String,
    aead: LessSafeKey,
}

impl Key {
    /// A key from its 64 hex digits (surrounding white space ignored); `what` names where it came
    /// from in the error.
    pub fn parse(text: &str, what: &str) -> Result<Key> {
        let bytes = hex_decode(text.trim())
            .filter(|b| b.len() == 32)
            .ok_or_else(|| {
                StoreError::Other(format!(
                    "{what} must hold the key as 64 hex digits (32 bytes), e.g. from `openssl rand -hex 32`"
                ))
            })?;
        Ok(Key::from_bytes(&bytes))
    }

    fn from_bytes(bytes: &[u8]) -> Key {
        let mut h = Sha256::new();
        h.update(b"convapi secret key id\0");
        h.update(bytes);
        let id = hex_encode(&h.finalize()[..4]);
        let aead = LessSafeKey::new(
            UnboundKey::new(&CHACHA20_POLY1305, bytes).expect("a 32-byte key is a ChaCha20 key"),
        );
        Key { id, aead }
    }

    /// A new random key and its 64 hex digits.
    fn generate() -> Result<(Key, String)> {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes)
            .map_err(|e| StoreError::Other(format!("no randomness for a new key: {e}")))?;
        Ok((Key::from_bytes(&bytes), hex_encode(&bytes)))
    }

    /// Its id, as sealed values name it.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// `plain` sealed for field `field` of destination `dest`.
    pub fn seal(&self, dest: &str, field: &str, plain: &str) -> Result<String> {
        let mut nonce = [0u8; NONCE_LEN];
        getrandom::fill(&mut nonce)
            .map_err(|e| StoreError::Other(format!("no randomness for a nonce: {e}")))?;
        let mut data = plain.as_bytes().to_vec();
        self.aead
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(associated(dest, field).as_bytes()),
                &mut data,
            )
            .map_err(|_| StoreError::Other("sealing a credential failed".to_owned()))?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&data);
        Ok(format!("{PREFIX}{}:{}", self.id, hex_encode(&out)))
    }

    fn open(&self, dest: &str, field: &str, hex: &str) -> Option<String> {
        let data = hex_decode(hex)?;
        if data.len() < NONCE_LEN {
            return None;
        }
        let (nonce, sealed) = data.split_at(NONCE_LEN);
        let mut sealed = sealed.to_vec();
        let plain = self
            .aead
            .open_in_place(
                Nonce::try_assume_unique_for_key(nonce).ok()?,
                Aad::from(associated(dest, field).as_bytes()),
                &mut sealed,
            )
            .ok()?;
        String::from_utf8(plain.to_vec()).ok()
    }
}

/// Only the id: the key never reaches a log.
impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Key({})", self.id)
    }
}

/// What binds a sealed value to its place.
fn associated(dest: &str, field: &str) -> String {
    format!("convapi destination credential\0{dest}\0{field}")
}

/// The id of the key `value` is sealed with; `None` for a value stored before values were sealed.
pub fn sealed_with(value: &str) -> Option<&str> {
    value
        .strip_prefix(PREFIX)
        .map(|rest| rest.split_once(':').map_or(rest, |(id, _)| id))
}

/// The key of PostgreSQL databases when the environment names none, given by a program that runs
/// the library in its own process (the tests, whose processes share one environment).
static GIVEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Gives [`GIVEN`] (64 hex digits), once per process; a second, different key is refused.
pub fn give_postgres_key(hex: &str) -> Result<()> {
    Key::parse(hex, "the key given")?;
    if GIVEN.get_or_init(|| hex.trim().to_owned()) != hex.trim() {
        return Err(StoreError::Other(
            "this process was given another key already".to_owned(),
        ));
    }
    Ok(())
}

/// Where the keys of one database come from, found once per call of the store.
pub struct Keyring {
    /// The key that seals, or why there is none.
    current: Result<Key>,
    /// Former keys, for opening only.
    old: Vec<Key>,
    /// The file the current key is in (or is to be made in), when it is a file.
    file: Option<PathBuf>,
    /// Whether the file was missing and may be made (the one beside a SQLite database).
    may_create: bool,
}

impl Keyring {
    /// The keys of the database `conn` is connected to. Reads the environment and the key files;
    /// makes nothing: [`Keyring::sealing_key`] makes the file beside a SQLite database.
    pub fn of(conn: Conn<'_>) -> Result<Keyring> {
        let missing = |what: String| Err(StoreError::Other(what));
        let (current, file, may_create) = if let Some(text) = var(KEY_VAR) {
            (Key::parse(&text, KEY_VAR), None, false)
        } else if let Some(path) = var(KEY_FILE_VAR).map(PathBuf::from) {
            let key = match read_key_file(&path) {
                Ok(Some(k)) => Ok(k),
                Ok(None) => missing(format!(
                    "{KEY_FILE_VAR} names {}, which does not exist: restore the key file, or \
                     point {KEY_FILE_VAR} at it",
                    path.display()
                )),
                Err(e) => Err(e),
            };
            (key, Some(path), false)
        } else {
            match beside(conn) {
                Some(path) => match read_key_file(&path) {
                    Ok(Some(k)) => (Ok(k), Some(path), false),
                    Ok(None) => (
                        missing(format!(
                            "the key file {} is missing: restore it from your backup of it, or \
                             set {KEY_VAR} to the key",
                            path.display()
                        )),
                        Some(path),
                        true,
                    ),
                    Err(e) => (Err(e), Some(path), false),
                },
                None => match GIVEN.get() {
                    Some(given) => (Key::parse(given, "the key given"), None, false),
                    None => (
                        missing(format!(
                            "destination credentials are stored encrypted, and a PostgreSQL \
                             database has no place beside it for the key: set {KEY_VAR} to 64 hex \
                             digits (`openssl rand -hex 32`), or {KEY_FILE_VAR} to a file holding \
                             them, the same on every node (a database copied from SQLite by \
                             `convapi migrate`: the contents of its convapi.db.key)"
                        )),
                        None,
                        false,
                    ),
                },
            }
        };
        let mut old = Vec::new();
        if let Some(text) = var(OLD_KEY_VAR) {
            old.push(Key::parse(&text, OLD_KEY_VAR)?);
        }
        if let Some(file) = &file {
            let mut name = file.clone().into_os_string();
            name.push(".old");
            if let Some(k) = read_key_file(Path::new(&name))? {
                old.push(k);
            }
        }
        Ok(Keyring {
            current,
            old,
            file,
            may_create,
        })
    }

    /// The key that seals: the file beside a SQLite database is made (0600, never over an
    /// existing file or through a link) when it does not exist yet.
    pub fn sealing_key(&mut self) -> Result<&Key> {
        if self.current.is_err() && self.may_create {
            let path = self
                .file
                .clone()
                .expect("a file may be made only where there is one");
            self.current = Ok(create_key_file(&path)?);
            self.may_create = false;
        }
        self.current.as_ref().map_err(Clone::clone)
    }

    /// The text of a stored value of field `field` of destination `dest`: opened when sealed, as
    /// it is when stored before values were sealed. `None` when its key is here but it does not
    /// open (altered, or copied from another destination or field): no key will ever open it. An
    /// error when its key is not given (the fix is to give it).
    pub fn open(&self, dest: &str, field: &str, stored: &str) -> Result<Option<String>> {
        let Some(rest) = stored.strip_prefix(PREFIX) else {
            return Ok(Some(stored.to_owned()));
        };
        let (id, hex) = rest.split_once(':').unwrap_or((rest, ""));
        let key = self
            .current
            .as_ref()
            .ok()
            .into_iter()
            .chain(&self.old)
            .find(|k| k.id == id);
        let Some(key) = key else {
            let given = match &self.current {
                Ok(k) => format!("the key given is {}", k.id),
                Err(e) => e.to_string(),
            };
            return Err(StoreError::Other(format!(
                "destination {dest}'s {field} is sealed with key {id}, and {given}: give the key it was \
                 sealed with ({KEY_VAR}, {KEY_FILE_VAR}, or the key file beside a SQLite database; a \
                 former key as {OLD_KEY_VAR})"
            )));
        };
        Ok(key.open(dest, field, hex))
    }
}

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The key file beside a SQLite database (`convapi.db.key`); `None` on PostgreSQL and for a
/// database without a file.
fn beside(conn: Conn<'_>) -> Option<PathBuf> {
    match conn {
        Conn::Sqlite(c) => c
            .path()
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(format!("{p}.key"))),
        Conn::Postgres(_) => None,
    }
}

/// The key in `path`; `None` when there is no such file.
fn read_key_file(path: &Path) -> Result<Option<Key>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Key::parse(&text, &format!("the key file {}", path.display())).map(Some),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
        Err(e) => Err(StoreError::Other(format!(
            "cannot read the key file {}: {e}",
            path.display()
        ))),
    }
}

/// A new key in a new file at `path`, readable by its owner only; when another process made the
/// file first, its key.
fn create_key_file(path: &Path) -> Result<Key> {
    let (key, hex) = Key::generate()?;
    let fail = |e: std::io::Error| {
        StoreError::Other(format!("cannot write the key file {}: {e}", path.display()))
    };
    let mut options = std::fs::OpenOptions::new();
    // create_new is O_CREAT|O_EXCL: it fails on any existing name, a symbolic link included.
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = match options.open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == ErrorKind::AlreadyExists => {
            return read_key_file(path)?.ok_or_else(|| fail(e));
        }
        Err(e) => return Err(fail(e)),
    };
    file.write_all(format!("{hex}\n").as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(fail)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    log::info!(
        "made the key {} of destination credentials in {}: back it up apart from the database",
        key.id,
        path.display()
    );
    Ok(key)
}

fn hex_encode(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[(b >> 4) as usize] as char);
        out.push(DIGITS[(b & 15) as usize] as char);
    }
    out
}

fn hex_decode(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    text.as_bytes()
        .chunks(2)
        .map(|p| Some(digit(p[0])? << 4 | digit(p[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(byte: u8) -> Key {
        Key::from_bytes(&[byte; 32])
    }

    fn ring(current: Key, old: Vec<Key>) -> Keyring {
        Keyring {
            current: Ok(current),
            old,
            file: None,
            may_create: false,
        }
    }

    #[test]
    fn a_sealed_value_opens_only_in_its_place_and_with_its_key() {
        let k = key(7);
        let sealed = k.seal("d1", "access_token", "EAAB-secret-token").unwrap();
        assert!(!sealed.contains("EAAB"), "{sealed}");
        assert_eq!(sealed_with(&sealed), Some(k.id()));
        let keys = ring(key(7), vec![]);
        assert_eq!(
            keys.open("d1", "access_token", &sealed).unwrap().as_deref(),
            Some("EAAB-secret-token")
        );
        // Another destination or field: the associated data differs.
        assert_eq!(keys.open("d2", "access_token", &sealed).unwrap(), None);
        assert_eq!(keys.open("d1", "api_secret", &sealed).unwrap(), None);
        // Another key: named in the error.
        let other = ring(key(8), vec![]);
        let e = other.open("d1", "access_token", &sealed).unwrap_err();
        assert!(e.to_string().contains(k.id()), "{e}");
        // A former key opens it.
        assert!(ring(key(8), vec![key(7)])
            .open("d1", "access_token", &sealed)
            .unwrap()
            .is_some());
        // Two seals of one value differ (a nonce each).
        assert_ne!(
            sealed,
            k.seal("d1", "access_token", "EAAB-secret-token").unwrap()
        );
    }

    #[test]
    fn a_value_from_before_sealing_reads_as_it_is() {
        let keys = ring(key(1), vec![]);
        assert_eq!(
            keys.open("d", "f", "plain-token").unwrap().as_deref(),
            Some("plain-token")
        );
        assert_eq!(sealed_with("plain-token"), None);
    }

    #[test]
    fn keys_are_64_hex_digits() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        assert!(Key::parse(hex, "k").is_ok());
        assert!(Key::parse(&format!(" {hex}\n"), "k").is_ok());
        let e = Key::parse("abc", KEY_VAR).unwrap_err().to_string();
        assert!(
            e.contains("CONVAPI_SECRET_KEY") && e.contains("64 hex digits"),
            "{e}"
        );
        assert!(Key::parse(&hex.replace('0', "g"), "k").is_err());
        assert_eq!(
            hex_decode(&hex_encode(&[0, 15, 16, 255])).unwrap(),
            [0, 15, 16, 255]
        );
    }

    #[test]
    fn the_key_file_is_made_once_owner_only() {
        let dir = std::env::temp_dir().join(format!("convapi-key-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir(&dir).unwrap();
        let path = dir.join("db.key");
        let made = create_key_file(&path).unwrap();
        let again = create_key_file(&path).unwrap();
        assert_eq!(
            made.id(),
            again.id(),
            "an existing file is kept, not replaced"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            // Never through a link: a link at the name is refused, its target left alone.
            let link = dir.join("link.key");
            std::os::unix::fs::symlink(dir.join("target"), &link).unwrap();
            assert!(create_key_file(&link).is_err());
            assert!(!dir.join("target").exists());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
