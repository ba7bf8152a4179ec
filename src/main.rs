fn main() {
    std::process::exit(almanac::cli::main());
}
