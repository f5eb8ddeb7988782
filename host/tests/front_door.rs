//! The front door in one process: a runtime's own key-value exchange
//! under `Messenger::init`, handlers that answer, `wait_until`, the
//! point-to-point layer on the `self` transport, and messages no handler
//! was installed for.

mod common;

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use fireopal::btl::WaitError;
use fireopal::p2p::{P2p, P2pError, Source, Tag};

use common::{messenger, self_only};

#[test]
fn the_messenger_starts_over_a_runtimes_own_exchange() {
    let registry = self_only();
    let (m, exchange) = messenger(&registry);
    assert_eq!((exchange.puts, exchange.fences), (1, 1));
    assert!(exchange.store.contains_key("btl-directory"));
    assert_eq!(m.route(0).map(|r| r.component), Some("self".to_owned()));
}

#[test]
fn a_handler_answers_through_its_replies() {
    let registry = self_only();
    let (mut m, _) = messenger(&registry);
    m.register_replying(1, |msg, replies| {
        let mut answer = msg.payload.to_vec();
        answer.reverse();
        replies
            .send(msg.peer, 2, b"re", &answer)
            .expect("a user tag");
    })
    .expect("tag 1");
    let answers: Rc<RefCell<Vec<Vec<u8>>>> = Rc::default();
    let seen = Rc::clone(&answers);
    m.register(2, move |msg| seen.borrow_mut().push(msg.payload.to_vec()))
        .expect("tag 2");
    m.send(0, 1, &[], b"abc").expect("send to self");
    m.wait_until(|_| !answers.borrow().is_empty(), Duration::from_secs(60))
        .expect("the answer arrives");
    assert_eq!(*answers.borrow(), [b"cba".to_vec()]);
    // A reserved tag is refused where the reply is queued.
    m.register_replying(3, |msg, replies| {
        assert!(replies.send(msg.peer, 0xF0, &[], &[]).is_err());
    })
    .expect("tag 3");
}

#[test]
fn a_wait_on_nothing_ends_as_a_stall() {
    let registry = self_only();
    let (mut m, _) = messenger(&registry);
    let err = m
        .wait_until(|_| false, Duration::from_millis(20))
        .expect_err("nothing can satisfy it");
    assert_eq!(
        err,
        WaitError::Stalled {
            limit: Duration::from_millis(20)
        }
    );
}

fn p2p() -> P2p {
    let registry = self_only();
    let (m, _) = messenger(&registry);
    let mut p = P2p::new(m, registry.params());
    p.set_stall_limit(Some(Duration::from_secs(60)));
    p
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 ^ seed).collect()
}

#[test]
fn messages_to_oneself_of_every_protocol_arrive_whole() {
    let mut p = p2p();
    let world = p.world();
    for (i, len) in [0usize, 1, 8, 4096, 1 << 20, 3 << 20]
        .into_iter()
        .enumerate()
    {
        let data = pattern(len, i as u8);
        let send = p.isend(&world, 0, i as i32, data.clone());
        let recv = p.irecv(&world, Source::Any, Tag::Tag(i as i32), vec![0u8; len]);
        let (got, status) = p.wait(recv).expect("received");
        assert_eq!(
            (status.source, status.tag, status.count),
            (0, i as i32, len)
        );
        assert_eq!(got, data, "{len} bytes");
        let (back, _) = p.wait(send).expect("sent");
        assert_eq!(back, data, "the send hands its buffer back");
    }
}

#[test]
fn a_short_buffer_truncates_and_keeps_what_fits() {
    let mut p = p2p();
    let world = p.world();
    for len in [100usize, 2 << 20] {
        let data = pattern(len, 7);
        let send = p.isend(&world, 0, 5, data.clone());
        let recv = p.irecv(&world, Source::Rank(0), Tag::Any, vec![0u8; 10]);
        let failure = p.wait(recv).expect_err("the buffer is too short");
        let P2pError::Truncated { status, sent } = failure.error else {
            panic!("{}", failure.error)
        };
        assert_eq!((status.count, sent), (10, len as u64));
        assert_eq!(failure.buffer.as_deref(), Some(&data[..10]));
        p.wait(send).expect("the send completes");
    }
}

