//! Variables in manifests, as BOSH's CLI and config server give them: `((name))` standing
//! for a whole value (which may be a mapping, as a certificate is), `((name.key))` for one
//! of its keys, or inside a string; and the values a manifest's `variables:` declares,
//! generated once (passwords, certificates signed by a CA declared before them, RSA and
//! SSH keys, users).
//! Pure but for the system's random source: names and values in, values out.

mod keys;

use std::collections::BTreeMap;

use fleet_yaml::{Key, Node, Value};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, SanType};
use serde_json::Value as Json;

#[derive(Debug, thiserror::Error)]
pub enum VariableError {
    #[error("Expected to find variables: {}", .0.join(", "))]
    Missing(Vec<String>),
    #[error("variables[{index}] ({name}): {message}")]
    Declaration {
        index: usize,
        name: String,
        message: String,
    },
    #[error("((variable {name})) is {kind} and stands inside a string `{text}`")]
    NotText {
        name: String,
        kind: &'static str,
        text: String,
    },
}

/// Why a certificate could not be made.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    #[error("alternative name `{name}`: {source}")]
    AlternativeName { name: String, source: rcgen::Error },
    #[error("its CA `{0}` is not declared before it")]
    UndeclaredCa(String),
    #[error("its CA `{ca}` has no {key}")]
    CaField { ca: String, key: String },
    #[error("Unsupported extended key usage value: {0}")]
    KeyUsage(String),
    #[error(transparent)]
    Generation(#[from] rcgen::Error),
}

/// Every variable's value, by name.
pub type Values = BTreeMap<String, Json>;

/// A password as BOSH's CLI makes one: 20 of `a-z0-9`.
pub fn password() -> String {
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let mut bytes = [0u8; 20];
    getrandom::fill(&mut bytes).expect("the system's random source works");
    bytes
        .iter()
        .map(|b| ALPHABET[*b as usize % ALPHABET.len()] as char)
        .collect()
}

/// Generates what `declared` (the manifest's `variables:`) names and `values` lacks, in
/// order, so that a certificate finds the CA declared before it. Whether anything was
/// generated.
///
/// # Errors
/// A declaration of an unknown type, or a certificate whose CA is unknown.
pub fn generate(declared: &Json, values: &mut Values) -> Result<bool, VariableError> {
    let Some(list) = declared.as_array() else {
        return Ok(false);
    };
    let mut made = false;
    // A certificate's issuer is rebuilt from its CA's declaration: the same names, so
    // that what it signs chains to the CA.
    let options_of = |name: &str| {
        list.iter()
            .find(|d| d.get("name").and_then(Json::as_str) == Some(name))
            .and_then(|d| d.get("options"))
            .cloned()
            .unwrap_or(Json::Null)
    };
    for (index, declaration) in list.iter().enumerate() {
        let name = declaration
            .get("name")
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_string();
        let fail = |message: String| VariableError::Declaration {
            index,
            name: name.clone(),
            message,
        };
        if name.is_empty() {
            return Err(fail("has no name".into()));
        }
        if values.contains_key(&name) {
            continue;
        }
        let options = declaration.get("options").cloned().unwrap_or(Json::Null);
        let value = match declaration.get("type").and_then(Json::as_str) {
            Some("password") => Json::String(password()),
            // CredHub's `user`: a name (as given, or made) and a password.
            Some("user") => serde_json::json!({
                "username": options
                    .get("username")
                    .and_then(Json::as_str)
                    .map_or_else(password, str::to_string),
                "password": password(),
            }),
            Some("certificate") => {
                certificate(&options, values, &options_of).map_err(|e| fail(e.to_string()))?
            }
            Some("rsa") => keys::rsa_key().map_err(|e| fail(e.to_string()))?,
            Some("ssh") => keys::ssh_key().map_err(|e| fail(e.to_string()))?,
            Some(other) => {
                return Err(fail(format!(
                    "type `{other}` is not one generated here (password, certificate, rsa, ssh, \
                     user)"
                )));
            }
            None => return Err(fail("has no type".into())),
        };
        values.insert(name, value);
        made = true;
    }
    Ok(made)
}

