//! Host views and copies of tensors for the collectives (MPI works on
//! host buffers): raw slices of contiguous CPU tensors, f32 copies, and
//! buffers reduced in a CPU tensor's own storage.
//!
//! Units: f32 elements (or 16-bit words).

use tch::{Device, Kind, Tensor};

use crate::model::{terr, TResult};

/// View of a contiguous CPU tensor whose elements are `T` (f32, or the raw
/// 16-bit words of fp16 / bf16) as a slice.
///
/// # Safety
/// `t` must be a contiguous CPU tensor of elements of `T`'s size and
/// layout that outlives the slice and is not resized meanwhile.
pub(crate) unsafe fn raw<T>(t: &Tensor) -> &[T] {
    let n = t.numel();
    if n == 0 {
        return &[];
    }
    std::slice::from_raw_parts(t.data_ptr() as *const T, n)
}

/// Mutable view of a contiguous CPU tensor (see [`raw`]).
///
/// # Safety
/// As [`raw`], and no other view of `t` is used meanwhile.
#[allow(clippy::mut_from_ref)]
pub(crate) unsafe fn raw_mut<T>(t: &Tensor) -> &mut [T] {
    let n = t.numel();
    if n == 0 {
        return &mut [];
    }
    std::slice::from_raw_parts_mut(t.data_ptr() as *mut T, n)
}

/// [`raw`] of an f32 tensor.
///
/// # Safety
/// As [`raw`].
pub(crate) unsafe fn cpu_slice(t: &Tensor) -> &[f32] {
    raw(t)
}

/// [`raw_mut`] of an f32 tensor.
///
/// # Safety
/// As [`raw_mut`].
#[allow(clippy::mut_from_ref)]
pub(crate) unsafe fn cpu_slice_mut(t: &Tensor) -> &mut [f32] {
    raw_mut(t)
}

/// A contiguous f32 CPU copy of `t` to reduce in place: the tensor (when
/// `t` is already on the CPU, reduced in its own storage) or a host vector.
pub(crate) fn host_buffer(t: &Tensor) -> TResult<(Option<Tensor>, Vec<f32>)> {
    if t.device() == Device::Cpu {
        Ok((Some(t.f_contiguous().map_err(terr)?), Vec::new()))
    } else {
        Ok((None, host_vec(t)?))
    }
}

/// The mutable elements of a [`host_buffer`].
pub(crate) fn host_mut<'b>(buf: &'b Option<Tensor>, host: &'b mut Vec<f32>) -> &'b mut [f32] {
    match buf {
        // SAFETY: a contiguous f32 CPU tensor owned by the caller, with no
        // other view used while the slice lives.
        Some(t) => unsafe { cpu_slice_mut(t) },
        None => host.as_mut_slice(),
    }
}

/// The reduced [`host_buffer`] as a tensor on `dev`.
pub(crate) fn buffer_tensor(buf: Option<Tensor>, host: Vec<f32>, dev: Device) -> TResult<Tensor> {
    match buf {
        Some(t) => Ok(t),
        None => Tensor::from_slice(&host).f_to_device(dev).map_err(terr),
    }
}

/// A contiguous f32 host copy of `x`.
pub(crate) fn host_vec(x: &Tensor) -> TResult<Vec<f32>> {
    let c = x
        .f_to_device(Device::Cpu)
        .and_then(|t| t.f_to_kind(Kind::Float))
        .and_then(|t| t.f_contiguous())
        .and_then(|t| t.f_view([-1]))
        .map_err(terr)?;
    Vec::<f32>::try_from(&c).map_err(terr)
}

/// A tensor of `shape` on `device` from host values.
pub(crate) fn from_host(v: &[f32], shape: &[i64], device: Device) -> TResult<Tensor> {
    Tensor::from_slice(v)
        .f_view(shape)
        .and_then(|t| t.f_to_device(device))
        .map_err(terr)
}
