//! Spreading the reference's independent rows over the cores: the Hopper reference at
//! gpt-oss size (H = I = 2880) is billions of emulated wgmma steps, too slow on one core for
//! gpu-check's per-call time limit. Results come back in input order, so the reference's
//! output does not depend on the number of cores.

/// `f` over `items` on every core, results in `items`' order.
pub(crate) fn par_map<T: Sync, R: Send>(items: &[T], f: impl Fn(&T) -> R + Sync) -> Vec<R> {
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    if workers <= 1 || items.len() <= 1 {
        return items.iter().map(&f).collect();
    }
    let per = items.len().div_ceil(workers);
    let f = &f;
    std::thread::scope(|s| {
        let parts: Vec<_> = items
            .chunks(per)
            .map(|chunk| s.spawn(move || chunk.iter().map(f).collect::<Vec<R>>()))
            .collect();
        // A worker only panics if `f` does; pass that panic on unchanged.
        parts
            .into_iter()
            .flat_map(|p| p.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::par_map;

    #[test]
    fn results_keep_the_input_order_whatever_the_split() {
        for n in [0usize, 1, 2, 7, 1000, 1001] {
            let items: Vec<usize> = (0..n).collect();
            assert_eq!(
                par_map(&items, |&v| v * v),
                items.iter().map(|v| v * v).collect::<Vec<_>>()
            );
        }
    }
}
