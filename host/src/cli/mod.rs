//! The `fireopal` command line: one module per subcommand.

use std::process::ExitCode;

mod run;

const USAGE: &str = "usage: fireopal <command> [args]

commands:
  info [--json] [--param name=value]...   components, their status, and every parameter
  run -n N [--param k=v]... [--tag-output] -- prog args
                                          start a job of N local processes
";

/// Entry point of the `fireopal` binary; `args` excludes the program name.
pub fn main(args: Vec<String>) -> ExitCode {
    let Some((cmd, rest)) = args.split_first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    match cmd.as_str() {
        "run" => run::main(rest),
        "help" | "--help" | "-h" => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("fireopal: unknown command {other:?}\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
