//! One turn of blockio's event loops (`UringEventLoop._run_once`,
//! `EpollEventLoop._run_once`) in Rust: asyncio's
//! `BaseEventLoop._run_once`, step for step, without its Python frame nor
//! one `Handle._run` frame per callback.
//!
//! # The containers are asyncio's; the turn is Rust
//!
//! The ready queue is the loop's `_ready` deque, the timers its
//! `_scheduled` list kept as a heap by `heapq` (its `heappop` and
//! `heapify`, so that the order is `TimerHandle`'s own comparison), the
//! count of cancelled timers its `_timer_cancelled_count`: asyncio's code
//! (`call_soon`, `call_at`, `TimerHandle.cancel`, a future's callbacks)
//! and tests that look into them go on working unchanged. What is Rust is
//! the walk through one turn:
//!
//! 1. cancelled timers are swept: all of them (the heap rebuilt) when
//!    more than 100 are scheduled and over half are cancelled, else those
//!    at the head of the heap;
//! 2. the wait's timeout: 0 when a callback is ready or the loop is
//!    stopping, else the nearest deadline from now (at most a day), else
//!    none;
//! 3. the wait: on io_uring the proactor's wait in Rust
//!    (`select::select_batch`, the body of `RingProactor.select`), else
//!    the loop's `_selector.select(timeout)` and `_process_events`;
//! 4. the timers due by now plus the clock's resolution are moved to
//!    `_ready`;
//! 5. the callbacks ready when step 5 began run, in order, a cancelled
//!    one skipped; what they schedule runs in the next turn.
//!
//! A handle whose `_run` is asyncio's own `Handle._run` (asked for each
//! handle, the answer kept per class under its version tag: `own_run`;
//! so one a tool replaced, even after the loop ran, is called instead)
//! runs as `Handle._run` would: `handle._context.run(callback, *args)`
//! called from here; an exception other than `SystemExit` and
//! `KeyboardInterrupt` (which propagate, the rest of `_ready` left for
//! the next turn) goes to `handle._loop.call_exception_handler` with
//! `Handle._run`'s context (`message` "Exception in callback ...",
//! `exception`, `handle`, and `source_traceback` when the handle has
//! one), the exception being handled meanwhile (as in an `except` block:
//! a handler's `sys.exc_info()` or `logging.exception` sees it). Any
//! other handle runs through its own `_run`. In debug mode each callback
//! runs as asyncio's debug branch does: `_current_handle` set, `_run`
//! called, and one slower than `slow_callback_duration` logged.
//!
//! A handle whose class is exactly `Handle` or `TimerHandle` has its
//! slots (`_cancelled`, `_args`, `_context`, `_callback`) read through
//! their member descriptors (`PyMember_GetOne`, what the descriptor's own
//! `__get__` does): a generic attribute lookup from C costs more than the
//! interpreter's specialised one, and with it the turn ran more
//! instructions per callback than asyncio's Python loop
//! (`docs/benchmarks.md`, "The loop's turn in Rust").
//!
//! The clock is the loop's `time()`; when that is asyncio's own
//! (`time.monotonic()`) it is read here from the same clock
//! (`CLOCK_MONOTONIC`) without a call, and not read at all when no timer
//! is scheduled (asyncio reads it to compare with no timer).

use pyo3::exceptions::{PyKeyboardInterrupt, PySystemExit};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyDict, PyList, PyTuple};

use super::own_run::OwnRun;
use super::select::select_batch;
use super::vcall::call_in_place;

