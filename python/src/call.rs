//! `read`, `readinto`, `seek`, `tell`, `readline` and `write` of a
//! `blockio.open` binary file: each returns a [`FileCall`], a coroutine object written
//! in Rust, whose first step serves the call inline when it can (see
//! [`crate::inline`]) and returns at once, and otherwise runs the file's
//! queued coroutine for it (`_read`, `_readinto`, `_seek`, `_tell`, `_readline`,
//! `_write_queued`, or `_read_after_a_turn` when the thread's turn of the
//! event loop is due: see [`crate::turns`]; `_read_pieces` when a read
//! served inline goes on in pieces), passing its steps through.
//!
//! A `read` whose turn is due, run by an asyncio task, takes the turn
//! itself instead (a loop of cached reads takes one about every 1 ms): it
//! holds the file's call queue for the task (`AsyncFile._turn_queue`),
//! yields once, bare (`None`, which an asyncio task answers by stepping
//! it again at the loop's next pass, as after `asyncio.sleep(0)`), and
//! reads at its next step, with no Python coroutine made, then hands the
//! queue on (`AsyncFile._turn_served`): about 16,000 instructions fewer
//! per turn, a third (`docs/benchmarks.md`, "A read's own turn of the
//! event loop"). Elsewhere (trio) `_read_after_a_turn` takes it.
//!
//! An `async def` would cost a coroutine (its frame, the generator made
//! and freed, the send) on every call, the inline ones included: about
//! 1,100 instructions of a cached 16 KiB `read`'s 8,000
//! (`docs/benchmarks.md`). A [`FileCall`] is one small object, and awaiting one
//! that is served is one slot call: from Python 3.10 on, `am_send`, which
//! hands the result back with `PYGEN_RETURN` (what `await` uses through
//! Python 3.11, and asyncio's tasks on every version); else `__next__`,
//! which raises `StopIteration(result)` as a finished coroutine does.
//!
//! The call is served at its first step, not when it is made, as a
//! coroutine's body runs: a call never awaited (or cancelled before it started)
//! does nothing, and calls made together run in the order they are first
//! stepped, as coroutines do. A [`FileCall`] never awaited warns of
//! nothing where a coroutine warns "never awaited" when freed: a finaliser
//! on every call would cost each of them; the queued coroutine, made only
//! once the call has started, is stepped to its end or closed with it.

use std::sync::{Mutex, MutexGuard, PoisonError};

use pyo3::exceptions::{PyRuntimeError, PyStopIteration, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyString, PyTuple};
use pyo3::{intern, PyTraverseError, PyTypeInfo, PyVisit};

use crate::inline::{
    read_inline, readinto_inline, readline_inline, seek_inline, tell_inline, write_inline,
    FileState,
};

/// The call and its arguments, as given.
pub(crate) enum Op {
    /// `read(size)`.
    Read(PyObject),
    /// `readinto(buf)`.
    Readinto(PyObject),
    /// `seek(offset, whence)`.
    Seek(PyObject, PyObject),
    /// `tell()`.
    Tell,
    /// `readline(size)`.
    Readline(PyObject),
    /// `write(data)`.
    Write(PyObject),
}

/// Where a [`FileCall`] is.
enum State {
    /// Not started: the file, and the call.
    Start(Py<FileState>, Op),
    /// Going through the file's call queue: the queued call's coroutine,
    /// whose steps are this call's.
    Queued(PyObject),
    /// A `read` served inline whose turn of the event loop was due: it
    /// holds the file's call queue and has yielded to the loop once, bare;
    /// its next step reads.
    Turning(Turn),
    /// Returned, raised, or closed.
    Done,
    /// Stepping the queued call (or serving the call) now: a step, throw
    /// or close made meanwhile, from inside it, is refused, as a running
    /// coroutine's.
    Running,
}

/// The file's call queue, taken for an asyncio task by a `read` that
/// takes its turn of the event loop itself (`AsyncFile._turn_queue`), and
/// the read's size: handed on when the call ends, is thrown into, closed
/// or freed (`AsyncFile._turn_done`), unless the read goes on in its
/// queued coroutine (`AsyncFile._read_turned`), which hands it on then.
pub(crate) struct Turn {
    /// The file, the read's size and the task holding the queue; `None`
    /// once handed on (or to the queued coroutine).
    held: Option<(Py<FileState>, usize, PyObject)>,
}

