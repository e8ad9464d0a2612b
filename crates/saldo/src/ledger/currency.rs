//! Currencies: what an account's amounts are denominated in ([`Currency`]) and how many
//! minor-unit digits they have ([`Scale`]), fixed when the account is opened
//! ([`Denomination`]). Amounts stay integers of minor units; money moves only between accounts
//! of one currency (the check is [`super::apply`]'s, on the locked rows), and an exchange is a
//! linked group with one leg per currency through the operator's exchange accounts.
//!
//! A code is an ISO 4217 code (`EUR`, `JPY`) or an operator's asset code of the same shape: an
//! upper-case ASCII letter, then 2..=11 upper-case letters, digits or underscores (the schema's
//! CHECK says the same, `migrations/V12__currencies.sql`). A scale is 0..=18; when none is
//! given, ISO 4217's minor unit for the few codes whose unit is not 2 ([`Scale::default_for`]).
//!
//! A leaf: it imports only `domain` (for [`InputError`]).

use std::fmt;

use serde::{Serialize, Serializer};

use crate::domain::InputError;

/// Longest currency code.
pub const MAX_CURRENCY_LEN: usize = 12;
/// Largest scale (minor-unit digits).
pub const MAX_SCALE: u8 = 18;

/// A validated currency code, kept inline (no allocation: it is `Copy`).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Currency {
    bytes: [u8; MAX_CURRENCY_LEN],
    len: u8,
}

impl Currency {
    /// The default of an account opened without one, and of every account and transfer that
    /// existed before currencies (migration V12).
    pub const DEFAULT: Currency = Currency::known(*b"EUR");

    /// A three-letter code known to be valid (constants only).
    const fn known(code: [u8; 3]) -> Currency {
        let mut bytes = [0; MAX_CURRENCY_LEN];
        bytes[0] = code[0];
        bytes[1] = code[1];
        bytes[2] = code[2];
        Currency { bytes, len: 3 }
    }

    /// `code` if it has the shape `^[A-Z][A-Z0-9_]{2,11}$`, else
    /// [`InputError::CurrencyInvalid`].
    pub fn new(code: &str) -> Result<Currency, InputError> {
        let raw = code.as_bytes();
        let shaped = (3..=MAX_CURRENCY_LEN).contains(&raw.len())
            && raw[0].is_ascii_uppercase()
            && raw[1..]
                .iter()
                .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || *b == b'_');
        if !shaped {
            return Err(InputError::CurrencyInvalid(truncated(code)));
        }
        let mut bytes = [0; MAX_CURRENCY_LEN];
        bytes[..raw.len()].copy_from_slice(raw);
        Ok(Currency {
            bytes,
            // At most MAX_CURRENCY_LEN (12), checked above.
            len: raw.len() as u8,
        })
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII bytes are ever stored (checked in `new`).
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or("")
    }
}

/// A refused code as the error names it: at most 32 characters, so a huge input is not echoed.
fn truncated(code: &str) -> String {
    code.chars().take(32).collect()
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Currency({})", self.as_str())
    }
}

impl Serialize for Currency {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// A validated scale: the number of minor-unit digits (0..=18).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(transparent)]
pub struct Scale(u8);

impl Scale {
    /// The scale of [`Currency::DEFAULT`].
    pub const DEFAULT: Scale = Scale(2);

    /// `digits` if within 0..=18, else [`InputError::ScaleOutOfRange`].
    pub fn new(digits: i64) -> Result<Scale, InputError> {
        match u8::try_from(digits) {
            Ok(d) if d <= MAX_SCALE => Ok(Scale(d)),
            _ => Err(InputError::ScaleOutOfRange {
                scale: digits,
                max: MAX_SCALE,
            }),
        }
    }

    /// ISO 4217's minor unit of `currency`: 0 for JPY, 3 for KWD, BHD, JOD, OMR and TND, 2 for
    /// every other code (an asset code included: give its scale when it differs).
    pub fn default_for(currency: Currency) -> Scale {
        match currency.as_str() {
            "JPY" => Scale(0),
            "KWD" | "BHD" | "JOD" | "OMR" | "TND" => Scale(3),
            _ => Scale(2),
        }
    }

    pub fn get(self) -> u8 {
        self.0
    }
}

impl fmt::Display for Scale {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// What an account is denominated in: its currency and scale, fixed when it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Denomination {
    pub currency: Currency,
    pub scale: Scale,
}

impl Denomination {
    /// EUR, scale 2: an account opened without a currency, and every account opened before
    /// currencies existed.
    pub const DEFAULT: Denomination = Denomination {
        currency: Currency::DEFAULT,
        scale: Scale::DEFAULT,
    };

    /// `currency` with `scale`, or its ISO default scale when none is given.
    pub fn new(currency: Currency, scale: Option<Scale>) -> Denomination {
        Denomination {
            currency,
            scale: scale.unwrap_or_else(|| Scale::default_for(currency)),
        }
    }

    /// From a request's optional fields: no currency is [`Denomination::DEFAULT`] (a scale
    /// alone then applies to EUR); both are validated.
    pub fn parse(currency: Option<&str>, scale: Option<i64>) -> Result<Denomination, InputError> {
        let scale = scale.map(Scale::new).transpose()?;
        let currency = currency.map(Currency::new).transpose()?;
        Ok(Denomination::new(
            currency.unwrap_or(Currency::DEFAULT),
            scale,
        ))
    }
}

impl Default for Denomination {
    fn default() -> Self {
        Denomination::DEFAULT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_of_the_documented_shape_parse_and_others_are_typed_errors() {
        for ok in [
            "EUR",
            "USD",
            "JPY",
            "USDC",
            "BTC",
            "GOLD_OZ",
            "A1_",
            "ABCDEFGHIJKL",
        ] {
            assert_eq!(Currency::new(ok).map(|c| c.to_string()), Ok(ok.to_owned()));
        }
        for bad in [
            "",
            "EU",
            "eur",
            "1EU",
            "_EU",
            "EUR ",
            "E-UR",
            "ABCDEFGHIJKLM",
            "EÜR",
            "EUR\0",
        ] {
            assert!(
                matches!(Currency::new(bad), Err(InputError::CurrencyInvalid(_))),
                "{bad:?}"
            );
        }
        assert_eq!(Currency::DEFAULT.as_str(), "EUR");
    }

    #[test]
    fn scales_are_0_to_18_and_default_from_iso() {
        assert_eq!(Scale::new(0).map(Scale::get), Ok(0));
        assert_eq!(Scale::new(18).map(Scale::get), Ok(18));
        for bad in [-1, 19, 256, i64::MIN, i64::MAX] {
            assert_eq!(
                Scale::new(bad),
                Err(InputError::ScaleOutOfRange {
                    scale: bad,
                    max: 18
                })
            );
        }
        let of = |c: &str| Scale::default_for(Currency::new(c).expect("code")).get();
        assert_eq!((of("JPY"), of("KWD"), of("TND"), of("USD")), (0, 3, 3, 2));
        assert_eq!(
            Denomination::parse(None, None),
            Ok(Denomination::DEFAULT),
            "EUR, 2"
        );
        let jpy = Denomination::parse(Some("JPY"), None).expect("jpy");
        assert_eq!(jpy.scale.get(), 0);
        let btc = Denomination::parse(Some("BTC"), Some(8)).expect("btc");
        assert_eq!((btc.currency.as_str(), btc.scale.get()), ("BTC", 8));
    }
}
