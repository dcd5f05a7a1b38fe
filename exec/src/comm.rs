//! Collectives with unequal pieces on flat f32 host buffers: all-gather
//! (`MPI_Allgatherv`), reduce-scatter with a sum (`MPI_Reduce_scatter`) and
//! all-reduce with a sum (`MPI_Allreduce`, in place), sub-groups
//! (`MPI_Comm_split`: hybrid sharding's shard and replica groups), plus
//! the few small helpers the trainer needs (barrier, gather of f64 records
//! to rank 0, abort).
//!
//! Units: element counts (f32). [`SelfComm`] is the one-rank implementation
//! (always available); `MpiComm` (feature `mpi`) runs over `MPI_COMM_WORLD`.

use crate::error::ExecError;

/// Collectives of a group of ranks. Piece `i` of a split buffer belongs to
/// rank `i`; `counts` has one entry per rank and sums to the full length.
pub trait Collectives {
    /// This rank (0-based).
    fn rank(&self) -> usize;
    /// Number of ranks.
    fn size(&self) -> usize;
    /// All-gather: `local` (length `counts[rank]`) from every rank into
    /// `full` (length `sum(counts)`), pieces in rank order.
    fn all_gather_v(
        &self,
        local: &[f32],
        counts: &[usize],
        full: &mut [f32],
    ) -> Result<(), ExecError>;
    /// [`Collectives::all_gather_v`] of 16-bit words (fp16 / bf16
    /// parameters: what mixed-precision all-gathers carry).
    fn all_gather_v16(
        &self,
        local: &[u16],
        counts: &[usize],
        full: &mut [u16],
    ) -> Result<(), ExecError>;
    /// Reduce-scatter with a sum: `full` (length `sum(counts)`) summed
    /// elementwise over all ranks, piece `rank` of the sum into `local`
    /// (length `counts[rank]`).
    fn reduce_scatter_v(
        &self,
        full: &[f32],
        counts: &[usize],
        local: &mut [f32],
    ) -> Result<(), ExecError>;
    /// All-reduce with a sum, in place: `buf` (same length on every rank)
    /// becomes the elementwise sum over all ranks.
    fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<(), ExecError>;
    /// All-reduce with a maximum, in place (the vocabulary-parallel
    /// cross-entropy's row maxima).
    fn all_reduce_max(&self, buf: &mut [f32]) -> Result<(), ExecError>;
    /// Point-to-point send of `buf` to rank `dest` with `tag`, without
    /// waiting for the receiver (`MPI_Isend`; the buffer is kept until
    /// [`Collectives::flush_sends`]): a pipeline stage sends on while its
    /// neighbour may be sending to it.
    fn send(&self, dest: usize, tag: u16, buf: Vec<f32>) -> Result<(), ExecError>;
    /// Blocking receive into `buf` (its length is the message's) from rank
    /// `src` with `tag`.
    fn recv(&self, src: usize, tag: u16, buf: &mut [f32]) -> Result<(), ExecError>;
    /// Waits until every [`Collectives::send`] of this rank has completed.
    fn flush_sends(&self) -> Result<(), ExecError>;
    /// The sub-group of the ranks that pass the same `color` (every rank
    /// calls it), ranks ordered as in this group.
    fn split(&self, color: usize) -> Result<Self, ExecError>
    where
        Self: Sized;
    /// Blocks until every rank has called it.
    fn barrier(&self);
    /// Gathers `values` (same length on every rank) to rank 0: `Some` of
    /// the concatenation in rank order on rank 0, `None` elsewhere.
    fn gather_f64(&self, values: &[f64]) -> Option<Vec<f64>>;
    /// Ends the whole job with `code` (never returns).
    fn abort(&self, code: i32) -> !;
}

fn check_counts(
    counts: &[usize],
    size: usize,
    rank: usize,
    local: usize,
    full: usize,
) -> Result<(), ExecError> {
    if counts.len() != size {
        return Err(ExecError::Comm(format!(
            "{} piece counts for {size} ranks",
            counts.len()
        )));
    }
    if counts[rank] != local || counts.iter().sum::<usize>() != full {
        return Err(ExecError::Comm(format!(
            "buffer lengths {local}/{full} do not match piece counts {counts:?} on rank {rank}"
        )));
    }
    Ok(())
}

