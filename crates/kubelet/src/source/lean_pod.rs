//! A pod read from the API without `metadata.managedFields`: [`LeanPod`] is what the API
//! source's watcher lists and watches.
//!
//! Why while parsing rather than after: k8s-openapi reads `managedFields[].fieldsV1` as a
//! `serde_json::Value`, a map per field the manager set, so every pod in a list or watch event
//! built and then freed a tree of small allocations that nothing in the kubelet reads (the API
//! source drops the field from the pods it keeps). perf put that at about 3% of the kubelet's
//! CPU while 100 pods stopped (three watch events per pod, each a whole pod) and 1.4% while they
//! started. Upstream's decoder copies `fieldsV1` as raw bytes, which costs little; here the
//! parser skips the field outright (serde's `IgnoredAny`, which serde_json skips without
//! allocating).
//!
//! How: the pod is deserialized through [`Lean`], a deserializer wrapper that only acts on two
//! maps, the pod's top level (to find `metadata`) and `metadata` itself (to skip
//! `managedFields`); every other value goes straight to the underlying deserializer. Nothing
//! else in the object changes.

use std::fmt;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

/// A [`Pod`] as the API sent it, less `metadata.managedFields` (see the module docs).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LeanPod(pub Pod);

impl<'de> Deserialize<'de> for LeanPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Pod::deserialize(Lean {
            de: d,
            level: Level::Top,
        })
        .map(LeanPod)
    }
}

impl k8s_openapi::Resource for LeanPod {
    const API_VERSION: &'static str = <Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = <Pod as k8s_openapi::Resource>::Scope;
}

impl k8s_openapi::ListableResource for LeanPod {
    const LIST_KIND: &'static str = <Pod as k8s_openapi::ListableResource>::LIST_KIND;
}

impl k8s_openapi::Metadata for LeanPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.0.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

/// Which map a [`Lean`] stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    /// The pod: its `metadata` value is read through `Lean` at [`Level::Meta`].
    Top,
    /// The pod's metadata: its `managedFields` is skipped.
    Meta,
}

/// The deserializer wrapper: a struct or map read through it is read through [`LeanMap`];
/// anything else is the underlying deserializer's.
struct Lean<D> {
    de: D,
    level: Level,
}

