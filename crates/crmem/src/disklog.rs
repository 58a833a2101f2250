//! A primary's disk log, for the case where every replica fails at once: the write sets of
//! its commits (the WRITE parts it ships to its backups, addressed to [`crate::node::DISK`])
//! appended to a file and made durable with group commit, one `fdatasync` for whatever
//! arrived while the previous one ran; a checkpoint of every segment bounds the log.
//!
//! Files in the log's directory:
//! - `log`: records `[length u32][FNV-1a 64 of the bytes u64][bytes]`, little-endian, each a
//!   WRITE part. A record cut short or whose checksum fails ends the log: it and what follows
//!   are cut off when the log is read (a write that never finished was never acknowledged).
//! - `checkpoint`: `TXCRMCP1`, the commit number it covers (u64), the segment count (u32),
//!   each segment as `[length u64][bytes]`, then the FNV-1a 64 of everything before it.
//!   Written aside (`checkpoint.tmp`), synced, renamed into place, the directory synced; then
//!   the log is emptied.

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

const CHECKPOINT_MAGIC: &[u8; 8] = b"TXCRMCP1";
/// The longest record the log takes (a WRITE part is at most a message).
const RECORD_MAX: usize = crate::node::MESSAGE_BYTES_MAX;
/// Bytes past which the writer takes a checkpoint and empties the log.
pub const CHECKPOINT_AFTER_BYTES: u64 = 64 << 20;

/// What the writer is handed, in the order the node produced it.
pub(crate) enum Item {
    /// A WRITE part of commit `seq`; `last` if it is the commit's last part.
    Part {
        seq: u64,
        last: bool,
        bytes: Vec<u8>,
    },
    /// Every segment as of commit `seq`.
    Checkpoint { seq: u64, images: Vec<Vec<u8>> },
}

/// What the directory held: a checkpoint, if any, and the log's records after it.
pub(crate) struct Found {
    pub checkpoint: Option<(u64, Vec<Vec<u8>>)>,
    pub parts: Vec<Vec<u8>>,
}

use txcast_proto::fnv::Fnv64;

fn fnv(bytes: &[u8]) -> u64 {
    Fnv64::of(bytes)
}

