//! How a process of real execution allocates host memory: every rank and
//! the profiler keep freed memory for reuse, as PyTorch's caching allocator
//! does on CUDA.

/// Makes this process keep freed host memory for reuse: glibc's `malloc`
/// serves every block from its heap (no `mmap` per large block) and never
/// gives the heap's top back to the system (below 2 GiB).
///
/// Without it every large CPU tensor (a gathered unit, the logits, the
/// embedding's dense gradient, a gradient buffer: tens of MB for small
/// models) is a fresh `mmap` whose pages are faulted in and zeroed on first
/// touch, every iteration. That costs more than the arithmetic on small
/// models, and on a CPU it makes ranks of one host fight over memory
/// bandwidth. Keeping freed memory is what PyTorch's caching allocator does
/// on CUDA. The profiler and every rank call this first, so profiles and
/// runs see the same allocator. A no-op without the `torch` feature or
/// outside glibc.
pub fn keep_freed_memory() {
    #[cfg(all(feature = "torch", target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: mallopt only changes allocator parameters.
        unsafe {
            libc::mallopt(libc::M_MMAP_MAX, 0);
            libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
        }
    }
}
