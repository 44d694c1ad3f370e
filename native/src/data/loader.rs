//! Datasets and the loader that batches them: a seeded shuffle per epoch, an optional shard per
//! process (data-parallel training), and batches prepared on a background thread while the
//! current one trains.
//!
//! A [`Dataset`] turns a list of example indices into one host-side batch (plain vectors, no
//! device tensors, so it can be built on another thread); the training step uploads it. The
//! order of each epoch is a pure function of the loader's seed and the epoch, so a resumed run
//! that skips the batches already done sees exactly the batches an uninterrupted run sees.
//!
//! ```
//! use kiln::data::loader::{DataLoader, Dataset};
//! struct Squares;
//! impl Dataset for Squares {
//!     type Batch = Vec<(f32, f32)>;
//!     fn len(&self) -> usize { 10 }
//!     fn batch(&self, idx: &[usize], _epoch: u64) -> kiln::core::Result<Self::Batch> {
//!         Ok(idx.iter().map(|&i| (i as f32, (i * i) as f32)).collect())
//!     }
//! }
//! let loader = DataLoader::new(Squares, 4).shuffle(7);
//! let batches: Vec<_> = loader.epoch(0, 0).collect::<Result<_, _>>()?;
//! assert_eq!(batches.len(), 3); // 4 + 4 + 2
//! let mut seen: Vec<f32> = batches.iter().flatten().map(|p| p.0).collect();
//! seen.sort_by(f32::total_cmp);
//! assert_eq!(seen, (0..10).map(|i| i as f32).collect::<Vec<_>>());
//! # Ok::<(), kiln::core::Error>(())
//! ```

use crate::core::{Error, Result};
use crate::data::augment::SplitMix64;
use std::sync::Arc;
use std::sync::mpsc;

/// Examples addressed by index, batched on the host.
pub trait Dataset: Send + Sync + 'static {
    /// One batch as host data (sent from the loader's thread to the training loop).
    type Batch: Send + 'static;
    /// Number of examples.
    fn len(&self) -> usize;
    /// `true` when there is no example.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The examples `indices`, in that order, as one batch. `epoch` lets augmentation draw
    /// differently each epoch; it must be the only source of randomness besides the indices.
    fn batch(&self, indices: &[usize], epoch: u64) -> Result<Self::Batch>;
}

/// Batches of a [`Dataset`]: in order or shuffled per epoch, optionally one shard of several.
#[derive(Debug)]
pub struct DataLoader<D> {
    dataset: Arc<D>,
    batch_size: usize,
    shuffle: Option<u64>,
    drop_last: bool,
    shard: (usize, usize),
    prefetch: usize,
}

impl<D> Clone for DataLoader<D> {
    fn clone(&self) -> Self {
        DataLoader {
            dataset: self.dataset.clone(),
            ..*self
        }
    }
}

impl<D: Dataset> DataLoader<D> {
    /// Batches of `batch_size` examples in index order, the last one possibly smaller.
    /// A `batch_size` of 0 is reported by [`DataLoader::check`] (and by every epoch).
    pub fn new(dataset: impl Into<Arc<D>>, batch_size: usize) -> Self {
        DataLoader {
            dataset: dataset.into(),
            batch_size,
            shuffle: None,
            drop_last: false,
            shard: (0, 1),
            prefetch: 2,
        }
    }
    /// Shuffles each epoch with a permutation seeded by `seed` and the epoch.
    pub fn shuffle(mut self, seed: u64) -> Self {
        self.shuffle = Some(seed);
        self
    }
    /// Leaves out a last batch smaller than the batch size.
    pub fn drop_last(mut self, on: bool) -> Self {
        self.drop_last = on;
        self
    }
    /// Keeps shard `rank` of `world`: each epoch's order is cut into `world` equal parts
    /// (dropping at most `world - 1` examples so they are equal), and this loader batches
    /// part `rank`. With the same seed, the shards of one epoch are disjoint and together
    /// hold every example once.
    pub fn shard(mut self, rank: usize, world: usize) -> Self {
        self.shard = (rank, world);
        self
    }
    /// Batches prepared ahead of the one in use (0: prepared on the calling thread, in turn).
    pub fn prefetch(mut self, batches: usize) -> Self {
        self.prefetch = batches;
        self
    }
    /// The dataset.
    pub fn dataset(&self) -> &D {
        &self.dataset
    }
    /// Examples per batch.
    pub fn batch_size(&self) -> usize {
        self.batch_size
    }

