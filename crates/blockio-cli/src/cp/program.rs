//! The name `cp`'s messages give it.

use std::sync::OnceLock;

/// The name messages, `--help` and `--version` use, chosen in this one
/// place: `blockio cp`, or when the binary runs under another name (a link
/// named `cp`), that name as invoked, as GNU `cp` names itself by its
/// `argv[0]`.
pub(super) fn program() -> &'static str {
    static NAME: OnceLock<String> = OnceLock::new();
    NAME.get_or_init(|| {
        let argv0 = std::env::args_os().next().unwrap_or_default();
        let base = std::path::Path::new(&argv0)
            .file_name()
            .map(|b| b.to_string_lossy().into_owned())
            .unwrap_or_default();
        if base.is_empty() || base.starts_with("blockio") {
            "blockio cp".to_string()
        } else {
            argv0.to_string_lossy().into_owned()
        }
    })
}
