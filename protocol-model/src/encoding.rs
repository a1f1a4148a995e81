//! A world written as a few dozen bytes: the exploration keeps millions of them between one
//! level and the next.

use crate::kind::Kind;
use crate::records::{Keeps, Latched, Tombstone};
use crate::session::Session;
use crate::step::{Acquire, Grant, HoldId, Offer, RequestId, WaiterId};
use crate::store::{HandsOver, Lease, NameState, Queued, Settings, Store};
use crate::world::{Call, Client, InFlight, LocalHold, Memory, Remembered, Thread, Waiting, World};

mod steps;

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

encode_struct!(Lease {
    hold,
    until,
    session,
    unclaimed
});
encode_struct!(Tombstone { hold, until });
encode_struct!(Latched {
    request,
    answer,
    until
});
encode_struct!(Session { until, gate });
encode_struct!(Keeps {
    tombstones,
    releases,
    set_once
});
encode_struct!(Settings {
    hands_over,
    keeps,
    ops_per_step,
    turns,
    proofs,
    lock_turns
});
encode_struct!(Remembered {
    name,
    kind,
    hold,
    until,
    acquire
});
encode_struct!(Client {
    remembered,
    session_until
});
encode_struct!(Call {
    thread,
    name,
    kind,
    fixed
});
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
    hold,
    proven
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
    tenure,
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
    fixed,
    granted_until
});
encode_struct!(Thread {
    holds,
    unknown,
    waiting,
    calling
});
encode_struct!(Memory {
    ended,
    tokens,
    first_answers,
    heard,
    permits,
    armed,
    unapplied,
    promised,
    oversized,
});
encode_struct!(Store {
    names,
    latched,
    sessions,
    settings
});
encode_struct!(World {
    now,
    store,
    threads,
    clients,
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
        self.lock_waiting.encode(out);
        self.writers_waiting.encode(out);
        self.readers_waiting.encode(out);
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
            lock_waiting: Encode::decode(input),
            writers_waiting: Encode::decode(input),
            readers_waiting: Encode::decode(input),
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

impl Encode for InFlight {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            InFlight::Request {
                step,
                request,
                sent,
                renewal,
            } => {
                out.push(0);
                step.encode(out);
                request.encode(out);
                sent.encode(out);
                renewal.encode(out);
            }
            InFlight::Grant(grant) => {
                out.push(1);
                grant.encode(out);
            }
            InFlight::Call(call) => {
                out.push(2);
                call.encode(out);
            }
        }
    }

    fn decode(input: &mut &[u8]) -> Self {
        match byte(input) {
            0 => {
                let step = Encode::decode(input);
                let request = Encode::decode(input);
                let sent = Encode::decode(input);
                InFlight::Request {
                    step,
                    request,
                    sent,
                    renewal: Encode::decode(input),
                }
            }
            1 => InFlight::Grant(Encode::decode(input)),
            _ => InFlight::Call(Encode::decode(input)),
        }
    }
}