impl Turn {
    /// Takes the queue of `file` (free: `read_inline` found it so) for a
    /// `read(size)` whose turn is due, if an asyncio task runs the call
    /// (else `None`: the call goes through `_read_after_a_turn`).
    fn take(file: &Bound<'_, FileState>, size: &Bound<'_, PyAny>) -> PyResult<Option<Turn>> {
        let py = file.py();
        let Ok(n) = size.extract::<usize>() else {
            return Ok(None);
        };
        let task = file.call_method0(intern!(py, "_turn_queue"))?;
        if task.is_none() {
            return Ok(None);
        }
        let held = Some((file.clone().unbind(), n, task.unbind()));
        Ok(Some(Turn { held }))
    }

    /// The file, the size and the task, the queue no longer handed on
    /// when this is dropped.
    fn into_parts(mut self) -> Option<(Py<FileState>, usize, PyObject)> {
        self.held.take()
    }
}

/// Hands the queue that `task` holds for a call on `file` on
/// (`AsyncFile._turn_done`).
fn turn_done(file: &Bound<'_, FileState>, task: PyObject) -> PyResult<()> {
    let py = file.py();
    file.call_method1(intern!(py, "_turn_done"), (task,))
        .map(drop)
}

impl Drop for Turn {
    /// A call freed (or cleared) during its turn hands the queue on, as a
    /// queued coroutine's `finally` does when it is closed.
    fn drop(&mut self) {
        if let Some((file, _, task)) = self.held.take() {
            Python::with_gil(|py| {
                if let Err(e) = turn_done(file.bind(py), task) {
                    e.write_unraisable(py, Some(file.bind(py).as_any()));
                }
            });
        }
    }
}

/// What a step did: yielded a value to the event loop (the queued
/// coroutine waits), or returned the call's result.
enum Step {
    Yield(PyObject),
    Return(PyObject),
}

/// A call on a `blockio.open` binary file (`read`, `readinto`, `seek`,
/// `tell`, `readline`, `write`): a
/// coroutine object, for every user of one: `await`, asyncio's tasks
/// (`create_task`, `ensure_future`, `wait_for`, `gather`;
/// `asyncio.iscoroutine` is true of it, as `collections.abc.Coroutine`
/// is), trio and anyio; its `send`, `throw`, `close`, `__await__`,
/// `__next__` and `__iter__` act as a coroutine's. Awaited to its end, a
/// second await raises `RuntimeError`, as a coroutine's does.
///
/// Frozen, its state behind its own lock (held only to take or put the
/// state back, never across a Python call): its name is read with no
/// borrow, also while a step runs (asyncio formats a task's repr, which
/// asks the coroutine's `__qualname__`, from inside a `throw`).
#[pyclass(frozen, module = "blockio._blockio")]
pub(crate) struct FileCall {
    state: Mutex<State>,
    /// The method's name (`read`, `readinto`, `seek`, `tell`, `readline`, `write`), for `__name__` and
    /// `__qualname__`, which asyncio puts in a task's repr.
    name: &'static str,
}

impl FileCall {
    /// A `FileCall` of `op` on `file`, not started.
    pub(crate) fn make(file: &Bound<'_, FileState>, op: Op) -> PyResult<PyObject> {
        let name = match op {
            Op::Read(_) => "read",
            Op::Readinto(_) => "readinto",
            Op::Seek(..) => "seek",
            Op::Tell => "tell",
            Op::Readline(_) => "readline",
            Op::Write(_) => "write",
        };
        let state = Mutex::new(State::Start(file.clone().unbind(), op));
        Ok(Bound::new(file.py(), FileCall { state, name })?
            .into_any()
            .unbind())
    }

