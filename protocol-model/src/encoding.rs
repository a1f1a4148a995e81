//! A world written as a few dozen bytes: the exploration keeps millions of them between one
//! level and the next.

use crate::kind::Kind;
use crate::step::{Acquire, Answer, Counter, Grant, HoldId, Offer, RequestId, Step, WaiterId};
use crate::store::{HandsOver, Lease, NameState, Queued, Store};
use crate::world::{InFlight, LocalHold, Memory, Thread, Waiting, World};

/// Something written to bytes and read back.
pub trait Encode: Sized {
    /// Appends it to `out`.
    fn encode(&self, out: &mut Vec<u8>);
    /// Reads it from the front of `input`, which moves past it.
    fn decode(input: &mut &[u8]) -> Self;
}

/// The next byte of `input`.
fn byte(input: &mut &[u8]) -> u8 {
    let (first, rest) = input.split_first().expect("a world's bytes end early");
    *input = rest;
    *first
}

impl Encode for u64 {
    fn encode(&self, out: &mut Vec<u8>) {
        let mut value = *self;
        loop {
            let low = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(low);
                return;
            }
            out.push(low | 0x80);
        }
    }

    fn decode(input: &mut &[u8]) -> Self {
        let mut value = 0u64;
        let mut shift = 0;
        loop {
            let next = byte(input);
            value |= u64::from(next & 0x7f) << shift;
            if next & 0x80 == 0 {
                return value;
            }
            shift += 7;
        }
    }
}

macro_rules! encode_as_u64 {
    ($($ty:ty),*) => {$(
        impl Encode for $ty {
            fn encode(&self, out: &mut Vec<u8>) {
                u64::from(*self).encode(out);
            }

            fn decode(input: &mut &[u8]) -> Self {
                <$ty>::try_from(u64::decode(input)).expect("a number in range")
            }
        }
    )*};
}
encode_as_u64!(u8, u32);

impl Encode for bool {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(u8::from(*self));
    }

    fn decode(input: &mut &[u8]) -> Self {
        byte(input) != 0
    }
}

impl<T: Encode> Encode for Option<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            None => out.push(0),
            Some(value) => {
                out.push(1);
                value.encode(out);
            }
        }
    }

    fn decode(input: &mut &[u8]) -> Self {
        (byte(input) != 0).then(|| T::decode(input))
    }
}

impl<T: Encode> Encode for Vec<T> {
    fn encode(&self, out: &mut Vec<u8>) {
        (self.len() as u64).encode(out);
        for item in self {
            item.encode(out);
        }
    }

    fn decode(input: &mut &[u8]) -> Self {
        let len = u64::decode(input) as usize;
        (0..len).map(|_| T::decode(input)).collect()
    }
}

impl<T: Encode, const N: usize> Encode for smallvec::SmallVec<[T; N]> {
    fn encode(&self, out: &mut Vec<u8>) {
        (self.len() as u64).encode(out);
        for item in self {
            item.encode(out);
        }
    }

    fn decode(input: &mut &[u8]) -> Self {
        let len = u64::decode(input) as usize;
        (0..len).map(|_| T::decode(input)).collect()
    }
}

impl<A: Encode, B: Encode> Encode for (A, B) {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
        self.1.encode(out);
    }

    fn decode(input: &mut &[u8]) -> Self {
        let a = A::decode(input);
        (a, B::decode(input))
    }
}

impl<A: Encode, B: Encode, C: Encode> Encode for (A, B, C) {
    fn encode(&self, out: &mut Vec<u8>) {
        self.0.encode(out);
        self.1.encode(out);
        self.2.encode(out);
    }

    fn decode(input: &mut &[u8]) -> Self {
        let a = A::decode(input);
        let b = B::decode(input);
        (a, b, C::decode(input))
    }
}

/// A struct written field by field, in order.
macro_rules! encode_struct {
    ($ty:ident { $($field:ident),* $(,)? }) => {
        impl Encode for $ty {
            fn encode(&self, out: &mut Vec<u8>) {
                $(self.$field.encode(out);)*
            }

            fn decode(input: &mut &[u8]) -> Self {
                $(let $field = Encode::decode(input);)*
                $ty { $($field),* }
            }
        }
    };
}

