//! The recorder of the primitive operations' times (paper 000, Table 6), alone in its process:
//! it is process-wide, so the library's other tests, recording while it is on, would add
//! their own operations to what this one takes.

use zcio_genie::breakdown::{
    Op, Phase, discard_message, enable, end_message, in_phase, take, time,
};

#[test]
fn records_per_message_totals_by_phase() {
    assert!(take().is_empty());
    time(Op::Copyin, || ());
    end_message();
    enable(true);
    time(Op::Copyin, || {
        std::thread::sleep(std::time::Duration::from_millis(1))
    });
    time(Op::Copyin, || ());
    in_phase(Phase::Dispose, || time(Op::Unreference, || ()));
    end_message();
    time(Op::Swap, || ());
    discard_message();
    end_message();
    let s = take();
    assert_eq!(s.len(), 2, "{s:?}");
    let c = s.iter().find(|x| x.op == Op::Copyin).unwrap();
    assert_eq!(
        (c.phase, c.calls, c.per_message_ns.len()),
        (Phase::Prepare, 2, 1)
    );
    assert!(c.per_message_ns[0] >= 1_000_000);
    let u = s.iter().find(|x| x.op == Op::Unreference).unwrap();
    assert_eq!(u.phase, Phase::Dispose);
    assert!(take().is_empty());
    enable(false);
    time(Op::Copyin, || ());
    end_message();
    assert!(take().is_empty());
}