    /// An error naming the setting when the loader cannot produce a batch.
    pub fn check(&self) -> Result<()> {
        let (rank, world) = self.shard;
        if self.batch_size == 0 {
            return Err(Error::invalid(
                "data loader",
                "expected a batch size of at least 1, found 0",
            ));
        }
        if world == 0 || rank >= world {
            return Err(Error::invalid(
                "data loader",
                format!("expected shard rank < world, found rank {rank} of world {world}"),
            ));
        }
        if self.batches() == 0 {
            return Err(Error::invalid(
                "data loader",
                format!(
                    "expected at least one batch, found {} examples for batches of {}{}",
                    self.shard_len(),
                    self.batch_size,
                    if world > 1 { " in this shard" } else { "" }
                ),
            ));
        }
        Ok(())
    }

    /// Examples in this loader's shard.
    fn shard_len(&self) -> usize {
        self.dataset.len() / self.shard.1.max(1)
    }

    /// Batches per epoch.
    pub fn batches(&self) -> usize {
        let n = self.shard_len();
        let b = self.batch_size.max(1);
        if self.drop_last { n / b } else { n.div_ceil(b) }
    }

    /// The indices of every batch of `epoch`, in order.
    pub fn plan(&self, epoch: u64) -> Vec<Vec<usize>> {
        let n = self.dataset.len();
        let mut order: Vec<usize> = match self.shuffle {
            Some(seed) => permutation(n, seed, epoch),
            None => (0..n).collect(),
        };
        let (rank, per) = (self.shard.0, self.shard_len());
        order = order.drain(..).skip(rank * per).take(per).collect();
        order
            .chunks(self.batch_size.max(1))
            .take(self.batches())
            .map(<[usize]>::to_vec)
            .collect()
    }

    /// The batches of `epoch` from batch number `first` on (to resume mid-epoch), each built on
    /// a background thread while the previous one is used. Dropping the iterator stops the
    /// thread.
    pub fn epoch(&self, epoch: u64, first: usize) -> Batches<D::Batch> {
        if let Err(e) = self.check() {
            return Batches::Failed(Some(e));
        }
        let todo: Vec<Vec<usize>> = self.plan(epoch).into_iter().skip(first).collect();
        let dataset = self.dataset.clone();
        if self.prefetch == 0 {
            let mut todo = todo.into_iter();
            return Batches::Inline(Box::new(move || {
                todo.next().map(|idx| dataset.batch(&idx, epoch))
            }));
        }
        let (tx, rx) = mpsc::sync_channel(self.prefetch);
        // The thread ends at the end of the epoch or when the receiver is dropped (its send
        // fails); it never outlives a batch's work.
        std::thread::spawn(move || {
            for idx in todo {
                if tx.send(dataset.batch(&idx, epoch)).is_err() {
                    break;
                }
            }
        });
        Batches::Threaded(rx)
    }
}

/// The batches of one epoch, from [`DataLoader::epoch`].
pub enum Batches<B> {
    /// Built on a background thread.
    Threaded(mpsc::Receiver<Result<B>>),
    /// Built on the calling thread (`prefetch(0)`).
    Inline(Box<dyn FnMut() -> Option<Result<B>>>),
    /// The loader's settings cannot produce batches: yields this error once.
    Failed(Option<Error>),
}

impl<B> Iterator for Batches<B> {
    type Item = Result<B>;
    fn next(&mut self) -> Option<Result<B>> {
        match self {
            Batches::Threaded(rx) => rx.recv().ok(),
            Batches::Inline(next) => next(),
            Batches::Failed(e) => e.take().map(Err),
        }
    }
}