    /// One step, sent `arg`: the first serves the call inline if it can
    /// (and returns), else starts the queued coroutine; the others step
    /// that coroutine. A first step sent anything but None is refused, as
    /// by a coroutine just started (it stays unstarted).
    fn step(&self, arg: &Bound<'_, PyAny>) -> PyResult<Step> {
        let py = arg.py();
        match self.take()? {
            State::Start(file, op) => {
                if !arg.is_none() {
                    self.put(State::Start(file, op));
                    return Err(PyTypeError::new_err(
                        "can't send non-None value to a just-started coroutine",
                    ));
                }
                match serve(&file.into_bound(py), op) {
                    Ok(Served::Queued(coro)) => self.forward(coro, arg),
                    Ok(Served::Turn(turn)) => {
                        self.put(State::Turning(turn));
                        Ok(Step::Yield(py.None()))
                    }
                    Ok(Served::Now(value)) => {
                        self.put(State::Done);
                        Ok(Step::Return(value))
                    }
                    Err(e) => {
                        self.put(State::Done);
                        Err(e)
                    }
                }
            }
            State::Queued(coro) => self.forward(coro.into_bound(py), arg),
            State::Turning(turn) => self.after_turn(py, turn),
            State::Done | State::Running => {
                self.put(State::Done);
                Err(reused())
            }
        }
    }

    /// The step after a `read`'s own turn (whatever was sent, as a bare
    /// `yield` ignores it): the read served inline, holding the queue
    /// (`FileState::_read_after_turn`), and the queue handed on
    /// (`AsyncFile._turn_served`); or, when
    /// it goes on in pieces or through the engine, its queued coroutine
    /// `AsyncFile._read_turned`, which hands the queue on at its end.
    fn after_turn(&self, py: Python<'_>, turn: Turn) -> PyResult<Step> {
        let Some((file, size, task)) = turn.into_parts() else {
            self.put(State::Done);
            return Err(reused());
        };
        let file = file.into_bound(py);
        let got = match file.try_borrow_mut() {
            Ok(mut st) => st._read_after_turn(py, size),
            Err(_) => None,
        };
        match got {
            Some(data) if !data.bind(py).is(&*PyBool::new(py, true)) => {
                self.put(State::Done);
                file.call_method1(intern!(py, "_turn_served"), (task,))?;
                Ok(Step::Return(data))
            }
            got => {
                let data = got.unwrap_or_else(|| py.None());
                let coro = file.call_method1(
                    intern!(py, "_read_turned"),
                    (size, data, task.clone_ref(py)),
                );
                match coro {
                    Ok(coro) => self.forward(coro, &py.None().into_bound(py)),
                    Err(e) => {
                        self.put(State::Done);
                        turn_done(&file, task)?;
                        Err(e)
                    }
                }
            }
        }
    }

    /// Steps the queued coroutine `coro` with `arg`; keeps it while it
    /// yields.
    fn forward(&self, coro: Bound<'_, PyAny>, arg: &Bound<'_, PyAny>) -> PyResult<Step> {
        let py = arg.py();
        let sent = coro.call_method1(intern!(py, "send"), (arg,));
        match sent {
            Ok(yielded) => {
                self.put(State::Queued(coro.unbind()));
                Ok(Step::Yield(yielded.unbind()))
            }
            Err(e) => {
                self.put(State::Done);
                if !e.is_instance_of::<PyStopIteration>(py) {
                    return Err(e);
                }
                let stop = e.into_value(py).into_bound(py);
                Ok(Step::Return(stop.getattr(intern!(py, "value"))?.unbind()))
            }
        }
    }

