//! Resource counting against the real process (a test binary of its own: the counts are
//! process-wide, so no other test may open or map anything meanwhile).

use std::os::fd::AsFd;
use zcio_vm::resources::{Resources, Tolerance};

#[test]
fn a_memory_file_and_a_mapping_are_counted_and_their_release_seen() {
    let before = Resources::now();
    let fd =
        rustix::fs::memfd_create("zcio-resources-test", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, zcio_vm::page_size() as u64).unwrap();
    // A shared file mapping never merges with its anonymous neighbours: one more mapping.
    let m = zcio_vm::Mapping::shared_fd(fd.as_fd(), 0, zcio_vm::page_size(), None).unwrap();
    let during = Resources::now();
    assert_eq!(during.memfds, before.memfds + 1, "{before:?} {during:?}");
    assert_eq!(during.fds, before.fds + 1, "{before:?} {during:?}");
    assert!(during.vmas > before.vmas, "{before:?} {during:?}");
    let grown = during.strayed_from(&before, &Tolerance::nothing_grows(0));
    assert!(
        grown.iter().any(|g| g.starts_with("memory files")),
        "{grown:?}"
    );
    drop((m, fd));
    let after = Resources::now();
    assert_eq!(after.memfds, before.memfds);
    assert_eq!(after.fds, before.fds);
    assert_eq!(after.vmas, before.vmas);
}
