//! `fireopal bench pingpong --from registered`: messages above the eager
//! limit go as tagged point-to-point messages of `fireopal::p2p`, whose
//! rendezvous (Open MPI's ob1 calls it RGET) announces the sender's
//! registered buffer in a small message; the receiver reads the bytes
//! straight into its own buffer with `get` and answers FIN, after which
//! the sender's request completes. A large message is copied once, by the
//! transport.
//!
//! As the OSU benchmarks do, every message lands in one buffer, and the
//! bytes of the last one are checked against the sender's at the end.

use std::cell::{Cell, RefCell};

use fireopal::p2p::{Communicator, P2p, Request, Source, Tag};

use super::WINDOW;

/// The tag of the bench's tagged messages.
const TAG: i32 = 1;

/// The tagged side of the bench on one rank.
pub(super) struct Tagged {
    world: Communicator,
    peer: u32,
    /// Sends not yet reaped.
    sends: RefCell<Vec<Request<()>>>,
    /// Where every received message lands.
    landing: RefCell<Vec<u8>>,
    /// Length of the last message received.
    last: Cell<usize>,
}

impl Tagged {
    pub(super) fn new(world: Communicator, peer: u32, largest: usize) -> Self {
        Tagged {
            world,
            peer,
            sends: RefCell::new(Vec::new()),
            landing: RefCell::new(vec![0u8; largest]),
            last: Cell::new(0),
        }
    }

    /// Starts sending `bytes`; its request is reaped by a later wait.
    #[allow(unsafe_code)]
    pub(super) fn send(&self, p: &mut P2p, bytes: &[u8]) -> Result<(), String> {
        if self.sends.borrow().len() >= WINDOW {
            // A window's sends are complete once its acknowledgement came.
            self.reap(p)?;
        }
        // SAFETY: `bytes` is the bench's source buffer, borrowed and
        // unchanged until `finish`, which waits for every send first.
        let req = unsafe { p.isend_raw(&self.world, self.peer, TAG, bytes.as_ptr(), bytes.len()) };
        self.sends.borrow_mut().push(req);
        Ok(())
    }

    /// Receives `target - counter` messages of `n` bytes, all into the
    /// landing buffer, then counts them on `counter`.
    #[allow(unsafe_code)]
    pub(super) fn receive(
        &self,
        p: &mut P2p,
        counter: &Cell<u64>,
        target: u64,
        n: usize,
    ) -> Result<(), String> {
        let due = target.saturating_sub(counter.get());
        let mut landing = self.landing.borrow_mut();
        let n = n.min(landing.len());
        let mut reqs: Vec<Request<()>> = Vec::with_capacity(due as usize);
        for _ in 0..due {
            // SAFETY: the landing buffer is borrowed until the receives
            // are waited for below; the receives write it concurrently,
            // as the OSU benchmarks' receives do.
            let req = unsafe {
                p.irecv_raw(
                    &self.world,
                    Source::Rank(self.peer),
                    Tag::Tag(TAG),
                    landing.as_mut_ptr(),
                    n,
                )
            };
            reqs.push(req);
        }
        reqs.extend(self.sends.borrow_mut().drain(..));
        for r in p.waitall(reqs) {
            r.map_err(|e| e.to_string())?;
        }
        self.last.set(n);
        counter.set(target);
        Ok(())
    }

    fn reap(&self, p: &mut P2p) -> Result<(), String> {
        let sends: Vec<Request<()>> = self.sends.borrow_mut().drain(..).collect();
        for r in p.waitall(sends) {
            r.map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// Waits for the last sends, and checks the bytes of the last message
    /// received against `source`.
    pub(super) fn finish(&self, p: &mut P2p, source: &[u8]) -> Result<(), String> {
        self.reap(p)?;
        let n = self.last.get();
        if self.landing.borrow()[..n] != source[..n] {
            return Err(format!(
                "the last {n}-byte message arrived with other bytes"
            ));
        }
        Ok(())
    }
}
