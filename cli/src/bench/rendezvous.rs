//! `fireopal bench pingpong --from registered`: messages above the eager
//! limit go by rendezvous, as a runtime's point-to-point layer builds it
//! on the messenger (Open MPI's ob1 calls this protocol RGET).
//!
//! The sender announces a message with a small active message carrying
//! the address, length and remote key of its registered buffer; the
//! receiver reads the bytes straight into its own registered buffer with
//! `get` and answers FIN, after which the sender may reuse its buffer. So
//! a large message is copied once, by the transport, and the receiver's
//! handler never touches its bytes. Handlers cannot start operations, so
//! the announcement handler only records what arrived; the bench's wait
//! loop starts the gets and finishes them ([`Rendezvous::serve`]).
//!
//! Every message lands at the start of one landing buffer, as the OSU
//! benchmarks receive all the messages of a window into one buffer; a
//! runtime would fetch each into the buffer its receive names.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;

use fireopal::btl::{MemoryHandle, Messenger, SendError, SendId, SendTicket};
use fireopal_abi::btl::{Access, MemRegion};

/// Announcement of a message: header `address, length` (little-endian
/// u64 each), payload the remote key.
const TAG_RTS: u8 = 4;
/// The receiver has the message: the sender's buffer is free again.
const TAG_FIN: u8 = 5;

/// A message announced to this process and not fetched yet.
struct Announced {
    addr: u64,
    len: usize,
    key: Vec<u8>,
}

/// What the announcement handler found, read by the wait loop.
#[derive(Default)]
struct Inbox {
    announced: VecDeque<Announced>,
    /// Why an announcement could not be read, if one could not.
    malformed: Option<String>,
}

/// Both ends of the protocol for one peer: this process's registered
/// source and landing buffers, and the messages in flight each way.
pub(super) struct Rendezvous {
    peer: u32,
    source: MemoryHandle,
    source_region: MemRegion,
    /// Gets write here; owned, so its address is fixed while registered.
    landing: Vec<u8>,
    landing_region: MemRegion,
    landing_handle: MemoryHandle,
    inbox: Rc<RefCell<Inbox>>,
    /// Gets started and not complete.
    fetching: RefCell<Vec<SendId>>,
    /// Messages this process announced, and FINs received for them.
    announced: Cell<u64>,
    fins: Rc<Cell<u64>>,
    /// Longest message fetched, for the check at the end.
    longest: Cell<usize>,
}

impl Rendezvous {
    /// Registers `source` for the peer to read and a landing buffer of
    /// `largest` bytes for gets, and installs the two handlers.
    ///
    /// `source` must stay alive and unwritten until [`Self::finish`].
    pub(super) fn new(
        m: &mut Messenger,
        peer: u32,
        source: &[u8],
        largest: usize,
    ) -> Result<Self, String> {
        let inbox = Rc::new(RefCell::new(Inbox::default()));
        let fins = Rc::new(Cell::new(0u64));
        {
            let inbox = Rc::clone(&inbox);
            m.register(TAG_RTS, move |msg| {
                let mut inbox = inbox.borrow_mut();
                match parse_announcement(msg.header, msg.payload) {
                    Ok(a) => inbox.announced.push_back(a),
                    Err(why) => {
                        inbox.malformed.get_or_insert(why);
                    }
                }
            })
            .map_err(|e| e.to_string())?;
            let fins = Rc::clone(&fins);
            m.register(TAG_FIN, move |_| fins.set(fins.get() + 1))
                .map_err(|e| e.to_string())?;
        }
        let mut landing = vec![0u8; largest.max(1)];
        // SAFETY: `source` outlives the registration (the caller's
        // promise) and the transport only reads it; `landing` is owned
        // here, never resized, and read by this process only between
        // gets (in `finish`), after every get completed.
        #[allow(unsafe_code)]
        let (source_region, landing_region) = unsafe {
            (
                MemRegion::new(source.as_ptr().cast_mut(), source.len()),
                MemRegion::new(landing.as_mut_ptr(), landing.len()),
            )
        };
        let source_handle = m
            .register_memory(peer, source_region, Access::REMOTE_READ)
            .map_err(|e| format!("registering the source buffer: {e}"))?;
        let landing_handle = m
            .register_memory(peer, landing_region, Access::LOCAL_WRITE)
            .map_err(|e| format!("registering the landing buffer: {e}"))?;
        Ok(Self {
            peer,
            source: source_handle,
            source_region,
            landing,
            landing_region,
            landing_handle,
            inbox,
            fetching: RefCell::new(Vec::new()),
            announced: Cell::new(0),
            fins,
            longest: Cell::new(0),
        })
    }

    /// Announces the first `n` bytes of the source buffer to the peer.
    pub(super) fn announce(&self, m: &mut Messenger, n: usize) -> Result<(), String> {
        let n = n.min(self.source_region.len());
        let mut header = [0u8; 16];
        header[..8].copy_from_slice(&(self.source_region.as_ptr() as u64).to_le_bytes());
        header[8..].copy_from_slice(&(n as u64).to_le_bytes());
        m.send(self.peer, TAG_RTS, &header, &self.source.remote_key)
            .map_err(|e| format!("announcing a message: {e}"))?;
        self.announced.set(self.announced.get() + 1);
        Ok(())
    }

