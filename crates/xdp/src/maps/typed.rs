//! Typed views of the loaded maps over rvs-sys's byte-level map calls:
//! keys and values are the `#[repr(C)]` mirrors of `bpf/rvs.h`, turned into
//! and out of bytes by `zerocopy` (no hand-written `aya::Pod` impls). The methods
//! keep aya's names and errors (`get`, `set`, `insert`, `remove`, `iter`;
//! [`MapError`]) so the callers read as before.

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd};

use aya::maps::{Map, MapError};
use aya::sys::SyscallError;
use rvs_sys::bpf::BpfMap;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// A map key or value: plain bytes both ways (every `#[repr(C)]` mirror,
/// the integers and arrays of them).
pub trait Plain: FromBytes + IntoBytes + Immutable + KnownLayout + Copy {}
impl<T: FromBytes + IntoBytes + Immutable + KnownLayout + Copy> Plain for T {}

fn syscall(call: &'static str) -> impl Fn(std::io::Error) -> MapError {
    move |io_error| MapError::SyscallError(SyscallError { call, io_error })
}

/// The file descriptor of a loaded map of any type rvs uses.
fn fd_of(map: &Map) -> Result<BorrowedFd<'_>, MapError> {
    let data = match map {
        Map::Array(d)
        | Map::PerCpuArray(d)
        | Map::HashMap(d)
        | Map::LruHashMap(d)
        | Map::PerCpuHashMap(d)
        | Map::PerCpuLruHashMap(d)
        | Map::DevMap(d)
        | Map::DevMapHash(d)
        | Map::ProgramArray(d) => d,
        _ => {
            return Err(MapError::IoError(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "a map type without a typed view",
            )));
        }
    };
    Ok(data.fd().as_fd())
}

/// The map behind `map`, its key and (one CPU's) value sizes checked
/// against `K` and `V`, as aya's typed maps check them.
fn open<K, V>(map: &Map) -> Result<BpfMap<'_>, MapError> {
    let m = BpfMap::new(fd_of(map)?).map_err(syscall("bpf_obj_get_info_by_fd"))?;
    let (key, value) = (m.info().key_size as usize, m.info().value_size as usize);
    if key != size_of::<K>() {
        return Err(MapError::InvalidKeySize {
            size: size_of::<K>(),
            expected: key,
        });
    }
    if value != size_of::<V>() {
        return Err(MapError::InvalidValueSize {
            size: size_of::<V>(),
            expected: value,
        });
    }
    Ok(m)
}

fn read<V: Plain>(bytes: &[u8]) -> Result<V, MapError> {
    V::read_from_bytes(bytes).map_err(|_| {
        syscall("bpf_map_lookup_elem")(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "value size differs from the Rust type",
        ))
    })
}

/// An array map with values `V`.
#[derive(Debug)]
pub struct TypedArray<'a, V> {
    map: BpfMap<'a>,
    _v: PhantomData<V>,
}

impl<'a, V: Plain> TypedArray<'a, V> {
    /// A view of `map` (its key and value sizes are checked on every call).
    pub fn new(map: &'a Map) -> Result<Self, MapError> {
        Ok(TypedArray {
            map: open::<u32, V>(map)?,
            _v: PhantomData,
        })
    }

    fn bounds(&self, index: u32) -> Result<(), MapError> {
        let max_entries = self.map.info().max_entries;
        if index >= max_entries {
            return Err(MapError::OutOfBounds { index, max_entries });
        }
        Ok(())
    }

    /// `map[index]`.
    pub fn get(&self, index: &u32, _flags: u64) -> Result<V, MapError> {
        self.bounds(*index)?;
        let mut v = vec![0u8; self.map.value_len()];
        if !self
            .map
            .lookup(index.as_bytes(), &mut v)
            .map_err(syscall("bpf_map_lookup_elem"))?
        {
            return Err(MapError::KeyNotFound);
        }
        read(&v)
    }

    /// `map[index] = value`.
    pub fn set(&mut self, index: u32, value: impl Borrow<V>, flags: u64) -> Result<(), MapError> {
        self.bounds(index)?;
        self.map
            .update(index.as_bytes(), value.borrow().as_bytes(), flags)
            .map_err(syscall("bpf_map_update_elem"))
    }
}

/// A per-CPU array map with values `V` (one per possible CPU).
#[derive(Debug)]
pub struct TypedPerCpuArray<'a, V> {
    map: BpfMap<'a>,
    _v: PhantomData<V>,
}

