//! Connections counted per client address, so that one client holding sockets open
//! (idle, or stuck before its TLS handshake) cannot take every connection from the
//! others.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

/// The address a request came from, for the access log and the login throttle.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub SocketAddr);

#[derive(Clone)]
pub struct ClientSlots {
    per_client: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

/// One connection of a client; its slot is given back when it is dropped.
pub struct Slot {
    ip: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl ClientSlots {
    pub fn new(per_client: usize) -> Self {
        ClientSlots {
            per_client,
            open: Arc::default(),
        }
    }

    /// A slot for a new connection from `ip`, or `None` when it has its limit open.
    pub fn take(&self, ip: IpAddr) -> Option<Slot> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let count = open.entry(ip).or_insert(0);
        if *count >= self.per_client {
            return None;
        }
        *count += 1;
        Some(Slot {
            ip,
            open: Arc::clone(&self.open),
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_address_has_its_own_limit_and_slots_come_back() {
        let slots = ClientSlots::new(2);
        let a: IpAddr = "127.0.0.2".parse().unwrap();
        let b: IpAddr = "127.0.0.3".parse().unwrap();
        let first = slots.take(a).unwrap();
        let _second = slots.take(a).unwrap();
        assert!(slots.take(a).is_none());
        assert!(slots.take(b).is_some());
        drop(first);
        assert!(slots.take(a).is_some());
    }
}
