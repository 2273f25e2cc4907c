//! Sets pyo3's `Py_3_*` configuration flags for the Python the module is
//! built for: `src/call.rs` fills the `am_send` slot, which
//! exists from Python 3.10 on.

fn main() {
    pyo3_build_config::use_pyo3_cfgs();
}
