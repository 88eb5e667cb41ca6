//! The CSRF check of every request that changes something (cancel, sign-out): the
//! session's own token, sent back in a header (`fetch`) or a form field, compared in
//! constant time. `SameSite=Strict` already keeps other sites' requests cookie-less;
//! the token also stops a request that a page of the same site could forge.

use subtle::ConstantTimeEq;

/// The header a script sends the token in (a plain form sends the field `csrf`).
pub(super) const HEADER: &str = "x-csrf-token";

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum CsrfError {
    #[error("missing CSRF token: reload the page and try again")]
    Missing,
    #[error("wrong CSRF token: reload the page and try again")]
    Wrong,
}

pub(super) fn check(expected: &str, given: Option<&str>) -> Result<(), CsrfError> {
    let given = given.ok_or(CsrfError::Missing)?;
    if given.as_bytes().ct_eq(expected.as_bytes()).into() {
        Ok(())
    } else {
        Err(CsrfError::Wrong)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_sessions_own_token_passes() {
        assert_eq!(check("t0ken", Some("t0ken")), Ok(()));
        assert_eq!(check("t0ken", None), Err(CsrfError::Missing));
        assert_eq!(check("t0ken", Some("t0ke")), Err(CsrfError::Wrong));
        assert_eq!(check("t0ken", Some("")), Err(CsrfError::Wrong));
    }
}