/// What a turn takes from asyncio, looked up once per process.
struct Asyncio {
    /// `heapq.heappop`
    heappop: PyObject,
    /// `heapq.heapify`
    heapify: PyObject,
    /// `asyncio.events.Handle._run`, if it was asyncio's own when first
    /// looked up (its code compiled from `asyncio/events.py`; a tool may
    /// have replaced it before the first turn), and whether a handle's
    /// `_run` is that one: such a handle runs from here, any other
    /// through its `_run`.
    own_run: OwnRun,
    /// `asyncio.events.Handle`
    handle_class: PyObject,
    /// `Handle`'s slots `_cancelled`, `_args`, `_context`, `_callback`
    /// (their `member_descriptor`s), read from a handle of asyncio's
    /// classes without an attribute lookup (see [`Slot`]).
    slots: [Slot; 4],
    /// `TimerHandle`'s slot `_when`, read from a handle whose class is
    /// exactly `TimerHandle`.
    when: Slot,
    /// `asyncio.events.TimerHandle`
    timer_class: PyObject,
    /// `asyncio.base_events.BaseEventLoop.time`: a loop whose `time` is
    /// this one has its clock read here.
    base_time: PyObject,
    /// `types.MethodType`, the type of a bound method.
    method_type: PyObject,
    /// `contextvars.Context.run`, called with the context first.
    context_run: PyObject,
    /// `asyncio.format_helpers._format_callback_source`
    format_source: PyObject,
    /// `asyncio.base_events._format_handle`
    format_handle: PyObject,
    /// `asyncio.log.logger`
    logger: PyObject,
    /// `base_events._MIN_SCHEDULED_TIMER_HANDLES`
    min_scheduled: usize,
    /// `base_events._MIN_CANCELLED_TIMER_HANDLES_FRACTION`
    min_cancelled_fraction: f64,
    /// `base_events.MAXIMUM_SELECT_TIMEOUT`
    max_timeout: f64,
    /// Whether `_format_callback_source` takes `debug` (Python 3.13 on).
    format_takes_debug: bool,
}

static ASYNCIO: GILOnceCell<Asyncio> = GILOnceCell::new();

/// The index in [`Asyncio::slots`] of `_cancelled`, `_args`, `_context`
/// and `_callback`.
const CANCELLED: usize = 0;
const ARGS: usize = 1;
const CONTEXT: usize = 2;
const CALLBACK: usize = 3;

/// One slot of asyncio's `Handle` class (`__slots__`): its
/// `member_descriptor`, through which a handle whose class is exactly
/// `Handle` or `TimerHandle` has the slot read as the descriptor's own
/// `__get__` reads it (`PyMember_GetOne`), without looking the name up
/// through the class first (a generic attribute lookup costs more than
/// the interpreter's specialised one that `Handle._run` would use).
struct Slot(PyObject);

impl Slot {
    /// `Handle.__dict__[name]`, which must be a `member_descriptor`.
    fn of(events: &Bound<'_, PyModule>, class: &str, name: &str) -> PyResult<Slot> {
        let py = events.py();
        let descr = events.getattr(class)?.getattr("__dict__")?.get_item(name)?;
        let member = py.import("types")?.getattr("MemberDescriptorType")?;
        if !descr.get_type().is(&member) {
            return Err(pyo3::exceptions::PyTypeError::new_err(format!(
                "asyncio.events.{class}.{name} is not a slot"
            )));
        }
        Ok(Slot(descr.unbind()))
    }

    /// The slot's value in `handle`, whose class must be exactly the
    /// slot's class or (for a slot of `Handle`) `TimerHandle` (checked by
    /// the caller: [`exact`]).
    fn get<'py>(&self, py: Python<'py>, handle: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: the GIL is held (`py`). `self.0` is a live
        // `member_descriptor` (its type checked in `of`, held by this
        // value), so it is a `PyMemberDescrObject` whose `d_member`
        // points into its class, which the descriptor keeps alive. That
        // member describes a slot of the class's instance layout, and
        // `handle`'s class is that class or `TimerHandle` for a slot of
        // `Handle` (a subclass that keeps `Handle`'s layout as its
        // prefix), so the member's offset lies within `handle`. `PyMember_GetOne` returns a new
        // reference, or NULL with `AttributeError` set for an unset slot,
        // which `from_owned_ptr_or_err` takes over.
        unsafe {
            let descr = self.0.as_ptr() as *mut pyo3::ffi::PyMemberDescrObject;
            let out = pyo3::ffi::PyMember_GetOne(
                handle.as_ptr() as *const std::os::raw::c_char,
                // (pyo3-ffi types the field `PyGetSetDef *`; CPython's
                // `PyMemberDescrObject.d_member` is a `PyMemberDef *`)
                (*descr).d_member.cast::<pyo3::ffi::PyMemberDef>(),
            );
            Bound::from_owned_ptr_or_err(py, out)
        }
    }
}

