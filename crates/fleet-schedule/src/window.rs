//! A daily maintenance window such as `01:00-05:00` in a time zone, optionally on some
//! weekdays only. A window may cross midnight (`22:00-04:00`); its weekday is the day it
//! opens on. Pure: the caller says what time it is.

use std::collections::BTreeSet;
use std::fmt;

use jiff::civil::{Date, Time, Weekday};
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WindowError {
    #[error("`{0}` is not a window like `01:00-05:00`")]
    Shape(String),
    #[error("`{0}` is not a time of day like `01:00`")]
    Time(String),
    #[error("the window opens and closes at the same time: `{0}`")]
    Empty(String),
    #[error("`{0}` is not a time zone known here (like `UTC` or `Europe/Berlin`)")]
    Zone(String),
    #[error("`{0}` is not a weekday (`mon` .. `sun`)")]
    Weekday(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    opens: Time,
    closes: Time,
    zone: TimeZone,
    zone_name: String,
    /// `None`: every day.
    weekdays: Option<BTreeSet<u8>>,
}

/// Where a moment stands against the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WindowState {
    Open { closes_at: Zoned },
    Closed { opens_at: Zoned },
}

fn time(text: &str) -> Result<Time, WindowError> {
    let bad = || WindowError::Time(text.to_string());
    let (h, m) = text.trim().split_once(':').ok_or_else(bad)?;
    let (h, m): (i8, i8) = (h.parse().map_err(|_| bad())?, m.parse().map_err(|_| bad())?);
    if h.to_string().len() > 2 || m.to_string().len() > 2 || m.is_negative() {
        return Err(bad());
    }
    Time::new(h, m, 0, 0).map_err(|_| bad())
}

fn weekday(text: &str) -> Result<Weekday, WindowError> {
    let day = match text.trim().to_ascii_lowercase().as_str() {
        "mon" | "monday" => Weekday::Monday,
        "tue" | "tuesday" => Weekday::Tuesday,
        "wed" | "wednesday" => Weekday::Wednesday,
        "thu" | "thursday" => Weekday::Thursday,
        "fri" | "friday" => Weekday::Friday,
        "sat" | "saturday" => Weekday::Saturday,
        "sun" | "sunday" => Weekday::Sunday,
        _ => return Err(WindowError::Weekday(text.to_string())),
    };
    Ok(day)
}

impl Window {
    /// # Errors
    /// A window, time zone or weekday that does not read; a window of no length.
    pub fn parse(window: &str, zone: &str, weekdays: &[String]) -> Result<Window, WindowError> {
        let (opens, closes) = window
            .split_once('-')
            .ok_or_else(|| WindowError::Shape(window.to_string()))?;
        let (opens, closes) = (time(opens)?, time(closes)?);
        if opens == closes {
            return Err(WindowError::Empty(window.to_string()));
        }
        let tz = TimeZone::get(zone).map_err(|_| WindowError::Zone(zone.to_string()))?;
        let weekdays = if weekdays.is_empty() {
            None
        } else {
            Some(
                weekdays
                    .iter()
                    .map(|d| weekday(d).map(|d| d.to_monday_one_offset() as u8))
                    .collect::<Result<_, _>>()?,
            )
        };
        Ok(Window {
            opens,
            closes,
            zone: tz,
            zone_name: zone.to_string(),
            weekdays,
        })
    }

    fn opens_on(&self, date: Date) -> bool {
        self.weekdays
            .as_ref()
            .is_none_or(|days| days.contains(&(date.weekday().to_monday_one_offset() as u8)))
    }

    /// The window opening on `date`: when it opens and when it closes.
    fn on(&self, date: Date) -> Option<(Zoned, Zoned)> {
        let close_date = if self.closes > self.opens {
            date
        } else {
            date.tomorrow().ok()?
        };
        let opens = date
            .to_datetime(self.opens)
            .to_zoned(self.zone.clone())
            .ok()?;
        let closes = close_date
            .to_datetime(self.closes)
            .to_zoned(self.zone.clone())
            .ok()?;
        Some((opens, closes))
    }

