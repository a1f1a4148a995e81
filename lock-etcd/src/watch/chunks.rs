//! The messages of a watch's response: a chunked HTTP body of newline-ended JSON messages.

/// The messages of a chunked body, as its bytes arrive: each chunk's data, newline-ended
/// JSON messages.
#[derive(Default)]
pub(super) struct Chunks {
    pub(super) raw: Vec<u8>,
    body: Vec<u8>,
    ended: bool,
}

impl Chunks {
    /// The next whole message; an empty one once the body ended; `None` until more bytes
    /// arrive.
    pub(super) fn next_message(&mut self) -> Option<Vec<u8>> {
        loop {
            if let Some(at) = self.body.iter().position(|b| *b == b'\n') {
                let message: Vec<u8> = self.body.drain(..=at).collect();
                if message.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return Some(message);
            }
            if self.ended {
                return Some(Vec::new());
            }
            // One chunk: `<hex size>[;ext]\r\n<data>\r\n`.
            let line_end = self.raw.windows(2).position(|w| w == b"\r\n")?;
            let size = std::str::from_utf8(&self.raw[..line_end])
                .ok()
                .and_then(|line| usize::from_str_radix(line.split(';').next()?.trim(), 16).ok());
            let Some(size) = size else {
                self.ended = true;
                continue;
            };
            let start = line_end + 2;
            if self.raw.len() < start + size + 2 {
                return None;
            }
            self.body.extend_from_slice(&self.raw[start..start + size]);
            self.raw.drain(..start + size + 2);
            if size == 0 {
                self.ended = true;
            }
        }
    }
}

pub(super) fn is_timeout(error: &std::io::Error) -> bool {
    matches!(
        error.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_come_whole_across_chunks() {
        let mut chunks = Chunks::default();
        chunks.raw.extend_from_slice(b"5\r\n{\"a\":");
        assert_eq!(chunks.next_message(), None);
        chunks.raw.extend_from_slice(b"\r\n3\r\n1}\n\r\n");
        assert_eq!(chunks.next_message().as_deref(), Some(&b"{\"a\":1}\n"[..]));
        assert_eq!(chunks.next_message(), None);
        chunks.raw.extend_from_slice(b"0\r\n\r\n");
        assert_eq!(chunks.next_message().as_deref(), Some(&b""[..]));
    }
}
