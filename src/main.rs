fn main() {
    std::process::exit(convapi::cli::main());
}