    /// One turn of the receiving side, after a `progress`: checks
    /// `completions`, finishes the gets among them (each adds one to
    /// `arrived` and answers FIN), then starts a get for every new
    /// announcement. Returns how many things it did.
    pub(super) fn serve(
        &self,
        m: &mut Messenger,
        completions: Vec<(SendId, Result<(), SendError>)>,
        arrived: &Cell<u64>,
    ) -> Result<usize, String> {
        let mut events = 0;
        for (id, status) in completions {
            status.map_err(|e| e.to_string())?;
            let mut fetching = self.fetching.borrow_mut();
            if let Some(at) = fetching.iter().position(|&f| f == id) {
                fetching.swap_remove(at);
                drop(fetching);
                self.fetched(m, arrived)?;
                events += 1;
            }
        }
        loop {
            let next = {
                let mut inbox = self.inbox.borrow_mut();
                if let Some(why) = inbox.malformed.take() {
                    return Err(format!("rank {}: {why}", self.peer));
                }
                inbox.announced.pop_front()
            };
            let Some(a) = next else {
                break;
            };
            events += 1;
            if a.len > self.landing.len() {
                return Err(format!(
                    "rank {} announced {} bytes, more than the {} this side can take",
                    self.peer,
                    a.len,
                    self.landing.len()
                ));
            }
            // SAFETY: the first `a.len` bytes of the landing buffer, which
            // this value owns (see `new`).
            #[allow(unsafe_code)]
            let local = unsafe { MemRegion::new(self.landing_region.as_ptr(), a.len) };
            self.longest.set(self.longest.get().max(a.len));
            let ticket = m
                .get(self.peer, local, Some(&self.landing_handle), a.addr, &a.key)
                .map_err(|e| format!("fetching an announced message: {e}"))?;
            match ticket {
                SendTicket::Done => self.fetched(m, arrived)?,
                SendTicket::Pending(id) => self.fetching.borrow_mut().push(id),
            }
        }
        Ok(events)
    }

    /// A get finished: the message has arrived, and the sender hears so.
    fn fetched(&self, m: &mut Messenger, arrived: &Cell<u64>) -> Result<(), String> {
        arrived.set(arrived.get() + 1);
        m.send(self.peer, TAG_FIN, &[], &[])
            .map_err(|e| format!("answering FIN: {e}"))?;
        Ok(())
    }

    /// Whether every message this process announced was answered.
    pub(super) fn all_answered(&self) -> bool {
        self.fins.get() >= self.announced.get()
    }

    /// Checks that the fetched bytes are `expected` (what the peer's
    /// source buffer holds; every message starts at its first byte), and
    /// releases both registrations. Call once every announcement was
    /// answered and no get is in flight.
    pub(super) fn finish(self, m: &mut Messenger, expected: &[u8]) -> Result<(), String> {
        if !self.fetching.borrow().is_empty() {
            return Err("gets still in flight at the end".into());
        }
        let longest = self.longest.get();
        let wrong = self.landing[..longest]
            .iter()
            .zip(expected)
            .position(|(got, want)| got != want);
        if let Some(at) = wrong.or((expected.len() < longest).then_some(expected.len())) {
            return Err(format!(
                "the gets left byte {at} of the landing buffer wrong"
            ));
        }
        m.deregister_memory(self.landing_handle)
            .map_err(|e| e.to_string())?;
        m.deregister_memory(self.source).map_err(|e| e.to_string())
    }
}

/// Reads an announcement: 16 bytes of header (address, length), then
/// the key.
fn parse_announcement(header: &[u8], key: &[u8]) -> Result<Announced, String> {
    let h: [u8; 16] = header.try_into().map_err(|_| {
        format!(
            "an announcement's header has {} bytes, not 16",
            header.len()
        )
    })?;
    let word = |at: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&h[at..at + 8]);
        u64::from_le_bytes(w)
    };
    let (addr, len) = (word(0), word(8));
    let len = usize::try_from(len).map_err(|_| format!("an announced length of {len} bytes"))?;
    if key.is_empty() {
        return Err("an announcement without a key".into());
    }
    Ok(Announced {
        addr,
        len,
        key: key.to_vec(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn announcements_are_read_or_refused() {
        let mut header = [0u8; 16];
        header[..8].copy_from_slice(&0x1000u64.to_le_bytes());
        header[8..].copy_from_slice(&4096u64.to_le_bytes());
        let a = parse_announcement(&header, b"key").unwrap();
        assert_eq!(
            (a.addr, a.len, a.key.as_slice()),
            (0x1000, 4096, &b"key"[..])
        );
        assert!(parse_announcement(&header[..15], b"key").is_err());
        assert!(parse_announcement(&[0; 17], b"key").is_err());
        assert!(parse_announcement(&header, b"").is_err());
    }
}
