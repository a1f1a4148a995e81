//! Commands encoded straight into a connection's write buffer, in the protocol's own form
//! (an array of bulk strings): the hot path's steps cost no `redis::Cmd` and no copy.

use std::io::Write;

/// Appends the command made of `words`.
pub(crate) fn command(out: &mut Vec<u8>, words: &[&[u8]]) {
    command_header(out, words.len());
    for bytes in words {
        word(out, bytes);
    }
}

/// Appends the header of a command of `words` words.
pub(crate) fn command_header(out: &mut Vec<u8>, words: usize) {
    // Writing to a Vec cannot fail.
    let _ = write!(out, "*{words}\r\n");
}

/// Appends one word of a command.
pub(crate) fn word(out: &mut Vec<u8>, bytes: &[u8]) {
    let _ = write!(out, "${}\r\n", bytes.len());
    out.extend_from_slice(bytes);
    out.extend_from_slice(b"\r\n");
}

/// Appends one word of a command: `number` in decimal.
pub(crate) fn number(out: &mut Vec<u8>, number: usize) {
    let digits = number.checked_ilog10().map_or(1, |log| log as usize + 1);
    let _ = write!(out, "${digits}\r\n{number}\r\n");
}

#[cfg(test)]
mod tests {
    #[test]
    fn commands_are_encoded_as_redis_packs_them() {
        for keys in [0usize, 7, 10, 123] {
            let mut out = Vec::new();
            super::command_header(&mut out, 3);
            super::word(&mut out, b"DEL");
            super::number(&mut out, keys);
            super::word(&mut out, b"");
            let packed = redis::cmd("DEL").arg(keys).arg("").get_packed_command();
            assert_eq!(out, packed);
        }
    }
}