/// A seeded permutation of `0..n` (Fisher-Yates over splitmix64), one per epoch.
pub fn permutation(n: usize, seed: u64, epoch: u64) -> Vec<usize> {
    let mut rng = SplitMix64::new(seed ^ epoch.wrapping_mul(0xD1B5_4A32_D192_ED03));
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        let j = (rng.next_u64() % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Example `i` is `i`; a batch records its epoch so tests can see it passed through.
    struct Numbers(usize);
    impl Dataset for Numbers {
        type Batch = (u64, Vec<usize>);
        fn len(&self) -> usize {
            self.0
        }
        fn batch(&self, idx: &[usize], epoch: u64) -> Result<Self::Batch> {
            if let Some(&bad) = idx.iter().find(|&&i| i >= self.0) {
                return Err(Error::index("numbers", format!("{bad} of {}", self.0)));
            }
            Ok((epoch, idx.to_vec()))
        }
    }

    fn collect(l: &DataLoader<Numbers>, epoch: u64, first: usize) -> Vec<Vec<usize>> {
        l.epoch(epoch, first)
            .map(|b| {
                let (e, idx) = b.unwrap();
                assert_eq!(e, epoch);
                idx
            })
            .collect()
    }

    #[test]
    fn shuffled_epochs_differ_cover_everything_and_resume_midway() {
        let l = DataLoader::new(Numbers(23), 5).shuffle(3);
        let (a, b) = (collect(&l, 0, 0), collect(&l, 1, 0));
        assert_eq!(a.iter().map(Vec::len).collect::<Vec<_>>(), [5, 5, 5, 5, 3]);
        assert_ne!(a, b);
        for epoch in [&a, &b] {
            let mut all: Vec<usize> = epoch.concat();
            all.sort();
            assert_eq!(all, (0..23).collect::<Vec<_>>());
        }
        assert_eq!(collect(&l, 0, 2), a[2..]);
        assert_eq!(collect(&l.clone().prefetch(0), 1, 0), b);
        assert_eq!(l.clone().drop_last(true).batches(), 4);
        let plain = DataLoader::new(Numbers(7), 3);
        assert_eq!(
            collect(&plain, 4, 0),
            [vec![0, 1, 2], vec![3, 4, 5], vec![6]]
        );
    }

    #[test]
    fn shards_are_disjoint_equal_and_cover_the_epoch() {
        for (n, world) in [(23, 2), (30, 3), (7, 4)] {
            let mut seen = Vec::new();
            let per = n / world;
            for rank in 0..world {
                let l = DataLoader::new(Numbers(n), 2).shuffle(9).shard(rank, world);
                let idx = collect(&l, 5, 0).concat();
                assert_eq!(idx.len(), per, "rank {rank} of {world}");
                seen.extend(idx);
            }
            let whole = permutation(n, 9, 5);
            assert_eq!(seen, whole[..per * world], "n {n} world {world}");
        }
    }

    #[test]
    fn bad_settings_and_failing_batches_are_errors() {
        let msg = |l: DataLoader<Numbers>| l.epoch(0, 0).next().unwrap().unwrap_err().to_string();
        assert!(msg(DataLoader::new(Numbers(5), 0)).contains("batch size of at least 1"));
        assert!(msg(DataLoader::new(Numbers(5), 2).shard(2, 2)).contains("rank 2 of world 2"));
        assert!(msg(DataLoader::new(Numbers(3), 4).drop_last(true)).contains("3 examples"));
        // A dataset whose len() lies: the batch's own error comes through.
        struct Liar;
        impl Dataset for Liar {
            type Batch = ();
            fn len(&self) -> usize {
                4
            }
            fn batch(&self, idx: &[usize], _: u64) -> Result<()> {
                Numbers(2).batch(idx, 0).map(drop)
            }
        }
        let errs: Vec<String> = DataLoader::new(Liar, 2)
            .epoch(0, 0)
            .filter_map(|b| b.err().map(|e| e.to_string()))
            .collect();
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].contains("of 2"), "{errs:?}");
    }
}
