//! `read`, `readinto`, `seek`, `tell`, `readline` and `write` as a `blockio.open`
//! binary file's class holds them: each a [`CoroutineMethod`], which frameworks and mocks take for a
//! coroutine function, as they take aiofiles' `async def` methods, while a
//! call costs what the core's method costs.
//!
//! `inspect.iscoroutinefunction(f.read)` looks through the bound method
//! to its `__func__` and asks for a function, or (from Python 3.10 on) an
//! object that looks like one (`__code__`, `__defaults__`,
//! `__kwdefaults__`, `__annotations__`, `__name__`), whose code is a
//! coroutine's. A [`CoroutineMethod`] answers those from its template, an
//! `async def` of the same signature that awaits the core's method
//! (`blockio/_file.py`), and on Python 3.9, whose check is
//! `isinstance(obj, types.FunctionType)`, gives `types.FunctionType` as
//! its `__class__` (as `unittest.mock` does for its specs).
//!
//! A call `f.read(n)` never makes the bound method: the type is a method
//! descriptor (`Py_TPFLAGS_METHOD_DESCRIPTOR`), so the interpreter calls
//! it with the file first, through its vectorcall, which parses the
//! arguments as the core's method does and makes the [`FileCall`]
//! (`python/src/call.rs`) directly. Only `f.read` taken as a value makes a
//! bound method (`types.MethodType`).

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
// (`pyo3::impl_` is what pyo3's own macros expand to, not its stable API:
// the crate is held at 0.23 in `python/Cargo.toml`, and the argument parsing
// and trampoline used here are to be checked again on an upgrade, as
// `call.rs`'s.)
use pyo3::impl_::extract_argument::{FunctionDescription, NoVarargs, NoVarkeywords};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::{intern, Borrowed, PyTypeInfo};

use crate::inline::FileState;

/// The core's method a [`CoroutineMethod`] calls.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Read,
    Seek,
    Tell,
    Readline,
    Write,
    Readinto,
}

impl Kind {
    /// The kind named `name`, if any.
    fn named(name: &str) -> Option<Kind> {
        match name {
            "read" => Some(Kind::Read),
            "seek" => Some(Kind::Seek),
            "tell" => Some(Kind::Tell),
            "readline" => Some(Kind::Readline),
            "write" => Some(Kind::Write),
            "readinto" => Some(Kind::Readinto),
            _ => None,
        }
    }

    /// Its place in [`TEMPLATES`].
    fn index(self) -> usize {
        self as usize
    }
}

/// Each kind's template (`read`, `seek`, `tell`, `readline`, `write`,
/// `readinto`), once a
/// [`CoroutineMethod`] of it is made: the code a [`FileCall`]'s `cr_code`
/// gives, and the function its `cr_frame` is made from before it starts.
static TEMPLATES: [GILOnceCell<PyObject>; 6] = [
    GILOnceCell::new(),
    GILOnceCell::new(),
    GILOnceCell::new(),
    GILOnceCell::new(),
    GILOnceCell::new(),
    GILOnceCell::new(),
];

/// The template of the method named `name` (`read`, `seek`, `tell`,
/// `readline`, `write`, `readinto`), if
/// its [`CoroutineMethod`] was made.
pub(crate) fn template_of<'py>(py: Python<'py>, name: &str) -> Option<&'py Bound<'py, PyAny>> {
    let kind = Kind::named(name)?;
    TEMPLATES[kind.index()].get(py).map(|t| t.bind(py))
}

/// A method of a `blockio.open` binary file that is a coroutine function
/// to `inspect` and `asyncio` (see the module's notes): called, it returns
/// the core's `FileCall`, as `FileState.read`, `seek` and `tell` do.
#[pyclass(frozen, module = "blockio._blockio")]
pub(crate) struct CoroutineMethod {
    /// The entry point of a call, where the type's
    /// `tp_vectorcall_offset` points (see [`add`]).
    vectorcall: ffi::vectorcallfunc,
    kind: Kind,
    /// The `async def` whose signature, code and names this method gives.
    template: PyObject,
}