/// What a certificate's declaration makes of its names and whether it is a CA.
fn params(options: &Json) -> Result<CertificateParams, CertificateError> {
    let text = |key: &str| options.get(key).and_then(Json::as_str).map(str::to_string);
    let mut params = CertificateParams::default();
    if let Some(cn) = text("common_name") {
        params.distinguished_name.push(DnType::CommonName, cn);
    }
    for name in options
        .get("alternative_names")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
        .filter_map(Json::as_str)
    {
        params.subject_alt_names.push(match name.parse() {
            Ok(ip) => SanType::IpAddress(ip),
            Err(_) => SanType::DnsName(name.to_string().try_into().map_err(|source| {
                CertificateError::AlternativeName {
                    name: name.to_string(),
                    source,
                }
            })?),
        });
    }
    if options.get("is_ca").and_then(Json::as_bool) == Some(true) {
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    }
    for usage in options
        .get("extended_key_usage")
        .and_then(Json::as_array)
        .into_iter()
        .flatten()
        .filter_map(Json::as_str)
    {
        params.extended_key_usages.push(match usage {
            "server_auth" => rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            "client_auth" => rcgen::ExtendedKeyUsagePurpose::ClientAuth,
            other => return Err(CertificateError::KeyUsage(other.to_string())),
        });
    }
    Ok(params)
}

/// A certificate as BOSH keeps one: `ca`, `certificate`, `private_key`, PEM. Signed by
/// the certificate named by `options.ca`, or by itself.
fn certificate(
    options: &Json,
    values: &Values,
    options_of: &dyn Fn(&str) -> Json,
) -> Result<Json, CertificateError> {
    let text = |key: &str| options.get(key).and_then(Json::as_str).map(str::to_string);
    let params = params(options)?;
    let key = KeyPair::generate()?;
    let (cert, ca_pem) = match text("ca") {
        None => {
            let cert = params.self_signed(&key)?;
            let pem = cert.pem();
            (pem.clone(), pem)
        }
        Some(ca) => {
            let issuer_value = values
                .get(&ca)
                .ok_or_else(|| CertificateError::UndeclaredCa(ca.clone()))?;
            let field = |key: &str| {
                issuer_value.get(key).and_then(Json::as_str).ok_or_else(|| {
                    CertificateError::CaField {
                        ca: ca.clone(),
                        key: key.to_string(),
                    }
                })
            };
            let ca_key = KeyPair::from_pem(field("private_key")?)?;
            let issuer = Issuer::new(self::params(&options_of(&ca))?, ca_key);
            let cert = params.signed_by(&key, &issuer)?;
            (cert.pem(), field("certificate")?.to_string())
        }
    };
    Ok(serde_json::json!({
        "ca": ca_pem,
        "certificate": cert,
        "private_key": key.serialize_pem(),
    }))
}

/// Every `((name))` the node uses, by its name before any `.key`.
pub fn used(node: &Node) -> Vec<String> {
    let mut names = Vec::new();
    walk(node, &mut |text| {
        for (_, reference) in references(text) {
            let base = reference.split('.').next().unwrap_or_default().to_string();
            if !names.contains(&base) {
                names.push(base);
            }
        }
    });
    names
}

fn walk(node: &Node, visit: &mut dyn FnMut(&str)) {
    match &node.value {
        Value::Str(s) => visit(s),
        Value::Seq(items) => items.iter().for_each(|n| walk(n, visit)),
        Value::Map(entries) => entries.iter().for_each(|(_, n)| walk(n, visit)),
        _ => {}
    }
}

/// The references in a text: each as written (`(( !name ))`) and the name it names
/// (`name`: spaces around it and BOSH's bang kept off).
fn references(text: &str) -> Vec<(String, String)> {
    let mut found = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("((") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("))") else { break };
        let name = after[..end].trim();
        if !name.is_empty() && !name.contains(char::is_whitespace) {
            let written = format!("(({}))", &after[..end]);
            found.push((written, name.trim_start_matches('!').to_string()));
        }
        rest = &after[end + 2..];
    }
    found
}

fn lookup(values: &Values, reference: &str) -> Option<Json> {
    let mut parts = reference.split('.');
    let mut value = values.get(parts.next()?)?.clone();
    for key in parts {
        value = value.get(key)?.clone();
    }
    Some(value)
}

