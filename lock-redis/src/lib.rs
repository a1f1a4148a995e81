//! Redis backend for dlock (in progress).