/// A one-field struct written as its field.
macro_rules! encode_newtype {
    ($($ty:ident),*) => {$(
        impl Encode for $ty {
            fn encode(&self, out: &mut Vec<u8>) {
                self.0.encode(out);
            }

            fn decode(input: &mut &[u8]) -> Self {
                $ty(Encode::decode(input))
            }
        }
    )*};
}
encode_newtype!(HoldId, WaiterId, RequestId);

encode_struct!(Lease { hold, until });
encode_struct!(Offer {
    attempt,
    hold,
    lease
});
encode_struct!(Queued { waiter, offer });
encode_struct!(HandsOver { reentrant, permit });
encode_struct!(Grant {
    waiter,
    attempt,
    hold
});
encode_struct!(Acquire {
    name,
    kind,
    owner,
    waiter,
    lease,
    reentry,
    write_hold,
    will_wait,
    offer,
});
encode_struct!(LocalHold {
    name,
    kind,
    id,
    count,
    deadline,
    watchdog,
    unconfirmed,
    lost,
    token,
});
encode_struct!(Waiting {
    name,
    attempt,
    hold,
    refused_at
});
encode_struct!(Thread {
    holds,
    unknown,
    waiting
});
encode_struct!(Memory {
    ended,
    tokens,
    first_answers,
    heard,
    permits,
    armed,
    unapplied,
});
encode_struct!(Store {
    names,
    latched,
    hands_over
});
encode_struct!(World {
    now,
    store,
    threads,
    network,
    memory,
    faults,
    forced,
    next_id,
});

impl Encode for NameState {
    fn encode(&self, out: &mut Vec<u8>) {
        self.family.map(|f| f as u8).encode(out);
        self.holder.encode(out);
        self.readers.encode(out);
        self.permits.encode(out);
        self.permits_held.encode(out);
        self.count.encode(out);
        self.token.encode(out);
        self.queue.encode(out);
        self.ended.encode(out);
    }

    fn decode(input: &mut &[u8]) -> Self {
        let family = Option::<u8>::decode(input).map(family_of);
        NameState {
            family,
            holder: Encode::decode(input),
            readers: Encode::decode(input),
            permits: Encode::decode(input),
            permits_held: Encode::decode(input),
            count: Encode::decode(input),
            token: Encode::decode(input),
            queue: Encode::decode(input),
            ended: Encode::decode(input),
        }
    }
}

fn family_of(code: u8) -> crate::kind::Family {
    use crate::kind::Family;
    [
        Family::Lock,
        Family::Fair,
        Family::ReadWrite,
        Family::Semaphore,
        Family::Latch,
        Family::Election,
    ][usize::from(code)]
}

impl Encode for Kind {
    fn encode(&self, out: &mut Vec<u8>) {
        out.push(*self as u8);
    }

    fn decode(input: &mut &[u8]) -> Self {
        Kind::ALL[usize::from(byte(input))]
    }
}

impl Encode for Counter {
    fn encode(&self, out: &mut Vec<u8>) {
        let (tag, value) = match self {
            Counter::TrySetPermits(v) => (0, *v),
            Counter::AddPermits(v) => (1, *v),
            Counter::AvailablePermits => (2, 0),
            Counter::TrySetCount(v) => (3, *v),
            Counter::CountDown => (4, 0),
            Counter::Count => (5, 0),
        };
        out.push(tag);
        value.encode(out);
    }

    fn decode(input: &mut &[u8]) -> Self {
        let tag = byte(input);
        let value = u64::decode(input);
        match tag {
            0 => Counter::TrySetPermits(value),
            1 => Counter::AddPermits(value),
            2 => Counter::AvailablePermits,
            3 => Counter::TrySetCount(value),
            4 => Counter::CountDown,
            _ => Counter::Count,
        }
    }
}

