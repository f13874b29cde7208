//! The `schedule` block: the maintenance window a run keeps to.

use super::model::Schedule;
use super::read_value::{duration, set};
use crate::yaml::{Checker, Node, join};
use fleet_schedule::Window;

const KEYS: &[&str] = &["window", "time_zone", "weekdays", "grace_period"];

pub fn read_schedule(node: &Node, checker: &mut Checker) -> Option<Schedule> {
    let (mut window, mut zone, mut weekdays) = (None, "UTC".to_string(), Vec::new());
    let mut grace = Schedule::DEFAULT_GRACE;
    let mut window_at = node.at;
    for (key, value) in checker.map(node, "schedule", KEYS) {
        let path = join("schedule", &key.name);
        match key.name.as_str() {
            "window" => {
                window_at = value.at;
                window = checker.string(value, &path);
            }
            "time_zone" => set(&mut zone, checker.string(value, &path)),
            "weekdays" => {
                weekdays = checker
                    .list(value, &path)
                    .iter()
                    .filter_map(|d| checker.string(d, &path))
                    .collect()
            }
            _ => set(&mut grace, duration(checker, value, &path)),
        }
    }
    let Some(text) = window else {
        if node.get("time_zone").is_some() || node.get("weekdays").is_some() {
            checker.report("schedule.window", node.at, "is required with a schedule");
        }
        return None;
    };
    match Window::parse(&text, &zone, &weekdays) {
        Ok(parsed) => Some(Schedule {
            window: parsed,
            text,
            time_zone: zone,
            weekdays,
            grace_period: grace,
        }),
        Err(e) => {
            let key = match e {
                fleet_schedule::WindowError::Zone(_) => "schedule.time_zone",
                fleet_schedule::WindowError::Weekday(_) => "schedule.weekdays",
                _ => "schedule.window",
            };
            checker.report(key, window_at, e.to_string());
            None
        }
    }
}
