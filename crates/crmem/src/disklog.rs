//! A primary's disk log, for the case where every replica fails at once: the write sets of
//! its commits (the WRITE parts it ships to its backups, addressed to [`crate::node::DISK`])
//! appended to a file and made durable with group commit, one `fdatasync` for whatever
//! arrived while the previous one ran; a checkpoint of every segment bounds the log.
//!
//! Files in the log's directory:
//! - `log`: records `[length u32][FNV-1a 64 of the bytes u64][bytes]`, little-endian, each a
//!   WRITE part. A record cut short or whose checksum fails ends the log: it and what follows
//!   are cut off when the log is read (a write that never finished was never acknowledged).
//! - `checkpoint`: `TXCRMCP2`, the term (u64), the commit number it covers (u64), the
//!   segment count (u32), each segment as `[length u64][bytes]`, then the FNV-1a 64 of
//!   everything before it. Written aside (`checkpoint.tmp`), synced, renamed into place, the
//!   directory synced; then the log is emptied.
//!
//! The *term* names the primary whose history the log holds: the time (ns since the Unix
//! epoch) at which it was promoted, kept by its later checkpoints; 0 for the first primary's
//! log, and above the previous term whatever the clock says. A backup keeps its directory
//! as it was (the log of an earlier term, or nothing), so that a primary's log outlives it
//! until a promoted successor's checkpoint, of a higher term, is on disk. After every
//! replica failed, the directory to open as primary is the one with the highest term, then
//! the highest commit ([`position`]).

use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};

const CHECKPOINT_MAGIC: &[u8; 8] = b"TXCRMCP2";
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
    /// Every segment as of commit `seq`: a promoted node's log base, which starts a new
    /// term.
    Promoted { seq: u64, images: Vec<Vec<u8>> },
}

/// What the directory held: its term, a checkpoint, if any, and the log's records after it.
pub(crate) struct Found {
    pub term: u64,
    pub checkpoint: Option<(u64, Vec<Vec<u8>>)>,
    pub parts: Vec<Vec<u8>>,
}

/// Where a disk log ends: the term of the primary that wrote it, and the newest commit it
/// holds whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct DiskPosition {
    pub term: u64,
    pub seq: u64,
}

/// Reads the log in `dir` (changing nothing) and says where it ends: after every replica
/// failed, open as primary the directory with the highest position (term first).
pub fn position(dir: &Path) -> io::Result<DiskPosition> {
    let (term, mut seq) = match File::open(dir.join("checkpoint")) {
        Ok(f) => {
            let (term, seq, _) = read_checkpoint(f)?;
            (term, seq)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => (0, 0),
        Err(e) => return Err(e),
    };
    match File::open(dir.join("log")) {
        Ok(mut f) => {
            for p in read_records(&mut f)?.0 {
                if let Ok(crate::msg::Msg::Write(w)) = crate::msg::Msg::parse(&p) {
                    if w.part + 1 == w.parts {
                        seq = seq.max(w.seq);
                    }
                }
            }
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    Ok(DiskPosition { term, seq })
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
    /// The term of the history the log holds.
    term: u64,
}

impl DiskLog {
    /// Opens (creating it if need be) the log in `dir` and reads what it holds; a torn tail
    /// is cut off.
    pub fn open(dir: &Path) -> io::Result<(DiskLog, Found)> {
        std::fs::create_dir_all(dir)?;
        let (term, checkpoint) = match File::open(dir.join("checkpoint")) {
            Ok(f) => {
                let (term, seq, images) = read_checkpoint(f)?;
                (term, Some((seq, images)))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => (0, None),
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
                term,
            },
            Found {
                term,
                checkpoint,
                parts,
            },
        ))
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

    /// Starts a new term, above the log's and at least `at` (a promotion's clock).
    fn new_term(&mut self, at: u64) {
        self.term = at.max(self.term + 1);
    }

    /// Replaces the checkpoint with one of commit `seq` in the log's term, then empties the
    /// log.
    fn checkpoint(&mut self, seq: u64, images: &[Vec<u8>]) -> io::Result<()> {
        let mut b = Vec::with_capacity(32 + images.iter().map(|i| i.len() + 8).sum::<usize>());
        b.extend_from_slice(CHECKPOINT_MAGIC);
        b.extend_from_slice(&self.term.to_le_bytes());
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

/// A checkpoint's term, commit number and images.
fn read_checkpoint(f: File) -> io::Result<(u64, u64, Vec<Vec<u8>>)> {
    let mut b = Vec::new();
    BufReader::new(f).read_to_end(&mut b)?;
    if b.len() < 8 + 8 + 8 + 4 + 8 || &b[..8] != CHECKPOINT_MAGIC {
        return Err(bad("checkpoint: not a CRMem checkpoint"));
    }
    let (body, sum) = b.split_at(b.len() - 8);
    if fnv(body) != u64::from_le_bytes(sum.try_into().expect("8 bytes")) {
        return Err(bad("checkpoint: checksum"));
    }
    let term = u64::from_le_bytes(body[8..16].try_into().expect("8 bytes"));
    let seq = u64::from_le_bytes(body[16..24].try_into().expect("8 bytes"));
    let n = u32::from_le_bytes(body[24..28].try_into().expect("4 bytes")) as usize;
    if n > crate::node::SEGMENTS_MAX {
        return Err(bad("checkpoint: too many segments"));
    }
    let mut at = 28;
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
    Ok((term, seq, images))
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
                    Item::Promoted { seq, images } => {
                        // What came before it is covered by it.
                        buf.clear();
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)
                            .map_or(0, |d| d.as_nanos() as u64);
                        log.new_term(now);
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
        assert_eq!(found.term, 0);
        assert_eq!(found.parts, vec![b"three".to_vec()]);
        // A damaged checkpoint is an error, not a silent start from nothing.
        let mut cp = std::fs::read(dir.join("checkpoint")).unwrap();
        cp[17] ^= 1;
        std::fs::write(dir.join("checkpoint"), &cp).unwrap();
        assert!(DiskLog::open(&dir).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn part(seq: u64, part: u16, parts: u16) -> Vec<u8> {
        let mut m = Vec::new();
        let mut b = crate::msg::WriteBuilder::new(&mut m, seq, part, parts);
        b.range(0, 8, &[seq as u8; 4]);
        b.finish();
        m
    }

    #[test]
    fn a_promotion_starts_a_higher_term_and_the_position_counts_whole_commits() {
        let dir = std::env::temp_dir().join(format!("txcast-disklog-term-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(position(&dir).unwrap(), DiskPosition { term: 0, seq: 0 });
        let (mut log, _) = DiskLog::open(&dir).unwrap();
        let mut buf = Vec::new();
        // Commit 2 has only its first part of two: not whole.
        for p in [part(1, 0, 1), part(2, 0, 2)] {
            log.append(&p, &mut buf);
        }
        log.write_synced(&buf).unwrap();
        assert_eq!(position(&dir).unwrap(), DiskPosition { term: 0, seq: 1 });
        // A clock behind the log's term still moves it up.
        log.new_term(0);
        assert_eq!(log.term, 1);
        log.new_term(5_000);
        log.checkpoint(9, &[vec![0; 16]]).unwrap();
        drop(log);
        let (log, found) = DiskLog::open(&dir).unwrap();
        assert_eq!((found.term, log.term), (5_000, 5_000));
        assert_eq!(
            position(&dir).unwrap(),
            DiskPosition {
                term: 5_000,
                seq: 9
            }
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
