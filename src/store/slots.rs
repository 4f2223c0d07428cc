//! A file replaced often, kept in two slots rewritten in place in turn, so that a
//! replacement creates and frees no inode.
//!
//! Why not a temporary file renamed into place: every rename frees the old file's inode
//! and every temporary takes a new one. On ext4 without a journal (this project's CI and
//! development machines) each new inode makes the allocator step over every inode of its
//! group freed in the last minute (`recently_deleted`); with a transcript replaced twice
//! per agent turn, that was a third of a 32-subtask run's CPU.
//!
//! Each slot holds one header line, `grove-slot seq=<n> len=<bytes> fnv=<hash>`, then the
//! contents. A write goes to the slot that does not hold the newest synced contents, so a
//! crash during it leaves that one whole; a reader takes the valid slot with the highest
//! `seq`. A first slot without a header (written before slots, or by hand) is read whole,
//! as the oldest contents.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use crate::store::durable::{self, Durability, DurableError};
use crate::text::fnv1a;

const MAGIC: &str = "grove-slot";

/// A file in two slots: `<name>.<ext>` and `<name>.1.<ext>`.
#[derive(Debug)]
pub struct SlotFile {
    paths: [PathBuf; 2],
    /// What this process knows of the slots; read from them at the first write.
    state: Mutex<Option<Slots>>,
}

#[derive(Debug, Clone, Copy)]
struct Slots {
    /// The highest sequence number written (or found).
    seq: u64,
    /// The slot holding the newest contents known to be on disk.
    durable: Option<usize>,
}

impl SlotFile {
    /// The slots of the file whose first slot is `path`.
    pub fn new(path: &Path) -> Self {
        Self {
            paths: [path.to_path_buf(), second_slot(path)],
            state: Mutex::new(None),
        }
    }

    /// The first slot's path: the file's name.
    pub fn path(&self) -> &Path {
        &self.paths[0]
    }

    /// Replaces the contents with `contents`: fsynced, or not, as `durability` says.
    /// Either way a crash leaves the previous synced contents, if not these.
    pub fn write(&self, contents: &[u8], durability: Durability) -> Result<(), DurableError> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let slots = match *state {
            Some(slots) => slots,
            None => self.recover()?,
        };
        let target = slots.durable.map_or(0, |slot| 1 - slot);
        let seq = slots.seq + 1;
        let path = &self.paths[target];
        let existed = path.exists();
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .map_err(|e| DurableError::new("open", path, e))?;
        let header = format!(
            "{MAGIC} seq={seq} len={} fnv={:016x}\n",
            contents.len(),
            fnv1a(contents)
        );
        file.write_all(&[header.as_bytes(), contents].concat())
            .map_err(|e| DurableError::new("write", path, e))?;
        let durable = match durability {
            Durability::Synced => {
                file.sync_data()
                    .map_err(|e| DurableError::new("fsync", path, e))?;
                if !existed {
                    durable::sync_dir(durable::parent_dir(path))?;
                }
                Some(target)
            }
            Durability::Buffered => slots.durable,
        };
        *state = Some(Slots { seq, durable });
        Ok(())
    }

    /// The newest valid contents, or `None` when neither slot holds any.
    pub fn read(path: &Path) -> Result<Option<Vec<u8>>, DurableError> {
        let found = Self::new(path).newest()?;
        Ok(found.map(|(_, _, contents)| contents))
    }

    /// What the slots hold on disk: the newest is fsynced once, so that the next write,
    /// which goes to the other slot, never overwrites the only copy a crash would keep.
    fn recover(&self) -> Result<Slots, DurableError> {
        Ok(match self.newest()? {
            None => Slots {
                seq: 0,
                durable: None,
            },
            Some((slot, seq, _)) => {
                let path = &self.paths[slot];
                std::fs::File::open(path)
                    .and_then(|file| file.sync_data())
                    .map_err(|e| DurableError::new("fsync", path, e))?;
                Slots {
                    seq,
                    durable: Some(slot),
                }
            }
        })
    }

    /// The valid slot with the highest sequence number: (slot, seq, contents).
    fn newest(&self) -> Result<Option<(usize, u64, Vec<u8>)>, DurableError> {
        let mut newest: Option<(usize, u64, Vec<u8>)> = None;
        for (slot, path) in self.paths.iter().enumerate() {
            let bytes = match std::fs::read(path) {
                Ok(bytes) => bytes,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => return Err(DurableError::new("read", path, error)),
            };
            let parsed = match parse(&bytes) {
                Some((seq, contents)) => Some((seq, contents.to_vec())),
                // Only the first slot was ever written without a header.
                None if slot == 0 && !bytes.starts_with(MAGIC.as_bytes()) && !bytes.is_empty() => {
                    Some((0, bytes))
                }
                None => None,
            };
            if let Some((seq, contents)) = parsed
                && newest.as_ref().is_none_or(|(_, best, _)| seq > *best)
            {
                newest = Some((slot, seq, contents));
            }
        }
        Ok(newest)
    }
}

