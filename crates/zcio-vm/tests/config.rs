//! A program's configuration (`zcio_vm::config`): what it turns off is in force, reported as
//! said by the program, and a change after zcio's first use is refused while what is in force
//! stays. (A process of its own: the configuration is per process.)

use zcio_vm::VmRuntime;
use zcio_vm::config::{self, Disabled, Source};

#[test]
fn a_program_turns_page_moves_off_before_first_use_and_cannot_change_it_after() {
    let off = Disabled {
        page_moves: true,
        ..Disabled::default()
    };
    config::configure(off).unwrap();
    assert_eq!(config::current().source, Source::Program);
    let caps = VmRuntime::get().capabilities();
    assert!(!caps.swap, "page moves were turned off: {caps:?}");
    if caps
        .reasons
        .iter()
        .any(|r| r.contains("userfaultfd unavailable"))
    {
        // Nothing to turn off on this machine; the reason below is not given then.
    } else {
        assert!(
            caps.reasons
                .iter()
                .any(|r| r.contains("UFFDIO_MOVE disabled by the program")),
            "{:?}",
            caps.reasons
        );
    }
    // The same again is fine; another is refused, and the first stays.
    config::configure(off).unwrap();
    let e = config::configure(Disabled::default()).unwrap_err();
    assert!(e.to_string().contains("after its first use"), "{e}");
    assert_eq!(config::disabled(), off);
}