impl<'a, V: Plain> TypedPerCpuArray<'a, V> {
    /// A view of `map`.
    pub fn new(map: &'a Map) -> Result<Self, MapError> {
        Ok(TypedPerCpuArray {
            map: open::<u32, V>(map)?,
            _v: PhantomData,
        })
    }

    /// The values of `map[index]`, index = CPU number.
    pub fn get(&self, index: &u32, _flags: u64) -> Result<Vec<V>, MapError> {
        let max_entries = self.map.info().max_entries;
        if *index >= max_entries {
            return Err(MapError::OutOfBounds {
                index: *index,
                max_entries,
            });
        }
        let mut v = vec![0u8; self.map.value_len()];
        if !self
            .map
            .lookup(index.as_bytes(), &mut v)
            .map_err(syscall("bpf_map_lookup_elem"))?
        {
            return Err(MapError::KeyNotFound);
        }
        let stride = size_of::<V>().next_multiple_of(8);
        v.chunks_exact(stride)
            .map(|c| read(&c[..size_of::<V>()]))
            .collect()
    }
    /// Set `map[index]` to `value` on every CPU.
    pub fn set_all(&self, index: &u32, value: &V) -> Result<(), MapError> {
        let stride = size_of::<V>().next_multiple_of(8);
        let mut v = vec![0u8; self.map.value_len()];
        for c in v.chunks_exact_mut(stride) {
            c[..size_of::<V>()].copy_from_slice(value.as_bytes());
        }
        self.map
            .update(index.as_bytes(), &v, 0)
            .map_err(syscall("bpf_map_update_elem"))
    }
}

/// A hash (or LRU hash) map from `K` to `V`.
#[derive(Debug)]
pub struct TypedHash<'a, K, V> {
    map: BpfMap<'a>,
    _kv: PhantomData<(K, V)>,
}

impl<'a, K: Plain, V: Plain> TypedHash<'a, K, V> {
    /// A view of `map`.
    pub fn new(map: &'a Map) -> Result<Self, MapError> {
        Ok(TypedHash {
            map: open::<K, V>(map)?,
            _kv: PhantomData,
        })
    }

    /// The byte-level map (batched reads).
    pub fn raw(&self) -> &BpfMap<'a> {
        &self.map
    }

    /// `map[key]`; `KeyNotFound` when absent.
    pub fn get(&self, key: &K, _flags: u64) -> Result<V, MapError> {
        let mut v = vec![0u8; self.map.value_len()];
        if !self
            .map
            .lookup(key.as_bytes(), &mut v)
            .map_err(syscall("bpf_map_lookup_elem"))?
        {
            return Err(MapError::KeyNotFound);
        }
        read(&v)
    }

    /// `map[key] = value` (`flags` as `bpf_map_update_elem`'s).
    pub fn insert(
        &mut self,
        key: impl Borrow<K>,
        value: impl Borrow<V>,
        flags: u64,
    ) -> Result<(), MapError> {
        self.map
            .update(key.borrow().as_bytes(), value.borrow().as_bytes(), flags)
            .map_err(syscall("bpf_map_update_elem"))
    }

    /// Delete `key`; an absent key is the syscall's `ENOENT`, as aya's.
    pub fn remove(&mut self, key: &K) -> Result<(), MapError> {
        match self.map.delete(key.as_bytes()) {
            Ok(true) => Ok(()),
            Ok(false) => Err(syscall("bpf_map_delete_elem")(
                std::io::Error::from_raw_os_error(libc::ENOENT),
            )),
            Err(e) => Err(syscall("bpf_map_delete_elem")(e)),
        }
    }

    /// Every entry, by a key walk and one lookup per key (an entry deleted
    /// between the two is `KeyNotFound`).
    pub fn iter(&self) -> impl Iterator<Item = Result<(K, V), MapError>> + '_ {
        let mut key: Option<Vec<u8>> = None;
        let mut done = false;
        std::iter::from_fn(move || {
            if done {
                return None;
            }
            let mut next = vec![0u8; self.map.key_len()];
            match self.map.next_key(key.as_deref(), &mut next) {
                Ok(true) => {}
                Ok(false) => {
                    done = true;
                    return None;
                }
                Err(e) => {
                    done = true;
                    return Some(Err(syscall("bpf_map_get_next_key")(e)));
                }
            }
            let item = read::<K>(&next).and_then(|k| self.get(&k, 0).map(|v| (k, v)));
            key = Some(next);
            Some(item)
        })
    }
}
