//! [`Replies`]: the sends a handler queues while it runs, sent by the
//! messenger once the module that delivered the message has returned.

use fireopal_abi::btl::Rank;

use super::{Class, Messenger, SendError, SendTicket, FIRST_RESERVED_TAG};

/// Sends a handler asks for while it runs. They leave once the module
/// that delivered the message has returned from `progress`, in the order
/// queued, as [`Messenger::send`] would send them: one that fails, or
/// completes later, is reported by [`Messenger::take_completions`].
#[derive(Debug, Default)]
pub struct Replies {
    pub(super) queued: Vec<QueuedReply>,
}

#[derive(Debug)]
pub(super) struct QueuedReply {
    peer: Rank,
    tag: u8,
    header: Vec<u8>,
    payload: Vec<u8>,
    class: Class,
}

impl Replies {
    /// Queues a copy of the message for `peer`. Tags from
    /// [`FIRST_RESERVED_TAG`] are refused here, as by `send`.
    pub fn send(
        &mut self,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: &[u8],
    ) -> Result<(), SendError> {
        if tag >= FIRST_RESERVED_TAG {
            return Err(SendError::ReservedTag(tag));
        }
        self.queued.push(QueuedReply {
            peer,
            tag,
            header: header.to_vec(),
            payload: payload.to_vec(),
            class: Class::User,
        });
        Ok(())
    }

    /// Queues a copy of a library layer's message, on its reserved tag;
    /// its completion is the layer's (`class`).
    pub(crate) fn send_layer(
        &mut self,
        class: Class,
        peer: Rank,
        tag: u8,
        header: &[u8],
        payload: Vec<u8>,
    ) {
        self.queued.push(QueuedReply {
            peer,
            tag,
            header: header.to_vec(),
            payload,
            class,
        });
    }

    /// Number of sends queued.
    pub fn len(&self) -> usize {
        self.queued.len()
    }

    /// Whether nothing is queued.
    pub fn is_empty(&self) -> bool {
        self.queued.is_empty()
    }
}

impl Messenger {
    /// Sends what handlers queued during the last round. A reply that
    /// fails is reported by `take_completions` under an id of its own.
    #[inline(never)]
    pub(super) fn send_replies(&mut self) {
        for reply in std::mem::take(&mut self.shared.replies.queued) {
            let sent = match reply.class {
                Class::User => self.send(reply.peer, reply.tag, &reply.header, &reply.payload),
                class => {
                    self.send_message(reply.peer, reply.tag, &reply.header, &reply.payload, class)
                }
            };
            match sent {
                Ok(SendTicket::Done | SendTicket::Pending(_)) => {}
                Err(e) => {
                    let id = self.next_id(reply.class);
                    self.shared.completions.push(id, Err(e));
                }
            }
        }
    }
}
