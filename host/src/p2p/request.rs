//! Requests and the calls that make and finish them: [`P2p::isend`],
//! [`P2p::irecv`], [`P2p::test`], [`P2p::wait`], [`P2p::waitall`], the
//! blocking [`P2p::send`] and [`P2p::recv`], and the probes.
//!
//! A non-blocking call takes its buffer by value and the request owns it
//! until it completes: the transports may read or write the bytes until
//! then, and nothing else can touch them. [`P2p::wait`] hands the buffer
//! back. A request dropped before it completes keeps its buffer inside
//! the endpoint until it does, then frees both, so forgetting a request
//! never leaves a transport writing into memory its owner reuses.

#![allow(unsafe_code)]

use std::any::Any;
use std::cell::RefCell;
use std::fmt;
use std::marker::PhantomData;
use std::rc::Rc;

use fireopal_core::p2p::{ContextId, RecvSpec};

use super::endpoint::Started;
use super::protocol::{Protocol, RecvTarget, ReqId, ReqState};
use super::{Communicator, P2p, P2pError, Source, Status, Tag};

/// A send or receive in progress; [`P2p::wait`] or [`P2p::test`] finish
/// it and give back its buffer `B`.
#[must_use = "a request is finished by P2p::wait or P2p::test; dropped, its buffer is lost"]
pub struct Request<B> {
    id: Option<ReqId>,
    /// Set when the request completed at once (an eager send): its result
    /// and buffer. The error is boxed: a request is moved through every
    /// `waitall`, and completing at once is mostly a success.
    ready: Option<(Result<Status, Box<P2pError>>, B)>,
    proto: Rc<RefCell<Protocol>>,
    _buffer: PhantomData<B>,
}

impl<B> fmt::Debug for Request<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("id", &self.id)
            .field("ready", &self.ready.is_some())
            .finish()
    }
}

impl<B> Drop for Request<B> {
    fn drop(&mut self) {
        let Some(id) = self.id else { return };
        // The endpoint keeps the buffer until the request is over.
        if let Ok(mut proto) = self.proto.try_borrow_mut() {
            let done = proto.reqs.get(&id).is_some_and(|r| r.done.is_some());
            if done {
                proto.reqs.remove(&id);
            } else if let Some(r) = proto.reqs.get_mut(&id) {
                r.detached = true;
            }
        }
    }
}

/// Why [`P2p::wait`] did not return a request's buffer with a status.
pub struct Failure<B> {
    /// What went wrong.
    pub error: P2pError,
    /// The buffer, when the request is over (a truncated receive holds
    /// the bytes that fit).
    pub buffer: Option<B>,
    /// The request, when it is not over (the wait stalled): wait again,
    /// or drop it.
    pub request: Option<Request<B>>,
}

impl<B> fmt::Debug for Failure<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Failure")
            .field("error", &self.error)
            .field("buffer", &self.buffer.is_some())
            .field("request", &self.request)
            .finish()
    }
}

impl<B> fmt::Display for Failure<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.error.fmt(f)
    }
}

impl<B> std::error::Error for Failure<B> {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

impl<B> From<Failure<B>> for P2pError {
    fn from(f: Failure<B>) -> Self {
        f.error
    }
}

/// The context of a communicator's point-to-point traffic.
pub(super) fn p2p_context(comm: &Communicator) -> u32 {
    comm.context_id() * 2
}

/// What a receive on `context` from `source` with `tag` accepts.
pub(super) fn recv_spec(context: u32, source: Source, tag: Tag) -> RecvSpec {
    RecvSpec::new(ContextId(context), source, tag)
}

impl P2p {
    fn request<B>(
        &self,
        id: Option<ReqId>,
        ready: Option<(Result<Status, P2pError>, B)>,
    ) -> Request<B> {
        Request {
            id,
            ready: ready.map(|(result, buf)| (result.map_err(Box::new), buf)),
            proto: Rc::clone(&self.proto),
            _buffer: PhantomData,
        }
    }

    /// Starts sending `buf` to rank `dest` of `comm` with `tag` (`>= 0`).
    /// An error (a bad rank, a failed peer) completes the request with it.
    pub fn isend<B: AsRef<[u8]> + 'static>(
        &mut self,
        comm: &Communicator,
        dest: u32,
        tag: i32,
        buf: B,
    ) -> Request<B> {
        let boxed = Box::new(buf);
        let bytes = (*boxed).as_ref();
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        // SAFETY: `boxed` owns the bytes at a heap address that does not
        // change; it comes back at once or moves into the request.
        unsafe { self.send_request(comm, dest, tag, ptr, len, boxed) }
    }