/// The signatures, as `FileState`'s methods parse them.
static READ: FunctionDescription = FunctionDescription {
    cls_name: Some("AsyncFile"),
    func_name: "read",
    positional_parameter_names: &["size"],
    positional_only_parameters: 0,
    required_positional_parameters: 0,
    keyword_only_parameters: &[],
};
static SEEK: FunctionDescription = FunctionDescription {
    cls_name: Some("AsyncFile"),
    func_name: "seek",
    positional_parameter_names: &["offset", "whence"],
    positional_only_parameters: 0,
    required_positional_parameters: 1,
    keyword_only_parameters: &[],
};
static TELL: FunctionDescription = FunctionDescription {
    cls_name: Some("AsyncFile"),
    func_name: "tell",
    positional_parameter_names: &[],
    positional_only_parameters: 0,
    required_positional_parameters: 0,
    keyword_only_parameters: &[],
};
static READLINE: FunctionDescription = FunctionDescription {
    cls_name: Some("AsyncFile"),
    func_name: "readline",
    positional_parameter_names: &["self", "size"],
    positional_only_parameters: 0,
    required_positional_parameters: 1,
    keyword_only_parameters: &[],
};
static WRITE: FunctionDescription = FunctionDescription {
    cls_name: Some("AsyncFile"),
    func_name: "write",
    positional_parameter_names: &["self", "data"],
    positional_only_parameters: 0,
    required_positional_parameters: 2,
    keyword_only_parameters: &[],
};
static READINTO: FunctionDescription = FunctionDescription {
    cls_name: Some("AsyncFile"),
    func_name: "readinto",
    positional_parameter_names: &["self", "buf"],
    positional_only_parameters: 0,
    required_positional_parameters: 2,
    keyword_only_parameters: &[],
};

/// `CoroutineMethod(template)`: the method whose signature, code and
/// names are those of `template`, an `async def` named `read`, `seek`,
/// `tell`, `readline`, `write` or `readinto`.
#[pyfunction]
pub(crate) fn coroutine_method(template: &Bound<'_, PyAny>) -> PyResult<Py<CoroutineMethod>> {
    let py = template.py();
    let name: String = template.getattr(intern!(py, "__name__"))?.extract()?;
    let kind = Kind::named(&name).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "coroutine_method: no method {name:?} (read, seek, tell, readline, write or readinto)"
        ))
    })?;
    let flags: u32 = template
        .getattr(intern!(py, "__code__"))?
        .getattr(intern!(py, "co_flags"))?
        .extract()?;
    if flags & CO_COROUTINE == 0 {
        return Err(PyTypeError::new_err(format!(
            "coroutine_method: the template of {name:?} is not an async def"
        )));
    }
    let _ = TEMPLATES[kind.index()].set(py, template.clone().unbind());
    Py::new(
        py,
        CoroutineMethod {
            vectorcall: method_vectorcall,
            kind,
            template: template.clone().unbind(),
        },
    )
}

/// `inspect.CO_COROUTINE`.
const CO_COROUTINE: u32 = 0x80;

#[pymethods]
impl CoroutineMethod {
    /// The method bound to `obj` (a `types.MethodType`), or the method
    /// itself taken from the class.
    fn __get__(
        slf: Bound<'_, Self>,
        obj: Option<Bound<'_, PyAny>>,
        _owner: Option<Bound<'_, PyAny>>,
    ) -> PyResult<PyObject> {
        let py = slf.py();
        let Some(obj) = obj.filter(|o| !o.is_none()) else {
            return Ok(slf.into_any().unbind());
        };
        // SAFETY: both are live objects, borrowed for the call (the GIL is
        // held); PyMethod_New returns a new reference or NULL with an
        // exception set, which `from_owned_ptr_or_err` turns into Err.
        unsafe {
            let bound = PyMethod_New(slf.as_ptr(), obj.as_ptr());
            Ok(Bound::from_owned_ptr_or_err(py, bound)?.unbind())
        }
    }

    #[getter]
    fn __code__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.template.bind(py).getattr(intern!(py, "__code__"))
    }

    #[getter]
    fn __defaults__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.template.bind(py).getattr(intern!(py, "__defaults__"))
    }

    #[getter]
    fn __kwdefaults__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.template
            .bind(py)
            .getattr(intern!(py, "__kwdefaults__"))
    }

    #[getter]
    fn __annotations__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.template
            .bind(py)
            .getattr(intern!(py, "__annotations__"))
    }

    #[getter]
    fn __name__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.template.bind(py).getattr(intern!(py, "__name__"))
    }

    #[getter]
    fn __qualname__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.template.bind(py).getattr(intern!(py, "__qualname__"))
    }

    #[getter]
    fn __doc__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.template.bind(py).getattr(intern!(py, "__doc__"))
    }

    #[getter]
    fn __module__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.template.bind(py).getattr(intern!(py, "__module__"))
    }

    /// `types.FunctionType`, for Python 3.9's `inspect.isfunction` (see
    /// the module's notes); `type()` still gives the true type.
    #[cfg(not(Py_3_10))]
    #[getter]
    fn __class__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        py.import("types")?.getattr("FunctionType")
    }

    fn __repr__(&self) -> String {
        let name = match self.kind {
            Kind::Read => "read",
            Kind::Seek => "seek",
            Kind::Tell => "tell",
            Kind::Readline => "readline",
            Kind::Write => "write",
            Kind::Readinto => "readinto",
        };
        format!("<coroutine method {name:?} of blockio's AsyncFile>")
    }
}

