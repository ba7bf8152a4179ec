fn main() {
    fixed_mmap_threshold();
    almanac::platform::ignore_file_size_signal();
    std::process::exit(almanac::cli::main());
}

/// glibc serves an allocation of 128 KiB or more with its own mapping, returned to the system when freed,
/// but raises that threshold to the size of each such block freed (up to 32 MiB). A sweep frees large
/// vectors early (the walk's lists, the discovery cache), so its later ones came from the heap, where
/// freed memory stays resident: fixing the threshold cut a 100k-transcript sweep's peak RSS by 14 MiB
/// (docs/performance.md). A buffer above it is a fresh mapping each time, with its page faults: the
/// buffers made per transcript stay under it (`ledger::cursor`). Other allocators are left alone.
fn fixed_mmap_threshold() {
    almanac::platform::fix_mmap_threshold(128 * 1024);
}