/// Whether `handle`'s class is exactly asyncio's `Handle` or
/// `TimerHandle` (its slots then read through [`Slot::get`]).
fn exact(py: Python<'_>, asyncio: &Asyncio, handle: &Bound<'_, PyAny>) -> bool {
    let class = handle.get_type();
    class.is(asyncio.handle_class.bind(py)) || class.is(asyncio.timer_class.bind(py))
}

/// The slot `index` of [`Asyncio::slots`] (named `name`) of `handle`.
fn slot<'py>(
    py: Python<'py>,
    asyncio: &Asyncio,
    exact: bool,
    handle: &Bound<'py, PyAny>,
    index: usize,
    name: &Bound<'py, pyo3::types::PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    if exact {
        asyncio.slots[index].get(py, handle)
    } else {
        handle.getattr(name)
    }
}

/// Whether `function` is `module`'s own `name`: its code compiled from
/// that module's file under that name (not a tool's wrapper, which
/// `functools.wraps` names alike but compiles elsewhere).
fn compiled_in(
    function: &Bound<'_, PyAny>,
    module: &Bound<'_, PyModule>,
    name: &str,
) -> PyResult<bool> {
    let Ok(code) = function.getattr("__code__") else {
        return Ok(false);
    };
    Ok(code.getattr("co_name")?.eq(name)?
        && code
            .getattr("co_filename")?
            .eq(module.getattr("__file__")?)?)
}

impl Asyncio {
    fn get(py: Python<'_>) -> PyResult<&Asyncio> {
        ASYNCIO.get_or_try_init(py, || {
            let heapq = py.import("heapq")?;
            let base = py.import("asyncio.base_events")?;
            let events = py.import("asyncio.events")?;
            Ok(Asyncio {
                heappop: heapq.getattr("heappop")?.unbind(),
                heapify: heapq.getattr("heapify")?.unbind(),
                own_run: OwnRun::new({
                    let run = events.getattr("Handle")?.getattr("_run")?;
                    compiled_in(&run, &events, "_run")?.then(|| run.unbind())
                }),
                handle_class: events.getattr("Handle")?.unbind(),
                slots: [
                    Slot::of(&events, "Handle", "_cancelled")?,
                    Slot::of(&events, "Handle", "_args")?,
                    Slot::of(&events, "Handle", "_context")?,
                    Slot::of(&events, "Handle", "_callback")?,
                ],
                when: Slot::of(&events, "TimerHandle", "_when")?,
                timer_class: events.getattr("TimerHandle")?.unbind(),
                base_time: base.getattr("BaseEventLoop")?.getattr("time")?.unbind(),
                method_type: py.import("types")?.getattr("MethodType")?.unbind(),
                context_run: py
                    .import("contextvars")?
                    .getattr("Context")?
                    .getattr("run")?
                    .unbind(),
                format_source: py
                    .import("asyncio.format_helpers")?
                    .getattr("_format_callback_source")?
                    .unbind(),
                format_handle: base.getattr("_format_handle")?.unbind(),
                logger: py.import("asyncio.log")?.getattr("logger")?.unbind(),
                min_scheduled: base.getattr("_MIN_SCHEDULED_TIMER_HANDLES")?.extract()?,
                min_cancelled_fraction: base
                    .getattr("_MIN_CANCELLED_TIMER_HANDLES_FRACTION")?
                    .extract()?,
                max_timeout: base.getattr("MAXIMUM_SELECT_TIMEOUT")?.extract()?,
                format_takes_debug: py.version_info() >= (3, 13),
            })
        })
    }
}

/// Runs one turn of `event_loop` (a `BaseEventLoop`), as asyncio's
/// `BaseEventLoop._run_once` (see the module's doc). `proactor` is the
/// loop's `RingProactor`, whose wait then runs here without its Python
/// frame, or `None`: the loop's `_selector.select` and
/// `_process_events` are called.
#[pyfunction]
#[pyo3(signature = (event_loop, proactor))]
pub(crate) fn run_turn(
    py: Python<'_>,
    event_loop: &Bound<'_, PyAny>,
    proactor: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let asyncio = Asyncio::get(py)?;
    // (from the io_uring loop's dictionary, which it has anyway: see `Loop`)
    let event_loop = &Loop::of(event_loop, proactor.is_some())?;
    let clock = Clock::of(py, asyncio, event_loop)?;
    sweep_cancelled(py, asyncio, event_loop)?;
    let timeout = timeout(py, asyncio, event_loop, &clock)?;
    match proactor {
        Some(proactor) => select_batch(py, proactor, timeout)?,
        None => {
            let timeout = match timeout {
                // (asyncio's timeout when a callback is ready: the int 0)
                Some(0.0) => 0i32.into_pyobject(py)?.into_any(),
                Some(t) => t.into_pyobject(py)?.into_any(),
                None => py.None().into_bound(py),
            };
            let events = event_loop
                .get(intern!(py, "_selector"))?
                .call_method1(intern!(py, "select"), (timeout,))?;
            event_loop
                .obj
                .call_method1(intern!(py, "_process_events"), (events,))?;
        }
    }
    move_due_timers(py, asyncio, event_loop, &clock)?;
    run_ready(py, asyncio, event_loop)
}