// (`PyMethod_New`, part of CPython's API since 2.x, is not in pyo3-ffi
// 0.23.)
extern "C" {
    fn PyMethod_New(func: *mut ffi::PyObject, slf: *mut ffi::PyObject) -> *mut ffi::PyObject;
}

/// The vectorcall of a [`CoroutineMethod`]: the file, then the method's
/// arguments, as the interpreter passes them to a method descriptor.
unsafe extern "C" fn method_vectorcall(
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargsf: usize,
    kwnames: *mut ffi::PyObject,
) -> *mut ffi::PyObject {
    // SAFETY: CPython calls a vectorcall holding the GIL with `args`
    // holding `nargs` positional arguments followed by one per name in
    // `kwnames` (a tuple, or NULL), as the trampoline and `call` need.
    unsafe {
        let nargs = ffi::PyVectorcall_NARGS(nargsf);
        pyo3::impl_::trampoline::fastcall_with_keywords(callable, args, nargs, kwnames, call)
    }
}

/// A call of the [`CoroutineMethod`] `callable` (see [`method_vectorcall`]):
/// the file's `FileCall` of the method, its arguments parsed.
unsafe fn call(
    py: Python<'_>,
    callable: *mut ffi::PyObject,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: `callable` is a live `CoroutineMethod` (the vectorcall is
    // set on that type alone, which cannot be subclassed).
    let me = unsafe {
        Bound::from_borrowed_ptr(py, callable).downcast_into_unchecked::<CoroutineMethod>()
    };
    if nargs < 1 {
        return Err(PyTypeError::new_err(format!(
            "{} of AsyncFile needs the file as its first argument",
            me.get().__repr__()
        )));
    }
    // SAFETY: `nargs >= 1`: `args[0]` is a live object, borrowed for the
    // call.
    let file = unsafe { Bound::from_borrowed_ptr(py, *args) };
    let file = file.downcast::<FileState>()?;
    // SAFETY: `args` holds `nargs` (at least 1) positional arguments and
    // then the keyword ones `kwnames` names, live for the call, as
    // CPython passes them to a vectorcall (see `method_vectorcall`).
    let made = unsafe { file_call(py, me.get().kind, file, (args, nargs, kwnames)) }?;
    Ok(made.into_ptr())
}

/// A vectorcall's arguments: `args`, `nargs` positional ones then one per
/// name in `kwnames` (a tuple, or NULL).
type Args = (
    *const *mut ffi::PyObject,
    ffi::Py_ssize_t,
    *mut ffi::PyObject,
);

/// `file`'s `FileCall` of the method `kind`, its arguments parsed from
/// `all` (the file first). `read`, `seek` and `tell` count their
/// arguments after the file (as their pyo3 methods did), `readline`,
/// `write` and `readinto` with it (as the `async def`s they were, and the built-in's
/// methods).
///
/// # Safety
///
/// `all` holds at least one positional argument (the file) and is as
/// CPython passes a vectorcall's arguments: live objects, borrowed for
/// the call.
unsafe fn file_call(
    py: Python<'_>,
    kind: Kind,
    file: &Bound<'_, FileState>,
    all: Args,
) -> PyResult<PyObject> {
    let (args, nargs, kwnames) = all;
    // SAFETY: `nargs >= 1` (the caller's promise): the arguments after
    // the file are the `nargs - 1` from `args[1]` and the keyword ones.
    let rest = (unsafe { args.add(1) }, nargs - 1, kwnames);
    // (Each `parse` below: `rest` and `all` are vectorcall arguments as
    // `parse` needs, by the caller's promise and the above.)
    match kind {
        Kind::Read => {
            // SAFETY: see above: the arguments are as `parse` needs.
            let [size] = unsafe { parse(py, &READ, rest) }?;
            FileState::read(file, given(&size))
        }
        Kind::Seek => {
            // SAFETY: see above: the arguments are as `parse` needs.
            let [offset, whence] = unsafe { parse(py, &SEEK, rest) }?;
            let offset = offset
                .as_deref()
                .ok_or_else(|| PyTypeError::new_err("seek() missing its offset"))?;
            FileState::seek(file, offset, given(&whence))
        }
        Kind::Tell => {
            // SAFETY: see above: the arguments are as `parse` needs.
            let [] = unsafe { parse(py, &TELL, rest) }?;
            FileState::tell(file)
        }
        Kind::Readline => {
            // SAFETY: see above: the arguments are as `parse` needs.
            let [_, size] = unsafe { parse(py, &READLINE, all) }?;
            FileState::readline(file, given(&size))
        }
        Kind::Write => {
            // SAFETY: see above: the arguments are as `parse` needs.
            let [_, data] = unsafe { parse(py, &WRITE, all) }?;
            FileState::write(file, required(&data, "write() missing its data")?)
        }
        Kind::Readinto => {
            // SAFETY: see above: the arguments are as `parse` needs.
            let [_, buf] = unsafe { parse(py, &READINTO, all) }?;
            FileState::readinto(file, required(&buf, "readinto() missing its buffer")?)
        }
    }
}

/// The `N` arguments `desc` describes, parsed from the vectorcall's
/// arguments `given` (absent ones `None`); a `TypeError` worded as
/// Python's for a wrong call.
///
/// # Safety
///
/// `given` is as CPython passes a vectorcall's arguments: `nargs` live
/// positional objects at `args`, then one per name in `kwnames` (a
/// tuple, or NULL), borrowed for the call.
unsafe fn parse<'py, const N: usize>(
    py: Python<'py>,
    desc: &FunctionDescription,
    given: Args,
) -> PyResult<[Option<Borrowed<'py, 'py, PyAny>>; N]> {
    let (args, nargs, kwnames) = given;
    let mut out = [None; N];
    // SAFETY: the caller's promise, which `extract_arguments_fastcall`
    // needs.
    unsafe {
        desc.extract_arguments_fastcall::<NoVarargs, NoVarkeywords>(
            py, args, nargs, kwnames, &mut out,
        )?
    };
    Ok(out)
}

