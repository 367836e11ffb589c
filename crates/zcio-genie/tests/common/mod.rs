//! Helpers shared by the integration tests.

use zcio_genie::memnet::{self, MemnetEndpoint};
use zcio_genie::profile::Profile;

/// A memory-network link whose ends take the VM paths from the first page up (the calibrated
/// profile may say copying wins everywhere on this machine).
pub fn forced_pair() -> (MemnetEndpoint, MemnetEndpoint) {
    let (mut a, mut b) = memnet::pair().unwrap();
    a.set_profile(Profile::zero_copy());
    b.set_profile(Profile::zero_copy());
    (a, b)
}