/// An event loop, whose attributes a turn reads (`_ready`,
/// `_scheduled`, `_stopping`, ...), from its instance dictionary when it
/// is given one, else by generic attribute lookup.
///
/// From Python 3.11 an instance keeps its attributes in an array laid out
/// by its class (at most 30 names per class on 3.11), which the
/// interpreter's specialised attribute loads index directly, until its
/// `__dict__` is asked for: from then on they live in that dictionary and
/// every Python access to them (`call_soon`'s, a handle's `__init__`)
/// costs more. The epoll loop (27 attributes) keeps that array, so its
/// dictionary is never asked for here: reading it cost 3,800 instructions
/// per callback more in Python with one callback per turn
/// (`docs/benchmarks.md`). The io_uring loop (34 attributes) has its
/// dictionary anyway, and reading from it costs less than a generic
/// lookup through the loop's class (none of these names is a descriptor
/// of asyncio's classes; a name not there is looked up as an attribute).
struct Loop<'a, 'py> {
    obj: &'a Bound<'py, PyAny>,
    dict: Option<Bound<'py, PyDict>>,
}

impl<'a, 'py> Loop<'a, 'py> {
    /// `obj`, its attributes read from its `__dict__` when `dict`.
    fn of(obj: &'a Bound<'py, PyAny>, dict: bool) -> PyResult<Self> {
        let dict = match dict {
            true => Some(
                obj.getattr(intern!(obj.py(), "__dict__"))?
                    .downcast_into::<PyDict>()?,
            ),
            false => None,
        };
        Ok(Loop { obj, dict })
    }

    /// The loop's attribute `name`.
    fn get(&self, name: &Bound<'py, pyo3::types::PyString>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(dict) = &self.dict {
            if let Some(value) = dict.get_item(name)? {
                return Ok(value);
            }
        }
        self.obj.getattr(name)
    }
}

/// The loop's clock: read here when the loop's `time` is asyncio's own.
enum Clock<'py> {
    /// `CLOCK_MONOTONIC`, what `time.monotonic()` reads.
    Monotonic,
    /// The loop's own `time()` (a subclass's, or a test's stand-in).
    Loop(Bound<'py, PyAny>),
}

impl<'py> Clock<'py> {
    fn of(py: Python<'py>, asyncio: &Asyncio, event_loop: &Loop<'_, 'py>) -> PyResult<Self> {
        let name = intern!(py, "time");
        let base_time = asyncio.base_time.bind(py);
        let own = match &event_loop.dict {
            // (its class's `time`, unless the instance has its own)
            Some(dict) => {
                event_loop.obj.get_type().getattr(name)?.is(base_time) && !dict.contains(name)?
            }
            // (the loop's `time` as its turn would call it: asyncio's own
            // when it is a method bound to `BaseEventLoop.time`, whichever
            // loop it is bound to, since that reads `time.monotonic()`)
            None => {
                let time = event_loop.obj.getattr(name)?;
                time.get_type().is(asyncio.method_type.bind(py))
                    && time.getattr(intern!(py, "__func__"))?.is(base_time)
            }
        };
        Ok(if own {
            Clock::Monotonic
        } else {
            Clock::Loop(event_loop.obj.clone())
        })
    }

