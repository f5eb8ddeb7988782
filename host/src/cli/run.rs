//! `fireopal run` (issue 6; not written yet).

use std::process::ExitCode;

pub(crate) fn main(_args: &[String]) -> ExitCode {
    eprintln!("fireopal run: the launcher is not built yet");
    ExitCode::from(2)
}
