//! The order in which a plan's address changes reach the store: address by address,
//! ascending, an address's release before its claim. A plan that hands an address from
//! a gone instance to a new one frees it before claiming it, and every process takes
//! rows in the same order, so that two plans applied at once never wait for each other.

use super::{IpClaim, IpRelease};

pub(crate) enum IpStep<'a> {
    Release(&'a IpRelease),
    Claim(&'a IpClaim),
}

impl IpStep<'_> {
    fn key(&self) -> (u32, u8) {
        match self {
            IpStep::Release(r) => (r.address, 0),
            IpStep::Claim(c) => (c.address, 1),
        }
    }
}

/// `claims` and `releases` as the store applies them.
pub(crate) fn ip_steps<'a>(claims: &'a [IpClaim], releases: &'a [IpRelease]) -> Vec<IpStep<'a>> {
    let mut steps: Vec<IpStep<'a>> = releases
        .iter()
        .map(IpStep::Release)
        .chain(claims.iter().map(IpStep::Claim))
        .collect();
    // Stable: two releases of one address keep the plan's order.
    steps.sort_by_key(IpStep::key);
    steps
}
