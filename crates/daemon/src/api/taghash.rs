//! The hash an ETag is made of, fed straight from a value's `Serialize`
//! into SipHash: no JSON text is written and escaped for it. Each write
//! computes up to two ETags in the owner (the precondition and the
//! answer), and rendering them as JSON first was the largest single cost
//! of an API write. The encoding is unambiguous (every item starts with
//! its kind, strings and bytes carry their length, compounds are closed),
//! so two values hash alike only when they serialize alike (or SipHash
//! collides); tags are stable within a build, as they were.

use std::fmt;
use std::hash::{DefaultHasher, Hasher};

use serde::Serialize;
use serde::ser;

/// The 64-bit hash of `value` as it serializes.
pub(crate) fn tag_of<T: Serialize + ?Sized>(value: &T) -> u64 {
    let mut h = DefaultHasher::new();
    if let Err(e) = value.serialize(Tagger { h: &mut h }) {
        // A `Serialize` that refuses (none of the API's types do) fails
        // the same way each time: its message goes into the tag, as the
        // empty text did when the tag was over JSON.
        h.write_u8(0xff);
        h.write(e.0.as_bytes());
    }
    h.finish()
}

/// Why a value did not serialize (its own words).
#[derive(Debug)]
pub(crate) struct TagError(String);

impl fmt::Display for TagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TagError {}

impl ser::Error for TagError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        TagError(msg.to_string())
    }
}

/// Each item's first byte: its kind.
mod kind {
    pub const BOOL: u8 = 1;
    pub const INT: u8 = 2;
    pub const INT128: u8 = 3;
    pub const UINT: u8 = 4;
    pub const UINT128: u8 = 5;
    pub const FLOAT: u8 = 6;
    pub const CHAR: u8 = 7;
    pub const STR: u8 = 8;
    pub const BYTES: u8 = 9;
    pub const NONE: u8 = 10;
    pub const SOME: u8 = 11;
    pub const UNIT: u8 = 12;
    pub const UNIT_STRUCT: u8 = 13;
    pub const UNIT_VARIANT: u8 = 14;
    pub const NEWTYPE_STRUCT: u8 = 15;
    pub const NEWTYPE_VARIANT: u8 = 16;
    pub const SEQ: u8 = 17;
    pub const TUPLE: u8 = 18;
    pub const TUPLE_STRUCT: u8 = 19;
    pub const TUPLE_VARIANT: u8 = 20;
    pub const MAP: u8 = 21;
    pub const STRUCT: u8 = 22;
    pub const STRUCT_VARIANT: u8 = 23;
    /// Closes a compound.
    pub const END: u8 = 24;
}

/// A serializer whose output is the hasher's state.
struct Tagger<'a> {
    h: &'a mut DefaultHasher,
}

impl Tagger<'_> {
    fn str(&mut self, s: &str) {
        self.h.write_usize(s.len());
        self.h.write(s.as_bytes());
    }

    fn variant(&mut self, kind: u8, index: u32, name: &str) {
        self.h.write_u8(kind);
        self.h.write_u32(index);
        self.str(name);
    }

    fn item<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), TagError> {
        v.serialize(Tagger { h: &mut *self.h })
    }

    fn end(self) -> Result<(), TagError> {
        self.h.write_u8(kind::END);
        Ok(())
    }
}

impl<'a> ser::Serializer for Tagger<'a> {
    type Ok = ();
    type Error = TagError;
    type SerializeSeq = Self;
    type SerializeTuple = Self;
    type SerializeTupleStruct = Self;
    type SerializeTupleVariant = Self;
    type SerializeMap = Self;
    type SerializeStruct = Self;
    type SerializeStructVariant = Self;

    /// Addresses and the like in their compact form (cheaper, as exact).
    fn is_human_readable(&self) -> bool {
        false
    }

    fn serialize_bool(self, v: bool) -> Result<(), TagError> {
        self.h.write_u8(kind::BOOL);
        self.h.write_u8(u8::from(v));
        Ok(())
    }

    fn serialize_i8(self, v: i8) -> Result<(), TagError> {
        self.serialize_i64(i64::from(v))
    }

    fn serialize_i16(self, v: i16) -> Result<(), TagError> {
        self.serialize_i64(i64::from(v))
    }

    fn serialize_i32(self, v: i32) -> Result<(), TagError> {
        self.serialize_i64(i64::from(v))
    }

    fn serialize_i64(self, v: i64) -> Result<(), TagError> {
        self.h.write_u8(kind::INT);
        self.h.write_i64(v);
        Ok(())
    }

