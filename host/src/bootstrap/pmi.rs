//! The PMI-1 wire-protocol client: one request line, one reply line, over
//! the socket a launcher hands down in `PMI_FD`.
//!
//! It owns the handshake (`init`, `get_maxes`, `get_appnum`,
//! `get_my_kvsname`) and the `put` / `barrier_in` / `get` / `finalize`
//! requests; every reply goes through [`Message::parse`] and field checks,
//! so a malformed or missing reply is a [`WireError`], never a panic.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;

use super::codec;
use super::wire::{self, Message};
use super::WireError;

/// Why the handshake failed.
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// Talking to the server failed.
    Wire(WireError),
    /// The server's limits are too small for fireopal's key layout.
    Limits { keylen_max: i64, vallen_max: i64 },
}

/// A connected, initialised PMI-1 client.
#[derive(Debug)]
pub(crate) struct PmiClient {
    stream: UnixStream,
    /// Bytes read past the end of the last reply.
    pending: Vec<u8>,
    kvsname: String,
    keylen_max: usize,
    vallen_max: usize,
    appnum: i64,
}

impl PmiClient {
    /// Runs the handshake on `stream`.
    pub(crate) fn connect(stream: UnixStream) -> Result<PmiClient, ConnectError> {
        let mut client = PmiClient {
            stream,
            pending: Vec::new(),
            kvsname: String::new(),
            keylen_max: 0,
            vallen_max: 0,
            appnum: 0,
        };
        let w = ConnectError::Wire;

        let init = Message::new("init", &[("pmi_version", "1"), ("pmi_subversion", "1")]);
        let reply = client.call("init", &init, "response_to_init").map_err(w)?;
        check_rc("init", &reply).map_err(w)?;
        let version = reply
            .required_int("pmi_version")
            .map_err(|e| malformed("init", &e))
            .map_err(w)?;
        if version != 1 {
            return Err(w(WireError::Malformed {
                during: "init",
                reason: wire::Malformed::Version(version),
            }));
        }

        let reply = client
            .call("get_maxes", &Message::new("get_maxes", &[]), "maxes")
            .map_err(w)?;
        let int = |name: &'static str| {
            reply
                .required_int(name)
                .map_err(|e| malformed("get_maxes", &e))
        };
        let keylen_max = int("keylen_max").map_err(w)?;
        let vallen_max = int("vallen_max").map_err(w)?;
        // Limits count the C string's terminating NUL, hence the strict `>`.
        let key_ok = usize::try_from(keylen_max).is_ok_and(|k| k > codec::LONGEST_STORE_KEY);
        let val_ok = usize::try_from(vallen_max).is_ok_and(|v| v > codec::MIN_CHUNK_CAP);
        if !(key_ok && val_ok) {
            return Err(ConnectError::Limits {
                keylen_max,
                vallen_max,
            });
        }
        client.keylen_max = usize::try_from(keylen_max).unwrap_or(0);
        client.vallen_max = usize::try_from(vallen_max).unwrap_or(0);

        let reply = client
            .call("get_appnum", &Message::new("get_appnum", &[]), "appnum")
            .map_err(w)?;
        client.appnum = reply
            .required_int("appnum")
            .map_err(|e| malformed("get_appnum", &e))
            .map_err(w)?;

