//! Typed handles on the maps of a loaded [`Object`](super::Object) or on a
//! pinned map: keys and values are [`Pod`] types (the `#[repr(C)]` mirrors
//! of the C headers, integers and arrays of them), turned into and out of
//! bytes by `zerocopy`, over the byte-level calls of [`BpfMap`] — no
//! hand-written `unsafe impl Pod` per type, as aya's typed maps want.

use std::borrow::Borrow;
use std::marker::PhantomData;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::{BpfMap, Error};

/// A map key or value: plain bytes both ways. Every type that derives
/// zerocopy's `FromBytes`, `IntoBytes`, `Immutable` and `KnownLayout` and
/// is `Copy` is one (the blanket impl below), so the crates above name no
/// loader's trait.
pub trait Pod: FromBytes + IntoBytes + Immutable + KnownLayout + Copy {}
impl<T: FromBytes + IntoBytes + Immutable + KnownLayout + Copy> Pod for T {}

/// One map of a loaded object or a pinned map, untyped: its descriptor,
/// pinning, and the typed views.
#[derive(Clone, Copy, Debug)]
pub struct Map<'a> {
    data: &'a aya::maps::MapData,
}

impl<'a> Map<'a> {
    /// The map of a loaded object, if it is of a type rvs uses.
    pub(crate) fn of(map: &'a aya::maps::Map) -> Result<Self, Error> {
        use aya::maps::Map as M;
        let data = match map {
            M::Array(d)
            | M::PerCpuArray(d)
            | M::HashMap(d)
            | M::LruHashMap(d)
            | M::PerCpuHashMap(d)
            | M::PerCpuLruHashMap(d)
            | M::DevMap(d)
            | M::DevMapHash(d)
            | M::ProgramArray(d)
            | M::LpmTrie(d) => d,
            _ => {
                return Err(Error::Other(Box::new(std::io::Error::new(
                    std::io::ErrorKind::Unsupported,
                    "a map type without a typed view",
                ))));
            }
        };
        Ok(Map { data })
    }

    /// The map's file descriptor (for [`BpfMap`], batched reads, copies).
    pub fn fd(&self) -> BorrowedFd<'a> {
        self.data.fd().as_fd()
    }

    /// Pin the map at `path` (a file in a BPF filesystem), so it outlives
    /// this process.
    pub fn pin(&self, path: &Path) -> Result<(), Error> {
        self.data.pin(path).map_err(Error::from)
    }

    /// The map as an array of `V`.
    pub fn array<V: Pod>(self) -> Result<Array<'a, V>, Error> {
        Array::new(self)
    }

    /// The map as a per-CPU array of `V`.
    pub fn per_cpu_array<V: Pod>(self) -> Result<PerCpuArray<'a, V>, Error> {
        PerCpuArray::new(self)
    }

    /// The map as a hash (or LRU hash) map from `K` to `V`.
    pub fn hash<K: Pod, V: Pod>(self) -> Result<HashMap<'a, K, V>, Error> {
        HashMap::new(self)
    }

    /// The map as a program array (tail-call slots).
    pub fn program_array(self) -> Result<ProgramArray<'a>, Error> {
        ProgramArray::new(self)
    }

    /// The map as a longest-prefix-match trie from `K` to `V`.
    pub fn lpm_trie<K: Pod, V: Pod>(self) -> Result<LpmTrie<'a, K, V>, Error> {
        LpmTrie::new(self)
    }
}

/// A map opened from its pin (a previous process's map), owned.
#[derive(Debug)]
pub struct PinnedMap {
    data: aya::maps::MapData,
}

impl PinnedMap {
    /// Open the map pinned at `path`.
    pub fn open(path: &Path) -> Result<Self, Error> {
        Ok(PinnedMap {
            data: aya::maps::MapData::from_pin(path)?,
        })
    }

    /// The map, for the typed views.
    pub fn map(&self) -> Map<'_> {
        Map { data: &self.data }
    }
}

