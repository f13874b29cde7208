//! RSA key pairs for the `rsa` and `ssh` variable types, as the `bosh` CLI's config server
//! makes them: 2048 bits; the private key PEM-encoded PKCS#1 (`RSA PRIVATE KEY`); for
//! `rsa` the public key PEM-encoded PKIX (`PUBLIC KEY`); for `ssh` the public key as an
//! `authorized_keys` line (`ssh-rsa BASE64`) and its MD5 fingerprint in colon-separated
//! hex, as `ssh-keygen -E md5` prints it.

use md5::{Digest, Md5};
use rsa::pkcs1::EncodeRsaPrivateKey;
use rsa::pkcs8::{EncodePublicKey, LineEnding};
use rsa::traits::PublicKeyParts;
use rsa::{RsaPrivateKey, RsaPublicKey};
use serde_json::{Value as Json, json};

const BITS: usize = 2048;

/// Why a key could not be made.
#[derive(Debug, thiserror::Error)]
#[error("generating an RSA key pair: {0}")]
pub struct KeyError(String);

/// The system's random source as the `rsa` crate asks for one.
struct SystemRandom;

impl rand_core::RngCore for SystemRandom {
    fn next_u32(&mut self) -> u32 {
        let mut bytes = [0u8; 4];
        self.fill_bytes(&mut bytes);
        u32::from_le_bytes(bytes)
    }

    fn next_u64(&mut self) -> u64 {
        let mut bytes = [0u8; 8];
        self.fill_bytes(&mut bytes);
        u64::from_le_bytes(bytes)
    }

    fn fill_bytes(&mut self, dest: &mut [u8]) {
        getrandom::fill(dest).expect("the system's random source works");
    }

    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand_core::Error> {
        self.fill_bytes(dest);
        Ok(())
    }
}

impl rand_core::CryptoRng for SystemRandom {}

fn pair() -> Result<(RsaPrivateKey, String), KeyError> {
    let private =
        RsaPrivateKey::new(&mut SystemRandom, BITS).map_err(|e| KeyError(e.to_string()))?;
    let pem = private
        .to_pkcs1_pem(LineEnding::LF)
        .map_err(|e| KeyError(e.to_string()))?
        .to_string();
    Ok((private, pem))
}

/// An `rsa` variable's value: `private_key`, `public_key`.
pub fn rsa_key() -> Result<Json, KeyError> {
    let (private, private_pem) = pair()?;
    let public = RsaPublicKey::from(&private)
        .to_public_key_pem(LineEnding::LF)
        .map_err(|e| KeyError(e.to_string()))?;
    Ok(json!({"private_key": private_pem, "public_key": public}))
}

/// An `ssh` variable's value: `private_key`, `public_key`, `public_key_fingerprint`.
pub fn ssh_key() -> Result<Json, KeyError> {
    let (private, private_pem) = pair()?;
    let wire = ssh_wire(&RsaPublicKey::from(&private));
    let fingerprint: Vec<String> = Md5::digest(&wire)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Ok(json!({
        "private_key": private_pem,
        "public_key": format!("ssh-rsa {}\n", data_encoding::BASE64.encode(&wire)),
        "public_key_fingerprint": fingerprint.join(":"),
    }))
}

/// The public key in SSH's wire format (RFC 4253, 6.6): the name, the exponent and the
/// modulus, each length-prefixed, the numbers as `mpint`s.
fn ssh_wire(key: &RsaPublicKey) -> Vec<u8> {
    let mut out = Vec::new();
    let mut field = |bytes: &[u8]| {
        out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        out.extend_from_slice(bytes);
    };
    field(b"ssh-rsa");
    for number in [key.e(), key.n()] {
        let mut bytes = number.to_bytes_be();
        // A positive mpint whose top bit is set takes a leading zero byte.
        if bytes.first().is_some_and(|b| b & 0x80 != 0) {
            bytes.insert(0, 0);
        }
        field(&bytes);
    }
    out
}

#[cfg(test)]
mod tests {
    use rsa::pkcs1::DecodeRsaPrivateKey;
    use rsa::pkcs8::DecodePublicKey;

    use super::*;

    #[test]
    fn an_rsa_pair_is_2048_bits_and_its_halves_belong_together() {
        let value = rsa_key().unwrap();
        let private =
            RsaPrivateKey::from_pkcs1_pem(value["private_key"].as_str().unwrap()).unwrap();
        let public =
            RsaPublicKey::from_public_key_pem(value["public_key"].as_str().unwrap()).unwrap();
        assert_eq!(private.size() * 8, BITS);
        assert_eq!(RsaPublicKey::from(&private), public);
        assert!(
            value["private_key"]
                .as_str()
                .unwrap()
                .starts_with("-----BEGIN RSA PRIVATE KEY-----")
        );
        assert!(
            value["public_key"]
                .as_str()
                .unwrap()
                .starts_with("-----BEGIN PUBLIC KEY-----")
        );
    }

    #[test]
    fn an_ssh_key_reads_back_as_its_private_keys_public_half_with_its_fingerprint() {
        let value = ssh_key().unwrap();
        let private =
            RsaPrivateKey::from_pkcs1_pem(value["private_key"].as_str().unwrap()).unwrap();
        let line = value["public_key"].as_str().unwrap();
        let encoded = line.strip_prefix("ssh-rsa ").unwrap().trim_end();
        let wire = data_encoding::BASE64.decode(encoded.as_bytes()).unwrap();
        assert_eq!(wire, ssh_wire(&RsaPublicKey::from(&private)));
        let fingerprint = value["public_key_fingerprint"].as_str().unwrap();
        assert_eq!(fingerprint.len(), 47, "{fingerprint}");
        let expected: Vec<String> = Md5::digest(&wire)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(fingerprint, expected.join(":"));
    }
}
