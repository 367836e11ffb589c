//! VMMR reassembly of a file read (paper 002): a message that arrives in page-sized pieces
//! scattered over memory is made contiguous by moving its pages, not by copying its bytes.
//!
//! A file is read with `O_DIRECT` into slots of a page store whose free list has been shuffled,
//! so that the message's pages land all over the store, as pooled receive buffers would. The
//! reassembler moves those pages (`UFFDIO_MOVE`) into one free run of its own virtual range,
//! where the application reads the message as one slice; freeing the message moves the pages
//! back into their slots for the next read.
//!
//! Run it with `cargo run -p zcio --example vmmr_reassembly`.

use std::io::Write;
use zcio::vm::remap::{Granule, PageStore};
use zcio::vmmr::pool::BitmapPool;
use zcio::vmmr::producer::FileProducer;
use zcio::vmmr::reassemble::Reassembler;

#[path = "common/example.rs"]
mod example;

use example::Result;

/// 40 pages and a bit: the last page of the message is partly filled.
const LEN: usize = 40 * 4096 + 123;

fn run() -> Result<()> {
    // The file to read, in a temporary directory (on a file system that may refuse O_DIRECT:
    // the producer then reads through the page cache and says so).
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("message");
    let data: Vec<u8> = (0..LEN as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut f = std::fs::File::create(&file)?;
    f.write_all(&data)?;
    f.sync_all()?;
    drop(f);

    let mut producer = FileProducer::open(&file)?;
    match producer.direct() {
        Ok(()) => println!("reading with O_DIRECT: straight from the device into the slots"),
        Err(why) => println!("fallback: {why}"),
    }

    // A store of 64 page slots, its free list shuffled: take every slot, give them back in a
    // scrambled order.
    let mut store = PageStore::new(64, Granule::Page)?;
    let mut all: Vec<_> = std::iter::from_fn(|| store.take()).collect();
    let mut k = 7;
    while !all.is_empty() {
        k = (k * 31 + 11) % all.len();
        store.put(all.swap_remove(k))?;
    }

    // Read the message into slots (wherever the store hands them out), then reassemble it in a
    // virtual range as large as the store, allocated from the paper's free-page bitmap.
    let slots = producer.read_message(&mut store, 0, LEN)?;
    let scattered: Vec<usize> = slots.iter().take(6).map(|s| s.index()).collect();
    println!("the message's first pages are in slots {scattered:?}...");
    let mut reassembler = Reassembler::new(BitmapPool::new(store.capacity()), Granule::Page)?;
    let message = reassembler
        .reassemble(&mut store, slots, LEN)
        .map_err(|refused| refused.error)?;

    let moved = message.moved();
    println!(
        "reassembled {} bytes ({}): {} moved in {} calls, {} copied",
        message.len(),
        message.path().name(),
        moved.moved,
        moved.calls,
        moved.copied
    );
    if moved.copied > 0 {
        println!("fallback: the kernel would not move some pages (no UFFDIO_MOVE?): copied");
    }

    // One contiguous slice, checked byte for byte against the file.
    let bytes = reassembler.bytes(&message)?;
    if let Some(i) = (0..LEN).find(|&i| bytes[i] != data[i]) {
        return Err(format!(
            "byte {i} of the reassembled message is {:#04x}, the file has {:#04x}",
            bytes[i], data[i]
        )
        .into());
    }
    if bytes.len() != LEN {
        return Err(format!("{} bytes reassembled, {LEN} read", bytes.len()).into());
    }
    println!("the reassembled message matches the file byte for byte");

    // Freeing moves the pages back into their slots, which go back to the store.
    let slots = reassembler
        .free(&mut store, message)
        .map_err(|refused| refused.error)?;
    for s in slots {
        store.put(s)?;
    }
    if store.free() != store.capacity() {
        return Err("slots went missing".into());
    }
    Ok(())
}

example::main_and_test!(example_vmmr_reassembly, run);
