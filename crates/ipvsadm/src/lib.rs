//! ipvsadm 1.31's command line and output formats, for rvs.
//!
//! `rvsadm` (the ipvsadm-compatible CLI) and `rvsd` (which loads
//! `ipvsadm-save` rule files and serves `-R`) share this crate so that both
//! accept exactly what ipvsadm accepts, refuse it with ipvsadm's words and
//! exit codes, and print ipvsadm's formats byte for byte (spec IPVS.md §4;
//! behaviour read from cezarsa/ipvsadm `ipvsadm.c`, `libipvs/libipvs.c`,
//! `config_stream.c`, and popt's `popt.c`).
//!
//! * [`parse_args`] / [`parse_args_named`] / [`parse_args_with`]: a command
//!   line to an [`Invocation`] built from rvs-core model types;
//! * [`parse_restore_line`]: one line of a `-R` stream / save file;
//! * [`snapshot`]: the serde model of what listings show;
//! * [`format_list`] / [`format_save`]: ipvsadm's outputs;
//! * [`control`]: ipvsadm commands as control-protocol commands, and the
//!   director's errors in ipvsadm's words;
//! * [`names`]: the only I/O (host and service names), swappable.
//!
//! rvs-only features are extra long options (`--mh-table-size`,
//! `--fullnat`, `--reload`); no ipvsadm option changes meaning.
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod cnum;
pub mod control;
mod error;
mod format;
pub mod names;
mod parse;
mod popt;
pub mod snapshot;
mod usage;

pub use error::ParseError;
pub use format::{
    IPVS_VERSION, ListError, ListOptions, ListTarget, format_laddrs, format_laddrs_with,
    format_list, format_list_with, format_save, format_save_with, largenum,
};
pub use parse::{
    Command, DaemonConfig, DestSpec, Invocation, LaddrSpec, ServiceSpec, SyncState, Timeouts,
    check_family, check_tunnel, parse_args, parse_args_named, parse_args_with, parse_restore_line,
    parse_restore_line_with,
};
pub use usage::{usage_text, version_text};
