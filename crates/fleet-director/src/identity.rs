//! The director's UUID: made once and kept with its state, so that clients that remember a
//! director (the bosh CLI's environments, a broker's configuration) see the same one after
//! a restart.

use fleet_store::{AsyncStore, StoreError, get, put};

const KEY: &str = "director_uuid";

/// The director's name: what `GET /info` answers, and the first part of the names its
/// config server keeps variables under.
pub const DIRECTOR_NAME: &str = "fleet-updater";

/// The UUID kept in the store, made and kept on first use.
pub async fn director_uuid(store: &AsyncStore) -> Result<String, StoreError> {
    store
        .run(|s| {
            if let Some(kept) = get::<String>(s, crate::collections::DIRECTOR, KEY)? {
                return Ok(kept);
            }
            let made = random_uuid();
            s.write(vec![put(crate::collections::DIRECTOR, KEY, "", &made)])?;
            Ok(made)
        })
        .await
}

/// A version 4 UUID in its text form.
fn random_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

#[cfg(test)]
mod tests {

    use super::*;

    #[tokio::test]
    async fn the_uuid_is_a_version_4_uuid_made_once() {
        let store = AsyncStore::new(fleet_store::testing::store());
        let first = director_uuid(&store).await.unwrap();
        let parts: Vec<&str> = first.split('-').collect();
        assert_eq!(
            parts.iter().map(|p| p.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12],
            "{first}"
        );
        assert!(first.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
        assert!(parts[2].starts_with('4'), "{first}");
        assert!("89ab".contains(&parts[3][..1]), "{first}");
        assert_eq!(director_uuid(&store).await.unwrap(), first);
        assert_ne!(random_uuid(), random_uuid());
    }
}
