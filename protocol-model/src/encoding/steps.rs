//! How steps and answers are written: a tag byte, then their fields.

use super::{byte, Encode};
use crate::records::Keep;
use crate::step::{Answer, Counter, Step, Tenure};

impl Encode for Keep {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Keep::Never => out.push(0),
            Keep::For(ticks) => {
                out.push(1);
                ticks.encode(out);
            }
            Keep::Always => out.push(2),
        }
    }

    fn decode(input: &mut &[u8]) -> Self {
        match byte(input) {
            0 => Keep::Never,
            1 => Keep::For(Encode::decode(input)),
            _ => Keep::Always,
        }
    }
}

impl Encode for Tenure {
    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Tenure::Landed => out.push(0),
            Tenure::Until(end) => {
                out.push(1);
                end.encode(out);
            }
            Tenure::Session { client, gate } => {
                out.push(2);
                (*client, *gate).encode(out);
            }
        }
    }

    fn decode(input: &mut &[u8]) -> Self {
        match byte(input) {
            0 => Tenure::Landed,
            1 => Tenure::Until(Encode::decode(input)),
            _ => {
                let (client, gate) = Encode::decode(input);
                Tenure::Session { client, gate }
            }
        }
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
            Step::Renew {
                holds,
                lease,
                session,
            } => {
                out.push(3);
                holds.encode(out);
                (*lease, *session).encode(out);
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
            Step::CancelWait { name, kind, waiter } => {
                out.push(8);
                (*name, *kind, *waiter).encode(out);
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
                let (lease, session) = Encode::decode(input);
                Step::Renew {
                    holds,
                    lease,
                    session,
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
                let (name, kind, waiter) = Encode::decode(input);
                Step::CancelWait { name, kind, waiter }
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
