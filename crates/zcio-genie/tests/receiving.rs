//! Receiving on the memory network without knowing the length: `peek_len` says it and takes
//! nothing, a buffer too small keeps the message queued and names its length, and `recv_alloc`
//! returns a buffer of the message's own length (in huge pages from 2 MiB), under every
//! semantics that fills application buffers and every input buffering.

mod common;

use common::{fill, forced_pair};
use zcio_genie::{GenieError, Granule, InputBuffering, Semantics};

const SEMANTICS: [Semantics; 4] = [
    Semantics::Copy,
    Semantics::EmulatedCopy,
    Semantics::Share,
    Semantics::EmulatedShare,
];

fn data(len: usize, i: usize) -> Vec<u8> {
    let mut d = vec![0u8; len];
    fill(&mut d, i as u8);
    d
}

#[test]
fn an_unknown_length_is_peeked_kept_and_received_whole() {
    let ps = zcio_vm::page_size();
    let h = zcio_vm::page::HUGE_PAGE_SIZE;
    let lens = [1, 3 * ps + 17, 2 * h + 5 * ps];
    let (mut tx, mut rx) = forced_pair();
    // The sender on a thread of its own: a message larger than the wire waits for the reader.
    let sender = std::thread::spawn(move || {
        for (i, len) in lens.into_iter().enumerate() {
            for sem in SEMANTICS {
                for _ in InputBuffering::ALL {
                    let d = data(len, i);
                    let (t, _) = tx.send(sem, &d).unwrap();
                    tx.wait(t).unwrap(); // share semantics lend `d` until then
                }
            }
        }
    });
    for (i, len) in lens.into_iter().enumerate() {
        let want = data(len, i);
        for sem in SEMANTICS {
            for input in InputBuffering::ALL {
                let case = format!("{len} bytes, {sem}, {input}");
                assert_eq!(rx.peek_len().unwrap(), len, "{case}");
                assert_eq!(rx.peek_len().unwrap(), len, "{case}: peeking takes nothing");
                if len > 1 {
                    let mut short = vec![0u8; len - 1];
                    let e = rx.recv(sem, &mut short, input).unwrap_err();
                    assert!(
                        matches!(e, GenieError::TooSmall { needed, got } if needed == len && got == len - 1),
                        "{case}: {e}"
                    );
                }
                let (got, acc) = rx.recv_alloc(sem, input).unwrap();
                assert_eq!(got.len(), len, "{case}");
                assert!(got[..] == want[..], "{case}: {}", acc.path);
                if len >= h && zcio_vm::huge::unavailable_reason().is_none() {
                    assert_ne!(got.granule(), Granule::Base, "{case}: not in huge pages");
                }
            }
        }
    }
    sender.join().unwrap();
}
