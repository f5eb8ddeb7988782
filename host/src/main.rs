//! The `fireopal` command; everything lives in [`fireopal::cli`].

fn main() -> std::process::ExitCode {
    fireopal::cli::main(std::env::args().skip(1).collect())
}