    /// The frame of a call not started (see `cr_frame`), `args` its
    /// method's arguments, the file first: that of the method's template
    /// coroutine (`blockio/_file.py`) made with them and closed before it
    /// ran (it warns of nothing; its frame keeps the code, the arguments
    /// and, before Python 3.11, the `f_lasti` of -1 that
    /// `inspect.getcoroutinestate` reads as created); `None` if the
    /// template is unknown.
    fn start_frame(&self, py: Python<'_>, args: Vec<PyObject>) -> PyResult<PyObject> {
        let Some(template) = crate::coromethod::template_of(py, self.name) else {
            return Ok(py.None());
        };
        let shadow = template.call1(PyTuple::new(py, args)?)?;
        let frame = shadow.getattr(intern!(py, "cr_frame"))?;
        shadow.call_method0(intern!(py, "close"))?;
        Ok(frame.unbind())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The state, `Running` left in its place; refused while a step
    /// runs (a step, throw or close from inside it).
    fn take(&self) -> PyResult<State> {
        let mut state = self.lock();
        if matches!(*state, State::Running) {
            return Err(PyValueError::new_err("coroutine already executing"));
        }
        Ok(std::mem::replace(&mut *state, State::Running))
    }

    /// Puts `state` back in place of `Running` (so nothing is freed, and
    /// no Python code runs, with the lock held).
    fn put(&self, state: State) {
        *self.lock() = state;
    }

    /// A step as `send` and `__next__` answer it: the value yielded, or
    /// `StopIteration(result)`.
    fn step_raising(&self, arg: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        match self.step(arg)? {
            Step::Yield(yielded) => Ok(yielded),
            Step::Return(value) => Err(PyStopIteration::new_err((value,))),
        }
    }
}

/// What the first step found: the result, served inline, or the queued
/// call's coroutine.
enum Served<'py> {
    Now(PyObject),
    Queued(Bound<'py, PyAny>),
    /// A `read` whose turn is due, the queue taken for its task: it
    /// yields to the loop, bare, and reads at its next step.
    Turn(Turn),
}

/// Serves `op` on `file` inline if it can be (see [`read_inline`],
/// [`readinto_inline`], [`seek_inline`], [`tell_inline`], [`readline_inline`],
/// [`write_inline`]), else makes its queued coroutine.
fn serve<'py>(file: &Bound<'py, FileState>, op: Op) -> PyResult<Served<'py>> {
    let py = file.py();
    let queued = |name: &Bound<'py, PyString>, args: Bound<'py, PyTuple>| {
        Ok(Served::Queued(file.call_method1(name, args)?))
    };
    match op {
        Op::Read(size) => {
            let size = size.into_bound(py);
            match read_inline(file, &size) {
                Some(got) if got.bind(py).is(&*PyBool::new(py, false)) => {
                    match Turn::take(file, &size)? {
                        Some(turn) => Ok(Served::Turn(turn)),
                        None => {
                            queued(intern!(py, "_read_after_a_turn"), PyTuple::new(py, [size])?)
                        }
                    }
                }
                Some(got) if got.bind(py).is(&*PyBool::new(py, true)) => {
                    queued(intern!(py, "_read_pieces"), PyTuple::new(py, [size])?)
                }
                Some(got) => Ok(Served::Now(got)),
                None => queued(intern!(py, "_read"), PyTuple::new(py, [size])?),
            }
        }
        Op::Readinto(buf) => {
            let buf = buf.into_bound(py);
            match readinto_inline(file, &buf) {
                Some(n) => Ok(Served::Now(n.into_pyobject(py)?.into_any().unbind())),
                None => queued(intern!(py, "_readinto"), PyTuple::new(py, [buf])?),
            }
        }
        Op::Seek(offset, whence) => {
            let (offset, whence) = (offset.into_bound(py), whence.into_bound(py));
            if let Some(to) = seek_inline(file, &offset, &whence) {
                return Ok(Served::Now(to.into_pyobject(py)?.into_any().unbind()));
            }
            queued(intern!(py, "_seek"), PyTuple::new(py, [offset, whence])?)
        }
        Op::Tell => match tell_inline(file) {
            Some(pos) => Ok(Served::Now(pos.into_pyobject(py)?.into_any().unbind())),
            None => queued(intern!(py, "_tell"), PyTuple::empty(py)),
        },
        Op::Readline(size) => {
            let size = size.into_bound(py);
            match readline_inline(file, &size) {
                Some(line) => Ok(Served::Now(line)),
                None => queued(intern!(py, "_readline"), PyTuple::new(py, [size])?),
            }
        }
        Op::Write(data) => {
            let data = data.into_bound(py);
            match write_inline(file, &data) {
                Some(n) => Ok(Served::Now(n.into_pyobject(py)?.into_any().unbind())),
                None => queued(intern!(py, "_write_queued"), PyTuple::new(py, [data])?),
            }
        }
    }
}

/// What a coroutine stepped after its end raises.
fn reused() -> PyErr {
    PyRuntimeError::new_err("cannot reuse already awaited coroutine")
}

