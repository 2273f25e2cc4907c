//! Whether a ready handle's `_run` is asyncio's own `Handle._run`, asked
//! once per callback by the turn (`turn.rs`), which runs such a handle's
//! callback itself, without `Handle._run`'s frame, and any other through
//! its `_run`, as asyncio's loop does.
//!
//! # What is asked
//!
//! `handle._run()` finds `_run` as any attribute of an instance: in its
//! class's MRO (`_PyType_Lookup`), unless the class replaces the lookup
//! (`__getattribute__`) or the instance has a `__dict__` that may hold its
//! own. So a handle's `_run` is asyncio's own when its class's attribute
//! lookup is the generic one, its instances have no `__dict__` (asyncio's
//! `Handle` and `TimerHandle` have `__slots__`), and the first `_run` in
//! its MRO is asyncio's `Handle._run`. A tool that replaced
//! `Handle._run` (a slow-callback logger), a subclass with a `_run` of
//! its own, or one set later on any class of the MRO, makes the answer
//! no, from the next callback on.
//!
//! # The answer kept per class, under its version tag
//!
//! That lookup through the MRO cost about 160 instructions per callback,
//! more than one callback per turn saved on the epoll loop. The answer is
//! kept for the last few classes asked (asyncio's `Handle` and
//! `TimerHandle` in practice), each with the class's `tp_version_tag`:
//! CPython gives a class a version tag when a lookup through it is cached
//! (its own attribute cache is keyed by that tag, and so is the
//! interpreter's specialised attribute access), and takes it away, from
//! the class and from every subclass, whenever an attribute of the class
//! is set or deleted, or its `__bases__` or MRO change (`PyType_Modified`).
//! A kept answer is used only while the class still has the tag it was
//! kept under; a class with no valid tag is looked up each time.
//!
//! What "valid" means differs by version (CPython's `Objects/typeobject.c`,
//! checked on 3.9.18, 3.10.13, 3.11.7, 3.12.1 and 3.13.0):
//!
//! * up to 3.12 the tag counts only while the class has the flag
//!   `Py_TPFLAGS_VALID_VERSION_TAG`: `PyType_Modified` clears the flag
//!   (3.9 leaves the old number in place), and `assign_version_tag`
//!   numbers a class before its bases and sets the flag only once every
//!   base has one (a class whose base could not be numbered keeps a
//!   number without the flag, which a later change of that base does not
//!   clear);
//! * from 3.13 the flag is no longer used: a tag is valid when it is not
//!   0, bases are numbered first, and `PyType_Modified` sets the class's
//!   and its subclasses' tags to 0;
//! * tags are never given out twice from 3.11 on (bpo-44914: the counter
//!   stops at its end); up to 3.10 it wraps around after 2^32 tags, after
//!   which a class could get back the number of an answer kept before a
//!   change, so there the answer is not kept: each callback looks up.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, Ordering::Relaxed};

use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;

/// How many classes' answers are kept (asyncio's two handle classes and
/// a few of a program's own).
const KEPT: usize = 4;

/// One class's kept answer.
struct Kept {
    /// The class (compared by address only, never dereferenced: an entry
    /// of a class since freed matches no live class's tag).
    class: AtomicPtr<ffi::PyTypeObject>,
    /// Its version tag when the answer was found; 0: the entry is empty.
    tag: AtomicU32,
    /// Whether its `_run` was asyncio's own.
    own: AtomicBool,
}

/// Asyncio's `Handle._run` and the answers kept for the last classes
/// asked (see the module's doc). Only touched with the GIL held, so the
/// atomics are there for `Sync` (a static), not for ordering.
pub(super) struct OwnRun {
    /// `asyncio.events.Handle._run`, if it was asyncio's own when first
    /// looked up (a tool may have replaced it before): None, every handle
    /// runs through its `_run`.
    run: Option<PyObject>,
    kept: [Kept; KEPT],
    /// The entry the next new answer replaces.
    next: AtomicUsize,
}

impl OwnRun {
    /// Asks about `run` (asyncio's `Handle._run`), or about nothing.
    pub(super) fn new(run: Option<PyObject>) -> Self {
        OwnRun {
            run,
            kept: std::array::from_fn(|_| Kept {
                class: AtomicPtr::new(std::ptr::null_mut()),
                tag: AtomicU32::new(0),
                own: AtomicBool::new(false),
            }),
            next: AtomicUsize::new(0),
        }
    }