/// One rank's collective: a checked copy.
fn self_copy<T: Copy>(from: &[T], counts: &[usize], to: &mut [T]) -> Result<(), ExecError> {
    check_counts(counts, 1, 0, from.len(), to.len())?;
    to.copy_from_slice(from);
    Ok(())
}

/// The one-rank group: collectives are copies.
#[derive(Debug, Default, Clone, Copy)]
pub struct SelfComm;

impl Collectives for SelfComm {
    fn rank(&self) -> usize {
        0
    }
    fn size(&self) -> usize {
        1
    }
    fn all_gather_v(
        &self,
        local: &[f32],
        counts: &[usize],
        full: &mut [f32],
    ) -> Result<(), ExecError> {
        self_copy(local, counts, full)
    }
    fn all_gather_v16(
        &self,
        local: &[u16],
        counts: &[usize],
        full: &mut [u16],
    ) -> Result<(), ExecError> {
        self_copy(local, counts, full)
    }
    fn reduce_scatter_v(
        &self,
        full: &[f32],
        counts: &[usize],
        local: &mut [f32],
    ) -> Result<(), ExecError> {
        check_counts(counts, 1, 0, local.len(), full.len())?;
        local.copy_from_slice(full);
        Ok(())
    }
    fn all_reduce_sum(&self, _buf: &mut [f32]) -> Result<(), ExecError> {
        Ok(())
    }
    fn all_reduce_max(&self, _buf: &mut [f32]) -> Result<(), ExecError> {
        Ok(())
    }
    fn send(&self, dest: usize, _tag: u16, _buf: Vec<f32>) -> Result<(), ExecError> {
        Err(ExecError::Comm(format!(
            "a one-rank group has no rank {dest} to send to"
        )))
    }
    fn recv(&self, src: usize, _tag: u16, _buf: &mut [f32]) -> Result<(), ExecError> {
        Err(ExecError::Comm(format!(
            "a one-rank group has no rank {src} to receive from"
        )))
    }
    fn flush_sends(&self) -> Result<(), ExecError> {
        Ok(())
    }
    fn split(&self, _color: usize) -> Result<Self, ExecError> {
        Ok(SelfComm)
    }
    fn barrier(&self) {}
    fn gather_f64(&self, values: &[f64]) -> Option<Vec<f64>> {
        Some(values.to_vec())
    }
    fn abort(&self, code: i32) -> ! {
        std::process::exit(code)
    }
}

#[cfg(feature = "mpi")]
pub use mpi_impl::MpiComm;

#[cfg(feature = "mpi")]
mod mpi_impl {
    use super::{check_counts, Collectives};
    use crate::error::ExecError;
    use mpi::collective::SystemOperation;
    use mpi::collective::{CommunicatorCollectives, Root};
    use mpi::datatype::{Equivalence, PartitionMut};
    use mpi::raw::AsRaw;
    use mpi::topology::Color;
    use mpi::topology::{Communicator, SimpleCommunicator};

    /// Collectives over `MPI_COMM_WORLD` (OpenMPI through rsmpi). Create it
    /// after [`MpiComm::init`]; the returned universe must outlive it.
    pub struct MpiComm {
        world: SimpleCommunicator,
        /// Sends in flight: their requests and the buffers MPI reads.
        pending: std::cell::RefCell<Vec<(mpi::ffi::MPI_Request, Vec<f32>)>>,
    }

