//! What `fleet-updater serve` prints when it starts, read back by the benchmarks and tests
//! that run it as a process: where its APIs listen and its CA.

// Each user of this file reads the part of the output it needs.
#![allow(dead_code)]

use std::io::BufRead;
use std::path::PathBuf;

/// Where a started `serve` listens, and the CA its certificates chain to.
pub struct Listening {
    /// `host:port` of the director API.
    pub director: String,
    /// `host:port` of the broker API.
    pub broker: String,
    pub ca: PathBuf,
}

/// Reads `serve`'s output up to the last of the lines naming its APIs and its CA; the
/// rest is left unread.
///
/// # Panics
/// When the output ends before naming all three.
pub fn listening(stdout: &mut impl BufRead) -> Listening {
    let (mut director, mut broker, mut ca) = (None, None, None);
    let mut line = String::new();
    while (director.is_none() || broker.is_none() || ca.is_none())
        && stdout.read_line(&mut line).expect("serve's output") > 0
    {
        if let Some(a) = line.strip_prefix("director API (BOSH director): https://") {
            director = Some(a.trim().to_string());
        }
        if let Some(a) = line.strip_prefix("broker API (management API): https://") {
            broker = Some(a.trim().to_string());
        }
        if let Some(path) = line.strip_prefix("CA certificate: ") {
            ca = Some(PathBuf::from(path.trim()));
        }
        line.clear();
    }
    Listening {
        director: director.expect("serve prints where the director listens"),
        broker: broker.expect("serve prints where the broker listens"),
        ca: ca.expect("serve prints its CA"),
    }
}
