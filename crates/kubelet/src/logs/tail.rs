//! Reading from the end of a file (upstream `pkg/util/tail`): where the last n lines start, and
//! the last bytes of a file, without reading a large log from its beginning.

use std::io::SeekFrom;
use std::path::Path;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeek, AsyncSeekExt};

/// Upstream reads backwards in 1 KiB blocks.
const BLOCK_SIZE: u64 = 1024;

/// Offset where the last `n` lines start (upstream `FindTailLineStartIndex`); 0 for `None`
/// (read everything). As upstream, an unterminated last line is not counted as a line.
pub async fn find_tail_line_start<R>(f: &mut R, n: Option<u64>) -> std::io::Result<u64>
where
    R: AsyncRead + AsyncSeek + Unpin,
{
    let Some(n) = n else { return Ok(0) };
    let size = f.seek(SeekFrom::End(0)).await?;
    let (mut left, mut right, mut count) = (0u64, size, 0u64);
    let mut buf = Vec::new();
    while right > 0 && count <= n {
        left = right.saturating_sub(BLOCK_SIZE);
        buf.resize((right - left) as usize, 0);
        f.seek(SeekFrom::Start(left)).await?;
        f.read_exact(&mut buf).await?;
        count += buf.iter().filter(|b| **b == b'\n').count() as u64;
        right = left;
    }
    // The oldest block read holds the extra newlines: skip past them.
    let mut start = 0usize;
    while count > n {
        match buf[start..].iter().position(|b| *b == b'\n') {
            Some(i) => start += i + 1,
            None => break,
        }
        count -= 1;
    }
    Ok(left + start as u64)
}

/// The last `max` bytes of the file and whether it was longer (upstream `ReadAtMost`).
pub async fn read_at_most(path: &Path, max: u64) -> std::io::Result<(Vec<u8>, bool)> {
    let mut f = tokio::fs::File::open(path).await?;
    let size = f.metadata().await?.len();
    let take = size.min(max);
    let offset = f.seek(SeekFrom::Start(size - take)).await?;
    let mut data = Vec::with_capacity(take as usize);
    f.take(take).read_to_end(&mut data).await?;
    Ok((data, offset > 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Cursor;

    async fn start(text: &str, n: Option<u64>) -> String {
        let mut c = Cursor::new(text.as_bytes().to_vec());
        let i = find_tail_line_start(&mut c, n).await.unwrap();
        text[i as usize..].to_string()
    }

    #[tokio::test]
    async fn tail_lines() {
        assert_eq!(start("a\nb\nc\n", None).await, "a\nb\nc\n");
        assert_eq!(start("a\nb\nc\n", Some(0)).await, "");
        assert_eq!(start("a\nb\nc\n", Some(1)).await, "c\n");
        assert_eq!(start("a\nb\nc\n", Some(2)).await, "b\nc\n");
        assert_eq!(start("a\nb\nc\n", Some(3)).await, "a\nb\nc\n");
        assert_eq!(start("a\nb\nc\n", Some(10)).await, "a\nb\nc\n");
        assert_eq!(start("", Some(1)).await, "");
        // An unterminated last line does not count.
        assert_eq!(start("a\nb\nc", Some(1)).await, "b\nc");
    }

    #[tokio::test]
    async fn tail_across_blocks() {
        let lines: Vec<String> = (0..500).map(|i| format!("line {i:04}\n")).collect();
        let text = lines.concat();
        assert!(text.len() as u64 > 3 * BLOCK_SIZE);
        for n in [0u64, 1, 99, 100, 101, 250, 499, 500, 501] {
            let want = lines[500 - n.min(500) as usize..].concat();
            assert_eq!(start(&text, Some(n)).await, want, "n={n}");
        }
    }

    #[tokio::test]
    async fn at_most() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"hello world").unwrap();
        assert_eq!(
            read_at_most(&p, 5).await.unwrap(),
            (b"world".to_vec(), true)
        );
        assert_eq!(
            read_at_most(&p, 100).await.unwrap(),
            (b"hello world".to_vec(), false)
        );
        std::fs::write(&p, b"").unwrap();
        assert_eq!(read_at_most(&p, 5).await.unwrap(), (vec![], false));
    }
}
