//! The binary's edge: parse arguments, run, and map the outcome to an exit code.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        Err(e) => {
            cli::error_line(&format!("error: {e}"));
            ExitCode::from(e.exit_code())
        }
    }
}