    /// Whether `handle._run` is asyncio's own `Handle._run`.
    pub(super) fn of(&self, handle: &Bound<'_, PyAny>) -> bool {
        let Some(run) = &self.run else {
            return false;
        };
        let class = handle.get_type_ptr();
        if let Some(tag) = version(class) {
            for kept in &self.kept {
                if kept.class.load(Relaxed) == class && kept.tag.load(Relaxed) == tag {
                    return kept.own.load(Relaxed);
                }
            }
        }
        self.look_up(handle.py(), class, run)
    }

    /// Looks `_run` up through `class`'s MRO and keeps the answer when
    /// the class has a valid version tag.
    #[cold]
    fn look_up(&self, py: Python<'_>, class: *mut ffi::PyTypeObject, run: &PyObject) -> bool {
        let name = intern!(py, "_run");
        // The first lookup gives the class a version tag if it has none
        // (CPython numbers a class when it caches a lookup through it);
        // the tag is read before the answer is found, so that a change of
        // the class meanwhile (a key's `__eq__` may run code) leaves the
        // answer under a tag the class no longer has.
        mro_lookup(class, name);
        let tag = version(class);
        let found = mro_lookup(class, name);
        // SAFETY: `class` is the type of a live object (the handle, held
        // by the caller with the GIL), so it points to a live, ready
        // `PyTypeObject`; these fields are plain reads.
        let (getattro, no_dict) = unsafe { ((*class).tp_getattro, (*class).tp_dictoffset == 0) };
        // (compared as addresses: `PyObject_GenericGetAttr` is CPython's,
        // imported, so its address is the one CPython stores in a class)
        let generic =
            getattro.map(|f| f as *const ()) == Some(ffi::PyObject_GenericGetAttr as *const ());
        let own = generic && no_dict && found == run.as_ptr();
        if let Some(tag) = tag {
            let kept = &self.kept[self.next.load(Relaxed) % KEPT];
            self.next
                .store(self.next.load(Relaxed).wrapping_add(1), Relaxed);
            kept.class.store(class, Relaxed);
            kept.tag.store(tag, Relaxed);
            kept.own.store(own, Relaxed);
        }
        own
    }
}

/// `class`'s version tag, if it is one a kept answer may be keyed by
/// (see the module's doc for each version's rule).
#[cfg(Py_3_11)]
fn version(class: *mut ffi::PyTypeObject) -> Option<u32> {
    // SAFETY: `class` is the type of a live object (a handle the caller
    // holds, with the GIL), so it points to a live `PyTypeObject`; both
    // fields are plain integers, written by CPython only with the GIL
    // held.
    let (tag, flags) = unsafe { ((*class).tp_version_tag, (*class).tp_flags) };
    let valid = cfg!(Py_3_13) || flags & ffi::Py_TPFLAGS_VALID_VERSION_TAG != 0;
    (tag != 0 && valid).then_some(tag)
}

/// Up to Python 3.10 version tags wrap around: no answer is kept.
#[cfg(not(Py_3_11))]
fn version(_class: *mut ffi::PyTypeObject) -> Option<u32> {
    None
}

/// The first `name` in `class`'s MRO, as the attribute lookup of an
/// instance finds it (null: none, or an error in a key's comparison,
/// which the lookup clears as CPython's own callers of it do).
fn mro_lookup(
    class: *mut ffi::PyTypeObject,
    name: &Bound<'_, pyo3::types::PyString>,
) -> *mut ffi::PyObject {
    // SAFETY: the GIL is held (`name` is bound to it); `class` points to
    // a live, ready type (see `version`) and `name` is a live `str`.
    // `_PyType_Lookup` returns a borrowed reference or null, and sets no
    // exception (it clears one raised while comparing keys); the pointer
    // is only compared, never dereferenced.
    unsafe { _PyType_Lookup(class, name.as_ptr()) }
}

extern "C" {
    /// CPython's lookup of an attribute through a type's MRO, with its
    /// method cache (`Include/cpython/object.h`, exported on every
    /// version; pyo3-ffi leaves it out as private). What
    /// `PyObject_GenericGetAttr` calls first.
    fn _PyType_Lookup(
        class: *mut ffi::PyTypeObject,
        name: *mut ffi::PyObject,
    ) -> *mut ffi::PyObject;
}