/// An optional argument as the core's methods take it: absent or `None`
/// is `None` (the default).
fn given<'a, 'py>(arg: &'a Option<Borrowed<'_, 'py, PyAny>>) -> Option<&'a Bound<'py, PyAny>> {
    arg.as_deref().filter(|a| !a.is_none())
}

/// A required argument, or `TypeError(missing)` when it was not passed.
fn required<'a, 'py>(
    arg: &'a Option<Borrowed<'_, 'py, PyAny>>,
    missing: &str,
) -> PyResult<&'a Bound<'py, PyAny>> {
    arg.as_deref()
        .ok_or_else(|| PyTypeError::new_err(missing.to_owned()))
}

/// Adds [`CoroutineMethod`] and `coroutine_method` to the module, its type
/// made a method descriptor called through its vectorcall (pyo3 0.23
/// makes neither).
pub(crate) fn add(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<CoroutineMethod>()?;
    m.add_function(wrap_pyfunction!(coroutine_method, m)?)?;
    // Where the entry point lies in every instance: measured on one.
    let probe = Py::new(
        py,
        CoroutineMethod {
            vectorcall: method_vectorcall,
            kind: Kind::Tell,
            template: py.None(),
        },
    )?;
    let base = probe.as_ptr() as usize;
    let field = std::ptr::addr_of!(probe.get().vectorcall) as usize;
    let offset = ffi::Py_ssize_t::try_from(field - base)?;
    let tp = CoroutineMethod::type_object(py).as_type_ptr();
    // SAFETY: `tp` is `CoroutineMethod`'s type object, a heap type made by
    // pyo3, alive as long as the module, whose attributes nothing sets
    // after this (so it may be marked immutable). Every instance holds the
    // `vectorcall` field at `offset` from its start (the same Rust layout
    // as the probe's), set to `method_vectorcall` when made, so the flag
    // and the offset describe every instance; `PyVectorcall_Call` is the
    // `tp_call` of any type with a vectorcall. `PyType_Modified` drops what
    // the type cache holds of the type.
    unsafe {
        (*tp).tp_vectorcall_offset = offset;
        (*tp).tp_call = Some(ffi::PyVectorcall_Call);
        (*tp).tp_flags |= ffi::Py_TPFLAGS_HAVE_VECTORCALL | ffi::Py_TPFLAGS_METHOD_DESCRIPTOR;
        // (an immutable type, as the built-in method descriptor's is: the
        // interpreter's specialised method load (3.11 on) takes only
        // descriptors of such types; the type has no attribute to set)
        #[cfg(Py_3_10)]
        {
            (*tp).tp_flags |= ffi::Py_TPFLAGS_IMMUTABLETYPE;
        }
        ffi::PyType_Modified(tp);
    }
    Ok(())
}