#[pymethods]
impl FileCall {
    /// The method's name, as a coroutine's `__name__` is its function's.
    #[getter]
    fn __name__(&self) -> &'static str {
        self.name
    }

    /// `AsyncFile.` and the method's name, as a coroutine's `__qualname__`.
    #[getter]
    fn __qualname__(&self) -> String {
        format!("AsyncFile.{}", self.name)
    }

    /// Whether a step of the call is running (as `cr_running`).
    #[getter]
    fn cr_running(&self) -> bool {
        matches!(*self.lock(), State::Running)
    }

    /// Whether the call waits, suspended, in its queued coroutine (as
    /// `cr_suspended`, which `inspect.getcoroutinestate` reads from
    /// Python 3.11 on).
    #[getter]
    fn cr_suspended(&self) -> bool {
        matches!(*self.lock(), State::Queued(_) | State::Turning(_))
    }

    /// What the call awaits: its queued coroutine while it waits in it,
    /// else `None` (as `cr_await`).
    #[getter]
    fn cr_await(&self, py: Python<'_>) -> PyObject {
        match &*self.lock() {
            State::Queued(coro) => coro.clone_ref(py),
            _ => py.None(),
        }
    }

    /// The frame (as `cr_frame`): not started, a frame of the method's
    /// template with the call's arguments, never run (a new one each
    /// time: see `start_frame`); waiting, its queued coroutine's; waiting
    /// for its own turn of the event loop, that of a generator suspended
    /// at a bare `yield` (`_turn_frame` in `blockio/_file.py`); done (or
    /// running), `None`. (What it needs is taken under the lock, which no
    /// Python call is made under.)
    #[getter]
    fn cr_frame(&self, py: Python<'_>) -> PyResult<PyObject> {
        enum Found {
            Start(Vec<PyObject>),
            Queued(PyObject),
            Turning,
            Nothing,
        }
        let found = match &*self.lock() {
            State::Start(file, op) => {
                let mut args = vec![file.clone_ref(py).into_any()];
                match op {
                    Op::Read(size) => args.push(size.clone_ref(py)),
                    Op::Seek(offset, whence) => {
                        args.push(offset.clone_ref(py));
                        args.push(whence.clone_ref(py));
                    }
                    Op::Tell => {}
                    Op::Readinto(arg) | Op::Readline(arg) | Op::Write(arg) => {
                        args.push(arg.clone_ref(py))
                    }
                }
                Found::Start(args)
            }
            State::Queued(coro) => Found::Queued(coro.clone_ref(py)),
            State::Turning(_) => Found::Turning,
            State::Done | State::Running => Found::Nothing,
        };
        match found {
            Found::Start(args) => self.start_frame(py, args),
            Found::Queued(coro) => coro.getattr(py, intern!(py, "cr_frame")),
            // (a generator's, suspended at a bare `yield`: `_file.py`)
            Found::Turning => Ok(py
                .import("blockio._file")?
                .call_method0(intern!(py, "_turn_frame"))?
                .unbind()),
            Found::Nothing => Ok(py.None()),
        }
    }

    /// The method's code (as `cr_code`): its template's
    /// (`blockio/_file.py`), or `None` if unknown.
    #[getter]
    fn cr_code(&self, py: Python<'_>) -> PyResult<PyObject> {
        match crate::coromethod::template_of(py, self.name) {
            Some(t) => Ok(t.getattr(intern!(py, "__code__"))?.unbind()),
            None => Ok(py.None()),
        }
    }

    /// Where the call was made (as `cr_origin`): not recorded, `None`.
    #[getter]
    fn cr_origin(&self, py: Python<'_>) -> PyObject {
        py.None()
    }

    fn __await__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// The next step: the value the queued call yields, or
    /// `StopIteration(result)`.
    fn __next__(&self, py: Python<'_>) -> PyResult<PyObject> {
        self.step_raising(&py.None().into_bound(py))
    }

    /// A step sent `value` (None to start): the value the queued call
    /// yields, or `StopIteration(result)`.
    fn send(&self, value: &Bound<'_, PyAny>) -> PyResult<PyObject> {
        self.step_raising(value)
    }

    /// Throws an exception in: into the queued call if it runs (what it
    /// yields or raises next), else raised here, and the call is done
    /// without having done anything, as a coroutine not started.
    #[pyo3(signature = (typ, val = None, tb = None))]
    fn throw(
        &self,
        typ: &Bound<'_, PyAny>,
        val: Option<&Bound<'_, PyAny>>,
        tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyObject> {
        let py = typ.py();
        let state = self.take()?;
        if let State::Queued(coro) = state {
            // (the arguments as given: Python 3.12 warns of the
            // three-argument form only when it is used)
            let mut args = vec![typ.clone()];
            args.extend(val.cloned());
            args.extend(tb.cloned());
            let thrown = PyTuple::new(py, args)
                .and_then(|args| coro.bind(py).call_method1(intern!(py, "throw"), args));
            return match thrown {
                Ok(yielded) => {
                    self.put(State::Queued(coro));
                    Ok(yielded.unbind())
                }
                Err(e) => {
                    self.put(State::Done);
                    Err(e)
                }
            };
        }
        self.put(State::Done);
        if let State::Turning(turn) = state {
            // (the read has not run: nothing moved, the queue is handed on)
            if let Some((file, _, task)) = turn.into_parts() {
                turn_done(file.bind(py), task)?;
            }
        } else {
            drop(state);
        }
        match val.filter(|v| !v.is_none()) {
            Some(v) if v.is_instance(typ).unwrap_or(false) => Err(PyErr::from_value(v.clone())),
            Some(v) => Err(PyErr::from_value(typ.call1((v,))?)),
            None => Err(PyErr::from_value(typ.clone())),
        }
    }

    /// Closes the queued call if it runs; the call is done.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let state = self.take()?;
        let closed = match state {
            State::Queued(ref coro) => coro.bind(py).call_method0(intern!(py, "close")).map(drop),
            State::Turning(turn) => match turn.into_parts() {
                Some((file, _, task)) => turn_done(file.bind(py), task),
                None => Ok(()),
            },
            _ => Ok(()),
        };
        self.put(State::Done);
        closed
    }

    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        // (never held across a Python call, so never held here: the
        // collector runs only inside one)
        let Ok(state) = self.state.try_lock() else {
            return Ok(());
        };
        match &*state {
            State::Start(file, op) => {
                visit.call(file)?;
                match op {
                    Op::Read(size) => visit.call(size),
                    Op::Seek(offset, whence) => {
                        visit.call(offset)?;
                        visit.call(whence)
                    }
                    Op::Tell => Ok(()),
                    Op::Readinto(arg) | Op::Readline(arg) | Op::Write(arg) => visit.call(arg),
                }
            }
            State::Queued(coro) => visit.call(coro),
            State::Turning(turn) => match &turn.held {
                Some((file, _, task)) => {
                    visit.call(file)?;
                    visit.call(task)
                }
                None => Ok(()),
            },
            State::Done | State::Running => Ok(()),
        }
    }

    fn __clear__(&self) {
        let state = std::mem::replace(&mut *self.lock(), State::Done);
        drop(state); // (freed with the lock let go: a finaliser may run)
    }
}