#[test]
fn probes_see_a_message_before_it_is_received() {
    let mut p = p2p();
    let world = p.world();
    assert_eq!(p.iprobe(&world, Source::Any, Tag::Any), Ok(None));
    p.send(&world, 0, 9, b"hello").expect("eager to self");
    let status = p.probe(&world, Source::Any, Tag::Any).expect("probed");
    assert_eq!((status.source, status.tag, status.count), (0, 9, 5));
    let mut buf = [0u8; 5];
    p.recv(&world, Source::Rank(0), Tag::Tag(9), &mut buf)
        .expect("received");
    assert_eq!(&buf, b"hello");
    assert_eq!(p.iprobe(&world, Source::Any, Tag::Any), Ok(None));
}

#[test]
fn communicators_of_one_keep_their_messages_apart_and_free_their_ids() {
    let mut p = p2p();
    let world = p.world();
    let dup = p.dup(&world).expect("dup");
    assert_ne!(dup.context_id(), world.context_id());
    p.send(&world, 0, 1, b"world").expect("on world");
    p.send(&dup, 0, 1, b"dup").expect("on dup");
    let mut buf = [0u8; 8];
    let st = p
        .recv(&dup, Source::Any, Tag::Any, &mut buf)
        .expect("dup's");
    assert_eq!(&buf[..st.count], b"dup");
    let st = p
        .recv(&world, Source::Any, Tag::Any, &mut buf)
        .expect("world's");
    assert_eq!(&buf[..st.count], b"world");
    let id = dup.context_id();
    p.free(dup.clone()).expect("free");
    assert!(dup.is_freed());
    assert_eq!(p.send(&dup, 0, 1, b"x"), Err(P2pError::FreedCommunicator));
    let again = p.dup(&world).expect("dup again");
    assert_eq!(again.context_id(), id, "a freed id is taken again");
    let none = p.split(&world, None, 0).expect("split");
    assert!(none.is_none());
    let one = p
        .split(&world, Some(3), 0)
        .expect("split")
        .expect("a color");
    assert_eq!((one.rank(), one.size()), (0, 1));
}

#[test]
fn bad_arguments_are_errors_on_the_request() {
    let mut p = p2p();
    let world = p.world();
    let send = p.isend(&world, 5, 0, vec![1u8]);
    let failure = p.wait(send).expect_err("rank 5 of 1");
    assert_eq!(failure.error, P2pError::NoSuchRank { rank: 5, size: 1 });
    assert_eq!(failure.buffer, Some(vec![1u8]));
    let send = p.isend(&world, 0, -3, vec![1u8]);
    let failure = p.wait(send).expect_err("a negative tag");
    assert_eq!(failure.error, P2pError::InvalidTag(-3));
}

#[test]
fn a_message_left_on_a_freed_communicator_never_reaches_the_next() {
    let mut p = p2p();
    let world = p.world();
    let d = p.dup(&world).expect("dup");
    p.send(&d, 0, 6, b"left")
        .expect("eager to self, never received");
    p.free(d.clone()).expect("free");
    let d2 = p.dup(&world).expect("dup again");
    assert_ne!(
        d2.context_id(),
        d.context_id(),
        "an id whose context still holds a message is not reused"
    );
    p.send(&d2, 0, 6, b"new").expect("send");
    let mut buf = [0u8; 8];
    let st = p
        .recv(&d2, Source::Rank(0), Tag::Tag(6), &mut buf)
        .expect("the new communicator's own message");
    assert_eq!(&buf[..st.count], b"new");
    assert!(p.failed_peers().is_empty());
}

#[test]
fn a_message_for_a_tag_with_no_handler_is_counted_not_lost_silently() {
    let registry = self_only();
    let (mut m, _) = messenger(&registry);
    for _ in 0..3 {
        m.send(0, 5, &[], b"early").expect("send to self");
    }
    m.wait_until(|m| m.unhandled_messages() == 3, Duration::from_secs(60))
        .expect("the three are counted");
    let seen = Rc::new(RefCell::new(0u32));
    let count = Rc::clone(&seen);
    m.register(5, move |_| *count.borrow_mut() += 1)
        .expect("tag 5");
    m.send(0, 5, &[], b"on time").expect("send to self");
    m.wait_until(|_| *seen.borrow() == 1, Duration::from_secs(60))
        .expect("the handler sees the next");
    assert_eq!(m.unhandled_messages(), 3);
}
