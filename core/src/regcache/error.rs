//! Error values of the registration cache.

use core::fmt;

use super::TransportId;

/// Why a [`RegCacheConfig`](super::RegCacheConfig) was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigError {
    /// The page size is zero or not a power of two.
    BadPageSize(usize),
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadPageSize(p) => write!(f, "page size {p} is not a power of two"),
        }
    }
}

impl core::error::Error for ConfigError {}

/// Why a transport could not be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddTransportError {
    /// The cache already serves the most transports a [`TransportId`] can
    /// name.
    TooMany,
}

impl fmt::Display for AddTransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooMany => write!(f, "a cache serves at most {} transports", u16::MAX),
        }
    }
}

impl core::error::Error for AddTransportError {}

/// Why [`RegCache::get`](super::RegCache::get) returned no registration.
/// In every case the cache holds the registrations it held before.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GetError<E> {
    /// The request has length zero: there is nothing to register.
    ZeroLength,
    /// The range runs past the top of the address space, or rounded to
    /// pages it would cover the whole address space.
    AddressOverflow,
    /// No transport of this cache has that id.
    UnknownTransport(TransportId),
    /// The registration found already has 2^23 references.
    TooManyReferences,
    /// The memory was invalidated again and again while it was being
    /// registered (it is being unmapped while in use).
    InvalidatedDuringRegistration,
    /// The backend refused to register the range.
    Backend(E),
}

impl<E: fmt::Display> fmt::Display for GetError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::ZeroLength => f.write_str("cannot register a zero-length range"),
            Self::AddressOverflow => f.write_str("range runs past the end of the address space"),
            Self::UnknownTransport(t) => write!(f, "no transport {} in this cache", t.index()),
            Self::TooManyReferences => f.write_str("registration has too many references"),
            Self::InvalidatedDuringRegistration => {
                f.write_str("memory was invalidated while it was being registered")
            }
            Self::Backend(e) => write!(f, "backend failed to register memory: {e}"),
        }
    }
}

impl<E: core::error::Error + 'static> core::error::Error for GetError<E> {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Self::Backend(e) => Some(e),
            _ => None,
        }
    }
}
