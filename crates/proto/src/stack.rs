//! The choice of a group's stack: [`GroupSpec`] names the protocol and its configuration, and
//! [`GroupSpec::start`] makes the member behind the one [`GroupMember`] interface.

use crate::addr::Address;
use crate::group::{self, GroupConfig};
use crate::member::{ConfigError, GroupError, GroupId, GroupMember};
use crate::order::{self, OrderConfig};
use crate::time::Instant;

/// A group's ordering protocol, chosen at creation: Amoeba's sequencer ([`group::Member`]), or
/// one of the layered protocols over the virtually synchronous stack (`totem`, `total`,
/// `dynseq`, `dynord`; [`order::Member`]).
#[derive(Clone, Debug, PartialEq)]
pub enum GroupSpec {
    Sequencer(GroupConfig),
    Ordered(OrderConfig),
}

impl From<GroupConfig> for GroupSpec {
    fn from(c: GroupConfig) -> Self {
        GroupSpec::Sequencer(c)
    }
}

impl From<OrderConfig> for GroupSpec {
    fn from(c: OrderConfig) -> Self {
        GroupSpec::Ordered(c)
    }
}

impl GroupSpec {
    pub fn id(&self) -> GroupId {
        match self {
            GroupSpec::Sequencer(c) => c.group,
            GroupSpec::Ordered(c) => c.vs.group,
        }
    }

    /// Largest group message a member of this group builds.
    pub fn packet_bytes_max(&self) -> usize {
        match self {
            GroupSpec::Sequencer(c) => c.packet_bytes_max,
            GroupSpec::Ordered(c) => c.vs.packet_bytes_max,
        }
    }

    /// A member at `me`: the group's first (`contact` None) or one joining through `contact`.
    pub fn start(
        self,
        me: Address,
        contact: Option<Address>,
        now: Instant,
    ) -> Result<Box<dyn GroupMember>, GroupError> {
        let bad = |e: crate::vsync::VsConfigError| GroupError::Config(ConfigError(e.0));
        Ok(match (self, contact) {
            (GroupSpec::Sequencer(cfg), None) => Box::new(group::Member::create(cfg, me, now)?),
            (GroupSpec::Sequencer(cfg), Some(c)) => Box::new(group::Member::join(cfg, me, c, now)?),
            (GroupSpec::Ordered(cfg), None) => {
                Box::new(order::Member::create(cfg, me, now).map_err(bad)?)
            }
            (GroupSpec::Ordered(cfg), Some(c)) => {
                Box::new(order::Member::join(cfg, me, c, now).map_err(bad)?)
            }
        })
    }
}