    /// Now, in the loop's time.
    fn now(&self, py: Python<'py>) -> PyResult<f64> {
        match self {
            Clock::Monotonic => {
                let mut t = libc::timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                // SAFETY: `t` is a valid, writable `timespec` for the
                // call's duration; `CLOCK_MONOTONIC` always exists on
                // Linux. (libc's, through the vDSO, as `time.monotonic()`
                // reads it; rustix's own vDSO lookup is not used: it reads
                // the auxiliary vector, which valgrind's does not map.)
                let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
                if rc != 0 {
                    return Err(std::io::Error::last_os_error().into());
                }
                Ok(t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9)
            }
            Clock::Loop(l) => l.call_method0(intern!(py, "time"))?.extract(),
        }
    }

    /// Whether reading the clock can be left out when its value is not
    /// used (it calls nothing of the loop's).
    fn silent(&self) -> bool {
        matches!(self, Clock::Monotonic)
    }
}

/// The loop's `_scheduled` heap.
fn scheduled<'py>(py: Python<'py>, event_loop: &Loop<'_, 'py>) -> PyResult<Bound<'py, PyList>> {
    Ok(event_loop
        .get(intern!(py, "_scheduled"))?
        .downcast_into::<PyList>()?)
}

/// Whether `handle` is cancelled (`_cancelled`).
fn cancelled(py: Python<'_>, handle: &Bound<'_, PyAny>) -> PyResult<bool> {
    handle.getattr(intern!(py, "_cancelled"))?.is_truthy()
}

/// Takes the nearest timer off `heap` (`heapq.heappop`), marked as no
/// longer scheduled.
fn pop_timer<'py>(
    py: Python<'py>,
    asyncio: &Asyncio,
    heap: &Bound<'py, PyList>,
) -> PyResult<Bound<'py, PyAny>> {
    let handle = asyncio.heappop.bind(py).call1((heap,))?;
    handle.setattr(intern!(py, "_scheduled"), false)?;
    Ok(handle)
}

/// Step 1: the cancelled timers swept, all of them when they are many,
/// else those at the head of the heap.
fn sweep_cancelled(py: Python<'_>, asyncio: &Asyncio, event_loop: &Loop<'_, '_>) -> PyResult<()> {
    let heap = scheduled(py, event_loop)?;
    let count = heap.len();
    let name = intern!(py, "_timer_cancelled_count");
    let mut cancelled_count: i64 = event_loop.get(name)?.extract()?;
    if count > asyncio.min_scheduled
        && cancelled_count as f64 / count as f64 > asyncio.min_cancelled_fraction
    {
        let kept = PyList::empty(py);
        for handle in heap.iter() {
            if cancelled(py, &handle)? {
                handle.setattr(intern!(py, "_scheduled"), false)?;
            } else {
                kept.append(handle)?;
            }
        }
        asyncio.heapify.bind(py).call1((&kept,))?;
        event_loop.obj.setattr(intern!(py, "_scheduled"), kept)?;
        event_loop.obj.setattr(name, 0)?;
        return Ok(());
    }
    while !heap.is_empty() && cancelled(py, &heap.get_item(0)?)? {
        cancelled_count -= 1;
        event_loop.obj.setattr(name, cancelled_count)?;
        pop_timer(py, asyncio, &heap)?;
    }
    Ok(())
}

/// Step 2: the wait's timeout in seconds (`None`: no limit).
fn timeout(
    py: Python<'_>,
    asyncio: &Asyncio,
    event_loop: &Loop<'_, '_>,
    clock: &Clock<'_>,
) -> PyResult<Option<f64>> {
    if event_loop.get(intern!(py, "_ready"))?.len()? > 0
        || event_loop.get(intern!(py, "_stopping"))?.is_truthy()?
    {
        return Ok(Some(0.0));
    }
    let heap = scheduled(py, event_loop)?;
    if heap.is_empty() {
        return Ok(None);
    }
    let when: f64 = heap.get_item(0)?.getattr(intern!(py, "_when"))?.extract()?;
    let t = when - clock.now(py)?;
    // (asyncio's `min(max(0, t), MAXIMUM_SELECT_TIMEOUT)` up to Python
    // 3.12: a deadline of NaN, whose comparisons are all false, waits 0 s
    // there too; 3.13's own loop hands NaN to its selector, which raises)
    Ok(Some(if t > asyncio.max_timeout {
        asyncio.max_timeout
    } else if t >= 0.0 {
        t
    } else {
        0.0
    }))
}

