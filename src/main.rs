//! The binary's edge: parse arguments, run, and map the outcome to an exit code.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    cli::main()
}
