//! Reading keepalived.conf text into tokens and a block tree
//! (keepalived `lib/parser.c` semantics).
//!
//! keepalived reads a file line by line. Before a line is split into words
//! it is filtered: an `@id` / `@^id` prefix makes it conditional on the
//! config id (`-i`), `$NAME=value` defines a parameter (a value ending in
//! `\` continues on the next lines), `$NAME` / `${NAME}` are substituted
//! (recursively, at use time), `~SEQ(var, [start,] [step,] end) LINE`
//! repeats a line, and `include PATTERN` splices in files. Words are
//! separated by blanks; `{` and `}` are words of their own even when
//! attached; `#` or `!` at the start of a word comments out the rest of the
//! line; `"..."` is one word with backslash escapes.
//!
//! A statement is a keyword and the words after it on the same line; a `{`
//! (on that line or at the start of a later one) opens its block.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::glob;
use crate::source::Resolver;
use crate::{ConfigError, Loc, Warning};

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A bare word.
    Word,
    /// A `"quoted string"` (escapes already processed).
    Quoted,
    /// `{`
    Open,
    /// `}`
    Close,
}

/// One token with its location and the logical line it came from.
#[derive(Clone, Debug)]
pub(crate) struct Token {
    pub(crate) text: String,
    pub(crate) kind: Kind,
    pub(crate) loc: Loc,
    line_id: u64,
}

/// A statement: keyword, arguments on the same line, optional block.
#[derive(Clone, Debug)]
pub(crate) struct Node {
    pub(crate) key: Token,
    pub(crate) args: Vec<Token>,
    pub(crate) block: Option<Vec<Node>>,
}

/// What `${_HASH}` and `${_BANG}` stand for until the line is split into
/// words (private-use characters, so that they do not start a comment).
const HASH: char = '\u{E000}';
const BANG: char = '\u{E001}';

const MAX_SUBST_DEPTH: usize = 32;
const MAX_SEQ_ITEMS: i64 = 65_536;
/// Longest line substitution may produce.
const MAX_LINE_LEN: usize = 64 * 1024;
/// Most logical lines one configuration may expand to (substitution and
/// `~SEQ` can multiply lines).
const MAX_LINES: u64 = 1_000_000;

struct Reader<'a> {
    ids: &'a [String],
    resolver: Option<&'a dyn Resolver>,
    max_depth: usize,
    params: HashMap<String, String>,
    stack: Vec<(PathBuf, String)>,
    tokens: Vec<Token>,
    next_line_id: u64,
    warnings: &'a mut Vec<Warning>,
    /// The state of `${_RANDOM}`'s generator (SplitMix64): seeded by the
    /// caller, reseeded by a `random_seed N` line, as keepalived does.
    rng: std::cell::Cell<u64>,
}