/// `<name>.1.<ext>` beside `<name>.<ext>` (`<name>.1` without an extension).
fn second_slot(path: &Path) -> PathBuf {
    match path.extension() {
        Some(ext) => {
            let mut extension = std::ffi::OsString::from("1.");
            extension.push(ext);
            path.with_extension(extension)
        }
        None => path.with_extension("1"),
    }
}

/// The sequence number and contents of a slot whose header and contents agree.
fn parse(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let end = bytes.iter().position(|byte| *byte == b'\n')?;
    let header = std::str::from_utf8(&bytes[..end]).ok()?;
    let contents = &bytes[end + 1..];
    let mut fields = header.split(' ');
    if fields.next() != Some(MAGIC) {
        return None;
    }
    let mut field = |name: &str| {
        fields
            .next()
            .and_then(|field| field.strip_prefix(name))
            .and_then(|value| value.strip_prefix('='))
            .map(str::to_owned)
    };
    let seq = field("seq")?.parse().ok()?;
    let len: usize = field("len")?.parse().ok()?;
    let hash = u64::from_str_radix(&field("fnv")?, 16).ok()?;
    (contents.len() == len && fnv1a(contents) == hash).then_some((seq, contents))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::os::unix::fs::MetadataExt as _;

    use super::*;

    #[test]
    fn writes_alternate_around_the_newest_synced_slot_and_reuse_the_two_inodes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        let file = SlotFile::new(&path);
        let second = dir.path().join("t.1.json");
        let mut inodes = Vec::new();
        for (n, durability) in [
            Durability::Synced,
            Durability::Buffered,
            Durability::Synced,
            Durability::Buffered,
            Durability::Buffered,
            Durability::Synced,
        ]
        .into_iter()
        .enumerate()
        {
            file.write(format!("v{n}").as_bytes(), durability).unwrap();
            assert_eq!(
                SlotFile::read(&path).unwrap(),
                Some(format!("v{n}").into_bytes())
            );
            inodes
                .push([&path, &second].map(|p| std::fs::metadata(p).map(|m| m.ino()).unwrap_or(0)));
        }
        assert_eq!(
            inodes[1..]
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len(),
            1,
            "once both slots exist, writes reuse their inodes: {inodes:?}"
        );
    }

    #[test]
    fn a_torn_slot_leaves_the_other_and_a_headerless_first_slot_reads_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.json");
        std::fs::write(&path, b"{\"legacy\":true}").unwrap();
        assert_eq!(
            SlotFile::read(&path).unwrap(),
            Some(b"{\"legacy\":true}".to_vec()),
            "a file written before slots is read as it is"
        );
        let file = SlotFile::new(&path);
        file.write(b"synced", Durability::Synced).unwrap();
        file.write(b"buffered", Durability::Buffered).unwrap();
        // The buffered write went to the slot that did not hold the synced one; tear it.
        let torn = [&path, &dir.path().join("t.1.json")]
            .into_iter()
            .find(|p| std::fs::read(p).unwrap().ends_with(b"buffered"))
            .unwrap()
            .clone();
        let bytes = std::fs::read(&torn).unwrap();
        std::fs::write(&torn, &bytes[..bytes.len() - 3]).unwrap();
        assert_eq!(SlotFile::read(&path).unwrap(), Some(b"synced".to_vec()));
        // A new writer (a resumed run) continues after what is on disk.
        SlotFile::new(&path)
            .write(b"resumed", Durability::Buffered)
            .unwrap();
        assert_eq!(SlotFile::read(&path).unwrap(), Some(b"resumed".to_vec()));
        assert!(
            std::fs::read(&torn).unwrap().ends_with(b"resumed"),
            "the resumed write overwrote the torn slot, not the synced one"
        );
    }
}