    /// Posts a receive into `buf` from `source` (a rank of `comm` or
    /// [`Source::Any`]) with `tag` (or [`Tag::Any`]).
    pub fn irecv<B: AsMut<[u8]> + 'static>(
        &mut self,
        comm: &Communicator,
        source: Source,
        tag: Tag,
        buf: B,
    ) -> Request<B> {
        let mut boxed = Box::new(buf);
        let bytes = (*boxed).as_mut();
        let (ptr, cap) = (bytes.as_mut_ptr(), bytes.len());
        // SAFETY: as in `isend`; the request owns `boxed` until it is over.
        unsafe { self.recv_request(comm, source, tag, ptr, cap, boxed) }
    }

    /// Starts sending `len` bytes at `ptr`, as [`isend`](Self::isend) but
    /// with memory the caller manages (a C binding's `MPI_Isend`; several
    /// requests may read the same bytes).
    ///
    /// # Safety
    ///
    /// The bytes must stay allocated and unchanged until the request has
    /// completed ([`wait`](Self::wait) or [`test`](Self::test) said so),
    /// even if the request is dropped.
    pub unsafe fn isend_raw(
        &mut self,
        comm: &Communicator,
        dest: u32,
        tag: i32,
        ptr: *const u8,
        len: usize,
    ) -> Request<()> {
        // SAFETY: the caller keeps the bytes as the contract above says.
        unsafe { self.send_request(comm, dest, tag, ptr, len, Box::new(())) }
    }

    /// Posts a receive into `len` bytes at `ptr`, as [`irecv`](Self::irecv)
    /// but with memory the caller manages (a C binding's `MPI_Irecv`).
    ///
    /// # Safety
    ///
    /// The bytes must stay allocated, and untouched by anything else,
    /// until the request has completed, even if the request is dropped.
    pub unsafe fn irecv_raw(
        &mut self,
        comm: &Communicator,
        source: Source,
        tag: Tag,
        ptr: *mut u8,
        len: usize,
    ) -> Request<()> {
        // SAFETY: the caller keeps the bytes as the contract above says.
        unsafe { self.recv_request(comm, source, tag, ptr, len, Box::new(())) }
    }

    /// A send request for the `len` bytes at `ptr`, which `keep` keeps
    /// alive: handed back at once when the send is over at once (an eager
    /// message, an error), else owned by the request until it is over.
    ///
    /// # Safety
    ///
    /// The bytes must stay readable and unchanged while `keep` lives, or
    /// as the caller of a raw call promises.
    unsafe fn send_request<B: 'static>(
        &mut self,
        comm: &Communicator,
        dest: u32,
        tag: i32,
        ptr: *const u8,
        len: usize,
        keep: Box<B>,
    ) -> Request<B> {
        let context = p2p_context(comm);
        // SAFETY: as this function's caller promises.
        match unsafe { self.start_send(comm, context, dest, tag, ptr, len) } {
            Ok(Started::Done) => {
                let status = Status {
                    count: len,
                    ..Status::default()
                };
                self.request(None, Some((Ok(status), *keep)))
            }
            Err(e) => self.request(None, Some((Err(e), *keep))),
            Ok(Started::Waiting(id)) => {
                if let Some(ReqState::Send(out)) = self
                    .proto
                    .borrow_mut()
                    .reqs
                    .get_mut(&id)
                    .map(|r| &mut r.state)
                {
                    out.owned = Some(keep);
                }
                self.request(Some(id), None)
            }
        }
    }

    /// A receive request into the `cap` bytes at `ptr`, which `keep`
    /// keeps alive; owned by the request until it is over, or handed back
    /// at once with the error of a receive that cannot be posted.
    ///
    /// # Safety
    ///
    /// The bytes must stay writable, and untouched by anything else,
    /// while `keep` lives, or as the caller of a raw call promises.
    unsafe fn recv_request<B: 'static>(
        &mut self,
        comm: &Communicator,
        source: Source,
        tag: Tag,
        ptr: *mut u8,
        cap: usize,
        keep: Box<B>,
    ) -> Request<B> {
        let failed_peer = match self.check_recv(comm, source, tag) {
            Ok(f) => f,
            Err(e) => return self.request(None, Some((Err(e), *keep))),
        };
        let target = RecvTarget {
            ptr,
            cap,
            owned: Some(keep),
        };
        let spec = recv_spec(p2p_context(comm), source, tag);
        let id = self.start_recv(comm, spec, target, failed_peer, false);
        self.request(Some(id), None)
    }

    /// Progresses once; true when `req` has completed (then
    /// [`wait`](Self::wait) returns at once).
    pub fn test<B: 'static>(&mut self, req: &Request<B>) -> Result<bool, P2pError> {
        if req.ready.is_some() {
            return Ok(true);
        }
        let id = req.id.unwrap_or(0);
        if self.is_done(id) {
            return Ok(true);
        }
        self.progress()?;
        Ok(self.is_done(id))
    }

    /// Waits for `req` to complete, then returns its buffer and status.
    pub fn wait<B: 'static>(&mut self, mut req: Request<B>) -> Result<(B, Status), Failure<B>> {
        if let Some((result, buf)) = req.ready.take() {
            return finish(result.map_err(|e| *e), buf);
        }
        let Some(id) = req.id else {
            return Err(Failure {
                error: P2pError::Collective("request without a buffer"),
                buffer: None,
                request: None,
            });
        };
        if let Err(error) = self.wait_for(|p| p.is_done(id)) {
            return Err(Failure {
                error,
                buffer: None,
                request: Some(req),
            });
        }
        req.id = None;
        let Some((result, owned)) = self.take_done(id) else {
            return Err(Failure {
                error: P2pError::Collective("request lost"),
                buffer: None,
                request: None,
            });
        };
        finish_owned(result, owned)
    }

    /// Waits for every request, in order. When the wait fails (a stall),
    /// the requests not complete come back at once in failures with its
    /// error, each with its request: none is waited for again.
    pub fn waitall<B: 'static>(
        &mut self,
        reqs: Vec<Request<B>>,
    ) -> Vec<Result<(B, Status), Failure<B>>> {
        // Drive them all first, so that completions are not serialized
        // behind the first request's.
        // Requests complete mostly in order: a cursor skips the done ones
        // once instead of looking at every request on every poll.
        let mut pending: Vec<ReqId> = Vec::with_capacity(reqs.len());
        pending.extend(reqs.iter().filter_map(|r| r.id));
        let mut next = 0;
        let failed = self
            .wait_for(|p| {
                while pending.get(next).is_some_and(|&id| p.is_done(id)) {
                    next += 1;
                }
                next == pending.len()
            })
            .err();
        let mut out = Vec::with_capacity(reqs.len());
        for mut r in reqs {
            // The common cases first, without `wait`'s look at the table.
            if let Some((result, buf)) = r.ready.take() {
                out.push(finish(result.map_err(|e| *e), buf));
                continue;
            }
            let finished = match r.id {
                Some(id) => self.take_done(id),
                None => None,
            };
            let result = match (finished, &failed) {
                (Some((result, owned)), _) => {
                    r.id = None;
                    finish_owned(result, owned)
                }
                (None, Some(error)) if r.id.is_some() => Err(Failure {
                    error: error.clone(),
                    buffer: None,
                    request: Some(r),
                }),
                (None, _) => self.wait(r),
            };
            out.push(result);
        }
        out
    }

    /// Sends `data` to rank `dest` of `comm` and returns once the buffer
    /// may be reused: at once for an eager message, after the receiver has
    /// read it for a rendezvous.
    pub fn send(
        &mut self,
        comm: &Communicator,
        dest: u32,
        tag: i32,
        data: &[u8],
    ) -> Result<(), P2pError> {
        self.send_on(comm, p2p_context(comm), dest, tag, data)
    }

    pub(super) fn send_on(
        &mut self,
        comm: &Communicator,
        context: u32,
        dest: u32,
        tag: i32,
        data: &[u8],
    ) -> Result<(), P2pError> {
        // SAFETY: `data` is borrowed until this returns, and this returns
        // only once the request is over or abandoned (no longer read).
        let started =
            unsafe { self.start_send(comm, context, dest, tag, data.as_ptr(), data.len())? };
        let Started::Waiting(id) = started else {
            return Ok(());
        };
        self.finish_blocking(id).map(|_| ())
    }

    /// Receives into `buf` from `source` with `tag` on `comm`.
    pub fn recv(
        &mut self,
        comm: &Communicator,
        source: Source,
        tag: Tag,
        buf: &mut [u8],
    ) -> Result<Status, P2pError> {
        self.recv_on(comm, p2p_context(comm), source, tag, buf)
    }

    #[inline]
    pub(super) fn recv_on(
        &mut self,
        comm: &Communicator,
        context: u32,
        source: Source,
        tag: Tag,
        buf: &mut [u8],
    ) -> Result<Status, P2pError> {
        let failed_peer = self.check_recv(comm, source, tag)?;
        let target = RecvTarget {
            ptr: buf.as_mut_ptr(),
            cap: buf.len(),
            owned: None,
        };
        let spec = recv_spec(context, source, tag);
        let id = self.start_recv(comm, spec, target, failed_peer, true);
        self.finish_blocking(id)
    }

    /// Waits for a request on a borrowed buffer; on a stall the request
    /// is abandoned before the borrow ends.
    pub(super) fn finish_blocking(&mut self, id: ReqId) -> Result<Status, P2pError> {
        // A blocking call's buffer is borrowed, not owned: only the
        // result comes out, taken by the same look that sees it done.
        let mut done = None;
        let waited = self.wait_for(|p| {
            let mut proto = p.proto.borrow_mut();
            let id = proto.reqs.resolve(id);
            match proto.reqs.get(&id) {
                Some(req) if req.done.is_none() => false,
                Some(_) => {
                    done = proto.reqs.take_done(&id);
                    true
                }
                None => true,
            }
        });
        if let Err(e) = waited {
            self.abandon(id);
            return Err(e);
        }
        match done {
            Some(Ok(status)) => Ok(status),
            Some(Err(e)) => Err(*e),
            None => Err(P2pError::Collective("request lost")),
        }
    }

    /// Progresses once, then shows the message a receive with `source` and
    /// `tag` on `comm` would take, if one has arrived (`MPI_Iprobe`).
    /// Refuses what a receive refuses: a rank outside `comm`, a negative
    /// tag, a freed communicator, a named source that failed (once the
    /// messages it sent before failing are received).
    pub fn iprobe(
        &mut self,
        comm: &Communicator,
        source: Source,
        tag: Tag,
    ) -> Result<Option<Status>, P2pError> {
        let failed = self.check_recv(comm, source, tag)?;
        self.progress()?;
        // A failed source's messages that arrived before it failed are
        // still shown; once none is left, the failure is the answer.
        match (self.probe_now(p2p_context(comm), source, tag), failed) {
            (Some(status), _) => Ok(Some(status)),
            (None, Some(failed)) => Err(failed),
            (None, None) => Ok(None),
        }
    }

    /// Waits until a message a receive with `source` and `tag` would take
    /// has arrived, and shows it (`MPI_Probe`). Refuses what
    /// [`iprobe`](Self::iprobe) refuses.
    pub fn probe(
        &mut self,
        comm: &Communicator,
        source: Source,
        tag: Tag,
    ) -> Result<Status, P2pError> {
        self.probe_on(comm, p2p_context(comm), source, tag)
    }

    pub(super) fn probe_on(
        &mut self,
        comm: &Communicator,
        context: u32,
        source: Source,
        tag: Tag,
    ) -> Result<Status, P2pError> {
        // A rank outside the communicator, a negative tag or a failed
        // source would never show a message: refused as a receive is.
        if let Some(failed) = self.check_recv(comm, source, tag)? {
            return self.probe_now(context, source, tag).ok_or(failed);
        }
        let mut found = None;
        self.wait_for(|p| {
            found = p.probe_now(context, source, tag);
            found.is_some()
        })?;
        found.ok_or(P2pError::Collective("probe lost its message"))
    }
}

/// The answer of a request taken out of the table, with the buffer it
/// owned.
fn finish_owned<B: 'static>(
    result: Result<Status, P2pError>,
    owned: Option<Box<dyn Any>>,
) -> Result<(B, Status), Failure<B>> {
    match owned.and_then(|b| b.downcast::<B>().ok()) {
        Some(buf) => finish(result, *buf),
        None => Err(Failure {
            error: result
                .err()
                .unwrap_or(P2pError::Collective("request lost its buffer")),
            buffer: None,
            request: None,
        }),
    }
}

fn finish<B>(result: Result<Status, P2pError>, buf: B) -> Result<(B, Status), Failure<B>> {
    match result {
        Ok(status) => Ok((buf, status)),
        Err(error) => Err(Failure {
            error,
            buffer: Some(buf),
            request: None,
        }),
    }
}
