//! # rvs-config
//!
//! Reads `keepalived.conf` — the LVS and VRRP subset, plus the FULLNAT
//! extensions of the Alibaba fork — into a typed model ([`model`]) and from
//! there into rvs-core's service model ([`ServiceSpec`]).
//!
//! Operators keep the file they already have: the reader follows
//! keepalived's `lib/parser.c` (blocks, `#`/`!` comments, quoted strings,
//! `include` with globs, `@id` conditional lines, `$NAME=value` parameters,
//! `~SEQ`), and the check/vrrp/global parsers' keywords and defaults
//! (`keepalived/check/check_parser.c`, `check_data.c`,
//! `keepalived/vrrp/vrrp_parser.c`, `keepalived/core/global_parser.c`).
//!
//! Unlike keepalived, which logs and carries on, a value that cannot be
//! understood is an error naming `file:line:column` and what was expected;
//! unknown keywords are warnings (with their location and the nearest known
//! keyword of the block) and are skipped together with any block they open.
//! Nothing is silently ignored: a keepalived keyword rvs reads but does not
//! carry out is a located "`KEYWORD` is not applied by rvs" warning, one it
//! must not run without is an error, and the few accepted quietly are
//! listed with the reason ([`keywords::TABLE`],
//! `docs/keepalived-keywords.md`). [`LoadOptions::strict`] makes the
//! warnings errors. No system checks are done: a missing
//! interface, script or address is not this crate's business (`--check`
//! judges the file, not the machine).
#![forbid(unsafe_code)]
#![warn(missing_docs, unreachable_pub)]

mod convert;
mod glob;
mod iproute;
pub mod keywords;
mod lexer;
pub mod model;
mod parse;
mod resolve;
mod source;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use convert::ServiceSpec;
pub use model::KeepalivedConf;
pub use source::{FsResolver, MemResolver, Resolver};

/// A position in a configuration file (1-based line and column).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Loc {
    /// The file as it was named (the top-level path, or an include's path).
    pub file: String,
    /// Line, starting at 1.
    pub line: u32,
    /// Column in characters, starting at 1.
    pub column: u32,
}

impl fmt::Display for Loc {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// A configuration the reader refuses: where, and what was expected.
///
/// Displays as `FILE:LINE:COLUMN: MESSAGE`, the format editors and CI
/// annotations understand.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{column}: {message}")]
pub struct ConfigError {
    /// File name.
    pub file: String,
    /// Line (1-based).
    pub line: u32,
    /// Column (1-based).
    pub column: u32,
    /// What was expected and what was found.
    pub message: String,
}

impl ConfigError {
    /// An error at a location.
    pub fn at(loc: &Loc, message: impl Into<String>) -> Self {
        ConfigError {
            file: loc.file.clone(),
            line: loc.line,
            column: loc.column,
            message: message.into(),
        }
    }

    /// The location of the error.
    pub fn loc(&self) -> Loc {
        Loc {
            file: self.file.clone(),
            line: self.line,
            column: self.column,
        }
    }
}

/// What kind of thing a [`Warning`] reports: `--strict` refuses the kinds
/// whose meaning rvs does not carry out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum WarningKind {
    /// A value accepted and used, adjusted or noted (keepalived's own
    /// warnings: quorum above the total weight, deprecated spelling, ...).
    #[default]
    Note,
    /// A keyword keepalived knows that rvs reads but does not carry out.
    NotApplied,
    /// A keyword neither keepalived's grammar (as rvs knows it) nor rvs
    /// knows; skipped with its block.
    Unknown,
}

/// Something accepted but worth telling the operator: an unknown keyword,
/// a keyword rvs does not apply, a value keepalived would adjust (quorum
/// above the total weight, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// File name.
    pub file: String,
    /// Line (1-based).
    pub line: u32,
    /// Column (1-based).
    pub column: u32,
    /// The warning text.
    pub message: String,
    /// Whether rvs carries out what the warning is about.
    pub kind: WarningKind,
}

impl Warning {
    /// A warning at a location.
    pub fn at(loc: &Loc, message: impl Into<String>) -> Self {
        Warning {
            file: loc.file.clone(),
            line: loc.line,
            column: loc.column,
            message: message.into(),
            kind: WarningKind::Note,
        }
    }

    /// The one wording for a keyword rvs reads but does not carry out:
    /// "`KEYWORD` is not applied by rvs (REASON)". Every such keyword goes
    /// through here so that `--strict` and the keyword audit test find it.
    pub fn not_applied(loc: &Loc, keyword: &str, reason: &str) -> Self {
        Warning {
            kind: WarningKind::NotApplied,
            ..Warning::at(loc, format!("`{keyword}` is not applied by rvs ({reason})"))
        }
    }

