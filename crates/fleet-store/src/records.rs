//! Typed access to the store's JSON documents.

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{Store, StoreError, Write};

/// A kind of record, declared as a constant by the layer that keeps it (the director its
/// releases and instances, the broker its service instances, ...): the store knows none of
/// them by name, and a constant cannot be mistyped into a second kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Collection(&'static str);

impl Collection {
    /// A kind named `name` in the database: lowercase ASCII letters, digits and `_`, at
    /// most 64 bytes. Checked when the constant is made, so a bad name does not compile.
    pub const fn new(name: &'static str) -> Self {
        let bytes = name.as_bytes();
        assert!(
            !bytes.is_empty() && bytes.len() <= 64,
            "a collection's name is 1 to 64 bytes"
        );
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            assert!(
                b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_',
                "a collection's name is lowercase letters, digits and `_`"
            );
            i += 1;
        }
        Collection(name)
    }

    pub fn name(self) -> &'static str {
        self.0
    }
}

pub fn get<T: DeserializeOwned>(
    store: &dyn Store,
    collection: Collection,
    key: &str,
) -> Result<Option<T>, StoreError> {
    store
        .get(collection, key)?
        .map(|body| serde_json::from_str(&body).map_err(StoreError::from))
        .transpose()
}

pub fn list<T: DeserializeOwned>(
    store: &dyn Store,
    collection: Collection,
    scope: Option<&str>,
) -> Result<Vec<T>, StoreError> {
    store
        .list(collection, scope)?
        .iter()
        .map(|body| serde_json::from_str(body).map_err(StoreError::from))
        .collect()
}

pub fn put<T: Serialize>(collection: Collection, key: &str, scope: &str, value: &T) -> Write {
    Write::Put {
        collection,
        key: key.to_string(),
        scope: scope.to_string(),
        body: serde_json::to_string(value).expect("records serialize"),
    }
}

pub fn remove(collection: Collection, key: &str) -> Write {
    Write::Delete {
        collection,
        key: key.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::Collection;

    #[test]
    fn a_kind_keeps_the_name_it_was_declared_with() {
        const KIND: Collection = Collection::new("cloud_vms2");
        assert_eq!(KIND.name(), "cloud_vms2");
        assert_ne!(KIND, Collection::new("cloud_vms"));
    }

    #[test]
    #[should_panic(expected = "lowercase letters, digits and `_`")]
    fn a_name_that_could_be_mistaken_is_refused() {
        let name = String::from("Instances");
        Collection::new(name.leak());
    }

    #[test]
    #[should_panic(expected = "1 to 64 bytes")]
    fn an_empty_name_is_refused() {
        Collection::new("");
    }
}