/// The next number of SplitMix64 (Steele, Lea and Flood) from `state`.
fn splitmix64(state: &std::cell::Cell<u64>) -> u64 {
    let s = state.get().wrapping_add(0x9E37_79B9_7F4A_7C15);
    state.set(s);
    let mut z = s;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `${_RANDOM [MIN [MAX]]}`: a number in [MIN, MAX] (defaults 0 and
/// 32767, keepalived's); `None` when the arguments are not non-negative
/// integers with MIN <= MAX (the text is then left as it is).
fn random(args: &str, state: &std::cell::Cell<u64>) -> Option<String> {
    let mut it = args.split_whitespace();
    let min: u64 = match it.next() {
        Some(m) => m.parse().ok()?,
        None => 0,
    };
    let max: u64 = match it.next() {
        Some(m) => m.parse().ok()?,
        None => 32767,
    };
    if it.next().is_some() || min > max {
        return None;
    }
    let span = max - min;
    let v = if span == u64::MAX {
        splitmix64(state)
    } else {
        min + splitmix64(state) % (span + 1)
    };
    Some(v.to_string())
}

/// Read a file (and its includes) into a flat token list.
pub(crate) fn read_all(
    path: PathBuf,
    name: &str,
    text: &str,
    opts: &crate::LoadOptions,
    resolver: Option<&dyn Resolver>,
    max_depth: usize,
    warnings: &mut Vec<Warning>,
) -> Result<Vec<Token>, ConfigError> {
    let mut r = Reader {
        ids: &opts.config_ids,
        resolver,
        max_depth,
        params: HashMap::new(),
        stack: Vec::new(),
        tokens: Vec::new(),
        next_line_id: 0,
        warnings,
        rng: std::cell::Cell::new(opts.random_seed),
    };
    r.read_file(path, name.to_owned(), text, None)?;
    Ok(r.tokens)
}

struct FileCtx {
    path: PathBuf,
    name: String,
}

impl Reader<'_> {
    fn read_file(
        &mut self,
        path: PathBuf,
        name: String,
        text: &str,
        from: Option<&Loc>,
    ) -> Result<(), ConfigError> {
        let identity = match self.resolver {
            Some(r) => r.identity(&path),
            None => crate::source::normalize(&path),
        };
        if let Some(pos) = self.stack.iter().position(|(id, _)| *id == identity) {
            let chain: Vec<&str> = self.stack[pos..]
                .iter()
                .map(|(_, n)| n.as_str())
                .chain(std::iter::once(name.as_str()))
                .collect();
            let loc = from.cloned().unwrap_or_default();
            return Err(ConfigError::at(
                &loc,
                format!("include loop: {}", chain.join(" -> ")),
            ));
        }
        if self.stack.len() >= self.max_depth {
            let loc = from.cloned().unwrap_or_default();
            return Err(ConfigError::at(
                &loc,
                format!(
                    "includes nested deeper than {} levels, found `{name}`",
                    self.max_depth
                ),
            ));
        }
        self.stack.push((identity, name.clone()));
        let file = FileCtx { path, name };
        let mut pending: Option<(String, Vec<String>)> = None;
        for (idx, raw) in text.split('\n').enumerate() {
            let lineno = u32::try_from(idx + 1).unwrap_or(u32::MAX);
            let raw = raw.strip_suffix('\r').unwrap_or(raw);
            if let Some((pname, mut parts)) = pending.take() {
                let t = raw.trim_end();
                if let Some(cont) = t.strip_suffix('\\') {
                    parts.push(cont.to_owned());
                    pending = Some((pname, parts));
                } else {
                    parts.push(t.to_owned());
                    self.params.insert(pname, parts.join("\n"));
                }
                continue;
            }
            if let Some(p) = self.process_line(raw.to_owned(), lineno, &file, 0)? {
                pending = Some(p);
            }
        }
        if let Some((pname, parts)) = pending {
            self.params.insert(pname, parts.join("\n"));
        }
        self.stack.pop();
        Ok(())
    }

    /// Filter, substitute and tokenize one logical line. Returns a pending
    /// multi-line definition when the line starts one.
    fn process_line(
        &mut self,
        mut line: String,
        lineno: u32,
        file: &FileCtx,
        depth: usize,
    ) -> Result<Option<(String, Vec<String>)>, ConfigError> {
        let loc0 = |col: usize| Loc {
            file: file.name.clone(),
            line: lineno,
            column: u32::try_from(col + 1).unwrap_or(u32::MAX),
        };
        if depth > MAX_SUBST_DEPTH {
            return Err(ConfigError::at(
                &loc0(0),
                "parameter substitution nested too deeply (a parameter refers to itself?)",
            ));
        }
        // Conditional prefix: blank it out so columns stay right.
        let lead = line.len() - line.trim_start().len();
        if line[lead..].starts_with('@') {
            let rest = &line[lead + 1..];
            let (negate, rest) = match rest.strip_prefix('^') {
                Some(r) => (true, r),
                None => (false, rest),
            };
            let word_len = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let id = &rest[..word_len];
            let active = self.ids.iter().any(|i| i == id);
            if active == negate {
                return Ok(None);
            }
            let prefix_len = 1 + usize::from(negate) + word_len;
            let blank = " ".repeat(line[lead..lead + prefix_len].chars().count());
            line.replace_range(lead..lead + prefix_len, &blank);
        }
        let trimmed = line.trim_start();
        // Parameter definition.
        if let Some(def) = trimmed.strip_prefix('$') {
            let name_len = def
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(def.len());
            let pname = &def[..name_len];
            if name_len > 0
                && !pname.starts_with(|c: char| c.is_ascii_digit())
                && def[name_len..].starts_with('=')
            {
                let value = def[name_len + 1..].trim();
                if let Some(first) = value.strip_suffix('\\') {
                    let first = first.trim();
                    let parts = if first.is_empty() {
                        Vec::new()
                    } else {
                        vec![first.to_owned()]
                    };
                    return Ok(Some((pname.to_owned(), parts)));
                }
                self.params.insert(pname.to_owned(), value.to_owned());
                return Ok(None);
            }
        }
        // ~SEQ(var, [start,] [step,] end) LINE
        if let Some(seq) = trimmed.strip_prefix("~SEQ(") {
            let col = line.len() - trimmed.len();
            let Some(close) = seq.find(')') else {
                return Err(ConfigError::at(
                    &loc0(col),
                    "expected `)` closing `~SEQ(`, found end of line",
                ));
            };
            let args: Vec<&str> = seq[..close].split(',').map(str::trim).collect();
            let body = seq[close + 1..].to_owned();
            let var = args.first().copied().unwrap_or("");
            let nums: Result<Vec<i64>, _> = args[1..].iter().map(|a| a.parse::<i64>()).collect();
            let (start, step, end) = match nums.as_deref() {
                Ok([end]) => (1, 1, *end),
                Ok([start, end]) => (*start, if start <= end { 1 } else { -1 }, *end),
                Ok([start, step, end]) => (*start, *step, *end),
                _ => {
                    return Err(ConfigError::at(
                        &loc0(col),
                        format!(
                            "expected `~SEQ(NAME, [START,] [STEP,] END)` with integer bounds, found `~SEQ({})`",
                            &seq[..close]
                        ),
                    ));
                }
            };
            if var.is_empty() || step == 0 {
                return Err(ConfigError::at(
                    &loc0(col),
                    "expected a parameter name and a non-zero step in `~SEQ(...)`",
                ));
            }
            let count = (end.saturating_sub(start) / step).saturating_add(1);
            if count > MAX_SEQ_ITEMS {
                return Err(ConfigError::at(
                    &loc0(col),
                    format!("`~SEQ` would produce {count} lines; at most {MAX_SEQ_ITEMS} allowed"),
                ));
            }
            let mut v = start;
            while (step > 0 && v <= end) || (step < 0 && v >= end) {
                self.params.insert(var.to_owned(), v.to_string());
                if self
                    .process_line(body.clone(), lineno, file, depth + 1)?
                    .is_some()
                {
                    return Err(ConfigError::at(
                        &loc0(col),
                        "multi-line parameter definitions are not allowed inside `~SEQ`",
                    ));
                }
                v = v.saturating_add(step);
                if v == i64::MAX || v == i64::MIN {
                    break;
                }
            }
            return Ok(None);
        }
        // Substitution.
        if let Some(new) = self.substitute(&line, file) {
            if new.len() > MAX_LINE_LEN {
                return Err(ConfigError::at(
                    &loc0(0),
                    format!(
                        "parameter substitution produced a line longer than {MAX_LINE_LEN} bytes"
                    ),
                ));
            }
            for part in new.split('\n') {
                if self
                    .process_line(part.to_owned(), lineno, file, depth + 1)?
                    .is_some()
                {
                    return Err(ConfigError::at(
                        &loc0(0),
                        "a substituted parameter cannot start a multi-line definition",
                    ));
                }
            }
            return Ok(None);
        }
        let line_id = self.next_line_id;
        self.next_line_id += 1;
        if line_id >= MAX_LINES {
            return Err(ConfigError::at(
                &loc0(0),
                format!("configuration expands to more than {MAX_LINES} lines"),
            ));
        }
        let mut toks = tokenize(&line, &file.name, lineno, line_id)?;
        // `${_HASH}` / `${_BANG}` are literal characters, never comments.
        for t in &mut toks {
            if t.text.contains([HASH, BANG]) {
                t.text = t.text.replace(HASH, "#").replace(BANG, "!");
            }
        }
        // `random_seed N` (global_defs) seeds the `${_RANDOM}` after it.
        if let [first, seed, ..] = toks.as_slice()
            && first.kind == Kind::Word
            && first.text == "random_seed"
            && let Ok(n) = seed.text.parse::<u64>()
        {
            self.rng.set(n);
        }
        if let Some(first) = toks.first()
            && first.kind == Kind::Word
            && first.text == "include"
        {
            let Some(arg) = toks.get(1) else {
                return Err(ConfigError::at(
                    &first.loc,
                    "expected a file name or pattern after `include`, found end of line",
                ));
            };
            if let Some(extra) = toks.get(2) {
                self.warnings.push(Warning::at(
                    &extra.loc,
                    format!("`include` takes one argument; ignoring `{}`", extra.text),
                ));
            }
            self.include(arg, file)?;
            return Ok(None);
        }
        self.tokens.extend(toks);
        Ok(None)
    }

    fn substitute(&self, line: &str, file: &FileCtx) -> Option<String> {
        if !line.contains('$') {
            return None;
        }
        let mut out = String::with_capacity(line.len());
        let mut changed = false;
        let mut rest = line;
        while let Some(pos) = rest.find('$') {
            out.push_str(&rest[..pos]);
            let after = &rest[pos + 1..];
            let (name, consumed, braced) = if let Some(b) = after.strip_prefix('{') {
                match b.find('}') {
                    Some(end) => (&b[..end], end + 2, true),
                    None => ("", 0, true),
                }
            } else {
                let n = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..n], n, false)
            };
            let followed_ok = braced
                || after[consumed..].is_empty()
                || after[consumed..].starts_with(char::is_whitespace);
            let value = if name.is_empty() || !followed_ok {
                None
            } else if let Some(args) = name.strip_prefix("_RANDOM")
                && (args.is_empty() || args.starts_with(char::is_whitespace))
                && braced
            {
                random(args, &self.rng)
            } else if name == "_RANDOM" {
                random("", &self.rng)
            } else if name == "_INSTANCE" {
                Some(self.ids.first().cloned().unwrap_or_default())
            } else if name == "_HASH" {
                Some(HASH.to_string())
            } else if name == "_BANG" {
                Some(BANG.to_string())
            } else if name == "_PWD" {
                Some(
                    file.path
                        .parent()
                        .map(|p| p.display().to_string())
                        .unwrap_or_default(),
                )
            } else {
                self.params.get(name).cloned()
            };
            match value {
                Some(v) => {
                    out.push_str(&v);
                    changed = true;
                    rest = &after[consumed..];
                }
                None => {
                    out.push('$');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        changed.then_some(out)
    }

    fn include(&mut self, arg: &Token, file: &FileCtx) -> Result<(), ConfigError> {
        let Some(resolver) = self.resolver else {
            return Err(ConfigError::at(
                &arg.loc,
                format!(
                    "cannot include `{}`: no file resolver (parsing a string without includes)",
                    arg.text
                ),
            ));
        };
        let pattern = Path::new(&arg.text);
        let full = if pattern.is_absolute() {
            pattern.to_path_buf()
        } else {
            match file.path.parent() {
                Some(dir) => dir.join(pattern),
                None => pattern.to_path_buf(),
            }
        };
        let magic = glob::has_magic(&arg.text);
        let paths = glob::expand(&full, resolver);
        if paths.is_empty() {
            self.warnings.push(Warning::at(
                &arg.loc,
                format!("include pattern `{}` matched no files", arg.text),
            ));
            return Ok(());
        }
        for p in paths {
            let text = match resolver.read(&p) {
                Ok(t) => t,
                Err(e) if magic => {
                    self.warnings.push(Warning::at(
                        &arg.loc,
                        format!("cannot read included file `{}`: {e}", p.display()),
                    ));
                    continue;
                }
                Err(e) => {
                    return Err(ConfigError::at(
                        &arg.loc,
                        format!("cannot include `{}`: {e}", p.display()),
                    ));
                }
            };
            let name = p.display().to_string();
            self.read_file(p, name, &text, Some(&arg.loc))?;
        }
        Ok(())
    }
}

fn tokenize(line: &str, file: &str, lineno: u32, line_id: u64) -> Result<Vec<Token>, ConfigError> {
    let chars: Vec<char> = line.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let loc = |col: usize| Loc {
        file: file.to_owned(),
        line: lineno,
        column: u32::try_from(col + 1).unwrap_or(u32::MAX),
    };
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        if c == '#' || c == '!' {
            break;
        }
        let start = i;
        let (text, kind) = match c {
            '{' => {
                i += 1;
                ("{".to_owned(), Kind::Open)
            }
            '}' => {
                i += 1;
                ("}".to_owned(), Kind::Close)
            }
            '"' => {
                i += 1;
                let mut s = String::new();
                let mut closed = false;
                while i < chars.len() {
                    match chars[i] {
                        '"' => {
                            closed = true;
                            i += 1;
                            break;
                        }
                        '\\' if i + 1 < chars.len() => {
                            let e = chars[i + 1];
                            s.push(match e {
                                'n' => '\n',
                                't' => '\t',
                                'r' => '\r',
                                other => other,
                            });
                            i += 2;
                        }
                        ch => {
                            s.push(ch);
                            i += 1;
                        }
                    }
                }
                if !closed {
                    return Err(ConfigError::at(
                        &loc(start),
                        "expected a closing `\"` for this quoted string, found end of line",
                    ));
                }
                (s, Kind::Quoted)
            }
            _ => {
                while i < chars.len()
                    && !chars[i].is_whitespace()
                    && chars[i] != '{'
                    && chars[i] != '}'
                {
                    i += 1;
                }
                (chars[start..i].iter().collect(), Kind::Word)
            }
        };
        out.push(Token {
            text,
            kind,
            loc: loc(start),
            line_id,
        });
    }
    Ok(out)
}

struct Frame {
    owner: Option<(Token, Vec<Token>)>,
    nodes: Vec<Node>,
}

/// Group tokens into statements and blocks.
pub(crate) fn build_tree(tokens: Vec<Token>, top_name: &str) -> Result<Vec<Node>, ConfigError> {
    let mut stack = vec![Frame {
        owner: None,
        nodes: Vec::new(),
    }];
    let mut pending: Option<(Token, Vec<Token>)> = None;
    let mut last_loc = Loc {
        file: top_name.to_owned(),
        line: 1,
        column: 1,
    };
    fn flush(stack: &mut [Frame], pending: &mut Option<(Token, Vec<Token>)>) {
        if let Some((key, args)) = pending.take()
            && let Some(top) = stack.last_mut()
        {
            top.nodes.push(Node {
                key,
                args,
                block: None,
            });
        }
    }
    for tok in tokens {
        last_loc = tok.loc.clone();
        match tok.kind {
            Kind::Open => {
                let owner = match pending.take() {
                    Some(p) => p,
                    None => {
                        let top = stack.last_mut();
                        match top.and_then(|t| {
                            if t.nodes.last().is_some_and(|n| n.block.is_none()) {
                                t.nodes.pop()
                            } else {
                                None
                            }
                        }) {
                            Some(n) => (n.key, n.args),
                            None => {
                                return Err(ConfigError::at(
                                    &tok.loc,
                                    "expected a keyword before `{`, found a block with no keyword",
                                ));
                            }
                        }
                    }
                };
                stack.push(Frame {
                    owner: Some(owner),
                    nodes: Vec::new(),
                });
            }
            Kind::Close => {
                flush(&mut stack, &mut pending);
                if stack.len() == 1 {
                    return Err(ConfigError::at(
                        &tok.loc,
                        "unexpected `}`: no block is open here",
                    ));
                }
                if let Some(frame) = stack.pop()
                    && let Some((key, args)) = frame.owner
                    && let Some(top) = stack.last_mut()
                {
                    top.nodes.push(Node {
                        key,
                        args,
                        block: Some(frame.nodes),
                    });
                }
            }
            Kind::Word | Kind::Quoted => match &mut pending {
                Some((key, args)) if key.line_id == tok.line_id => args.push(tok),
                _ => {
                    flush(&mut stack, &mut pending);
                    pending = Some((tok, Vec::new()));
                }
            },
        }
    }
    flush(&mut stack, &mut pending);
    if stack.len() > 1 {
        // Report the innermost unclosed block.
        if let Some(Frame {
            owner: Some((key, _)),
            ..
        }) = stack.last()
        {
            return Err(ConfigError::at(
                &key.loc,
                format!(
                    "expected `}}` closing the `{}` block opened here, found end of file ({})",
                    key.text, last_loc
                ),
            ));
        }
    }
    Ok(stack.pop().map(|f| f.nodes).unwrap_or_default())
}