/// Step 4: the timers due by now (plus the clock's resolution) moved to
/// `_ready`, nearest first.
fn move_due_timers(
    py: Python<'_>,
    asyncio: &Asyncio,
    event_loop: &Loop<'_, '_>,
    clock: &Clock<'_>,
) -> PyResult<()> {
    let heap = scheduled(py, event_loop)?;
    if heap.is_empty() && clock.silent() {
        return Ok(());
    }
    let resolution: f64 = event_loop
        .get(intern!(py, "_clock_resolution"))?
        .extract()?;
    let end = clock.now(py)? + resolution;
    let append = event_loop
        .get(intern!(py, "_ready"))?
        .getattr(intern!(py, "append"))?;
    let timer = asyncio.timer_class.bind(py);
    while !heap.is_empty() {
        let head = heap.get_item(0)?;
        let when = if head.get_type().is(timer) {
            asyncio.when.get(py, &head)?
        } else {
            head.getattr(intern!(py, "_when"))?
        };
        if when.extract::<f64>()? >= end {
            break;
        }
        append.call1((pop_timer(py, asyncio, &heap)?,))?;
    }
    Ok(())
}

/// Step 5: the callbacks ready now run, in order; a cancelled one is
/// skipped. `SystemExit` and `KeyboardInterrupt` stop the turn, the
/// callbacks after leaving `_ready` untouched.
fn run_ready(py: Python<'_>, asyncio: &Asyncio, event_loop: &Loop<'_, '_>) -> PyResult<()> {
    // (the deque and its bound `popleft` taken once per turn: the loop's
    // `_ready` is never replaced, only appended to and popped)
    let ready = event_loop.get(intern!(py, "_ready"))?;
    let todo = ready.len()?;
    if todo == 0 {
        return Ok(());
    }
    let popleft = ready.getattr(intern!(py, "popleft"))?;
    for _ in 0..todo {
        let handle = popleft.call0()?;
        let exact = exact(py, asyncio, &handle);
        let cancelled = slot(
            py,
            asyncio,
            exact,
            &handle,
            CANCELLED,
            intern!(py, "_cancelled"),
        )?;
        if cancelled.is_truthy()? {
            continue;
        }
        // (read per callback, as asyncio does: a callback may turn debug
        // mode on)
        if event_loop.get(intern!(py, "_debug"))?.is_truthy()? {
            run_debug(py, asyncio, event_loop.obj, &handle)?;
        } else {
            run_handle(py, asyncio, exact, &handle)?;
        }
    }
    Ok(())
}

/// Runs `handle` as its `_run` does (see the module's doc).
fn run_handle(
    py: Python<'_>,
    asyncio: &Asyncio,
    exact: bool,
    handle: &Bound<'_, PyAny>,
) -> PyResult<()> {
    // (asked for every handle, not assumed from its class: a tool that
    // replaces `Handle._run`, as slow-callback loggers do, sees every
    // callback run through its own)
    if !asyncio.own_run.of(handle) {
        handle.call_method0(intern!(py, "_run"))?;
        return Ok(());
    }
    let args = slot(py, asyncio, exact, handle, ARGS, intern!(py, "_args"))?;
    let Ok(args) = args.downcast::<PyTuple>() else {
        handle.call_method0(intern!(py, "_run"))?;
        return Ok(());
    };
    let context = slot(py, asyncio, exact, handle, CONTEXT, intern!(py, "_context"))?;
    let callback = slot(
        py,
        asyncio,
        exact,
        handle,
        CALLBACK,
        intern!(py, "_callback"),
    )?;
    match call_in_place(
        py,
        asyncio.context_run.bind(py),
        &[&context, &callback],
        Some(args),
    ) {
        Ok(_) => Ok(()),
        Err(e)
            if e.is_instance_of::<PySystemExit>(py)
                || e.is_instance_of::<PyKeyboardInterrupt>(py) =>
        {
            Err(e)
        }
        Err(e) => report(py, asyncio, handle, &callback, args, e),
    }
}