        let reply = client
            .call(
                "get_my_kvsname",
                &Message::new("get_my_kvsname", &[]),
                "my_kvsname",
            )
            .map_err(w)?;
        let kvsname = reply
            .required("kvsname")
            .map_err(|e| malformed("get_my_kvsname", &e))
            .map_err(w)?;
        if !wire::is_wire_safe(kvsname) {
            return Err(w(WireError::Malformed {
                during: "get_my_kvsname",
                reason: wire::Malformed::Kvsname(kvsname.to_owned()),
            }));
        }
        client.kvsname = kvsname.to_owned();
        Ok(client)
    }

    /// The key-value space name.
    pub(crate) fn kvsname(&self) -> &str {
        &self.kvsname
    }

    /// The application number.
    pub(crate) fn appnum(&self) -> i64 {
        self.appnum
    }

    /// Longest value text one key may hold (the limit less its NUL).
    pub(crate) fn value_cap(&self) -> usize {
        self.vallen_max.saturating_sub(1)
    }

    /// Stores `value` under `key` (both wire-safe, within the limits).
    pub(crate) fn put(&mut self, key: &str, value: &str) -> Result<(), WireError> {
        // Checked by the callers' layout; a violation would corrupt the line.
        if key.len() >= self.keylen_max || value.len() > self.value_cap() {
            return Err(WireError::Malformed {
                during: "put",
                reason: wire::Malformed::OverLimits {
                    key: key.len(),
                    value: value.len(),
                },
            });
        }
        let kvsname = self.kvsname.clone();
        let msg = Message::new(
            "put",
            &[("kvsname", &kvsname), ("key", key), ("value", value)],
        );
        let reply = self.call("put", &msg, "put_result")?;
        check_rc("put", &reply)
    }

    /// The value under `key`; `None` when the server has none.
    pub(crate) fn get(&mut self, key: &str) -> Result<Option<String>, WireError> {
        let kvsname = self.kvsname.clone();
        let msg = Message::new("get", &[("kvsname", &kvsname), ("key", key)]);
        let reply = self.call("get", &msg, "get_result")?;
        if reply.rc().map_err(|e| malformed("get", &e))? != 0 {
            // PMI-1 has no distinct "not found" code; every refusal means the
            // key cannot be read.
            return Ok(None);
        }
        let value = reply.required("value").map_err(|e| malformed("get", &e))?;
        Ok(Some(value.to_owned()))
    }

    /// `barrier_in` / `barrier_out`: commit and fence.
    pub(crate) fn barrier(&mut self) -> Result<(), WireError> {
        let reply = self.call(
            "barrier_in",
            &Message::new("barrier_in", &[]),
            "barrier_out",
        )?;
        check_rc("barrier_in", &reply)
    }

    /// `finalize` / `finalize_ack`.
    pub(crate) fn finalize(&mut self) -> Result<(), WireError> {
        let reply = self.call("finalize", &Message::new("finalize", &[]), "finalize_ack")?;
        check_rc("finalize", &reply)
    }

    /// Sends `msg` and reads the one-line reply, which must be `expected`.
    fn call(
        &mut self,
        during: &'static str,
        msg: &Message,
        expected: &'static str,
    ) -> Result<Message, WireError> {
        self.stream
            .write_all(msg.to_line().as_bytes())
            .map_err(|source| io_error(during, source))?;
        let line = self.read_line(during)?;
        let reply = Message::parse(&line).map_err(|e| malformed(during, &e))?;
        if reply.cmd != expected {
            return Err(WireError::Unexpected {
                during,
                expected,
                got: reply.cmd,
            });
        }
        Ok(reply)
    }

    fn read_line(&mut self, during: &'static str) -> Result<Vec<u8>, WireError> {
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(pos) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=pos).take(pos).collect();
                return Ok(line);
            }
            if self.pending.len() > wire::MAX_LINE {
                return Err(WireError::Malformed {
                    during,
                    reason: wire::Malformed::TooLong,
                });
            }
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(WireError::Closed { during }),
                Ok(n) => self
                    .pending
                    .extend_from_slice(chunk.get(..n).unwrap_or_default()),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return Err(WireError::Closed { during })
                }
                Err(source) => return Err(io_error(during, source)),
            }
        }
    }
}

fn io_error(during: &'static str, source: std::io::Error) -> WireError {
    match source.kind() {
        std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => {
            WireError::Closed { during }
        }
        _ => WireError::Io { during, source },
    }
}

fn malformed(during: &'static str, e: &wire::Malformed) -> WireError {
    WireError::Malformed {
        during,
        reason: e.clone(),
    }
}

fn check_rc(during: &'static str, reply: &Message) -> Result<(), WireError> {
    let rc = reply.rc().map_err(|e| malformed(during, &e))?;
    if rc == 0 {
        Ok(())
    } else {
        Err(WireError::Rejected {
            during,
            rc,
            msg: reply.field("msg").unwrap_or_default().to_owned(),
        })
    }
}
