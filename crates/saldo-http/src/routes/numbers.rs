//! Integers in JSON bodies as JSON Schema counts them: `2.0` is the integer 2 (the document
//! says `"type": "integer"`, and a value with a zero fraction is one), so a client or generator
//! that writes integers as floats is not refused. A fraction, a value out of range, NaN or
//! infinity is still refused (422). serde alone rejects every float for an integer field.

use std::fmt;

use serde::de::{self, Deserializer, Visitor};

/// An `i64` written as a JSON integer or as a float with no fraction.
pub fn i64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<i64, D::Error> {
    deserializer.deserialize_any(Integral)
}

/// An `i64` read as [`i64`] reads it, where a field attribute cannot reach (a list's items).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Int(pub i64);

impl<'de> serde::Deserialize<'de> for Int {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        i64(deserializer).map(Int)
    }
}

/// An optional (`null` or absent with `#[serde(default)]`) `u64`, likewise.
pub fn opt_u64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<u64>, D::Error> {
    deserializer.deserialize_option(OptionalUnsigned)
}

/// An optional (`null` or absent with `#[serde(default)]`) `i64`, likewise.
pub fn opt_i64<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<i64>, D::Error> {
    deserializer.deserialize_option(OptionalSigned)
}

/// Bounds of an `f64` that holds an `i64` exactly enough to convert: -2^63 ..< 2^63.
const I64_LOW: f64 = -9_223_372_036_854_775_808.0;
const I64_END: f64 = 9_223_372_036_854_775_808.0;

struct Integral;

impl Visitor<'_> for Integral {
    type Value = i64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer")
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<i64, E> {
        Ok(v)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<i64, E> {
        i64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Unsigned(v), &self))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<i64, E> {
        if v.is_finite() && v.fract() == 0.0 && (I64_LOW..I64_END).contains(&v) {
            // In range and integral by the checks above: the cast is exact.
            Ok(v as i64)
        } else {
            Err(E::invalid_value(de::Unexpected::Float(v), &self))
        }
    }
}

struct OptionalUnsigned;

impl<'de> Visitor<'de> for OptionalUnsigned {
    type Value = Option<u64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a non-negative integer or null")
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<u64>, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<u64>, D::Error> {
        let v = i64(d)?;
        u64::try_from(v)
            .map(Some)
            .map_err(|_| de::Error::invalid_value(de::Unexpected::Signed(v), &self))
    }
}

struct OptionalSigned;

impl<'de> Visitor<'de> for OptionalSigned {
    type Value = Option<i64>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an integer or null")
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<i64>, E> {
        Ok(None)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<i64>, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<i64>, D::Error> {
        i64(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    #[derive(Deserialize)]
    struct Body {
        #[serde(deserialize_with = "super::i64")]
        n: i64,
        #[serde(default, deserialize_with = "super::opt_u64")]
        ttl: Option<u64>,
    }

    fn parse(json: &str) -> Result<(i64, Option<u64>), String> {
        serde_json::from_str::<Body>(json)
            .map(|b| (b.n, b.ttl))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn integral_floats_are_integers_and_the_rest_is_refused() {
        assert_eq!(parse(r#"{"n": 2}"#), Ok((2, None)));
        assert_eq!(parse(r#"{"n": -2.0, "ttl": 60.0}"#), Ok((-2, Some(60))));
        assert_eq!(parse(r#"{"n": 1e3, "ttl": null}"#), Ok((1000, None)));
        assert_eq!(
            parse(r#"{"n": -9223372036854775808}"#),
            Ok((i64::MIN, None))
        );
        // Read to the nearest f64 (serde_json's `float_roundtrip`): the default fast path is
        // one ulp off here (…263.2), and an integral number was refused as a fraction.
        assert_eq!(
            parse(r#"{"n": 2090975019375263.0}"#),
            Ok((2_090_975_019_375_263, None))
        );
        for bad in [
            r#"{"n": 2.5}"#,
            r#"{"n": 1e19}"#,
            r#"{"n": 9223372036854775808}"#,
            r#"{"n": "2"}"#,
            r#"{"n": 1, "ttl": -1}"#,
            r#"{"n": 1, "ttl": 1.5}"#,
        ] {
            assert!(parse(bad).is_err(), "{bad} accepted");
        }
    }
}