    fn serialize_i128(self, v: i128) -> Result<(), TagError> {
        self.h.write_u8(kind::INT128);
        self.h.write_i128(v);
        Ok(())
    }

    fn serialize_u8(self, v: u8) -> Result<(), TagError> {
        self.serialize_u64(u64::from(v))
    }

    fn serialize_u16(self, v: u16) -> Result<(), TagError> {
        self.serialize_u64(u64::from(v))
    }

    fn serialize_u32(self, v: u32) -> Result<(), TagError> {
        self.serialize_u64(u64::from(v))
    }

    fn serialize_u64(self, v: u64) -> Result<(), TagError> {
        self.h.write_u8(kind::UINT);
        self.h.write_u64(v);
        Ok(())
    }

    fn serialize_u128(self, v: u128) -> Result<(), TagError> {
        self.h.write_u8(kind::UINT128);
        self.h.write_u128(v);
        Ok(())
    }

    fn serialize_f32(self, v: f32) -> Result<(), TagError> {
        self.serialize_f64(f64::from(v))
    }

    fn serialize_f64(self, v: f64) -> Result<(), TagError> {
        self.h.write_u8(kind::FLOAT);
        self.h.write_u64(v.to_bits());
        Ok(())
    }

    fn serialize_char(self, v: char) -> Result<(), TagError> {
        self.h.write_u8(kind::CHAR);
        self.h.write_u32(u32::from(v));
        Ok(())
    }

    fn serialize_str(mut self, v: &str) -> Result<(), TagError> {
        self.h.write_u8(kind::STR);
        self.str(v);
        Ok(())
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<(), TagError> {
        self.h.write_u8(kind::BYTES);
        self.h.write_usize(v.len());
        self.h.write(v);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), TagError> {
        self.h.write_u8(kind::NONE);
        Ok(())
    }

    fn serialize_some<T: Serialize + ?Sized>(mut self, v: &T) -> Result<(), TagError> {
        self.h.write_u8(kind::SOME);
        self.item(v)
    }

    fn serialize_unit(self) -> Result<(), TagError> {
        self.h.write_u8(kind::UNIT);
        Ok(())
    }

    fn serialize_unit_struct(mut self, name: &'static str) -> Result<(), TagError> {
        self.h.write_u8(kind::UNIT_STRUCT);
        self.str(name);
        Ok(())
    }

    fn serialize_unit_variant(
        mut self,
        _name: &'static str,
        index: u32,
        variant: &'static str,
    ) -> Result<(), TagError> {
        self.variant(kind::UNIT_VARIANT, index, variant);
        Ok(())
    }

    fn serialize_newtype_struct<T: Serialize + ?Sized>(
        mut self,
        _name: &'static str,
        v: &T,
    ) -> Result<(), TagError> {
        self.h.write_u8(kind::NEWTYPE_STRUCT);
        self.item(v)
    }

    fn serialize_newtype_variant<T: Serialize + ?Sized>(
        mut self,
        _name: &'static str,
        index: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<(), TagError> {
        self.variant(kind::NEWTYPE_VARIANT, index, variant);
        self.item(v)
    }

    fn serialize_seq(self, _len: Option<usize>) -> Result<Self, TagError> {
        self.h.write_u8(kind::SEQ);
        Ok(self)
    }

    fn serialize_tuple(self, _len: usize) -> Result<Self, TagError> {
        self.h.write_u8(kind::TUPLE);
        Ok(self)
    }

    fn serialize_tuple_struct(self, _name: &'static str, _len: usize) -> Result<Self, TagError> {
        self.h.write_u8(kind::TUPLE_STRUCT);
        Ok(self)
    }

    fn serialize_tuple_variant(
        mut self,
        _name: &'static str,
        index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self, TagError> {
        self.variant(kind::TUPLE_VARIANT, index, variant);
        Ok(self)
    }

    fn serialize_map(self, _len: Option<usize>) -> Result<Self, TagError> {
        self.h.write_u8(kind::MAP);
        Ok(self)
    }

    fn serialize_struct(self, _name: &'static str, _len: usize) -> Result<Self, TagError> {
        self.h.write_u8(kind::STRUCT);
        Ok(self)
    }

    fn serialize_struct_variant(
        mut self,
        _name: &'static str,
        index: u32,
        variant: &'static str,
        _len: usize,
    ) -> Result<Self, TagError> {
        self.variant(kind::STRUCT_VARIANT, index, variant);
        Ok(self)
    }
}

impl ser::SerializeSeq for Tagger<'_> {
    type Ok = ();
    type Error = TagError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), TagError> {
        self.item(v)
    }

    fn end(self) -> Result<(), TagError> {
        Tagger::end(self)
    }
}

impl ser::SerializeTuple for Tagger<'_> {
    type Ok = ();
    type Error = TagError;

