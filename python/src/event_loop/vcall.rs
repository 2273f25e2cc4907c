//! A Python call with its arguments in place (vectorcall): no argument
//! tuple is made and freed per call, as `call1` makes one. The loop's
//! turn calls `Context.run` once per callback and a completion's dispatch
//! once per message, so the tuple would be made on every one of them.

use pyo3::prelude::*;
use pyo3::types::PyTuple;

/// How many arguments a call passes without an allocation (a callback's
/// arguments are few).
const INLINE: usize = 8;

/// `callable(*first, *rest)`, the arguments passed in place.
pub(crate) fn call_in_place<'py>(
    py: Python<'py>,
    callable: &Bound<'py, PyAny>,
    first: &[&Bound<'py, PyAny>],
    rest: Option<&Bound<'py, PyTuple>>,
) -> PyResult<Bound<'py, PyAny>> {
    let n = first.len() + rest.map_or(0, |r| r.len());
    let mut inline = [std::ptr::null_mut(); INLINE];
    let mut spilled = Vec::new();
    let ptrs: &mut [*mut pyo3::ffi::PyObject] = if n <= INLINE {
        &mut inline[..n]
    } else {
        spilled.resize(n, std::ptr::null_mut());
        &mut spilled
    };
    let rest_items = rest.into_iter().flat_map(|r| r.iter_borrowed());
    for (p, a) in ptrs.iter_mut().zip(
        first
            .iter()
            .map(|a| a.as_ptr())
            .chain(rest_items.map(|a| a.as_ptr())),
    ) {
        *p = a;
    }
    // SAFETY: `callable`, each of `first` and the tuple `rest` (immutable,
    // so its items stay held by it) are live Python objects held by the
    // caller for the whole call, which only borrows them (vectorcall takes
    // no reference). `ptrs` holds exactly those `n` pointers and outlives
    // the call; no `PY_VECTORCALL_ARGUMENTS_OFFSET`, as the slot before
    // `ptrs` is not the callee's to use. The GIL is held (`py`). The result
    // is a new reference, or NULL with the exception set, which
    // `from_owned_ptr_or_err` takes over.
    unsafe {
        let out = pyo3::ffi::PyObject_Vectorcall(
            callable.as_ptr(),
            ptrs.as_ptr(),
            ptrs.len(),
            std::ptr::null_mut(),
        );
        Bound::from_owned_ptr_or_err(py, out)
    }
}
