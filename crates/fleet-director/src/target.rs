//! Which instances an operation acts on, as `bosh recreate|stop|start|restart` name them:
//! the whole deployment, one instance group, or one instance by index or id.

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Target {
    /// `None` is every group (the CLI's `*`).
    pub group: Option<String>,
    /// An index (`0`) or an instance id; `None` is every instance of the group.
    pub instance: Option<String>,
    /// Only these instances, by id: what a cloud check's resolutions act on.
    pub only: Option<std::collections::BTreeSet<String>>,
}

impl Target {
    pub fn all() -> Self {
        Target::default()
    }

    pub fn group(group: impl Into<String>) -> Self {
        Target {
            group: Some(group.into()),
            instance: None,
            only: None,
        }
    }

    pub fn instance(group: impl Into<String>, instance: impl Into<String>) -> Self {
        Target {
            group: Some(group.into()),
            instance: Some(instance.into()),
            only: None,
        }
    }

    pub fn matches(&self, group: &str, index: u32, id: &str) -> bool {
        self.group.as_deref().is_none_or(|g| g == group)
            && self
                .instance
                .as_deref()
                .is_none_or(|i| i == id || i.parse::<u32>().is_ok_and(|n| n == index))
            && self.only.as_ref().is_none_or(|ids| ids.contains(id))
    }

    /// `web/0`, `web` or `*`, for messages.
    pub fn describe(&self) -> String {
        if let Some(ids) = &self.only {
            return format!("{} instances", ids.len());
        }
        match (&self.group, &self.instance) {
            (None, _) => "*".to_string(),
            (Some(g), None) => g.clone(),
            (Some(g), Some(i)) => format!("{g}/{i}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_instance_is_named_by_index_or_by_id_inside_its_group() {
        assert!(Target::all().matches("web", 3, "abc"));
        assert!(Target::group("web").matches("web", 3, "abc"));
        assert!(!Target::group("db").matches("web", 3, "abc"));
        assert!(Target::instance("web", "3").matches("web", 3, "abc"));
        assert!(Target::instance("web", "abc").matches("web", 3, "abc"));
        assert!(!Target::instance("web", "2").matches("web", 3, "abc"));
        assert!(!Target::instance("db", "3").matches("web", 3, "abc"));
    }
}
