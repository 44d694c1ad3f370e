//! Data parallelism: rayon under `std`, a plain loop without it.

/// Calls `f(i, chunk)` for every `size`-element chunk of `data` (the last may be shorter), on
/// all cores under `std`.
pub(crate) fn chunks_mut<T: Send>(
    data: &mut [T],
    size: usize,
    f: impl Fn(usize, &mut [T]) + Send + Sync,
) {
    let size = size.max(1);
    #[cfg(feature = "std")]
    {
        use rayon::prelude::*;
        data.par_chunks_mut(size)
            .enumerate()
            .for_each(|(i, c)| f(i, c));
    }
    #[cfg(not(feature = "std"))]
    data.chunks_mut(size).enumerate().for_each(|(i, c)| f(i, c));
}