/// Hands the exception `error` of `handle`'s callback to its loop's
/// exception handler, with `Handle._run`'s context, while `error` is the
/// exception being handled.
fn report(
    py: Python<'_>,
    asyncio: &Asyncio,
    handle: &Bound<'_, PyAny>,
    callback: &Bound<'_, PyAny>,
    args: &Bound<'_, PyTuple>,
    error: PyErr,
) -> PyResult<()> {
    // (into_value: the exception with its traceback attached, as an
    // `except` clause hands it; being handled from here on, so that an
    // error raised while the callback is formatted or the handler runs
    // has it as its `__context__`)
    let exc = error.into_value(py).into_bound(py);
    let _handling = Handling::new(py, &exc)?;
    let owner = handle.getattr(intern!(py, "_loop"))?;
    let format = asyncio.format_source.bind(py);
    let source = if asyncio.format_takes_debug {
        let kwargs = PyDict::new(py);
        kwargs.set_item("debug", owner.call_method0(intern!(py, "get_debug"))?)?;
        format.call((callback, args), Some(&kwargs))?
    } else {
        format.call1((callback, args))?
    };
    let context = PyDict::new(py);
    context.set_item("message", format!("Exception in callback {source}"))?;
    context.set_item("exception", &exc)?;
    context.set_item("handle", handle)?;
    let traceback = handle.getattr(intern!(py, "_source_traceback"))?;
    if traceback.is_truthy()? {
        context.set_item("source_traceback", traceback)?;
    }
    owner.call_method1(intern!(py, "call_exception_handler"), (context,))?;
    Ok(())
}

/// Runs `handle` as asyncio's debug branch of `_run_once` does: the loop's
/// `_current_handle` set meanwhile, and a callback slower than the loop's
/// `slow_callback_duration` logged.
fn run_debug(
    py: Python<'_>,
    asyncio: &Asyncio,
    event_loop: &Bound<'_, PyAny>,
    handle: &Bound<'_, PyAny>,
) -> PyResult<()> {
    let current = intern!(py, "_current_handle");
    event_loop.setattr(current, handle)?;
    let ran = (|| -> PyResult<()> {
        let time = intern!(py, "time");
        let t0 = event_loop.call_method0(time)?;
        handle.call_method0(intern!(py, "_run"))?;
        let dt = event_loop.call_method0(time)?.sub(t0)?;
        if dt.ge(event_loop.getattr(intern!(py, "slow_callback_duration"))?)? {
            let name = asyncio.format_handle.bind(py).call1((handle,))?;
            asyncio.logger.bind(py).call_method1(
                intern!(py, "warning"),
                ("Executing %s took %.3f seconds", name, dt),
            )?;
        }
        Ok(())
    })();
    let cleared = event_loop.setattr(current, py.None());
    ran.and(cleared)
}

/// The thread's handled exception (`sys.exc_info()`) set to one
/// exception while this lives, as inside an `except` block, and the
/// previous one put back when it drops.
struct Handling<'py> {
    py: Python<'py>,
    previous: [*mut pyo3::ffi::PyObject; 3],
}

impl<'py> Handling<'py> {
    fn new(py: Python<'py>, exc: &Bound<'py, PyAny>) -> PyResult<Self> {
        let tb = exc.getattr(intern!(py, "__traceback__"))?;
        let mut previous = [std::ptr::null_mut(); 3];
        let [t, v, b] = &mut previous;
        // SAFETY: the GIL is held (`py`). `PyErr_GetExcInfo` stores new
        // references (or NULL) in the three pointers, which this value owns
        // until `drop` hands them back to `PyErr_SetExcInfo`.
        // `PyErr_SetExcInfo` steals one reference to each of its arguments:
        // each is a new one made by `into_ptr` from a live object.
        unsafe {
            pyo3::ffi::PyErr_GetExcInfo(t, v, b);
            pyo3::ffi::PyErr_SetExcInfo(
                exc.get_type().into_any().into_ptr(),
                exc.clone().into_ptr(),
                tb.into_ptr(),
            );
        }
        Ok(Handling { py, previous })
    }
}

impl Drop for Handling<'_> {
    fn drop(&mut self) {
        let _gil = self.py;
        let [t, v, b] = self.previous;
        // SAFETY: the GIL is held (`self.py` lives as long as this value).
        // The three pointers are the references `PyErr_GetExcInfo` gave
        // `new` (or NULL, which it takes), owned by this value and handed
        // over here exactly once: `PyErr_SetExcInfo` steals them.
        unsafe { pyo3::ffi::PyErr_SetExcInfo(t, v, b) };
    }
}
