//! A checksum list read a batch of whole lines at a time, so that `-c`
//! holds a bounded part of a list however long it is, and checks what a
//! slow producer has written before waiting for more.

use std::fs::File;
use std::io::{self, Read};

/// The most a batch reads at once by default
/// ([`SumOptions::list_batch`](crate::sum::SumOptions::list_batch)). One
/// read takes whatever is ready (a pipe gives what was written so far),
/// so a batch ends when the next read would block or when it is full.
pub(crate) const BATCH: usize = 256 << 10;

/// A list being read: the lines a read completed are handed out as one
/// batch; a line split between reads waits for its end. The list is
/// closed once read to its end: a list of a batch or less is closed
/// before any of its files is opened, so that it holds no descriptor
/// they need (under `ulimit -n 4`, as `b3sum` checks).
pub(crate) struct ListBatches {
    /// The list; `None` once read to its end.
    file: Option<File>,
    /// Whether the list is a regular file, whose end a short read comes
    /// right before (a pipe's short read is what was written so far).
    regular: bool,
    buf: Vec<u8>,
    /// Bytes read but not handed out: the start of an unfinished line, or
    /// the rest of the list after [`ListBatches::read_rest`].
    pending: Vec<u8>,
    eof: bool,
}

impl ListBatches {
    /// Reads `file` from where it stands, at most `most` bytes a read.
    pub(crate) fn new(file: File, most: usize) -> ListBatches {
        let regular = file.metadata().is_ok_and(|m| m.is_file());
        ListBatches {
            file: Some(file),
            regular,
            buf: vec![0; most.max(1)],
            pending: Vec::new(),
            eof: false,
        }
    }

    /// The next batch: whole lines, each with its newline, and at the end
    /// of the list a last line without one; `None` after the end.
    pub(crate) fn next_batch(&mut self) -> io::Result<Option<Vec<u8>>> {
        loop {
            if let Some(end) = self.pending.iter().rposition(|&b| b == b'\n') {
                let rest = self.pending.split_off(end + 1);
                return Ok(Some(std::mem::replace(&mut self.pending, rest)));
            }
            if self.eof {
                if self.pending.is_empty() {
                    return Ok(None);
                }
                return Ok(Some(std::mem::take(&mut self.pending)));
            }
            self.read_some()?;
        }
    }

    /// One read of the list into `pending`; at its end, the list is
    /// closed. After a short read of a regular file, a second read finds
    /// whether that was the end.
    fn read_some(&mut self) -> io::Result<()> {
        let Some(file) = &mut self.file else {
            self.eof = true;
            return Ok(());
        };
        let mut want_end = false;
        loop {
            match file.read(&mut self.buf) {
                Ok(0) => {
                    self.eof = true;
                    self.file = None;
                    return Ok(());
                }
                Ok(n) => {
                    self.pending.extend_from_slice(&self.buf[..n]);
                    if !self.regular || want_end || n == self.buf.len() {
                        return Ok(());
                    }
                    want_end = true;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads the rest of the list now, to be handed out as one batch: a
    /// list read from standard input that names `-` leaves standard input
    /// at its end for that file, as a list read whole would.
    pub(crate) fn read_rest(&mut self) -> io::Result<()> {
        if let Some(mut file) = self.file.take() {
            file.read_to_end(&mut self.pending)?;
        }
        self.eof = true;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The batches of a file holding `text`.
    fn batches(name: &str, text: &[u8]) -> Vec<Vec<u8>> {
        let path = std::env::temp_dir().join(format!("list-batches-{}-{name}", std::process::id()));
        std::fs::write(&path, text).unwrap();
        let mut b = ListBatches::new(File::open(&path).unwrap(), BATCH);
        std::fs::remove_file(&path).unwrap();
        let mut all = Vec::new();
        while let Some(batch) = b.next_batch().unwrap() {
            all.push(batch);
        }
        all
    }

    #[test]
    fn lines_split_between_reads_are_whole_and_the_last_may_be_unterminated() {
        // 7-byte lines: a read of BATCH bytes ends inside one.
        let mut text = b"123456\n".repeat(2 * BATCH / 7);
        text.extend_from_slice(b"tail");
        let all = batches("split", &text);
        assert!(all.len() >= 3, "{} batches", all.len());
        assert_eq!(all.concat(), text);
        for batch in &all[..all.len() - 1] {
            assert!(batch.len() <= BATCH + 7);
            assert_eq!(batch.len() % 7, 0);
            assert_eq!(batch.last(), Some(&b'\n'));
        }
        assert_eq!(all.last().unwrap(), b"tail");
    }

    #[test]
    fn a_short_list_is_closed_when_its_batch_is_handed_out() {
        let path = std::env::temp_dir().join(format!("list-batches-{}-short", std::process::id()));
        std::fs::write(&path, b"a\nb\n").unwrap();
        let mut b = ListBatches::new(File::open(&path).unwrap(), BATCH);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(b.next_batch().unwrap().as_deref(), Some(&b"a\nb\n"[..]));
        assert!(b.file.is_none(), "the list is still open");
        assert_eq!(b.next_batch().unwrap(), None);
    }

    #[test]
    fn an_empty_list_has_no_batch() {
        assert!(batches("empty", b"").is_empty());
    }
}