    impl std::fmt::Debug for MpiComm {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("MpiComm")
                .field("rank", &self.rank())
                .field("size", &self.size())
                .finish()
        }
    }

    fn to_i32(counts: &[usize]) -> Result<Vec<i32>, ExecError> {
        counts
            .iter()
            .map(|&c| {
                i32::try_from(c).map_err(|_| {
                    ExecError::Comm(format!("piece of {c} elements exceeds MPI's int count"))
                })
            })
            .collect()
    }

    impl MpiComm {
        /// Initialises MPI (once per process) and returns the universe
        /// (finalises MPI when dropped) and the world communicator, or
        /// `None` when MPI was already initialised.
        pub fn init() -> Option<(mpi::environment::Universe, MpiComm)> {
            let universe = mpi::initialize()?;
            let world = universe.world();
            Some((universe, MpiComm::over(world)))
        }

        /// Installs a panic hook that prints the panic and then calls
        /// `MPI_Abort(MPI_COMM_WORLD, 101)`, so a panicking rank ends the
        /// whole job instead of leaving the others blocked in a collective.
        pub fn abort_on_panic() {
            let previous = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                previous(info);
                eprintln!("cephalo-exec: rank panicked; aborting the MPI job");
                // SAFETY: MPI_Abort may be called at any time after MPI_Init.
                unsafe {
                    mpi::ffi::MPI_Abort(mpi::ffi::RSMPI_COMM_WORLD, 101);
                }
                std::process::abort();
            }));
        }
    }

    impl Drop for MpiComm {
        fn drop(&mut self) {
            // MPI may still read a pending send's buffer: wait first.
            let _ = self.flush_sends();
        }
    }

    impl MpiComm {
        fn over(world: SimpleCommunicator) -> MpiComm {
            MpiComm {
                world,
                pending: Default::default(),
            }
        }

        fn reduce_in_place(&self, buf: &mut [f32], op: SystemOperation) -> Result<(), ExecError> {
            if i32::try_from(buf.len()).is_err() {
                return Err(ExecError::Comm(format!(
                    "all-reduce of {} elements exceeds MPI's int count",
                    buf.len()
                )));
            }
            // rsmpi 0.8 exposes no MPI_IN_PLACE: reduce from a copy.
            let send = buf.to_vec();
            self.world.all_reduce_into(&send[..], buf, op);
            Ok(())
        }

        /// Rank 0's `bytes` on every rank (`MPI_Bcast` of the length, then
        /// of the bytes); the other ranks pass `None`.
        pub fn broadcast_bytes(&self, bytes: Option<Vec<u8>>) -> Vec<u8> {
            let root = self.world.process_at_rank(0);
            let mut buf = bytes.unwrap_or_default();
            let mut len = buf.len() as u64;
            root.broadcast_into(&mut len);
            buf.resize(len as usize, 0);
            root.broadcast_into(&mut buf[..]);
            buf
        }

        /// `MPI_Allgatherv` of pieces of any MPI element type.
        fn gather_varcount<T: mpi::datatype::Equivalence>(
            &self,
            local: &[T],
            counts: &[usize],
            full: &mut [T],
        ) -> Result<(), ExecError> {
            check_counts(counts, self.size(), self.rank(), local.len(), full.len())?;
            let c = to_i32(counts)?;
            let displs = to_i32(&crate::shard::offsets(counts))?;
            let mut part = PartitionMut::new(full, c, displs);
            self.world.all_gather_varcount_into(local, &mut part);
            Ok(())
        }
    }

    impl Collectives for MpiComm {
        fn rank(&self) -> usize {
            self.world.rank() as usize
        }
        fn size(&self) -> usize {
            self.world.size() as usize
        }
        fn all_gather_v(
            &self,
            local: &[f32],
            counts: &[usize],
            full: &mut [f32],
        ) -> Result<(), ExecError> {
            self.gather_varcount(local, counts, full)
        }
        fn all_gather_v16(
            &self,
            local: &[u16],
            counts: &[usize],
            full: &mut [u16],
        ) -> Result<(), ExecError> {
            self.gather_varcount(local, counts, full)
        }
        fn reduce_scatter_v(
            &self,
            full: &[f32],
            counts: &[usize],
            local: &mut [f32],
        ) -> Result<(), ExecError> {
            check_counts(counts, self.size(), self.rank(), local.len(), full.len())?;
            let c = to_i32(counts)?;
            // rsmpi 0.8 has no variable-count reduce-scatter wrapper.
            // SAFETY: buffers have the lengths MPI reads/writes (checked
            // above), the datatype is f32, and the communicator is live.
            let rc = unsafe {
                mpi::ffi::MPI_Reduce_scatter(
                    full.as_ptr() as *const std::ffi::c_void,
                    local.as_mut_ptr() as *mut std::ffi::c_void,
                    c.as_ptr(),
                    mpi::ffi::RSMPI_FLOAT,
                    mpi::ffi::RSMPI_SUM,
                    self.world.as_raw(),
                )
            };
            if rc != 0 {
                return Err(ExecError::Comm(format!("MPI_Reduce_scatter returned {rc}")));
            }
            Ok(())
        }
        fn all_reduce_sum(&self, buf: &mut [f32]) -> Result<(), ExecError> {
            self.reduce_in_place(buf, SystemOperation::sum())
        }
        fn all_reduce_max(&self, buf: &mut [f32]) -> Result<(), ExecError> {
            self.reduce_in_place(buf, SystemOperation::max())
        }
        fn send(&self, dest: usize, tag: u16, buf: Vec<f32>) -> Result<(), ExecError> {
            let n = i32::try_from(buf.len()).map_err(|_| {
                ExecError::Comm(format!(
                    "send of {} elements exceeds MPI's int count",
                    buf.len()
                ))
            })?;
            let mut req = std::mem::MaybeUninit::<mpi::ffi::MPI_Request>::uninit();
            // SAFETY: the buffer is moved into `pending` below and stays
            // there (its heap storage unmoved) until `flush_sends` waits
            // for the request; f32 elements, a live communicator.
            let rc = unsafe {
                mpi::ffi::MPI_Isend(
                    buf.as_ptr() as *const std::ffi::c_void,
                    n,
                    mpi::ffi::RSMPI_FLOAT,
                    dest as i32,
                    tag as i32,
                    self.world.as_raw(),
                    req.as_mut_ptr(),
                )
            };
            if rc != 0 {
                return Err(ExecError::Comm(format!(
                    "MPI_Isend to rank {dest} returned {rc}"
                )));
            }
            // SAFETY: MPI_Isend succeeded, so it wrote the request.
            let req = unsafe { req.assume_init() };
            self.pending.borrow_mut().push((req, buf));
            Ok(())
        }
        fn recv(&self, src: usize, tag: u16, buf: &mut [f32]) -> Result<(), ExecError> {
            use mpi::point_to_point::Source;
            let status = self
                .world
                .process_at_rank(src as i32)
                .receive_into_with_tag(buf, tag as i32);
            let got = status.count(f32::equivalent_datatype()) as usize;
            if got != buf.len() {
                return Err(ExecError::Comm(format!(
                    "expected {} elements from rank {src} (tag {tag}), got {got}",
                    buf.len()
                )));
            }
            Ok(())
        }
        fn flush_sends(&self) -> Result<(), ExecError> {
            let mut pending = std::mem::take(&mut *self.pending.borrow_mut());
            for (req, _buf) in pending.iter_mut() {
                // SAFETY: a request from MPI_Isend not yet waited for.
                let rc = unsafe { mpi::ffi::MPI_Wait(req, mpi::ffi::RSMPI_STATUS_IGNORE) };
                if rc != 0 {
                    return Err(ExecError::Comm(format!("MPI_Wait returned {rc}")));
                }
            }
            Ok(())
        }
        fn split(&self, color: usize) -> Result<Self, ExecError> {
            let c = i32::try_from(color)
                .map_err(|_| ExecError::Comm(format!("group color {color} too large")))?;
            let world = self
                .world
                .split_by_color(Color::with_value(c))
                .ok_or_else(|| ExecError::Comm(format!("MPI_Comm_split gave no group for {c}")))?;
            Ok(MpiComm::over(world))
        }
        fn barrier(&self) {
            self.world.barrier();
        }
        fn gather_f64(&self, values: &[f64]) -> Option<Vec<f64>> {
            let root = self.world.process_at_rank(0);
            if self.rank() == 0 {
                let mut out = vec![0.0f64; values.len() * self.size()];
                root.gather_into_root(values, &mut out[..]);
                Some(out)
            } else {
                root.gather_into(values);
                None
            }
        }
        fn abort(&self, code: i32) -> ! {
            self.world.abort(code)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn self_comm_copies_and_checks() {
        let c = SelfComm;
        let mut full = vec![0.0; 3];
        c.all_gather_v(&[1.0, 2.0, 3.0], &[3], &mut full).unwrap();
        assert_eq!(full, vec![1.0, 2.0, 3.0]);
        let mut local = vec![0.0; 3];
        c.reduce_scatter_v(&full, &[3], &mut local).unwrap();
        assert_eq!(local, full);
        c.all_reduce_sum(&mut local).unwrap();
        c.all_reduce_max(&mut local).unwrap();
        assert_eq!(local, full);
        assert!(c.send(1, 0, vec![1.0]).is_err());
        assert!(c.recv(1, 0, &mut local).is_err());
        c.flush_sends().unwrap();
        assert_eq!(c.split(3).unwrap().size(), 1);
        assert!(c.all_gather_v(&[1.0], &[2], &mut full).is_err());
    }
}
