//! The PMI-1 wire format: one line per message, `cmd=<name>` then
//! space-separated `key=value` fields, ended by `\n`.
//!
//! This module owns the checked parsing of such lines (used on every reply
//! the client reads and every command the launcher's server reads) and their
//! formatting. Nothing here panics on input from a peer.

use std::fmt;

/// Longest line either side accepts; the launcher's values are at most
/// [`super::server::VALLEN_MAX`] bytes, so this leaves ample room.
pub(crate) const MAX_LINE: usize = 64 * 1024;

/// One parsed PMI-1 line: the command name and its fields in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Message {
    pub(crate) cmd: String,
    pub(crate) fields: Vec<(String, String)>,
}

/// Why a PMI-1 line, or what it says, cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Malformed {
    /// The line is empty or only spaces.
    Empty,
    /// The line is not UTF-8.
    NotUtf8,
    /// The first field is not `cmd=<name>`.
    NoCommand,
    /// A field has an empty name (`=value`).
    EmptyFieldName,
    /// A field the caller needs is missing.
    MissingField(&'static str),
    /// A field the caller needs is not an integer.
    NotInteger(&'static str),
    /// No line end within 64 KiB.
    TooLong,
    /// The server speaks another PMI version than 1.
    Version(i64),
    /// The server's key-value space name holds characters that cannot be
    /// sent back on a line.
    Kvsname(String),
    /// A key or value (lengths in bytes) is over the server's limits.
    OverLimits {
        /// The key's length.
        key: usize,
        /// The value's length.
        value: usize,
    },
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Malformed::Empty => f.write_str("empty line"),
            Malformed::NotUtf8 => f.write_str("line is not UTF-8"),
            Malformed::NoCommand => f.write_str("line does not start with cmd=<name>"),
            Malformed::EmptyFieldName => f.write_str("field with an empty name"),
            Malformed::MissingField(name) => write!(f, "field {name} is missing"),
            Malformed::NotInteger(name) => write!(f, "field {name} is not an integer"),
            Malformed::TooLong => write!(f, "reply longer than {MAX_LINE} bytes"),
            Malformed::Version(v) => write!(f, "server speaks PMI version {v}, not 1"),
            Malformed::Kvsname(name) => write!(f, "kvsname {name:?} cannot be sent back"),
            Malformed::OverLimits { key, value } => write!(
                f,
                "key of {key} or value of {value} bytes over the server's limits"
            ),
        }
    }
}

impl std::error::Error for Malformed {}

impl Message {
    /// Parses one line (without its `\n`; a trailing `\r` is ignored).
    ///
    /// A word without `=` continues the previous field's value after a
    /// space: some servers put free text with spaces in `msg=`.
    pub(crate) fn parse(line: &[u8]) -> Result<Message, Malformed> {
        let text = core::str::from_utf8(line).map_err(|_| Malformed::NotUtf8)?;
        let text = text.strip_suffix('\r').unwrap_or(text);
        let mut words = text.split(' ').filter(|w| !w.is_empty());
        let first = words.next().ok_or(Malformed::Empty)?;
        let cmd = match first.split_once('=') {
            Some(("cmd", name)) if !name.is_empty() => name.to_owned(),
            _ => return Err(Malformed::NoCommand),
        };
        let mut fields: Vec<(String, String)> = Vec::new();
        for word in words {
            match word.split_once('=') {
                Some(("", _)) => return Err(Malformed::EmptyFieldName),
                Some((name, value)) => fields.push((name.to_owned(), value.to_owned())),
                None => match fields.last_mut() {
                    Some((_, value)) => {
                        value.push(' ');
                        value.push_str(word);
                    }
                    None => return Err(Malformed::NoCommand),
                },
            }
        }
        Ok(Message { cmd, fields })
    }

    /// Builds a message from a command name and fields.
    pub(crate) fn new(cmd: &str, fields: &[(&str, &str)]) -> Message {
        Message {
            cmd: cmd.to_owned(),
            fields: fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        }
    }

    /// The first field called `name`.
    pub(crate) fn field(&self, name: &str) -> Option<&str> {
        self.fields
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The field called `name`, which must be present.
    pub(crate) fn required(&self, name: &'static str) -> Result<&str, Malformed> {
        self.field(name).ok_or(Malformed::MissingField(name))
    }

    /// The field called `name` as an integer, which must be present.
    pub(crate) fn required_int(&self, name: &'static str) -> Result<i64, Malformed> {
        self.required(name)?
            .parse()
            .map_err(|_| Malformed::NotInteger(name))
    }

    /// The `rc` field: absent means success (Hydra's `barrier_out` has none).
    pub(crate) fn rc(&self) -> Result<i64, Malformed> {
        match self.field("rc") {
            None => Ok(0),
            Some(v) => v.parse().map_err(|_| Malformed::NotInteger("rc")),
        }
    }

    /// The line to send, with its `\n`.
    pub(crate) fn to_line(&self) -> String {
        let mut line = format!("cmd={}", self.cmd);
        for (k, v) in &self.fields {
            line.push(' ');
            line.push_str(k);
            line.push('=');
            line.push_str(v);
        }
        line.push('\n');
        line
    }
}

/// Whether `text` can travel as one field name or value: no spaces,
/// newlines or `=` (which would change how the line splits).
pub(crate) fn is_wire_safe(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b'=' && b != b'\\')
}

