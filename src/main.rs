fn main() -> std::process::ExitCode {
    std::process::ExitCode::from(redlock_run::main_exit_code())
}
