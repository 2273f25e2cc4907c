//! An object's attributes read from its instance dictionary, where
//! asyncio's loop and blockio's proactor keep what each turn reads
//! (`_ready`, `_scheduled`, `_stopping`, the proactor's `_ring`,
//! `_before_wait`, `_ops`, ...).
//!
//! A generic attribute lookup from C (`PyObject_GetAttr`) first looks the
//! name up through the object's class and its MRO (long, for an event
//! loop) for a data descriptor, and costs more than the interpreter's
//! specialised load that asyncio's Python turn uses. None of these names
//! is a descriptor of asyncio's or blockio's classes, so the instance
//! dictionary, where a plain assignment puts them, is read first; a name
//! not there (a subclass's property, a test's stand-in on the class) is
//! looked up as an attribute, as before.

use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

/// An object and its instance dictionary.
pub(super) struct Attrs<'a, 'py> {
    /// The object.
    pub(super) obj: &'a Bound<'py, PyAny>,
    /// Its `__dict__`.
    pub(super) dict: Bound<'py, PyDict>,
}

impl<'a, 'py> Attrs<'a, 'py> {
    /// `obj` with its instance dictionary (an `AttributeError` if it has
    /// none: asyncio's and blockio's loop and proactor classes have no
    /// `__slots__`).
    pub(super) fn of(obj: &'a Bound<'py, PyAny>) -> PyResult<Self> {
        let py = obj.py();
        // SAFETY: the GIL is held (`py`) and `obj` is a live object.
        // `PyObject_GenericGetDict` (what an instance's `__dict__`
        // descriptor calls) returns a new reference to the instance
        // dictionary, made if it was not yet, or NULL with an exception
        // set (no `__dict__`), which `from_owned_ptr_or_err` takes over.
        let dict = unsafe {
            Bound::from_owned_ptr_or_err(
                py,
                ffi::PyObject_GenericGetDict(obj.as_ptr(), std::ptr::null_mut()),
            )?
        };
        Ok(Attrs {
            obj,
            dict: dict.downcast_into::<PyDict>()?,
        })
    }

    /// The object's attribute `name`: from its instance dictionary, else
    /// as an attribute.
    pub(super) fn get(&self, name: &Bound<'py, PyString>) -> PyResult<Bound<'py, PyAny>> {
        match self.dict.get_item(name)? {
            Some(value) => Ok(value),
            None => self.obj.getattr(name),
        }
    }
}