/// The map behind `map`, its key and (one CPU's) value sizes checked
/// against `K` and `V`.
fn open<K, V>(map: Map<'_>) -> Result<BpfMap<'_>, Error> {
    let m = BpfMap::new(map.fd()).map_err(Error::syscall("bpf_obj_get_info_by_fd"))?;
    let (key, value) = (m.info().key_size as usize, m.info().value_size as usize);
    if key != size_of::<K>() {
        return Err(Error::InvalidKeySize {
            size: size_of::<K>(),
            expected: key,
        });
    }
    if value != size_of::<V>() {
        return Err(Error::InvalidValueSize {
            size: size_of::<V>(),
            expected: value,
        });
    }
    Ok(m)
}

fn read<V: Pod>(bytes: &[u8]) -> Result<V, Error> {
    V::read_from_bytes(bytes).map_err(|_| {
        Error::syscall("bpf_map_lookup_elem")(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "value size differs from the Rust type",
        ))
    })
}

/// The value bytes of `map[key]`; [`Error::KeyNotFound`] when absent.
fn lookup(map: &BpfMap<'_>, key: &[u8]) -> Result<Vec<u8>, Error> {
    let mut v = vec![0u8; map.value_len()];
    if !map
        .lookup(key, &mut v)
        .map_err(Error::syscall("bpf_map_lookup_elem"))?
    {
        return Err(Error::KeyNotFound);
    }
    Ok(v)
}

fn bounds(map: &BpfMap<'_>, index: u32) -> Result<(), Error> {
    let max_entries = map.info().max_entries;
    if index >= max_entries {
        return Err(Error::OutOfBounds { index, max_entries });
    }
    Ok(())
}

/// An array map with values `V`.
#[derive(Debug)]
pub struct Array<'a, V> {
    map: BpfMap<'a>,
    _v: PhantomData<V>,
}

impl<'a, V: Pod> Array<'a, V> {
    /// A view of `map` (its key and value sizes checked against `u32` and
    /// `V`).
    pub fn new(map: Map<'a>) -> Result<Self, Error> {
        Ok(Array {
            map: open::<u32, V>(map)?,
            _v: PhantomData,
        })
    }

    /// `map[index]` (`_flags`: aya's signature, unused).
    pub fn get(&self, index: &u32, _flags: u64) -> Result<V, Error> {
        bounds(&self.map, *index)?;
        let v = lookup(&self.map, index.as_bytes())?;
        read(&v)
    }

    /// `map[index] = value` (`flags` as `bpf_map_update_elem`'s).
    pub fn set(&mut self, index: u32, value: impl Borrow<V>, flags: u64) -> Result<(), Error> {
        bounds(&self.map, index)?;
        self.map
            .update(index.as_bytes(), value.borrow().as_bytes(), flags)
            .map_err(Error::syscall("bpf_map_update_elem"))
    }
}

/// A per-CPU array map with values `V` (one per possible CPU).
#[derive(Debug)]
pub struct PerCpuArray<'a, V> {
    map: BpfMap<'a>,
    _v: PhantomData<V>,
}

impl<'a, V: Pod> PerCpuArray<'a, V> {
    /// A view of `map`.
    pub fn new(map: Map<'a>) -> Result<Self, Error> {
        Ok(PerCpuArray {
            map: open::<u32, V>(map)?,
            _v: PhantomData,
        })
    }

    /// The values of `map[index]`, index = CPU number.
    pub fn get(&self, index: &u32, _flags: u64) -> Result<Vec<V>, Error> {
        bounds(&self.map, *index)?;
        let v = lookup(&self.map, index.as_bytes())?;
        let stride = size_of::<V>().next_multiple_of(8);
        v.chunks_exact(stride)
            .map(|c| read(&c[..size_of::<V>()]))
            .collect()
    }

    /// Set `map[index]` to `value` on every CPU.
    pub fn set_all(&self, index: &u32, value: &V) -> Result<(), Error> {
        let stride = size_of::<V>().next_multiple_of(8);
        let mut v = vec![0u8; self.map.value_len()];
        for c in v.chunks_exact_mut(stride) {
            c[..size_of::<V>()].copy_from_slice(value.as_bytes());
        }
        self.map
            .update(index.as_bytes(), &v, 0)
            .map_err(Error::syscall("bpf_map_update_elem"))
    }
}