fn bad(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// The open log: its file, appended to, and its directory.
pub(crate) struct DiskLog {
    dir: PathBuf,
    log: File,
    len: u64,
}

impl DiskLog {
    /// Opens (creating it if need be) the log in `dir` and reads what it holds; a torn tail
    /// is cut off.
    pub fn open(dir: &Path) -> io::Result<(DiskLog, Found)> {
        std::fs::create_dir_all(dir)?;
        let checkpoint = match File::open(dir.join("checkpoint")) {
            Ok(f) => Some(read_checkpoint(f)?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(e),
        };
        let mut log = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .open(dir.join("log"))?;
        let (parts, good) = read_records(&mut log)?;
        if good < log.metadata()?.len() {
            log.set_len(good)?;
            log.sync_data()?;
        }
        Ok((
            DiskLog {
                dir: dir.to_path_buf(),
                log,
                len: good,
            },
            Found { checkpoint, parts },
        ))
    }

    /// Empties the directory's checkpoint and log.
    pub fn clear(&mut self) -> io::Result<()> {
        match std::fs::remove_file(self.dir.join("checkpoint")) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        self.log.set_len(0)?;
        self.log.sync_all()?;
        self.len = 0;
        Ok(())
    }

    /// Appends one record (not yet synced).
    fn append(&mut self, bytes: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        out.extend_from_slice(&fnv(bytes).to_le_bytes());
        out.extend_from_slice(bytes);
    }

    /// Writes `buf` at the end of the log and syncs it.
    fn write_synced(&mut self, buf: &[u8]) -> io::Result<()> {
        self.log.write_all(buf)?;
        self.log.sync_data()?;
        self.len += buf.len() as u64;
        Ok(())
    }

    /// Replaces the checkpoint with one of commit `seq`, then empties the log.
    fn checkpoint(&mut self, seq: u64, images: &[Vec<u8>]) -> io::Result<()> {
        let mut b = Vec::with_capacity(24 + images.iter().map(|i| i.len() + 8).sum::<usize>());
        b.extend_from_slice(CHECKPOINT_MAGIC);
        b.extend_from_slice(&seq.to_le_bytes());
        b.extend_from_slice(&(images.len() as u32).to_le_bytes());
        for i in images {
            b.extend_from_slice(&(i.len() as u64).to_le_bytes());
            b.extend_from_slice(i);
        }
        let sum = fnv(&b);
        b.extend_from_slice(&sum.to_le_bytes());
        let tmp = self.dir.join("checkpoint.tmp");
        let mut f = File::create(&tmp)?;
        f.write_all(&b)?;
        f.sync_all()?;
        std::fs::rename(&tmp, self.dir.join("checkpoint"))?;
        File::open(&self.dir)?.sync_all()?;
        self.log.set_len(0)?;
        self.log.sync_all()?;
        self.len = 0;
        Ok(())
    }
}

fn read_checkpoint(f: File) -> io::Result<(u64, Vec<Vec<u8>>)> {
    let mut b = Vec::new();
    BufReader::new(f).read_to_end(&mut b)?;
    if b.len() < 8 + 8 + 4 + 8 || &b[..8] != CHECKPOINT_MAGIC {
        return Err(bad("checkpoint: not a CRMem checkpoint"));
    }
    let (body, sum) = b.split_at(b.len() - 8);
    if fnv(body) != u64::from_le_bytes(sum.try_into().expect("8 bytes")) {
        return Err(bad("checkpoint: checksum"));
    }
    let seq = u64::from_le_bytes(body[8..16].try_into().expect("8 bytes"));
    let n = u32::from_le_bytes(body[16..20].try_into().expect("4 bytes")) as usize;
    if n > crate::node::SEGMENTS_MAX {
        return Err(bad("checkpoint: too many segments"));
    }
    let mut at = 20;
    let mut images = Vec::with_capacity(n);
    for _ in 0..n {
        let len = body
            .get(at..at + 8)
            .map(|l| u64::from_le_bytes(l.try_into().expect("8 bytes")) as usize)
            .ok_or_else(|| bad("checkpoint: truncated"))?;
        at += 8;
        let img = body
            .get(at..at.saturating_add(len))
            .ok_or_else(|| bad("checkpoint: truncated"))?;
        images.push(img.to_vec());
        at += len;
    }
    if at != body.len() {
        return Err(bad("checkpoint: bytes after the last segment"));
    }
    Ok((seq, images))
}

/// The log's good records, and the length of the good prefix.
fn read_records(f: &mut File) -> io::Result<(Vec<Vec<u8>>, u64)> {
    let mut b = Vec::new();
    BufReader::new(&*f).read_to_end(&mut b)?;
    let mut parts = Vec::new();
    let mut at = 0usize;
    while let Some(h) = b.get(at..at + 12) {
        let len = u32::from_le_bytes(h[..4].try_into().expect("4 bytes")) as usize;
        let sum = u64::from_le_bytes(h[4..].try_into().expect("8 bytes"));
        if len > RECORD_MAX {
            break;
        }
        let Some(bytes) = b.get(at + 12..at + 12 + len) else {
            break;
        };
        if fnv(bytes) != sum {
            break;
        }
        parts.push(bytes.to_vec());
        at += 12 + len;
    }
    Ok((parts, at as u64))
}

/// The writer: takes items as they come, writes every one that is waiting, syncs once, and
/// reports the newest commit whose last part is on disk (`synced`). A checkpoint is written
/// where it falls in the order; when the log passes [`CHECKPOINT_AFTER_BYTES`] it asks for
/// one (`take_checkpoint`). Ends when the channel closes, or on an I/O error (reported
/// through `failed`: commits then wait for ever rather than complete without the disk).
pub(crate) fn run(
    mut log: DiskLog,
    rx: std::sync::mpsc::Receiver<Item>,
    synced: impl Fn(u64),
    take_checkpoint: impl Fn() -> (u64, Vec<Vec<u8>>),
    failed: impl Fn(&io::Error),
) {
    let mut buf = Vec::new();
    while let Ok(first) = rx.recv() {
        let mut newest = None;
        let mut item = Some(first);
        let r = (|| -> io::Result<()> {
            while let Some(i) = item.take().or_else(|| rx.try_recv().ok()) {
                match i {
                    Item::Part { seq, last, bytes } => {
                        log.append(&bytes, &mut buf);
                        if last {
                            newest = Some(seq);
                        }
                    }
                    Item::Checkpoint { seq, images } => {
                        // What came before it is covered by it.
                        buf.clear();
                        log.checkpoint(seq, &images)?;
                        newest = newest.max(Some(seq));
                    }
                }
            }
            if !buf.is_empty() {
                log.write_synced(&buf)?;
                buf.clear();
            }
            if log.len > CHECKPOINT_AFTER_BYTES {
                let (seq, images) = take_checkpoint();
                log.checkpoint(seq, &images)?;
                newest = newest.max(Some(seq));
            }
            Ok(())
        })();
        if let Err(e) = r {
            failed(&e);
            return;
        }
        if let Some(seq) = newest {
            synced(seq);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_checkpoints_read_back_and_a_torn_tail_is_cut() {
        let dir = std::env::temp_dir().join(format!("txcast-disklog-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (mut log, found) = DiskLog::open(&dir).unwrap();
        assert!(found.checkpoint.is_none() && found.parts.is_empty());
        let mut buf = Vec::new();
        log.append(b"one", &mut buf);
        log.append(b"two", &mut buf);
        log.write_synced(&buf).unwrap();
        drop(log);
        // A torn third record.
        let mut f = OpenOptions::new()
            .append(true)
            .open(dir.join("log"))
            .unwrap();
        f.write_all(&[5, 0, 0, 0, 1, 2]).unwrap();
        drop(f);
        let (mut log, found) = DiskLog::open(&dir).unwrap();
        assert_eq!(found.parts, vec![b"one".to_vec(), b"two".to_vec()]);
        assert_eq!(std::fs::metadata(dir.join("log")).unwrap().len(), 2 * 15);
        log.checkpoint(7, &[vec![1, 2, 3], vec![]]).unwrap();
        let mut buf = Vec::new();
        log.append(b"three", &mut buf);
        log.write_synced(&buf).unwrap();
        drop(log);
        let (_, found) = DiskLog::open(&dir).unwrap();
        assert_eq!(found.checkpoint, Some((7, vec![vec![1, 2, 3], vec![]])));
        assert_eq!(found.parts, vec![b"three".to_vec()]);
        // A damaged checkpoint is an error, not a silent start from nothing.
        let mut cp = std::fs::read(dir.join("checkpoint")).unwrap();
        cp[17] ^= 1;
        std::fs::write(dir.join("checkpoint"), &cp).unwrap();
        assert!(DiskLog::open(&dir).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
