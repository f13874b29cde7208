//! The networks of an apply spec checked against the agent's settings, as BOSH's agent
//! does before it applies: every network the spec names must be one the VM was made on,
//! and a dynamic one takes the address the IaaS gave the VM (`create-env` reads it back
//! from `get_state`). Everything else is kept as sent: the client compares them.

use serde_json::{Map, Value};

use super::error::ActionError;

/// Fills in the spec's dynamic networks from `settings` (the networks `create_vm` was
/// given, with the addresses the IaaS handed out).
///
/// # Errors
/// A network the settings do not have, named as BOSH's agent names it.
pub fn resolve(
    spec: &mut Map<String, Value>,
    settings: &Map<String, Value>,
) -> Result<(), ActionError> {
    for (name, network) in spec.iter_mut() {
        // The loopback network some specs carry is the VM's own.
        if name == "local" && network.get("ip").and_then(Value::as_str) == Some("127.0.0.1") {
            continue;
        }
        let set = settings
            .get(name)
            .ok_or_else(|| ActionError::NetworkNotInSettings(name.clone()))?;
        let dynamic = matches!(
            set.get("type").and_then(Value::as_str),
            Some("dynamic" | "dhcp")
        );
        if dynamic && let Some(network) = network.as_object_mut() {
            for key in ["ip", "netmask", "gateway"] {
                if let Some(value) = set.get(key) {
                    network.insert(key.into(), value.clone());
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn a_dynamic_network_takes_the_vms_address_and_others_stay_as_sent() {
        let settings = map(json!({
            "default": {"type": "dynamic", "ip": "10.254.3.7", "netmask": "255.255.255.0", "gateway": "10.254.3.1"},
            "static": {"type": "manual", "ip": "10.0.0.5"},
        }));
        let mut spec = map(json!({
            "default": {"type": "dynamic", "default": ["dns", "gateway"], "cloud_properties": {}},
            "static": {"type": "manual", "ip": "10.0.0.5", "netmask": "255.255.255.0", "extra": 1},
            "local": {"ip": "127.0.0.1"},
        }));
        let sent_static = spec["static"].clone();
        resolve(&mut spec, &settings).unwrap();
        assert_eq!(spec["default"]["ip"], "10.254.3.7");
        assert_eq!(spec["default"]["gateway"], "10.254.3.1");
        assert_eq!(spec["default"]["default"], json!(["dns", "gateway"]));
        assert_eq!(spec["static"], sent_static);
    }

    #[test]
    fn a_network_the_vm_was_not_made_on_is_named() {
        let mut spec = map(json!({"other": {"type": "manual", "ip": "10.0.0.5"}}));
        let e = resolve(&mut spec, &Map::new()).unwrap_err();
        assert_eq!(e.to_string(), "Network 'other' is not found in settings");
    }
}
