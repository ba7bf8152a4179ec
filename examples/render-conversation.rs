//! Times rendering the conversation a capture run reads (`turns::render`, the new part's entries) of
//! each file given, in one process, against reading it: cargo run --release --example
//! render-conversation -- APP FILE... Prints one line per file and the totals (scripts/bench_capture_input.py
//! reads them).
use std::io::Read;
use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let app = args.next().expect("usage: render-conversation APP FILE...");
    let cat = almanac::rules::load(&[]).expect("built-in rules load");
    let rule = cat.get(&app).expect("a known app");
    let turns = rule.turns.as_ref().expect("turn rules");
    let (mut read_s, mut render_s, mut bytes, mut out) = (0.0, 0.0, 0u64, 0u64);
    for f in args {
        // Best of three, the page cache warm: first every byte read, then the rendering.
        let (mut best_read, mut best_render) = (f64::MAX, f64::MAX);
        let mut written = 0;
        for _ in 0..3 {
            let t = Instant::now();
            let mut buf = Vec::new();
            std::fs::File::open(&f)
                .unwrap()
                .read_to_end(&mut buf)
                .unwrap();
            best_read = best_read.min(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let r = std::fs::File::open(&f).expect("readable");
            let cite = almanac::turns::render::Cite::Line;
            let (_, _, n) = almanac::turns::render::part(rule, turns, r, 1, cite, std::io::sink())
                .expect("read");
            best_render = best_render.min(t.elapsed().as_secs_f64());
            written = n;
            if buf.is_empty() {
                break;
            }
        }
        let size = std::fs::metadata(&f).unwrap().len();
        println!("{f}: {size} bytes read in {best_read:.4} s, rendered to {written} bytes in {best_render:.4} s");
        read_s += best_read;
        render_s += best_render;
        bytes += size;
        out += written;
    }
    println!(
        "total: {bytes} bytes read in {read_s:.4} s, rendered to {out} bytes in {render_s:.4} s"
    );
}
