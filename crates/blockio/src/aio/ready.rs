//! What a socket in the edge-triggered set
//! ([`EpollSet`](super::epoll::EpollSet)) is ready for, remembered between
//! the set's events: a bit per direction and a tick.
//!
//! The set reports a change of the socket's state once, so the bit stays
//! set after an event until a call in that direction says `EAGAIN` (or a
//! receive gets less than it asked for): then the socket is empty (or
//! full), and the next change reports it again. But an event may come
//! between that call and the clearing of the bit; clearing it then would
//! lose the event, and the request would wait for one that never comes.
//! So every event advances the tick, the caller notes the tick before its
//! call, and the bit is cleared only if the tick has not moved since
//! ([`ReadyWord::clear`]); otherwise the call is made again.
//!
//! The end of a direction (the peer's end of stream, a hang-up, an error
//! on send) is final and set apart: it is never cleared, so a receive
//! that took the last bytes of a stream whose end came in the same event
//! leaves the next receive to find that end at once, as the set will not
//! report it again.

use super::epoll::Readied;

/// A direction a request waits for its socket to be ready in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Awaits {
    Readable,
    Writable,
}

impl Awaits {
    fn bit(self) -> u8 {
        match self {
            Awaits::Readable => 1,
            Awaits::Writable => 2,
        }
    }

    /// The bit of this direction's end, which never clears.
    fn closed_bit(self) -> u8 {
        self.bit() << 2
    }
}

/// A socket's readiness (see the [module](self)): both directions at
/// first, when nothing is known, so that the first call is tried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadyWord {
    bits: u8,
    tick: u32,
}

impl Default for ReadyWord {
    fn default() -> Self {
        ReadyWord { bits: 3, tick: 0 }
    }
}

impl ReadyWord {
    /// Whether a call in direction `a` may proceed.
    pub(crate) fn is(self, a: Awaits) -> bool {
        self.bits & (a.bit() | a.closed_bit()) != 0
    }

    /// The tick: how many events have come (wrapping).
    pub(crate) fn tick(self) -> u32 {
        self.tick
    }

    /// An event came: the directions it reports are ready.
    pub(crate) fn set(&mut self, r: Readied) {
        self.tick = self.tick.wrapping_add(1);
        if r.readable {
            self.bits |= Awaits::Readable.bit();
        }
        if r.writable {
            self.bits |= Awaits::Writable.bit();
        }
        if r.read_closed {
            self.bits |= Awaits::Readable.closed_bit();
        }
        if r.write_closed {
            self.bits |= Awaits::Writable.closed_bit();
        }
    }

    /// A call in direction `a`, made with the tick at `seen`, found the
    /// socket not ready: cleared if no event came since, and true; false
    /// (left set) if one did, and the call is to be made again. The
    /// direction's end, if it came, stays.
    pub(crate) fn clear(&mut self, a: Awaits, seen: u32) -> bool {
        if self.tick != seen {
            return false;
        }
        self.bits &= !a.bit();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READ: Readied = Readied {
        readable: true,
        writable: false,
        read_closed: false,
        write_closed: false,
    };

    #[test]
    fn a_clear_after_an_event_it_did_not_see_leaves_the_bit() {
        let mut w = ReadyWord::default();
        assert!(w.is(Awaits::Readable) && w.is(Awaits::Writable));
        let seen = w.tick();
        assert!(w.clear(Awaits::Readable, seen));
        assert!(!w.is(Awaits::Readable));
        assert!(w.is(Awaits::Writable), "the other direction was cleared");

        // A call starts (tick noted), an event comes, the call says EAGAIN.
        let seen = w.tick();
        w.set(READ);
        assert!(!w.clear(Awaits::Readable, seen), "the event was lost");
        assert!(w.is(Awaits::Readable));
        // Made again with the new tick, it may clear.
        assert!(w.clear(Awaits::Readable, w.tick()));
        assert!(!w.is(Awaits::Readable));
    }

    #[test]
    fn an_event_sets_only_what_it_reports() {
        let mut w = ReadyWord::default();
        let t = w.tick();
        assert!(w.clear(Awaits::Readable, t) && w.clear(Awaits::Writable, t));
        w.set(READ);
        assert!(w.is(Awaits::Readable) && !w.is(Awaits::Writable));
        assert_eq!(w.tick(), t.wrapping_add(1));
    }

    /// The peer's last bytes and its end of stream in one event: the
    /// receive that takes the bytes clears the bit, and the end stays.
    #[test]
    fn the_end_of_a_direction_is_never_cleared() {
        let mut w = ReadyWord::default();
        w.set(Readied {
            read_closed: true,
            ..READ
        });
        assert!(w.clear(Awaits::Readable, w.tick()));
        assert!(w.is(Awaits::Readable), "the end of stream was cleared");
        assert!(w.clear(Awaits::Writable, w.tick()));
        assert!(!w.is(Awaits::Writable));
        w.set(Readied {
            write_closed: true,
            ..Readied::default()
        });
        assert!(w.clear(Awaits::Writable, w.tick()));
        assert!(w.is(Awaits::Writable));
    }
}
