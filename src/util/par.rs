//! The parallel helpers: map a slice over a few scoped threads (head reads and hashing of many files
//! pay for the second core; the walk itself does not), item by item or a chunk at a time in place.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

pub fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 4)
}

/// `f` applied to every item, results in input order. Items are handed out one at a time, so a few huge
/// files do not leave a thread idle.
pub fn map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let n = threads().min(items.len());
    if n <= 1 {
        return items.iter().map(f).collect();
    }
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<R>>> = Mutex::new((0..items.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..n {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= items.len() {
                    break;
                }
                let r = f(&items[i]);
                results.lock().expect("no thread panics while holding it")[i] = Some(r);
            });
        }
    });
    results
        .into_inner()
        .expect("threads joined")
        .into_iter()
        .map(|r| r.expect("every item mapped"))
        .collect()
}

/// `f` applied to each chunk of `chunk` items of `items`, in place (each chunk on one thread, chunks
/// handed out one at a time), results in chunk order: what a map would return per item is written into
/// the items themselves, so no second list of them is held.
pub fn map_chunks_mut<T: Send, R: Send>(
    items: &mut [T],
    chunk: usize,
    f: impl Fn(&mut [T]) -> R + Sync,
) -> Vec<R> {
    let chunks: Vec<&mut [T]> = items.chunks_mut(chunk.max(1)).collect();
    let n = threads().min(chunks.len());
    if n <= 1 {
        return chunks.into_iter().map(f).collect();
    }
    let work = Mutex::new(chunks.into_iter().enumerate());
    let results: Mutex<Vec<(usize, R)>> = Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..n {
            s.spawn(|| loop {
                let next = work
                    .lock()
                    .expect("no thread panics while holding it")
                    .next();
                let Some((i, c)) = next else { break };
                let r = f(c);
                results
                    .lock()
                    .expect("no thread panics while holding it")
                    .push((i, r));
            });
        }
    });
    let mut results = results.into_inner().expect("threads joined");
    results.sort_unstable_by_key(|(i, _)| *i);
    results.into_iter().map(|(_, r)| r).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn keeps_order() {
        let v: Vec<u64> = (0..1000).collect();
        assert_eq!(
            super::map(&v, |x| x * 2),
            v.iter().map(|x| x * 2).collect::<Vec<_>>()
        );
        assert!(super::map(&Vec::<u8>::new(), |x| *x).is_empty());
    }

    #[test]
    fn chunks_are_changed_in_place_and_their_results_kept_in_order() {
        let mut v: Vec<u64> = (0..1000).collect();
        let sums = super::map_chunks_mut(&mut v, 7, |c| {
            c.iter_mut().for_each(|x| *x *= 3);
            c.iter().sum::<u64>()
        });
        assert_eq!(v, (0..1000).map(|x| x * 3).collect::<Vec<_>>());
        let want: Vec<u64> = v.chunks(7).map(|c| c.iter().sum()).collect();
        assert_eq!(sums, want);
        assert!(super::map_chunks_mut(&mut Vec::<u8>::new(), 7, |c| c.len()).is_empty());
    }
}