/// Splits the complete lines off the front of `buf`, leaving any partial
/// line in place. Fails (with the length seen) when a line exceeds
/// [`MAX_LINE`] without a newline.
pub(crate) fn take_lines(buf: &mut Vec<u8>) -> Result<Vec<Vec<u8>>, usize> {
    let mut lines = Vec::new();
    let mut start = 0;
    while let Some(pos) = buf
        .get(start..)
        .and_then(|rest| rest.iter().position(|&b| b == b'\n'))
    {
        let end = start + pos;
        lines.push(buf.get(start..end).unwrap_or_default().to_vec());
        start = end + 1;
    }
    buf.drain(..start);
    if buf.len() > MAX_LINE {
        return Err(buf.len());
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hydra_replies() {
        let m = Message::parse(b"cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024").unwrap();
        assert_eq!(m.cmd, "maxes");
        assert_eq!(m.required_int("vallen_max"), Ok(1024));
        assert_eq!(m.rc(), Ok(0));
        let m =
            Message::parse(b"cmd=get_result rc=-1 msg=key_x_not_found value=unknown\r").unwrap();
        assert_eq!(m.rc(), Ok(-1));
        assert_eq!(m.field("value"), Some("unknown"));
    }

    #[test]
    fn value_may_contain_equals_and_free_text_joins() {
        let m = Message::parse(b"cmd=get_result value=a=b rc=1 msg=key not found").unwrap();
        assert_eq!(m.field("value"), Some("a=b"));
        assert_eq!(m.field("msg"), Some("key not found"));
    }

    #[test]
    fn rejects_malformed_lines() {
        assert_eq!(Message::parse(b""), Err(Malformed::Empty));
        assert_eq!(Message::parse(b"   "), Err(Malformed::Empty));
        assert_eq!(Message::parse(b"hello world"), Err(Malformed::NoCommand));
        assert_eq!(Message::parse(b"cmd= x=1"), Err(Malformed::NoCommand));
        assert_eq!(Message::parse(b"cmd=a =1"), Err(Malformed::EmptyFieldName));
        assert_eq!(Message::parse(&[b'c', 0xff]), Err(Malformed::NotUtf8));
        let m = Message::parse(b"cmd=maxes vallen_max=lots rc=x").unwrap();
        assert_eq!(
            m.required_int("vallen_max"),
            Err(Malformed::NotInteger("vallen_max"))
        );
        assert_eq!(
            m.required_int("keylen_max"),
            Err(Malformed::MissingField("keylen_max"))
        );
        assert_eq!(m.rc(), Err(Malformed::NotInteger("rc")));
    }

    #[test]
    fn round_trips_and_splits_lines() {
        let m = Message::new("put", &[("kvsname", "k"), ("key", "a"), ("value", "00ff")]);
        let line = m.to_line();
        assert_eq!(line, "cmd=put kvsname=k key=a value=00ff\n");
        let mut buf = format!("{line}{line}cmd=par").into_bytes();
        let lines = take_lines(&mut buf).unwrap();
        assert_eq!(lines.len(), 2);
        assert_eq!(Message::parse(&lines[1]).unwrap(), m);
        assert_eq!(buf, b"cmd=par");
        let mut long = vec![b'a'; MAX_LINE + 1];
        assert_eq!(take_lines(&mut long), Err(MAX_LINE + 1));
    }

    #[test]
    fn wire_safety() {
        assert!(is_wire_safe("kvs_12_0"));
        assert!(!is_wire_safe(""));
        assert!(!is_wire_safe("a b"));
        assert!(!is_wire_safe("a=b"));
        assert!(!is_wire_safe("a\nb"));
    }

    proptest::proptest! {
        /// Any line a peer sends parses or is refused, never panics; and a
        /// message of wire-safe words comes back from its own line.
        #[test]
        fn lines_parse_or_are_refused_and_messages_round_trip(
            raw in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120),
            cmd in "[a-z_]{1,12}",
            fields in proptest::collection::vec(("[a-z_]{1,8}", "[!-<>-~]{1,12}"), 0..5),
        ) {
            let _ = Message::parse(&raw);
            let mut buf = raw.clone();
            let _ = take_lines(&mut buf);
            let fields: Vec<(&str, &str)> = fields
                .iter()
                .filter(|(_, v)| is_wire_safe(v))
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let m = Message::new(&cmd, &fields);
            let line = m.to_line();
            let parsed = Message::parse(line.trim_end_matches('\n').as_bytes());
            proptest::prop_assert_eq!(parsed, Ok(m));
        }
    }
}
