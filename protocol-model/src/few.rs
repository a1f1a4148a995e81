//! The short lists a world is made of, kept inline.

/// A list of a few items (four before it spills to the heap).
pub type Few<T> = smallvec::SmallVec<[T; 4]>;