/// `am_await` of [`FileCall`]: the call itself (its own iterator), with
/// none of a method call's argument handling.
unsafe extern "C" fn call_await(slf: *mut pyo3::ffi::PyObject) -> *mut pyo3::ffi::PyObject {
    // SAFETY: CPython calls `am_await` holding the GIL with `slf` a live
    // object; the new reference returned is the caller's.
    unsafe { pyo3::ffi::Py_IncRef(slf) };
    slf
}

/// `am_send` of [`FileCall`]: a step, its result handed back with
/// `PYGEN_RETURN` (no `StopIteration` made) or its yield with
/// `PYGEN_NEXT`. Run inside pyo3's trampoline for a three-argument slot
/// (the GIL counted as held, panics caught), `result` passed through as
/// its third argument; [`send_step`] answers which status it was.
#[cfg(Py_3_10)]
unsafe extern "C" fn call_send(
    slf: *mut pyo3::ffi::PyObject,
    arg: *mut pyo3::ffi::PyObject,
    result: *mut *mut pyo3::ffi::PyObject,
) -> pyo3::ffi::PySendResult {
    use pyo3::ffi::PySendResult::{PYGEN_ERROR, PYGEN_NEXT, PYGEN_RETURN};
    // (`pyo3::impl_` is the support pyo3's own macros expand to, not its
    // stable API: the crate is held at 0.23 in `python/Cargo.toml`, and
    // this call is to be checked again on an upgrade.)
    // SAFETY: CPython calls a type's `am_send` holding the GIL, as the
    // trampoline needs, with `slf` a `FileCall` and `result` valid for a
    // write (see `send_step`, which the trampoline calls with them).
    let status =
        unsafe { pyo3::impl_::trampoline::ternaryfunc(slf, arg, result.cast(), send_step) };
    if status.is_null() {
        // SAFETY: `result` is valid for writes (see above); the error is set.
        unsafe { *result = std::ptr::null_mut() };
        PYGEN_ERROR
    } else if status == yielded_status() {
        PYGEN_NEXT
    } else {
        PYGEN_RETURN
    }
}