/// A hash (or LRU hash) map from `K` to `V`.
#[derive(Debug)]
pub struct HashMap<'a, K, V> {
    map: BpfMap<'a>,
    _kv: PhantomData<(K, V)>,
}

impl<'a, K: Pod, V: Pod> HashMap<'a, K, V> {
    /// A view of `map`.
    pub fn new(map: Map<'a>) -> Result<Self, Error> {
        Ok(HashMap {
            map: open::<K, V>(map)?,
            _kv: PhantomData,
        })
    }

    /// The byte-level map (batched reads).
    pub fn raw(&self) -> &BpfMap<'a> {
        &self.map
    }

    /// `map[key]`; [`Error::KeyNotFound`] when absent.
    pub fn get(&self, key: &K, _flags: u64) -> Result<V, Error> {
        let v = lookup(&self.map, key.as_bytes())?;
        read(&v)
    }

    /// `map[key] = value` (`flags` as `bpf_map_update_elem`'s: `BPF_ANY`,
    /// `BPF_NOEXIST`, `BPF_EXIST`).
    pub fn insert(
        &mut self,
        key: impl Borrow<K>,
        value: impl Borrow<V>,
        flags: u64,
    ) -> Result<(), Error> {
        self.map
            .update(key.borrow().as_bytes(), value.borrow().as_bytes(), flags)
            .map_err(Error::syscall("bpf_map_update_elem"))
    }

    /// Delete `key`; an absent key is the syscall's `ENOENT` (see
    /// [`Error::is_absent`]).
    pub fn remove(&mut self, key: &K) -> Result<(), Error> {
        match self.map.delete(key.as_bytes()) {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::syscall("bpf_map_delete_elem")(
                std::io::Error::from_raw_os_error(libc::ENOENT),
            )),
            Err(e) => Err(Error::syscall("bpf_map_delete_elem")(e)),
        }
    }

    /// Every entry, by a key walk and one lookup per key (an entry deleted
    /// between the two is [`Error::KeyNotFound`]).
    pub fn iter(&self) -> impl Iterator<Item = Result<(K, V), Error>> + '_ {
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
                    return Some(Err(Error::syscall("bpf_map_get_next_key")(e)));
                }
            }
            let item = read::<K>(&next).and_then(|k| self.get(&k, 0).map(|v| (k, v)));
            key = Some(next);
            Some(item)
        })
    }
}

/// A program array: the slots a program tail-calls.
#[derive(Debug)]
pub struct ProgramArray<'a> {
    map: BpfMap<'a>,
}

impl<'a> ProgramArray<'a> {
    /// A view of `map`.
    pub fn new(map: Map<'a>) -> Result<Self, Error> {
        Ok(ProgramArray {
            map: open::<u32, u32>(map)?,
        })
    }

    /// Put the program `program` (its descriptor) into slot `index`.
    pub fn set(&mut self, index: u32, program: BorrowedFd<'_>, flags: u64) -> Result<(), Error> {
        use std::os::fd::AsRawFd as _;
        bounds(&self.map, index)?;
        let fd = u32::try_from(program.as_raw_fd()).map_err(|_| {
            Error::syscall("bpf_map_update_elem")(std::io::Error::from_raw_os_error(libc::EBADF))
        })?;
        self.map
            .update(index.as_bytes(), fd.as_bytes(), flags)
            .map_err(Error::syscall("bpf_map_update_elem"))
    }

    /// Empty slot `index`; an empty slot is [`Error::KeyNotFound`].
    pub fn clear_index(&mut self, index: &u32) -> Result<(), Error> {
        bounds(&self.map, *index)?;
        match self.map.delete(index.as_bytes()) {
            Ok(true) => Ok(()),
            Ok(false) => Err(Error::KeyNotFound),
            Err(e) => Err(Error::syscall("bpf_map_delete_elem")(e)),
        }
    }
}

/// A longest-prefix-match trie (`BPF_MAP_TYPE_LPM_TRIE`) from `K` to `V`.
/// `K` is the kernel's `struct bpf_lpm_trie_key`: a `u32` prefix length
/// in bits, then the data the prefix covers. The byte-level calls are a
/// hash map's; a lookup finds the longest prefix that covers the key.
#[derive(Debug)]
pub struct LpmTrie<'a, K, V>(HashMap<'a, K, V>);

