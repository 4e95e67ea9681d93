//! A small re-implementation of the parts of popt (1.16+) that ipvsadm uses.
//!
//! ipvsadm parses its command line with popt, not getopt, and the
//! difference shows: options and plain arguments may be interleaved (plain
//! arguments are collected as "leftovers", which `--set` reads), short
//! options cluster (`-Lcn`), a short option's argument may follow in the
//! same word (`-srr`, `-s=rr`), long options take `--opt=value` or
//! `--opt value`, a required argument is the next word even if it starts
//! with `-`, an *optional* argument (`-p`) is the next word only if it does
//! not start with `-`, `--` ends option processing and `-` alone is a plain
//! argument. Long option names must match exactly (no abbreviations).
//! Errors are popt's: "unknown option", "missing argument", "option does
//! not take an argument", reported against the last word consumed
//! (`poptBadOption`).

/// Whether an option takes an argument.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum ArgKind {
    None,
    Required,
    Optional,
}

/// One row of the option table.
#[derive(Copy, Clone, Debug)]
pub(crate) struct OptSpec<T: Copy> {
    pub(crate) long: &'static str,
    pub(crate) short: Option<char>,
    pub(crate) kind: ArgKind,
    pub(crate) id: T,
}

/// popt's error codes that ipvsadm can meet.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum PoptError {
    BadOpt,
    NoArg,
    UnwantedArg,
}

impl PoptError {
    /// `poptStrerror`.
    pub(crate) fn text(self) -> &'static str {
        match self {
            PoptError::BadOpt => "unknown option",
            PoptError::NoArg => "missing argument",
            PoptError::UnwantedArg => "option does not take an argument",
        }
    }
}

/// Parsing state over one argument vector (without argv\[0\]).
pub(crate) struct Popt<'a, T: Copy> {
    table: &'a [OptSpec<T>],
    args: &'a [String],
    /// Index of the next word to read.
    next: usize,
    /// Remaining characters of a short-option cluster: (word index, byte offset).
    cluster: Option<(usize, usize)>,
    rest_leftover: bool,
    leftovers: Vec<String>,
    next_leftover: usize,
}

impl<'a, T: Copy> Popt<'a, T> {
    pub(crate) fn new(table: &'a [OptSpec<T>], args: &'a [String]) -> Self {
        Popt {
            table,
            args,
            next: 0,
            cluster: None,
            rest_leftover: false,
            leftovers: Vec::new(),
            next_leftover: 0,
        }
    }

    /// `poptBadOption(con, POPT_BADOPTION_NOALIAS)`: the last word consumed.
    pub(crate) fn bad_option(&self) -> Option<&'a str> {
        let i = self.next.checked_sub(1)?;
        self.args.get(i).map(String::as_str)
    }

    /// `poptGetArg`: the next leftover (plain) argument.
    pub(crate) fn get_arg(&mut self) -> Option<String> {
        let a = self.leftovers.get(self.next_leftover).cloned();
        if a.is_some() {
            self.next_leftover += 1;
        }
        a
    }

    fn find_long(&self, name: &str) -> Option<OptSpec<T>> {
        self.table.iter().copied().find(|o| o.long == name)
    }

    fn find_short(&self, c: char) -> Option<OptSpec<T>> {
        self.table.iter().copied().find(|o| o.short == Some(c))
    }

    /// `poptGetNextOpt`: the next option and its argument, `Ok(None)` when
    /// all words are consumed.
    pub(crate) fn next_opt(&mut self) -> Result<Option<(T, Option<String>)>, PoptError> {
        loop {
            let mut long_arg: Option<String> = None;
            let opt;
            if let Some((wi, off)) = self.cluster.take() {
                let word = &self.args[wi];
                let rest = &word[off..];
                let mut chars = rest.chars();
                let Some(c) = chars.next() else {
                    continue;
                };
                opt = self.find_short(c).ok_or(PoptError::BadOpt)?;
                let after = off + c.len_utf8();
                if after < word.len() {
                    self.cluster = Some((wi, after));
                }
            } else {
                let Some(word) = self.args.get(self.next) else {
                    return Ok(None);
                };
                let wi = self.next;
                self.next += 1;
                if self.rest_leftover || !word.starts_with('-') || word == "-" {
                    self.leftovers.push(word.clone());
                    continue;
                }
                if word == "--" {
                    self.rest_leftover = true;
                    continue;
                }
                if let Some(body) = word.strip_prefix("--") {
                    let (name, arg) = match body.split_once('=') {
                        Some((n, a)) => (n, Some(a.to_owned())),
                        None => (body, None),
                    };
                    opt = self.find_long(name).ok_or(PoptError::BadOpt)?;
                    long_arg = arg;
                } else {
                    // Single dash: a cluster of short options.
                    self.cluster = Some((wi, 1));
                    continue;
                }
            }

            if opt.kind == ArgKind::None {
                let eq_follows = self
                    .cluster
                    .is_some_and(|(wi, off)| self.args[wi][off..].starts_with('='));
                if long_arg.is_some() || eq_follows {
                    return Err(PoptError::UnwantedArg);
                }
                return Ok(Some((opt.id, None)));
            }

            let arg = if let Some(a) = long_arg {
                Some(a)
            } else if let Some((wi, off)) = self.cluster.take() {
                let rest = &self.args[wi][off..];
                Some(rest.strip_prefix('=').unwrap_or(rest).to_owned())
            } else if self.next >= self.args.len() {
                if opt.kind == ArgKind::Required {
                    return Err(PoptError::NoArg);
                }
                None
            } else {
                let w = &self.args[self.next];
                if opt.kind == ArgKind::Optional && w.starts_with('-') {
                    None
                } else {
                    self.next += 1;
                    Some(w.clone())
                }
            };
            return Ok(Some((opt.id, arg)));
        }
    }
}