/// What [`send_step`] returns for a step that yielded (an object only
/// compared, never handed out: the `True` singleton).
#[cfg(Py_3_10)]
fn yielded_status() -> *mut pyo3::ffi::PyObject {
    // SAFETY: the address of the `True` singleton, alive as long as the
    // interpreter; no reference is taken or given.
    unsafe { pyo3::ffi::Py_True() }
}

/// What [`send_step`] returns for a step that returned (the `False`
/// singleton, only compared).
#[cfg(Py_3_10)]
fn returned_status() -> *mut pyo3::ffi::PyObject {
    // SAFETY: as in `yielded_status`.
    unsafe { pyo3::ffi::Py_False() }
}

/// A step of the `FileCall` `slf` sent `arg`, for [`call_send`]: writes
/// the value returned or yielded to `result` (a new reference) and says
/// which with a status pointer (`yielded_status()` or `returned_status()`);
/// an error is the trampoline's to set.
#[cfg(Py_3_10)]
unsafe fn send_step(
    py: Python<'_>,
    slf: *mut pyo3::ffi::PyObject,
    arg: *mut pyo3::ffi::PyObject,
    result: *mut pyo3::ffi::PyObject,
) -> PyResult<*mut pyo3::ffi::PyObject> {
    // SAFETY: `slf` is a live `FileCall` (the slot is set on its type
    // alone, which cannot be subclassed) and `arg` a live object, both
    // borrowed for the call (see `call_send`).
    let me = unsafe { Bound::from_borrowed_ptr(py, slf).downcast_into_unchecked::<FileCall>() };
    // SAFETY: see above.
    let arg = unsafe { Bound::from_borrowed_ptr(py, arg) };
    let (out, status) = match me.get().step(&arg)? {
        Step::Return(value) => (value, returned_status()),
        Step::Yield(value) => (value, yielded_status()),
    };
    let result: *mut *mut pyo3::ffi::PyObject = result.cast();
    // SAFETY: `result` is `am_send`'s place for the object handed back,
    // valid for writes (see `call_send`); the new reference is the
    // caller's.
    unsafe { *result = out.into_ptr() };
    Ok(status)
}

/// Adds [`FileCall`] to the module, with its `am_await` slot going
/// straight back to it and, from Python 3.10 on, its `am_send` slot (pyo3
/// 0.23 fills neither as directly).
pub(crate) fn add(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<FileCall>()?;
    let ty = FileCall::type_object(m.py());
    let tp = ty.as_type_ptr();
    // SAFETY: `tp` is `FileCall`'s type object, a heap type made by pyo3,
    // alive as long as the module (which holds it). A heap type's
    // `tp_as_async` points into its own `PyHeapTypeObject` (never shared
    // with another type); no instance exists yet, and `PyType_Modified`
    // drops what the type cache holds of the type. The slots' functions
    // keep their contracts (see each).
    unsafe {
        let slots = (*tp).tp_as_async;
        if !slots.is_null() {
            (*slots).am_await = Some(call_await);
            #[cfg(Py_3_10)]
            {
                (*slots).am_send = Some(call_send);
            }
            pyo3::ffi::PyType_Modified(tp);
        }
    }
    Ok(())
}
