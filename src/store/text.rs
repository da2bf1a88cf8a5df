//! Text columns that hold a domain enum (`role`, `subject_kind`): decoded with the enum's
//! own parser, so an unknown value is a decode error, never a string passed along.

use std::str::FromStr;

use sqlx::error::BoxDynError;
use sqlx::postgres::{PgTypeInfo, PgValueRef};
use sqlx::{Decode, Postgres, Type};

use crate::domain::{ChangeKind, EventKind, Role, SubjectKind, TokenRole};

/// Use as `column as "column: Text<Role>"` in `query_as!`.
pub struct Text<T>(pub T);

impl<T> Type<Postgres> for Text<T> {
    fn type_info() -> PgTypeInfo {
        <String as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <String as Type<Postgres>>::compatible(ty)
    }
}

impl<'r, T> Decode<'r, Postgres> for Text<T>
where
    T: FromStr,
    T::Err: std::fmt::Display,
{
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        let text = <&str as Decode<Postgres>>::decode(value)?;
        text.parse()
            .map(Text)
            .map_err(|e| format!("`{text}`: {e}").into())
    }
}

macro_rules! unwrap_text {
    ($($t:ty),*) => {$(
        impl From<Text<$t>> for $t {
            fn from(text: Text<$t>) -> Self {
                text.0
            }
        }
    )*};
}

unwrap_text!(Role, TokenRole, SubjectKind, EventKind, ChangeKind);