/// A JSON document (job properties) with every reference replaced by its value.
///
/// # Errors
/// As [`interpolate`].
pub fn interpolate_json(value: &Json, values: &Values) -> Result<Json, VariableError> {
    Ok(interpolate(&fleet_yaml::from_json(value), values)?.to_json())
}

/// Every `((name))` a JSON document uses, by its name before any `.key`.
pub fn used_json(value: &Json) -> Vec<String> {
    used(&fleet_yaml::from_json(value))
}

/// The node with every reference replaced by its value.
///
/// # Errors
/// References with no value, all named; a structured value inside a string.
pub fn interpolate(node: &Node, values: &Values) -> Result<Node, VariableError> {
    let missing: Vec<String> = used(node)
        .into_iter()
        .filter(|name| !values.contains_key(name))
        .collect();
    if !missing.is_empty() {
        return Err(VariableError::Missing(missing));
    }
    replace(node, values)
}

fn replace(node: &Node, values: &Values) -> Result<Node, VariableError> {
    let value = match &node.value {
        Value::Str(s) => {
            let refs = references(s);
            if refs.is_empty() {
                return Ok(node.clone());
            }
            if refs.len() == 1 && s.trim() == refs[0].0 {
                let found = lookup(values, &refs[0].1)
                    .ok_or_else(|| VariableError::Missing(vec![refs[0].1.clone()]))?;
                return Ok(fleet_yaml::from_json_at(&found, node.at));
            }
            let mut text = s.clone();
            for (written, reference) in refs {
                let found = lookup(values, &reference)
                    .ok_or_else(|| VariableError::Missing(vec![reference.clone()]))?;
                let piece = match &found {
                    Json::String(t) => t.clone(),
                    Json::Number(n) => n.to_string(),
                    Json::Bool(b) => b.to_string(),
                    other => {
                        return Err(VariableError::NotText {
                            name: reference,
                            kind: if other.is_object() {
                                "a mapping"
                            } else {
                                "a list"
                            },
                            text: s.clone(),
                        });
                    }
                };
                text = text.replace(&written, &piece);
            }
            Value::Str(text)
        }
        Value::Seq(items) => Value::Seq(
            items
                .iter()
                .map(|n| replace(n, values))
                .collect::<Result<_, _>>()?,
        ),
        Value::Map(entries) => Value::Map(
            entries
                .iter()
                .map(|(k, n)| {
                    Ok((
                        Key {
                            name: k.name.clone(),
                            at: k.at,
                        },
                        replace(n, values)?,
                    ))
                })
                .collect::<Result<_, VariableError>>()?,
        ),
        other => other.clone(),
    };
    Ok(Node { value, at: node.at })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Node {
        fleet_yaml::load(text, fleet_yaml::Limits::default()).unwrap()
    }

    #[test]
    fn references_are_replaced_whole_by_key_and_inside_strings() {
        let node = load(
            "a: ((port))\nb: https://mbus:((pw))@127.0.0.1:((port))\nc: ((cert.ca))\nd: ((cert))\n",
        );
        let mut values = Values::new();
        values.insert("port".into(), Json::String("6868".into()));
        values.insert("pw".into(), Json::String("s3".into()));
        values.insert(
            "cert".into(),
            serde_json::json!({"ca": "CA", "certificate": "C"}),
        );
        let out = interpolate(&node, &values).unwrap().to_json();
        assert_eq!(out["a"], "6868");
        assert_eq!(out["b"], "https://mbus:s3@127.0.0.1:6868");
        assert_eq!(out["c"], "CA");
        assert_eq!(out["d"]["certificate"], "C");
        // BOSH's bang and spaces inside the parentheses name the same variable.
        let spaced = interpolate(&load("a: (( port ))\nb: x-((!pw))-y\n"), &values)
            .unwrap()
            .to_json();
        assert_eq!(spaced["a"], "6868");
        assert_eq!(spaced["b"], "x-s3-y");
        let e = interpolate(&load("x: ((one))\ny: a((two))b\n"), &Values::new()).unwrap_err();
        assert_eq!(e.to_string(), "Expected to find variables: one, two");
        let e = interpolate(&load("x: a((cert))b\n"), &values).unwrap_err();
        assert!(
            e.to_string()
                .contains("is a mapping and stands inside a string"),
            "{e}"
        );
    }

    #[test]
    fn declared_variables_are_generated_once_and_a_certificate_is_signed_by_its_ca() {
        let declared = serde_json::json!([
            {"name": "pw", "type": "password"},
            {"name": "ca", "type": "certificate", "options": {"is_ca": true, "common_name": "ca"}},
            {"name": "leaf", "type": "certificate", "options": {"ca": "ca", "common_name": "x", "alternative_names": ["127.0.0.1", "localhost"]}},
        ]);
        let mut values = Values::new();
        assert!(generate(&declared, &mut values).unwrap());
        assert_eq!(values["pw"].as_str().unwrap().len(), 20);
        assert_eq!(values["leaf"]["ca"], values["ca"]["certificate"]);
        let pw = values["pw"].clone();
        assert!(!generate(&declared, &mut values).unwrap(), "nothing new");
        assert_eq!(values["pw"], pw);
        let bad = serde_json::json!([{"name": "x", "type": "gpg"}]);
        let e = generate(&bad, &mut Values::new()).unwrap_err();
        assert!(
            e.to_string().starts_with("variables[0] (x): type `gpg`"),
            "{e}"
        );
        let keys = serde_json::json!([
            {"name": "signing", "type": "rsa"},
            {"name": "login", "type": "ssh"},
        ]);
        assert!(generate(&keys, &mut values).unwrap());
        assert!(values["signing"]["public_key"].is_string());
        assert!(values["login"]["public_key_fingerprint"].is_string());
        let users = serde_json::json!([
            {"name": "admin", "type": "user", "options": {"username": "root"}},
            {"name": "someone", "type": "user"},
        ]);
        assert!(generate(&users, &mut values).unwrap());
        assert_eq!(values["admin"]["username"], "root");
        assert_eq!(values["admin"]["password"].as_str().unwrap().len(), 20);
        assert_eq!(values["someone"]["username"].as_str().unwrap().len(), 20);
    }

    #[test]
    fn a_generated_certificate_verifies_against_its_ca_and_not_another() {
        use rustls_pki_types::pem::PemObject;
        use rustls_pki_types::{CertificateDer, UnixTime};
        let declared = serde_json::json!([
            {"name": "ca", "type": "certificate", "options": {"is_ca": true, "common_name": "ca"}},
            {"name": "other_ca", "type": "certificate", "options": {"is_ca": true, "common_name": "other"}},
            {"name": "leaf", "type": "certificate", "options": {"ca": "ca", "common_name": "web", "alternative_names": ["web.example.com"], "extended_key_usage": ["server_auth"]}},
        ]);
        let mut values = Values::new();
        generate(&declared, &mut values).unwrap();
        let der = |name: &str, key: &str| {
            CertificateDer::from_pem_slice(values[name][key].as_str().unwrap().as_bytes()).unwrap()
        };
        let leaf = der("leaf", "certificate");
        let leaf = webpki::EndEntityCert::try_from(&leaf).unwrap();
        let verify = |ca: &CertificateDer<'_>| {
            let anchor = webpki::anchor_from_trusted_cert(ca).unwrap();
            leaf.verify_for_usage(
                webpki::ALL_VERIFICATION_ALGS,
                &[anchor],
                &[],
                UnixTime::now(),
                webpki::KeyUsage::server_auth(),
                None,
                None,
            )
            .map(|_| ())
        };
        assert_eq!(verify(&der("ca", "certificate")), Ok(()));
        assert_eq!(verify(&der("leaf", "ca")), Ok(()), "its `ca` is its issuer");
        assert!(verify(&der("other_ca", "certificate")).is_err());
        let bad = serde_json::json!([{"name": "x", "type": "certificate", "options": {"common_name": "x", "extended_key_usage": ["code_signing"]}}]);
        let e = generate(&bad, &mut Values::new()).unwrap_err();
        assert!(
            e.to_string()
                .contains("Unsupported extended key usage value: code_signing"),
            "{e}"
        );
    }
}
