//! The short lists a world is made of, kept inline.

/// A list of a few items (two before it spills to the heap: most lists of a world hold fewer,
/// and a world is copied and moved often).
pub type Few<T> = smallvec::SmallVec<[T; 2]>;