impl Encode for Step {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Step::Acquire(acquire) => {
                out.push(0);
                acquire.encode(out);
            }
            Step::Release { name, kind, owner } => {
                out.push(1);
                (*name, *kind, *owner).encode(out);
            }
            Step::ReleaseTo {
                name,
                kind,
                owner,
                successor,
                lease,
            } => {
                out.push(2);
                (*name, *kind, *owner).encode(out);
                (*successor, *lease).encode(out);
            }
            Step::Renew { holds, lease } => {
                out.push(3);
                holds.encode(out);
                lease.encode(out);
            }
            Step::Status { name, kind, owner } => {
                out.push(4);
                (*name, *kind, *owner).encode(out);
            }
            Step::ForceUnlock { name, kind } => {
                out.push(5);
                (*name, *kind).encode(out);
            }
            Step::Counter { name, step } => {
                out.push(6);
                (*name, *step).encode(out);
            }
            Step::Leader { name } => {
                out.push(7);
                name.encode(out);
            }
            Step::CancelWait { name, waiter } => {
                out.push(8);
                (*name, *waiter).encode(out);
            }
        }
    }

    fn decode(input: &mut &[u8]) -> Self {
        match byte(input) {
            0 => Step::Acquire(Encode::decode(input)),
            1 => {
                let (name, kind, owner) = Encode::decode(input);
                Step::Release { name, kind, owner }
            }
            2 => {
                let (name, kind, owner) = Encode::decode(input);
                let (successor, lease) = Encode::decode(input);
                Step::ReleaseTo {
                    name,
                    kind,
                    owner,
                    successor,
                    lease,
                }
            }
            3 => {
                let holds = Encode::decode(input);
                Step::Renew {
                    holds,
                    lease: Encode::decode(input),
                }
            }
            4 => {
                let (name, kind, owner) = Encode::decode(input);
                Step::Status { name, kind, owner }
            }
            5 => {
                let (name, kind) = Encode::decode(input);
                Step::ForceUnlock { name, kind }
            }
            6 => {
                let (name, step) = Encode::decode(input);
                Step::Counter { name, step }
            }
            7 => Step::Leader {
                name: Encode::decode(input),
            },
            _ => {
                let (name, waiter) = Encode::decode(input);
                Step::CancelWait { name, waiter }
            }
        }
    }
}

impl Encode for Answer {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Answer::Acquired { token } => {
                out.push(0);
                token.encode(out);
            }
            Answer::Held => out.push(1),
            Answer::Gone => out.push(2),
            Answer::WrongKind => out.push(3),
            Answer::Unsupported => out.push(4),
            Answer::Released => out.push(5),
            Answer::NotHeld => out.push(6),
            Answer::Handed => out.push(7),
            Answer::Renewed(found) => {
                out.push(8);
                found.encode(out);
            }
            Answer::Status { locked, mine } => {
                out.push(9);
                (*locked, *mine).encode(out);
            }
            Answer::Forced(held) => {
                out.push(10);
                held.encode(out);
            }
            Answer::Count(number) => {
                out.push(11);
                number.encode(out);
            }
            Answer::Leader(leader) => {
                out.push(12);
                leader.encode(out);
            }
            Answer::Done => out.push(13),
        }
    }

    fn decode(input: &mut &[u8]) -> Self {
        match byte(input) {
            0 => Answer::Acquired {
                token: Encode::decode(input),
            },
            1 => Answer::Held,
            2 => Answer::Gone,
            3 => Answer::WrongKind,
            4 => Answer::Unsupported,
            5 => Answer::Released,
            6 => Answer::NotHeld,
            7 => Answer::Handed,
            8 => Answer::Renewed(Encode::decode(input)),
            9 => {
                let (locked, mine) = Encode::decode(input);
                Answer::Status { locked, mine }
            }
            10 => Answer::Forced(Encode::decode(input)),
            11 => Answer::Count(Encode::decode(input)),
            12 => Answer::Leader(Encode::decode(input)),
            _ => Answer::Done,
        }
    }
}

impl Encode for InFlight {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            InFlight::Request {
                step,
                request,
                renewal,
            } => {
                out.push(0);
                step.encode(out);
                request.encode(out);
                renewal.encode(out);
            }
            InFlight::Grant(grant) => {
                out.push(1);
                grant.encode(out);
            }
        }
    }

    fn decode(input: &mut &[u8]) -> Self {
        match byte(input) {
            0 => {
                let step = Encode::decode(input);
                let request = Encode::decode(input);
                InFlight::Request {
                    step,
                    request,
                    renewal: Encode::decode(input),
                }
            }
            _ => InFlight::Grant(Encode::decode(input)),
        }
    }
}