    /// An unknown keyword, with the nearest known one of its block when
    /// there is a close one.
    pub fn unknown(loc: &Loc, message: impl Into<String>) -> Self {
        Warning {
            kind: WarningKind::Unknown,
            ..Warning::at(loc, message)
        }
    }

    /// Whether `--strict` refuses this warning: rvs would not do what the
    /// file says (a keyword not applied, or one it does not know).
    pub fn is_strict_error(&self) -> bool {
        matches!(self.kind, WarningKind::NotApplied | WarningKind::Unknown)
    }
}

impl fmt::Display for Warning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: warning: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

/// How to read a configuration.
#[derive(Clone, Default)]
pub struct LoadOptions {
    /// Active config ids (keepalived `-i`). Empty = keepalived run without
    /// `-i` as far as rvs is concerned: `@name` lines are skipped and
    /// `@^name` lines kept.
    pub config_ids: Vec<String>,
    /// Where `include` reads files. `None`: [`load`] reads the file system,
    /// [`parse_str`] refuses includes. Tests pass a [`MemResolver`].
    pub resolver: Option<Arc<dyn Resolver>>,
    /// Maximum include nesting; 0 means the default (32).
    pub max_include_depth: usize,
    /// `--strict`: a keyword rvs does not apply (or does not know) is an
    /// error at its location instead of a warning, so that nothing in the
    /// file is left undone.
    pub strict: bool,
    /// The seed of `${_RANDOM}` (keepalived seeds it from the clock at
    /// start; rvsd does the same, tests fix it). A `random_seed N` line in
    /// the file reseeds it from there on, as in keepalived.
    pub random_seed: u64,
}

impl fmt::Debug for LoadOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadOptions")
            .field("config_ids", &self.config_ids)
            .field("resolver", &self.resolver.is_some())
            .field("max_include_depth", &self.max_include_depth)
            .field("strict", &self.strict)
            .field("random_seed", &self.random_seed)
            .finish()
    }
}

/// Default include nesting limit.
pub const DEFAULT_MAX_INCLUDE_DEPTH: usize = 32;

/// A configuration that was read, and what the reader noticed on the way.
#[derive(Clone, Debug)]
pub struct Loaded {
    /// The typed configuration, with keepalived's defaults and inheritance
    /// (virtual server → real server → checker) resolved.
    pub config: KeepalivedConf,
    /// Unknown keywords, adjusted values, ignored extra arguments.
    pub warnings: Vec<Warning>,
}

/// Read a configuration file and everything it includes.
pub fn load(path: &Path, opts: &LoadOptions) -> Result<Loaded, ConfigError> {
    let resolver: Arc<dyn Resolver> = match &opts.resolver {
        Some(r) => Arc::clone(r),
        None => Arc::new(FsResolver),
    };
    let name = path.display().to_string();
    let text = resolver.read(path).map_err(|e| ConfigError {
        file: name.clone(),
        line: 0,
        column: 0,
        message: format!("cannot read the configuration file: {e}"),
    })?;
    run(path.to_path_buf(), &name, &text, opts, Some(resolver))
}

/// Read a configuration from a string named `name` (used in locations and
/// as the base for relative includes). Includes are read through
/// `opts.resolver`; without one, `include` is an error.
pub fn parse_str(name: &str, text: &str, opts: &LoadOptions) -> Result<Loaded, ConfigError> {
    run(
        PathBuf::from(name),
        name,
        text,
        opts,
        opts.resolver.as_ref().map(Arc::clone),
    )
}

fn run(
    path: PathBuf,
    name: &str,
    text: &str,
    opts: &LoadOptions,
    resolver: Option<Arc<dyn Resolver>>,
) -> Result<Loaded, ConfigError> {
    let mut warnings = Vec::new();
    let depth = if opts.max_include_depth == 0 {
        DEFAULT_MAX_INCLUDE_DEPTH
    } else {
        opts.max_include_depth
    };
    let tokens = lexer::read_all(
        path,
        name,
        text,
        opts,
        resolver.as_deref(),
        depth,
        &mut warnings,
    )?;
    let tree = lexer::build_tree(tokens, name)?;
    let mut config = parse::parse(&tree, &mut warnings)?;
    resolve::resolve(&mut config, &mut warnings)?;
    if opts.strict
        && let Some(w) = warnings.iter().find(|w| w.is_strict_error())
    {
        return Err(ConfigError {
            file: w.file.clone(),
            line: w.line,
            column: w.column,
            message: format!("{} (refused by --strict)", w.message),
        });
    }
    Ok(Loaded { config, warnings })
}
