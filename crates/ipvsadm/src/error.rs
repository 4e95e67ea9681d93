//! The error type of the command-line parser.

/// A command line ipvsadm would refuse.
///
/// `message` is exactly what ipvsadm writes to stderr, without the final
/// newline: `eprintln!("{err}")` followed by `std::process::exit(err.exit_code)`
/// reproduces ipvsadm byte for byte. Exit codes: 2 for ipvsadm's `fail(2, ...)`
/// checks, 255 (`exit(-1)`) for the "Try `%s -h' ..." hint and for popt
/// syntax errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ParseError {
    /// Text ipvsadm prints on stderr (without the trailing newline).
    pub message: String,
    /// Process exit status ipvsadm uses.
    pub exit_code: i32,
    /// Whether `ipvsadm -R` stops at this error. ipvsadm exits at once for
    /// every error except popt syntax errors met after the command option
    /// ("`-x: unknown option`"), which only make that line's result -1; the
    /// restore then goes on with the next line.
    pub aborts_restore: bool,
}

impl ParseError {
    /// An error from ipvsadm's `fail(2, ...)`.
    pub(crate) fn fail(message: impl Into<String>) -> Self {
        ParseError {
            message: message.into(),
            exit_code: 2,
            aborts_restore: true,
        }
    }

    /// ipvsadm's `tryhelp_exit(program, -1)`.
    pub(crate) fn try_help(prog: &str) -> Self {
        ParseError {
            message: format!("Try `{prog} -h' or '{prog} --help' for more information."),
            exit_code: 255,
            aborts_restore: true,
        }
    }

    /// A popt error after the first option: `"%s: %s"`, result -1.
    pub(crate) fn popt(bad: &str, text: &str) -> Self {
        ParseError {
            message: format!("{bad}: {text}"),
            exit_code: 255,
            aborts_restore: false,
        }
    }
}