    fn serialize_element<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), TagError> {
        self.item(v)
    }

    fn end(self) -> Result<(), TagError> {
        Tagger::end(self)
    }
}

impl ser::SerializeTupleStruct for Tagger<'_> {
    type Ok = ();
    type Error = TagError;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), TagError> {
        self.item(v)
    }

    fn end(self) -> Result<(), TagError> {
        Tagger::end(self)
    }
}

impl ser::SerializeTupleVariant for Tagger<'_> {
    type Ok = ();
    type Error = TagError;

    fn serialize_field<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), TagError> {
        self.item(v)
    }

    fn end(self) -> Result<(), TagError> {
        Tagger::end(self)
    }
}

impl ser::SerializeMap for Tagger<'_> {
    type Ok = ();
    type Error = TagError;

    fn serialize_key<T: Serialize + ?Sized>(&mut self, k: &T) -> Result<(), TagError> {
        self.item(k)
    }

    fn serialize_value<T: Serialize + ?Sized>(&mut self, v: &T) -> Result<(), TagError> {
        self.item(v)
    }

    fn end(self) -> Result<(), TagError> {
        Tagger::end(self)
    }
}

impl ser::SerializeStruct for Tagger<'_> {
    type Ok = ();
    type Error = TagError;

    /// The field's name too: a skipped field (`skip_serializing_if`)
    /// shifts the ones after it, as it shortens the JSON.
    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), TagError> {
        self.str(key);
        self.item(v)
    }

    fn end(self) -> Result<(), TagError> {
        Tagger::end(self)
    }
}

impl ser::SerializeStructVariant for Tagger<'_> {
    type Ok = ();
    type Error = TagError;

    fn serialize_field<T: Serialize + ?Sized>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), TagError> {
        self.str(key);
        self.item(v)
    }

    fn end(self) -> Result<(), TagError> {
        Tagger::end(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr};

    #[test]
    fn equal_values_hash_alike() {
        let v = serde_json::json!({"w": 1, "a": ["x", null, true, 2.5]});
        assert_eq!(tag_of(&v), tag_of(&v.clone()));
        assert_eq!(tag_of(&(1u8, "x")), tag_of(&(1u64, "x")));
    }

    /// Values that differ only in where a boundary falls, or in an item's
    /// kind, hash apart: what the length prefixes and kinds are for.
    #[test]
    fn boundaries_and_kinds_are_in_the_hash() {
        let pairs: [(u64, u64); 6] = [
            (tag_of(&["ab", "c"]), tag_of(&["a", "bc"])),
            (
                tag_of(&vec![vec![1u8], vec![]]),
                tag_of(&vec![vec![], vec![1u8]]),
            ),
            (tag_of(&Some(0u32)), tag_of(&0u32)),
            (tag_of(&None::<u32>), tag_of(&())),
            (tag_of(&-1i64), tag_of(&u64::MAX)),
            (tag_of(&"1"), tag_of(&1u32)),
        ];
        for (i, (a, b)) in pairs.into_iter().enumerate() {
            assert_ne!(a, b, "pair {i}");
        }
    }

    /// A real server's tag changes with each field of its configuration.
    #[test]
    fn each_field_of_a_real_server_is_in_its_tag() {
        let base = rvs_core::model::DestConfig::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)), 80);
        let snap = rvs_ipvsadm::snapshot::DestSnap::from_config;
        let tag = tag_of(&snap(&base));
        let mut edits: Vec<rvs_core::model::DestConfig> = Vec::new();
        for f in [
            |d: &mut rvs_core::model::DestConfig| d.weight += 1,
            |d: &mut rvs_core::model::DestConfig| d.port += 1,
            |d: &mut rvs_core::model::DestConfig| d.u_threshold += 1,
            |d: &mut rvs_core::model::DestConfig| d.l_threshold += 1,
            |d: &mut rvs_core::model::DestConfig| d.addr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)),
        ] {
            let mut d = base;
            f(&mut d);
            edits.push(d);
        }
        for (i, d) in edits.iter().enumerate() {
            assert_ne!(tag_of(&snap(d)), tag, "edit {i}");
        }
        assert_eq!(tag_of(&snap(&base)), tag);
    }
}