    /// Whether the window is open at `now`, and when it next closes or opens.
    pub fn state_at(&self, now: Timestamp) -> WindowState {
        let today = now.to_zoned(self.zone.clone()).date();
        let mut next_open: Option<Zoned> = None;
        // Yesterday's window may still be open after midnight; a week ahead always holds
        // an opening day.
        let mut date = today.yesterday().unwrap_or(today);
        for _ in 0..10 {
            if self.opens_on(date)
                && let Some((opens, closes)) = self.on(date)
            {
                if opens.timestamp() <= now && now < closes.timestamp() {
                    return WindowState::Open { closes_at: closes };
                }
                if opens.timestamp() > now && next_open.is_none() {
                    next_open = Some(opens);
                }
            }
            match date.tomorrow() {
                Ok(next) => date = next,
                Err(_) => break,
            }
        }
        WindowState::Closed {
            opens_at: next_open.unwrap_or_else(|| now.to_zoned(self.zone.clone())),
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}-{} {}",
            self.opens.strftime("%H:%M"),
            self.closes.strftime("%H:%M"),
            self.zone_name
        )?;
        if let Some(days) = &self.weekdays {
            let names = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"];
            let shown: Vec<&str> = days.iter().map(|d| names[(*d - 1) as usize]).collect();
            write!(f, " on {}", shown.join(", "))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn open_until(window: &Window, now: &str) -> Option<String> {
        match window.state_at(at(now)) {
            WindowState::Open { closes_at } => Some(closes_at.timestamp().to_string()),
            WindowState::Closed { .. } => None,
        }
    }

    #[test]
    fn a_night_window_in_a_zone_is_open_inside_and_names_its_next_opening_outside() {
        let w = Window::parse("01:00-05:00", "Europe/Berlin", &[]).unwrap();
        // 01:30 in Berlin (CET, UTC+1) is 00:30 UTC.
        assert_eq!(
            open_until(&w, "2026-11-24T00:30:00Z").as_deref(),
            Some("2026-11-24T04:00:00Z")
        );
        match w.state_at(at("2026-11-24T12:00:00Z")) {
            WindowState::Closed { opens_at } => {
                assert_eq!(opens_at.timestamp(), at("2026-11-25T00:00:00Z"))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            open_until(&w, "2026-11-24T04:00:00Z"),
            None,
            "closed at its end"
        );
        assert_eq!(w.to_string(), "01:00-05:00 Europe/Berlin");
    }

    #[test]
    fn a_window_across_midnight_belongs_to_the_day_it_opens_on() {
        let w = Window::parse("22:00-04:00", "UTC", &["fri".into()]).unwrap();
        // Friday 2026-11-27 22:00 to Saturday 04:00.
        assert_eq!(
            open_until(&w, "2026-11-28T03:00:00Z").as_deref(),
            Some("2026-11-28T04:00:00Z")
        );
        assert_eq!(
            open_until(&w, "2026-11-27T03:00:00Z"),
            None,
            "Thursday's night"
        );
        match w.state_at(at("2026-11-28T05:00:00Z")) {
            WindowState::Closed { opens_at } => {
                assert_eq!(opens_at.timestamp(), at("2026-12-04T22:00:00Z"))
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(w.to_string(), "22:00-04:00 UTC on fri");
    }

    #[test]
    fn bad_windows_zones_and_days_are_named() {
        for (window, zone, days, wanted) in [
            ("1-5", "UTC", vec![], "`1` is not a time of day"),
            ("01:00", "UTC", vec![], "is not a window"),
            ("25:00-05:00", "UTC", vec![], "`25:00`"),
            ("01:00-01:00", "UTC", vec![], "same time"),
            ("01:00-05:00", "Mars/Olympus", vec![], "`Mars/Olympus`"),
            (
                "01:00-05:00",
                "UTC",
                vec!["someday".to_string()],
                "`someday`",
            ),
        ] {
            let e = Window::parse(window, zone, &days).unwrap_err().to_string();
            assert!(e.contains(wanted), "{window} {zone}: {e}");
        }
    }
}
