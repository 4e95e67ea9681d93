//! Typed views of the loaded maps: rvs-sys's ([`rvs_sys::bpf`]) under the
//! names this crate's callers use. Keys and values are the `#[repr(C)]`
//! mirrors of `bpf/rvs.h`, turned into and out of bytes by `zerocopy`.

pub use rvs_sys::bpf::{
    Array as TypedArray, HashMap as TypedHash, PerCpuArray as TypedPerCpuArray, Pod as Plain,
};