impl<'a, K: Pod, V: Pod> LpmTrie<'a, K, V> {
    /// A view of `map`.
    pub fn new(map: Map<'a>) -> Result<Self, Error> {
        HashMap::new(map).map(LpmTrie)
    }

    /// The value of the longest prefix that covers `key` (given with the
    /// full prefix length); [`Error::KeyNotFound`] when none does.
    pub fn get(&self, key: &K) -> Result<V, Error> {
        self.0.get(key, 0)
    }

    /// Add or replace the prefix `key`.
    pub fn insert(&mut self, key: &K, value: &V) -> Result<(), Error> {
        self.0.insert(key, value, 0)
    }

    /// Delete the prefix `key` (exactly that prefix); an absent one is
    /// [`Error::KeyNotFound`].
    pub fn remove(&mut self, key: &K) -> Result<(), Error> {
        self.0
            .remove(key)
            .map_err(|e| if e.is_absent() { Error::KeyNotFound } else { e })
    }

    /// Every prefix in the trie, by a key walk.
    pub fn keys(&self) -> impl Iterator<Item = Result<K, Error>> + '_ {
        self.0.iter().map(|r| r.map(|(k, _)| k))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A map created for a test, held as a pinned map is (root only).
    fn created(test: &str, map_type: u32, key: u32, value: u32, max: u32) -> Option<PinnedMap> {
        let fd = super::super::tests::create(test, map_type, key, value, max)?;
        Some(PinnedMap {
            data: aya::maps::MapData::from_fd(fd).expect("a map the kernel just created"),
        })
    }

    #[test]
    fn typed_views_check_sizes_and_name_absent_keys() {
        const HASH: u32 = 1;
        const ARRAY: u32 = 2;
        const PERCPU_ARRAY: u32 = 6;
        let test = "typed_views_check_sizes_and_name_absent_keys";
        let Some(h) = created(test, HASH, 4, 8, 16) else {
            return;
        };
        let mut hash = h.map().hash::<u32, u64>().unwrap();
        hash.insert(1, 10, 0).unwrap();
        hash.insert(2u32, 20u64, 0).unwrap();
        assert_eq!(hash.get(&1, 0).unwrap(), 10);
        let e = hash.get(&3, 0).unwrap_err();
        assert!(matches!(e, Error::KeyNotFound) && e.is_absent(), "{e:?}");
        assert_eq!(e.to_string(), "key not found");
        hash.remove(&1).unwrap();
        let e = hash.remove(&1).unwrap_err();
        assert!(e.is_absent(), "{e:?}");
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
        let all: Vec<_> = hash.iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(all, vec![(2, 20)]);
        let e = h.map().hash::<u64, u64>().unwrap_err();
        assert_eq!(e.to_string(), "invalid key size 8, expected 4");
        let e = h.map().hash::<u32, u32>().unwrap_err();
        assert_eq!(e.to_string(), "invalid value size 4, expected 8");

        let Some(a) = created(test, ARRAY, 4, 8, 4) else {
            return;
        };
        let mut array = a.map().array::<u64>().unwrap();
        array.set(3, 7, 0).unwrap();
        assert_eq!(array.get(&3, 0).unwrap(), 7);
        assert_eq!(array.get(&0, 0).unwrap(), 0);
        let e = array.set(4, 1, 0).unwrap_err();
        assert_eq!(e.to_string(), "the index is 4 but `max_entries` is 4");

        let Some(p) = created(test, PERCPU_ARRAY, 4, 4, 2) else {
            return;
        };
        let per_cpu = p.map().per_cpu_array::<u32>().unwrap();
        per_cpu.set_all(&1, &5).unwrap();
        let v = per_cpu.get(&1, 0).unwrap();
        assert_eq!(v.len(), super::super::possible_cpus().unwrap());
        assert!(v.iter().all(|&x| x == 5), "{v:?}");
        assert!(matches!(
            per_cpu.get(&2, 0),
            Err(Error::OutOfBounds {
                index: 2,
                max_entries: 2
            })
        ));
    }
}
