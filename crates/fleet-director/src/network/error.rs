use std::net::Ipv4Addr;

/// Reservation errors, each naming instance, deployment, network and address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetworkError {
    #[error(
        "NetworkReservationAlreadyInUse: failed to reserve IP '{ip}' for instance '{instance}' of deployment '{deployment}' on network '{network}': already reserved by {holder}"
    )]
    AlreadyInUse {
        ip: Ipv4Addr,
        instance: String,
        deployment: String,
        network: String,
        holder: String,
    },
    #[error(
        "NetworkReservationAlreadyExists: instance '{instance}' of deployment '{deployment}' already has a reservation on network '{network}'; only one per network is allowed"
    )]
    AlreadyExists {
        instance: String,
        deployment: String,
        network: String,
    },
    #[error(
        "NetworkReservationNotEnoughCapacity: failed to reserve an IP for instance '{instance}' of deployment '{deployment}' on manual network '{network}': no more available in the subnets of {az}"
    )]
    NotEnoughCapacity {
        instance: String,
        deployment: String,
        network: String,
        az: String,
    },
    #[error(
        "NetworkReservationIpOutsideSubnet: static IP '{ip}' for instance '{instance}' of deployment '{deployment}' does not belong to any subnet of network '{network}'"
    )]
    OutsideSubnet {
        ip: Ipv4Addr,
        instance: String,
        deployment: String,
        network: String,
    },
    #[error(
        "NetworkReservationIpReserved: failed to reserve IP '{ip}' for instance '{instance}' of deployment '{deployment}' on network '{network}': IP belongs to the reserved range"
    )]
    Reserved {
        ip: Ipv4Addr,
        instance: String,
        deployment: String,
        network: String,
    },
    #[error(
        "NetworkReservationWrongAz: static IP '{ip}' for instance '{instance}' of deployment '{deployment}' on network '{network}' belongs to no subnet of availability zone '{az}'"
    )]
    WrongAz {
        ip: Ipv4Addr,
        instance: String,
        deployment: String,
        network: String,
        az: String,
    },
    #[error(
        "NetworkReservationWrongType: instance '{instance}' of deployment '{deployment}' on {kind} network '{network}': {reason}"
    )]
    WrongType {
        instance: String,
        deployment: String,
        network: String,
        kind: String,
        reason: String,
    },
    #[error(
        "instance '{instance}' of deployment '{deployment}' names network '{network}', which is not defined"
    )]
    UnknownNetwork {
        instance: String,
        deployment: String,
        network: String,
    },
    #[error("IP reservations: {0}")]
    Store(String),
}
