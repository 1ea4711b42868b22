//! Helpers shared by the CLI's test binaries.
use std::path::Path;

/// Hashes of the ledger's data: the database file and its write-ahead log
/// (absent and empty count the same: no frames). Reading a WAL database can
/// create SQLite's empty side files, `-wal` and the `-shm` index, without
/// changing a byte of data; a refused sync never writes either.
pub fn fingerprint(ledger: &Path) -> (u64, u64) {
    use std::hash::{Hash, Hasher};
    let hash = |suffix: &str| {
        let bytes = std::fs::read(format!("{}{suffix}", ledger.display())).unwrap_or_default();
        let mut h = std::collections::hash_map::DefaultHasher::new();
        bytes.hash(&mut h);
        h.finish()
    };
    (hash(""), hash("-wal"))
}