macro_rules! forward {
    ($($method:ident($($arg:ident: $ty:ty),*)),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* v: V) -> Result<V::Value, D::Error> {
                self.de.$method($($arg,)* v)
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for Lean<D> {
    type Error = D::Error;

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, D::Error> {
        let level = self.level;
        self.de
            .deserialize_struct(name, fields, LeanVisitor { v, level })
    }

    fn deserialize_map<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
        let level = self.level;
        self.de.deserialize_map(LeanVisitor { v, level })
    }

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
        let level = self.level;
        self.de.deserialize_any(LeanVisitor { v, level })
    }

    /// k8s-openapi reads every field as an `Option` (`metadata` too, defaulted when absent).
    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, D::Error> {
        let level = self.level;
        self.de.deserialize_option(LeanVisitor { v, level })
    }

    fn is_human_readable(&self) -> bool {
        self.de.is_human_readable()
    }

    forward! {
        deserialize_bool(), deserialize_i8(), deserialize_i16(), deserialize_i32(),
        deserialize_i64(), deserialize_i128(), deserialize_u8(), deserialize_u16(),
        deserialize_u32(), deserialize_u64(), deserialize_u128(), deserialize_f32(),
        deserialize_f64(), deserialize_char(), deserialize_str(), deserialize_string(),
        deserialize_bytes(), deserialize_byte_buf(), deserialize_unit(),
        deserialize_unit_struct(name: &'static str),
        deserialize_newtype_struct(name: &'static str),
        deserialize_seq(), deserialize_tuple(len: usize),
        deserialize_tuple_struct(name: &'static str, len: usize),
        deserialize_enum(name: &'static str, variants: &'static [&'static str]),
        deserialize_identifier(), deserialize_ignored_any(),
    }
}

/// Hands the struct's visitor a [`LeanMap`] instead of the map it is given, and an option's
/// visitor a [`Lean`] over its value.
struct LeanVisitor<V> {
    v: V,
    level: Level,
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty)),* $(,)?) => {
        $(
            fn $method<E: de::Error>(self, x: $ty) -> Result<V::Value, E> {
                self.v.$method(x)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for LeanVisitor<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.v.expecting(f)
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.v.visit_map(LeanMap {
            map,
            level: self.level,
            value_is_meta: false,
        })
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.v.visit_seq(seq)
    }

    fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<V::Value, D2::Error> {
        self.v.visit_some(Lean {
            de: d,
            level: self.level,
        })
    }

    fn visit_newtype_struct<D2: Deserializer<'de>>(self, d: D2) -> Result<V::Value, D2::Error> {
        self.v.visit_newtype_struct(d)
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.v.visit_enum(data)
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.v.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.v.visit_unit()
    }

    fn visit_borrowed_str<E: de::Error>(self, x: &'de str) -> Result<V::Value, E> {
        self.v.visit_borrowed_str(x)
    }

    fn visit_borrowed_bytes<E: de::Error>(self, x: &'de [u8]) -> Result<V::Value, E> {
        self.v.visit_borrowed_bytes(x)
    }

    forward_visit! {
        visit_bool(bool), visit_i8(i8), visit_i16(i16), visit_i32(i32), visit_i64(i64),
        visit_i128(i128), visit_u8(u8), visit_u16(u16), visit_u32(u32), visit_u64(u64),
        visit_u128(u128), visit_f32(f32), visit_f64(f64), visit_char(char), visit_str(&str),
        visit_string(String), visit_bytes(&[u8]), visit_byte_buf(Vec<u8>),
    }
}

/// The pod's or its metadata's map: at [`Level::Top`] the value of `metadata` is read through
/// [`Lean`] at [`Level::Meta`]; at [`Level::Meta`] the entry `managedFields` is skipped.
struct LeanMap<A> {
    map: A,
    level: Level,
    /// The key just read was the pod's `metadata`.
    value_is_meta: bool,
}

/// What a key read by [`KeySeed`] turned out to be.
enum Key<T> {
    /// The caller's key, and whether it names the pod's metadata.
    Kept(T, bool),
    /// An entry to skip; the caller's seed is still unused.
    Skipped,
}

impl<'de, A: MapAccess<'de>> MapAccess<'de> for LeanMap<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let mut seed = Some(seed);
        loop {
            let read = KeySeed {
                seed: &mut seed,
                level: self.level,
            };
            match self.map.next_key_seed(read)? {
                None => return Ok(None),
                Some(Key::Kept(k, is_meta)) => {
                    self.value_is_meta = is_meta;
                    return Ok(Some(k));
                }
                Some(Key::Skipped) => {
                    self.map.next_value::<IgnoredAny>()?;
                }
            }
        }
    }

    fn next_value_seed<T: DeserializeSeed<'de>>(&mut self, seed: T) -> Result<T::Value, A::Error> {
        if std::mem::take(&mut self.value_is_meta) {
            self.map.next_value_seed(MetaSeed(seed))
        } else {
            self.map.next_value_seed(seed)
        }
    }

    fn size_hint(&self) -> Option<usize> {
        self.map.size_hint()
    }
}

/// Reads one key as a string, decides, and only then hands it to the caller's seed (left in
/// place for the next key when the entry is skipped).
struct KeySeed<'s, K> {
    seed: &'s mut Option<K>,
    level: Level,
}

impl<'de, K: DeserializeSeed<'de>> DeserializeSeed<'de> for KeySeed<'_, K> {
    type Value = Key<K::Value>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de, K: DeserializeSeed<'de>> KeySeed<'_, K> {
    fn decide<E: de::Error>(
        self,
        key: &str,
        keep: impl FnOnce(K) -> Result<K::Value, E>,
    ) -> Result<Key<K::Value>, E> {
        if self.level == Level::Meta && key == "managedFields" {
            return Ok(Key::Skipped);
        }
        let is_meta = self.level == Level::Top && key == "metadata";
        let seed = self
            .seed
            .take()
            .ok_or_else(|| E::custom("a map key was read twice"))?;
        Ok(Key::Kept(keep(seed)?, is_meta))
    }
}

impl<'de, K: DeserializeSeed<'de>> Visitor<'de> for KeySeed<'_, K> {
    type Value = Key<K::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }

    fn visit_borrowed_str<E: de::Error>(self, key: &'de str) -> Result<Self::Value, E> {
        self.decide(key, |s| {
            s.deserialize(de::value::BorrowedStrDeserializer::new(key))
        })
    }

    fn visit_str<E: de::Error>(self, key: &str) -> Result<Self::Value, E> {
        self.decide(key, |s| s.deserialize(de::value::StrDeserializer::new(key)))
    }
}

/// Reads the pod's `metadata` value through [`Lean`] at [`Level::Meta`].
struct MetaSeed<T>(T);

impl<'de, T: DeserializeSeed<'de>> DeserializeSeed<'de> for MetaSeed<T> {
    type Value = T::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<T::Value, D::Error> {
        self.0.deserialize(Lean {
            de: d,
            level: Level::Meta,
        })
    }
}

#[cfg(test)]
mod tests;
