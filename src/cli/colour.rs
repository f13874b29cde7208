//! Colour only where a person reads it: a terminal, and not when `NO_COLOR` is set
//! (https://no-color.org). Cron and errand logs get plain text.

use std::io::IsTerminal;

pub fn on_stderr() -> bool {
    let refused = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    !refused && std::io::stderr().is_terminal()
}
