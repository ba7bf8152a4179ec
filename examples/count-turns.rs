//! Times a count-only turn read (what a dry run's count does) of each file given, for profiling the
//! turn reader: cargo run --release --example count-turns -- APP FILE...
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let app = args.next().expect("usage: count-turns APP FILE...");
    let cat = almanac::rules::load(&[]).expect("built-in rules load");
    let rule = cat.get(&app).expect("a known app");
    let turns = rule.turns.as_ref().expect("turn rules");
    let opts = almanac::turns::Options {
        keep: almanac::turns::Keep::Counts,
        ..Default::default()
    };
    for f in args {
        let t = Instant::now();
        let r = std::fs::File::open(&f).expect("readable");
        let out = almanac::turns::extract(rule, turns, r, 1, 0, &opts).expect("read");
        println!(
            "{f}: {:.3} s, {} turns, {} user, {} bytes",
            t.elapsed().as_secs_f64(),
            out.total_turns,
            out.user_turns,
            out.bytes_read
        );
    }
}
