//! The keyword audit, shown: every keyword of keepalived.conf(5) (keepalived
//! 2.2.7) with its man page section and what rvs does with it, each loaded in
//! a minimal valid context and its outcome asserted; and a check that the
//! installed man page has no keyword this table lacks; and a check that
//! these rows and `rvs_config::keywords::TABLE` agree entry for entry.
//!
//! Outcomes: `Applied(test)` — carried out, and `test` (file::function)
//! shows it: the keyword is in that function's body or in a function of the
//! same test file it calls (a config builder), see [`shows`]; `Untested` — read
//! and used by rvs, but no test exercises it yet (listed as such in
//! docs/keepalived-keywords.md, `Applied("")` in `keywords::TABLE`); `Warned` — a located "`KEYWORD` is not
//! applied by rvs" warning; `Quiet` — accepted silently, reason in
//! `rvs_config::keywords::TABLE` and docs/keepalived-keywords.md; `Refused`
//! — a located error; `InBlock` — inside a block rvs does not apply, whose
//! own keyword is warned.

use rvs_config::keywords::{self, Block, Outcome as TableOutcome};
use rvs_config::{LoadOptions, WarningKind, parse_str};

#[derive(Clone, Copy, Debug)]
enum Ctx {
    Top,
    Global,
    VrrpInstance,
    Auth,
    SyncGroup,
    VrrpScript,
    Vsg,
    VirtualServer,
    RealServer,
    Checker(&'static str),
    Url,
    Ssl,
    In(&'static str),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Outcome {
    Applied(&'static str),
    Untested,
    Warned,
    Quiet,
    Refused,
    InBlock,
}
use Ctx::*;
use Outcome::*;

struct Row {
    section: &'static str,
    keyword: &'static str,
    ctx: Ctx,
    line: &'static str,
    outcome: Outcome,
}

const fn row(
    section: &'static str,
    keyword: &'static str,
    ctx: Ctx,
    line: &'static str,
    outcome: Outcome,
) -> Row {
    Row {
        section,
        keyword,
        ctx,
        line,
        outcome,
    }
}

const VI: &str =
    "vrrp_instance VI_K {\n state BACKUP\n interface lo\n virtual_router_id 9\n priority 100\n";

/// `line` in a minimal valid file for its context.
fn wrap(ctx: Ctx, line: &str) -> String {
    let rs = "real_server 192.0.2.20 80 {\n";
    let vs = "virtual_server 192.0.2.10 80 {\n protocol TCP\n";
    match ctx {
        Top => format!("{line}\n"),
        Global => format!("global_defs {{\n{line}\n}}\n"),
        VrrpInstance => format!("{VI}{line}\n}}\n"),
        Auth => format!("{VI}authentication {{\n{line}\n}}\n}}\n"),
        SyncGroup => format!("{VI}}}\nvrrp_sync_group G {{\n group {{\n VI_K\n }}\n{line}\n}}\n"),
        VrrpScript => format!("vrrp_script S {{\n script /bin/true\n{line}\n}}\n"),
        Vsg => format!(
            "virtual_server_group G {{\n{line}\n}}\nvirtual_server group G {{\n protocol TCP\n{rs}}}\n}}\n"
        ),
        VirtualServer => format!("{vs}{line}\n{rs}}}\n}}\n"),
        RealServer => format!("{vs}{rs}{line}\n}}\n}}\n"),
        Checker("MISC_CHECK") => {
            format!("{vs}{rs}MISC_CHECK {{\n misc_path /bin/true\n{line}\n}}\n}}\n}}\n")
        }
        Checker(kind) => format!("{vs}{rs}{kind} {{\n{line}\n}}\n}}\n}}\n"),
        Url => format!("{vs}{rs}HTTP_GET {{\nurl {{\n path /\n{line}\n}}\n}}\n}}\n}}\n"),
        Ssl => format!("SSL {{\n{line}\n}}\n"),
        In(block) => format!("{block} B {{\n{line}\n}}\n"),
    }
}

/// The table block a context's keywords are looked up in.
fn block_of(ctx: Ctx) -> Option<Block> {
    Some(match ctx {
        Top => Block::Top,
        Global => Block::Global,
        VrrpInstance | Auth => Block::VrrpInstance,
        SyncGroup => Block::SyncGroup,
        VrrpScript => Block::VrrpScript,
        VirtualServer => Block::VirtualServer,
        RealServer => Block::RealServer,
        Checker(_) => Block::Checker,
        Url => Block::Url,
        Ssl => Block::Ssl,
        Vsg | In(_) => return None,
    })
}

fn names(message: &str, keyword: &str) -> bool {
    message.contains(&format!("`{keyword}`"))
}

/// `src` with its comments blanked, each char marked as code (false inside
/// a string or char literal, whose braces do not count).
fn lex(src: &str) -> Vec<(char, bool)> {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize| c.get(i).copied();
    let mut out = Vec::with_capacity(c.len());
    let mut i = 0;
    while i < c.len() {
        if c[i] == '/' && at(i + 1) == Some('/') {
            while i < c.len() && c[i] != '\n' {
                out.push((' ', true));
                i += 1;
            }
        } else if c[i] == '/' && at(i + 1) == Some('*') {
            let mut depth = 0;
            loop {
                if i >= c.len() {
                    break;
                }
                if c[i] == '/' && at(i + 1) == Some('*') {
                    depth += 1;
                    out.extend([(' ', true), (' ', true)]);
                    i += 2;
                } else if c[i] == '*' && at(i + 1) == Some('/') {
                    depth -= 1;
                    out.extend([(' ', true), (' ', true)]);
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push((' ', true));
                    i += 1;
                }
            }
        } else if c[i] == '"'
            || (c[i] == 'r'
                && matches!(at(i + 1), Some('"' | '#'))
                && (i == 0 || !(c[i - 1].is_alphanumeric() || c[i - 1] == '_')))
        {
            // A string: "..." with escapes, or r#"..."# raw.
            let raw = c[i] == 'r';
            let mut hashes = 0;
            if raw {
                out.push((c[i], true));
                i += 1;
                while i < c.len() && c[i] == '#' {
                    hashes += 1;
                    out.push(('#', true));
                    i += 1;
                }
                if c.get(i) != Some(&'"') {
                    continue; // `r#ident`
                }
            }
            out.push(('"', true));
            i += 1;
            while i < c.len() {
                if !raw && c[i] == '\\' && i + 1 < c.len() {
                    out.extend([(c[i], false), (c[i + 1], false)]);
                    i += 2;
                    continue;
                }
                if c[i] == '"' && (0..hashes).all(|h| c.get(i + 1 + h) == Some(&'#')) {
                    out.push(('"', true));
                    i += 1;
                    for _ in 0..hashes {
                        out.push(('#', true));
                        i += 1;
                    }
                    break;
                }
                out.push((c[i], false));
                i += 1;
            }
        } else if c[i] == '\''
            && matches!(at(i + 1), Some('{' | '}' | '"'))
            && at(i + 2) == Some('\'')
        {
            out.extend([('\'', true), (c[i + 1], false), ('\'', true)]);
            i += 3;
        } else {
            out.push((c[i], true));
            i += 1;
        }
    }
    out
}

fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// Where `word` occurs as a whole word in `text` (char indices).
fn word_at(text: &[char], word: &str) -> Vec<usize> {
    let w: Vec<char> = word.chars().collect();
    (0..text.len().saturating_sub(w.len() - 1))
        .filter(|&i| {
            text[i..i + w.len()] == w[..]
                && (i == 0 || !is_word(text[i - 1]))
                && text.get(i + w.len()).is_none_or(|c| !is_word(*c))
        })
        .collect()
}

/// Every `fn NAME` of a lexed file with its body (brace matched, braces in
/// strings and comments not counted); the first of a name wins.
fn fn_bodies(lexed: &[(char, bool)]) -> Vec<(String, std::ops::Range<usize>)> {
    let text: Vec<char> = lexed.iter().map(|(c, _)| *c).collect();
    let mut out: Vec<(String, std::ops::Range<usize>)> = Vec::new();
    for at in word_at(&text, "fn") {
        if !lexed[at].1 {
            continue;
        }
        let name: String = text[at + 2..]
            .iter()
            .skip_while(|c| c.is_whitespace())
            .take_while(|c| is_word(**c))
            .collect();
        if name.is_empty() || out.iter().any(|(n, _)| *n == name) {
            continue;
        }
        let Some(open) = (at..text.len()).find(|&i| lexed[i].1 && matches!(text[i], '{' | ';'))
        else {
            continue;
        };
        if text[open] == ';' {
            continue; // a declaration without a body
        }
        let mut depth = 0usize;
        for (i, (c, code)) in lexed.iter().enumerate().skip(open) {
            match (c, code) {
                ('{', true) => depth += 1,
                ('}', true) => {
                    depth -= 1;
                    if depth == 0 {
                        out.push((name, open..i + 1));
                        break;
                    }
                }
                _ => {}
            }
        }
    }
    out
}

/// Whether the test `test` (`file::function`, the file from the repository
/// root `root`) exercises `keyword`: the function's body — or, in a file
/// under a `tests/` directory, the body of a function of the same file it
/// calls (the config builders of the e2e tests) — has the keyword as a
/// word, in code or in a (config) string; comments do not count.
fn shows(root: &str, keyword: &str, test: &str) -> Result<(), String> {
    let Some((file, func)) = test.split_once("::") else {
        return Err(format!("`{test}` is not file::function"));
    };
    let src = std::fs::read_to_string(format!("{root}/{file}"))
        .map_err(|e| format!("no test `{test}`: {file}: {e}"))?;
    let lexed = lex(&src);
    let text: Vec<char> = lexed.iter().map(|(c, _)| *c).collect();
    let bodies = fn_bodies(&lexed);
    let Some((_, body)) = bodies.iter().find(|(n, _)| n == func) else {
        return Err(format!("no test `{test}`: {file} has no `fn {func}`"));
    };
    let body_text = &text[body.clone()];
    let mut searched = vec![body.clone()];
    // In a file of tests/ every function is a test's or a helper's; in src/
    // a called function may be the code under test itself.
    let helpers = file.contains("/tests/");
    for (name, range) in bodies.iter().filter(|_| helpers) {
        if name != func
            && word_at(body_text, name).iter().any(|&i| {
                body_text[i + name.chars().count()..]
                    .iter()
                    .find(|c| !c.is_whitespace())
                    == Some(&'(')
            })
        {
            searched.push(range.clone());
        }
    }
    if searched
        .iter()
        .any(|r| !word_at(&text[r.clone()], keyword).is_empty())
    {
        Ok(())
    } else {
        Err(format!(
            "`{test}` does not exercise it: `{keyword}` is not in its body (nor in a function of {file} it calls)"
        ))
    }
}

fn doc() -> String {
    std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/keepalived-keywords.md"
    ))
    .expect("docs/keepalived-keywords.md")
}

/// The failures of one row: its outcome when loaded in its context, and
/// for `Applied(test)` that `test` exercises the keyword ([`shows`]).
fn check_row(r: &Row, doc: &str, root: &str) -> Vec<String> {
    let mut failures = Vec::new();
    let text = wrap(r.ctx, r.line);
    let got = parse_str("k.conf", &text, &LoadOptions::default());
    let what = format!("[{}] `{}` in {:?}", r.section, r.keyword, r.ctx);
    match (r.outcome, &got) {
        (Refused, Err(e)) if names(&e.message, r.keyword) && e.line > 0 => {}
        (Refused, _) => failures.push(format!("{what}: expected an error naming it, got {got:?}")),
        (_, Err(e)) => failures.push(format!("{what}: {e}\n{text}")),
        (Applied(test), Ok(l)) => {
            if let Some(w) = l.warnings.iter().find(|w| names(&w.message, r.keyword)) {
                failures.push(format!("{what}: applied, but warned: {w}"));
            }
            if let Err(e) = shows(root, r.keyword, test) {
                failures.push(format!("{what}: {e}"));
            }
        }
        (Untested, Ok(l)) => {
            if let Some(w) = l.warnings.iter().find(|w| names(&w.message, r.keyword)) {
                failures.push(format!("{what}: applied, but warned: {w}"));
            }
        }
        (Warned, Ok(l)) => {
            let ok = l.warnings.iter().any(|w| {
                w.kind == WarningKind::NotApplied
                    && w.message
                        .starts_with(&format!("`{}` is not applied by rvs (", r.keyword))
                    && w.line > 0
            });
            if !ok {
                failures.push(format!(
                    "{what}: expected a not-applied warning, got {:?}",
                    l.warnings
                ));
            }
        }
        (Quiet, Ok(l)) => {
            if let Some(w) = l.warnings.iter().find(|w| names(&w.message, r.keyword)) {
                failures.push(format!("{what}: quiet, but warned: {w}"));
            }
            let listed = block_of(r.ctx)
                .and_then(|b| keywords::outcome(b, r.keyword))
                .is_some_and(|o| matches!(o, TableOutcome::Quiet(_)));
            if !listed || !doc.contains(&format!("`{}`", r.keyword)) {
                failures.push(format!(
                    "{what}: quiet without a reason in keywords::TABLE and the doc"
                ));
            }
        }
        (InBlock, Ok(l)) => {
            let In(block) = r.ctx else {
                unreachable!("InBlock rows are In(..)")
            };
            if !l
                .warnings
                .iter()
                .any(|w| w.kind == WarningKind::NotApplied && names(&w.message, block))
            {
                failures.push(format!(
                    "{what}: expected `{block}` warned, got {:?}",
                    l.warnings
                ));
            }
        }
    }
    failures
}

#[test]
fn every_keyword_has_its_outcome() {
    let doc = doc();
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut failures = Vec::new();
    for r in ROWS {
        failures.extend(check_row(r, &doc, root));
    }
    assert!(
        failures.is_empty(),
        "{} keyword(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// The reference check itself: a row naming a test that does not exercise
/// its keyword fails, as does one naming a missing function; a right one
/// passes.
#[test]
fn a_wrong_test_reference_is_reported() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let doc = doc();
    // Crafted rows through the table test's own check: the reference the
    // DNS_CHECK `name` row had (a test of `rvsadm -h`) fails it; the right
    // one passes.
    let wrong_row = row(
        "Virtual server(s)",
        "name",
        Checker("DNS_CHECK"),
        "name x",
        Applied("crates/rvs/tests/e2e/golden.rs::help_and_version"),
    );
    let failures = check_row(&wrong_row, &doc, root);
    assert!(
        failures.len() == 1 && failures[0].contains("does not exercise it"),
        "{failures:?}"
    );
    let right_row = row(
        "Virtual server(s)",
        "name",
        Checker("DNS_CHECK"),
        "name x",
        Applied("crates/rvs/tests/e2e/health_probes.rs::dns_check_against_a_real_responder"),
    );
    assert_eq!(check_row(&right_row, &doc, root), Vec::<String>::new());
    // A test of `rvsadm -h`, not of DNS_CHECK's `name` (the row's old reference).
    let wrong = shows(
        root,
        "name",
        "crates/rvs/tests/e2e/golden.rs::help_and_version",
    );
    assert!(
        wrong
            .as_ref()
            .is_err_and(|e| e.contains("does not exercise")),
        "{wrong:?}"
    );
    // In the file, but not in the named function.
    let other = shows(
        root,
        "use_vmac",
        "crates/rvs/tests/e2e/vrrp.rs::vrrp_reload_changes_priorities_without_a_flap",
    );
    assert!(other.is_err(), "{other:?}");
    // A file that never mentions it.
    let absent = shows(
        root,
        "quorum_max",
        "crates/rvs/tests/e2e/track.rs::track_process_moves_mastership_and_faults",
    );
    assert!(absent.is_err(), "{absent:?}");
    let missing = shows(
        root,
        "use_vmac",
        "crates/rvs/tests/e2e/vrrp.rs::no_such_test",
    );
    assert!(
        missing.as_ref().is_err_and(|e| e.contains("no test")),
        "{missing:?}"
    );
    assert_eq!(
        shows(
            root,
            "use_vmac",
            "crates/rvs/tests/e2e/vrrp.rs::vrrp_use_vmac_announces_the_virtual_mac"
        ),
        Ok(())
    );
}

/// Comments, strings and brace counting of the body finder.
#[test]
fn bodies_are_brace_matched_outside_strings_and_comments() {
    let src = "fn a() { let s = \"}{ x\"; // }\n b(); let c = '}'; }\nfn b() { r#\"y }\"#; /* z */ }\nfn c() { z() }";
    let lexed = lex(src);
    let text: String = lexed.iter().map(|(c, _)| *c).collect();
    let bodies = fn_bodies(&lexed);
    let names: Vec<&str> = bodies.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    let chars: Vec<char> = text.chars().collect();
    let a: String = chars[bodies[0].1.clone()].iter().collect();
    assert!(a.ends_with("'}'; }"), "{a}");
    assert!(!a.contains("fn b"), "{a}");
    let b: Vec<char> = chars[bodies[1].1.clone()].to_vec();
    assert!(!word_at(&b, "y").is_empty());
    assert!(word_at(&b, "z").is_empty(), "a comment does not count");
}

/// The operators' document lists the untested keywords, exactly the
/// `Untested` rows (its "Applied, no behavioural test named yet" section).
#[test]
fn the_doc_lists_the_untested_keywords() {
    let mut entries: Vec<String> = Vec::new();
    for r in ROWS.iter().filter(|r| r.outcome == Untested) {
        let entry = format!("`{}` ({})", r.keyword, r.section);
        if !entries.contains(&entry) {
            entries.push(entry);
        }
    }
    let line = entries.join(", ");
    let doc = doc();
    let section = doc
        .split("## Applied, no behavioural test named yet")
        .nth(1)
        .expect("the doc's untested section");
    assert!(
        section.lines().any(|l| l == line),
        "docs/keepalived-keywords.md's untested list should read:\n{line}"
    );
}

/// Every entry of the crate's table is in the operators' document, with its
/// block.
#[test]
fn the_doc_lists_every_keyword_not_applied() {
    let doc = doc();
    for (block, kw, outcome) in keywords::TABLE {
        let line = format!("| {block:?} | `{kw}` |");
        assert!(
            doc.contains(&line),
            "docs/keepalived-keywords.md lacks {line} ({outcome:?})"
        );
    }
}

/// Whether a row's expected outcome is the table's.
fn same(row: Outcome, table: TableOutcome) -> bool {
    match (row, table) {
        (Applied(a), TableOutcome::Applied(b)) => a == b,
        (Untested, TableOutcome::Applied(b)) => b.is_empty(),
        (Warned, TableOutcome::NotApplied(_))
        | (Quiet, TableOutcome::Quiet(_))
        | (Refused, TableOutcome::Refused(_)) => true,
        _ => false,
    }
}

/// Keywords keepalived.conf(5) does not have — rvs's own extensions and
/// Alibaba keepalived's FULLNAT ones — known to the reader, so in no row.
const RVS_EXTENSIONS: &[(Block, &str)] = &[
    (Block::Top, "local_address_group"),
    (Block::VirtualServer, "laddr_group_name"),
    (Block::VirtualServer, "mh_table_size"),
    (Block::VirtualServer, "proxy_protocol"),
    (Block::VirtualServer, "max_conns"),
    (Block::RealServer, "proxy_protocol"),
    (Block::VirtualServer, "quic_lb"),
    (Block::RealServer, "quic_server_id"),
    // keepalived 1.x's, read with a "deprecated; use global_defs
    // lvs_sync_daemon" warning (crates/config/tests/parse.rs::vrrp_instance_keywords).
    (Block::VrrpInstance, "lvs_sync_daemon_interface"),
];

/// Rows for a word of another keyword's syntax, not a keyword of the block:
/// `virtual_server group NAME`.
const SYNTAX_WORDS: &[(Option<Block>, &str)] = &[(Some(Block::Top), "group")];

impl Row {
    fn ctx_block(&self) -> Option<Block> {
        block_of(self.ctx)
    }
}

/// The test's rows and `keywords::TABLE` cannot drift apart: every entry
/// of the crate's table is a row here with the same outcome (and, when
/// applied, the same behavioural test), and every row of a block the table
/// covers is either the table's entry with the same outcome or one of the
/// block's applied keywords (`keywords::known`); and every keyword the
/// reader knows is a row (but rvs's own extensions).
#[test]
fn the_rows_and_the_crate_s_table_agree() {
    let mut failures = Vec::new();
    for (block, kw, outcome) in keywords::TABLE {
        let rows: Vec<&Row> = ROWS
            .iter()
            .filter(|r| block_of(r.ctx) == Some(*block) && r.keyword == *kw)
            .collect();
        if rows.is_empty() {
            failures.push(format!(
                "TABLE's {block:?} `{kw}` ({outcome:?}) is in no row"
            ));
        } else if !rows.iter().any(|r| same(r.outcome, *outcome)) {
            failures.push(format!(
                "TABLE's {block:?} `{kw}` is {outcome:?}, its rows say {:?}",
                rows.iter().map(|r| r.outcome).collect::<Vec<_>>()
            ));
        }
    }
    for r in ROWS {
        if SYNTAX_WORDS.contains(&(r.ctx_block(), r.keyword)) {
            continue;
        }
        // `authentication { }`'s keywords are read by their block's
        // parser; the other contexts without a table block likewise.
        let Some(block) = block_of(r.ctx).filter(|_| !matches!(r.ctx, Auth)) else {
            continue;
        };
        match (keywords::outcome(block, r.keyword), r.outcome) {
            (Some(t), o) if !same(o, t) => failures.push(format!(
                "[{}] {block:?} `{}`: the row says {o:?}, TABLE {t:?}",
                r.section, r.keyword
            )),
            (Some(_), _) => {}
            (None, Applied(_) | Untested) if keywords::known(block).contains(&r.keyword) => {}
            (None, o) => failures.push(format!(
                "[{}] {block:?} `{}` ({o:?}) is neither in TABLE nor an applied keyword of keywords::known",
                r.section, r.keyword
            )),
        }
    }
    for block in [
        Block::Top,
        Block::Global,
        Block::VrrpInstance,
        Block::SyncGroup,
        Block::VrrpScript,
        Block::VirtualServer,
        Block::RealServer,
        Block::Checker,
        Block::Url,
        Block::Ssl,
    ] {
        for kw in keywords::known(block) {
            let row = ROWS
                .iter()
                .any(|r| block_of(r.ctx) == Some(block) && r.keyword == kw);
            if !row && !RVS_EXTENSIONS.contains(&(block, kw)) {
                failures.push(format!(
                    "{block:?} `{kw}` is known to the reader but in no row"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} disagreement(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Sections of keepalived.conf(5) that are overviews or examples (their
/// keywords are the ones the other sections define).
const EXAMPLE_SECTIONS: &[&str] = &[
    "NAME",
    "Note:",
    "DESCRIPTION",
    "PARAMETER SYNTAX",
    "SCRIPTS",
    "Quoted strings",
    "CONFIGURATION PARSER",
    "TOP HIERACHY",
    "GLOBAL CONFIGURATION",
    "VRRPD CONFIGURATION",
    "LVS CONFIGURATION",
    "ADVANCED CONFIGURATION",
    "Conditional configuration and configuration id",
    "Parameter substitution",
    "Pre-defined definitions",
    "Sequence blocks",
    "List blocks",
    "KERNEL SETTINGS",
    "AUTHORS",
    "SEE ALSO",
];

/// (section, keyword) of every keyword the man page documents: bold words
/// that start a line.
fn man_keywords(roff: &str) -> Vec<(String, String)> {
    let mut section = String::new();
    let mut out = Vec::new();
    for line in roff.lines() {
        if let Some(s) = line.strip_prefix(".SH") {
            section = s.trim().trim_matches('"').to_owned();
            continue;
        }
        let Some(rest) = line.trim_start().strip_prefix("\\fB") else {
            continue;
        };
        let word: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        let next = rest[word.len()..].chars().next();
        // `flag-1`, `sh-port`: scheduler flags, not keywords.
        if word.is_empty()
            || !word.starts_with(|c: char| c.is_ascii_alphabetic())
            || next == Some('-')
        {
            continue;
        }
        if matches!(word.as_str(), "NOT" | "Note" | "Important") {
            continue;
        }
        if EXAMPLE_SECTIONS.contains(&section.as_str()) {
            continue;
        }
        out.push((section.clone(), word));
    }
    out
}

#[test]
fn no_keyword_of_the_man_page_is_missing() {
    let path = "/usr/share/man/man5/keepalived.conf.5.gz";
    if !std::path::Path::new(path).exists() {
        // A failure under CI (set to anything) or RVS_REQUIRE_PRIVILEGED=1.
        rvs_testbed::skip_or_fail(
            "no_keyword_of_the_man_page_is_missing",
            format!("{path} is not installed (scripts/install-deps installs keepalived)"),
        );
        return;
    }
    let out = std::process::Command::new("zcat")
        .arg(path)
        .output()
        .expect("zcat");
    assert!(out.status.success(), "zcat {path}");
    let roff = String::from_utf8_lossy(&out.stdout);
    let found = man_keywords(&roff);
    assert!(
        found.len() > 300,
        "the man page parsed to {} keywords only",
        found.len()
    );
    let missing: Vec<String> = found
        .iter()
        .filter(|(s, k)| !ROWS.iter().any(|r| r.section == s && r.keyword == k))
        .map(|(s, k)| format!("[{s}] {k}"))
        .collect();
    assert!(
        missing.is_empty(),
        "keywords of keepalived.conf(5) missing from the table:\n{}",
        missing.join("\n")
    );
}

#[rustfmt::skip]
static ROWS: &[Row] = &[
    row("Global definitions", "net_namespace", Global, "net_namespace x", Applied("crates/rvs/tests/e2e/netns_daemon.rs::net_namespace_runs_the_daemon_inside_the_named_namespace")),
    row("Global definitions", "net_namespace_ipvs", Global, "net_namespace_ipvs x", Refused),
    row("Global definitions", "namespace_with_ipsets", Global, "namespace_with_ipsets", Warned),
    row("Global definitions", "instance", Global, "instance x", Warned),
    row("Global definitions", "use_pid_dir", Global, "use_pid_dir", Quiet),
    row("Global definitions", "linkbeat_use_polling", Global, "linkbeat_use_polling", Warned),
    row("Global definitions", "child_wait_time", Global, "child_wait_time 1", Quiet),
    row("Global definitions", "global_defs", Top, "global_defs {\n}", Applied("crates/rvs/tests/e2e/sync.rs::lvs_sync_daemon_follows_the_vrrp_state")),
    row("Global definitions", "tmp_config_directory", Global, "tmp_config_directory x", Quiet),
    row("Global definitions", "config_save_dir", Global, "config_save_dir x", Warned),
    row("Global definitions", "process_names", Global, "process_names", Quiet),
    row("Global definitions", "process_name", Global, "process_name x", Quiet),
    row("Global definitions", "vrrp_process_name", Global, "vrrp_process_name x", Quiet),
    row("Global definitions", "checker_process_name", Global, "checker_process_name x", Quiet),
    row("Global definitions", "bfd_process_name", Global, "bfd_process_name x", Quiet),
    row("Global definitions", "startup_script", Global, "startup_script 192.0.2.1", Warned),
    row("Global definitions", "startup_script_timeout", Global, "startup_script_timeout 1", Warned),
    row("Global definitions", "shutdown_script", Global, "shutdown_script 192.0.2.1", Warned),
    row("Global definitions", "shutdown_script_timeout", Global, "shutdown_script_timeout 1", Warned),
    row("Global definitions", "notification_email", Global, "notification_email {\n}", Applied("crates/rvs/tests/e2e/smtp_alert.rs::smtp_alert_mails_vrrp_transitions_to_a_real_smtp_server")),
    row("Global definitions", "notification_email_from", Global, "notification_email_from admin@example.com", Applied("crates/rvs/tests/e2e/smtp_alert.rs::smtp_alert_mails_vrrp_transitions_to_a_real_smtp_server")),
    row("Global definitions", "smtp_server", Global, "smtp_server 127.0.0.1", Applied("crates/rvs/tests/e2e/smtp_alert.rs::smtp_alert_mails_vrrp_transitions_to_a_real_smtp_server")),
    row("Global definitions", "smtp_helo_name", Global, "smtp_helo_name x", Applied("crates/rvs/tests/e2e/smtp_alert.rs::smtp_alert_mails_vrrp_transitions_to_a_real_smtp_server")),
    row("Global definitions", "smtp_connect_timeout", Global, "smtp_connect_timeout 30", Applied("crates/rvs/tests/e2e/smtp_alert.rs::smtp_alert_mails_vrrp_transitions_to_a_real_smtp_server")),
    row("Global definitions", "smtp_alert", Global, "smtp_alert", Applied("crates/rvs/tests/e2e/smtp_alert.rs::smtp_alert_mails_vrrp_transitions_to_a_real_smtp_server")),
    row("Global definitions", "smtp_alert_vrrp", Global, "smtp_alert_vrrp", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("Global definitions", "smtp_alert_checker", Global, "smtp_alert_checker", Applied("crates/check/src/build.rs::checker_keywords_reach_the_probes_and_the_policy")),
    row("Global definitions", "checker_log_all_failures", Global, "checker_log_all_failures", Applied("crates/check/src/build.rs::checker_keywords_reach_the_probes_and_the_policy")),
    row("Global definitions", "no_email_faults", Global, "no_email_faults", Applied("crates/control/src/vrrp/tests.rs::no_email_faults_leaves_fault_transitions_unmailed")),
    row("Global definitions", "router_id", Global, "router_id x", Applied("crates/rvs/tests/e2e/smtp_alert.rs::smtp_alert_mails_vrrp_transitions_to_a_real_smtp_server")),
    row("Global definitions", "vrrp_mcast_group4", Global, "vrrp_mcast_group4 224.0.0.18", Applied("crates/config/tests/parse.rs::global_defs_keywords")),
    row("Global definitions", "vrrp_mcast_group6", Global, "vrrp_mcast_group6 ff02::12", Applied("crates/config/tests/parse.rs::global_defs_keywords")),
    row("Global definitions", "default_interface", Global, "default_interface p33p1.3", Warned),
    row("Global definitions", "lvs_sync_daemon", Global, "lvs_sync_daemon 1", Applied("crates/rvs/tests/e2e/sync.rs::lvs_sync_daemon_follows_the_vrrp_state")),
    row("Global definitions", "lvs_timeouts", Global, "lvs_timeouts", Applied("crates/rvs/tests/e2e/reload.rs::sighup_and_rvsadm_reload_apply_the_difference")),
    row("Global definitions", "lvs_flush", Global, "lvs_flush", Applied("crates/config/tests/parse.rs::global_defs_keywords")),
    row("Global definitions", "lvs_flush_on_stop", Global, "lvs_flush_on_stop", Applied("crates/config/tests/parse.rs::global_defs_keywords")),
    row("Global definitions", "vrrp_garp_master_delay", Global, "vrrp_garp_master_delay 10", Applied("crates/control/src/vrrp/tests.rs::an_instance_is_resolved_with_keepalived_defaults")),
    row("Global definitions", "vrrp_garp_master_repeat", Global, "vrrp_garp_master_repeat 1", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("Global definitions", "vrrp_garp_lower_prio_delay", Global, "vrrp_garp_lower_prio_delay 10", Warned),
    row("Global definitions", "vrrp_down_timer_adverts", Global, "vrrp_down_timer_adverts 3", Applied("crates/control/src/vrrp/tests.rs::vrrp_down_timer_adverts_is_the_instances_default")),
    row("Global definitions", "vrrp_garp_lower_prio_repeat", Global, "vrrp_garp_lower_prio_repeat 1", Warned),
    row("Global definitions", "vrrp_garp_master_refresh", Global, "vrrp_garp_master_refresh 60", Applied("crates/config/tests/parse.rs::global_defs_keywords")),
    row("Global definitions", "vrrp_garp_master_refresh_repeat", Global, "vrrp_garp_master_refresh_repeat 2", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("Global definitions", "vrrp_garp_interval", Global, "vrrp_garp_interval 0.001", Warned),
    row("Global definitions", "vrrp_gna_interval", Global, "vrrp_gna_interval 0.000001", Warned),
    row("Global definitions", "vrrp_min_garp", Global, "vrrp_min_garp", Warned),
    row("Global definitions", "vrrp_garp_extra_if", Global, "vrrp_garp_extra_if", Warned),
    row("Global definitions", "vrrp_lower_prio_no_advert", Global, "vrrp_lower_prio_no_advert", Warned),
    row("Global definitions", "vrrp_higher_prio_send_advert", Global, "vrrp_higher_prio_send_advert", Warned),
    row("Global definitions", "vrrp_version", Global, "vrrp_version 3", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_v3_interoperates_with_keepalived")),
    row("Global definitions", "nftables", Global, "nftables", Warned),
    row("Global definitions", "nftables_priority", Global, "nftables_priority 1", Warned),
    row("Global definitions", "nftables_counters", Global, "nftables_counters", Warned),
    row("Global definitions", "nftables_ifindex", Global, "nftables_ifindex", Warned),
    row("Global definitions", "nftables_ipvs", Global, "nftables_ipvs", Warned),
    row("Global definitions", "nftables_ipvs_priority", Global, "nftables_ipvs_priority 1", Warned),
    row("Global definitions", "nftables_ipvs_start_fwmark", Global, "nftables_ipvs_start_fwmark 1", Warned),
    row("Global definitions", "vrrp_iptables", Global, "vrrp_iptables keepalived", Warned),
    row("Global definitions", "vrrp_ipsets", Global, "vrrp_ipsets", Warned),
    row("Global definitions", "vrrp_check_unicast_src", Global, "vrrp_check_unicast_src", Warned),
    row("Global definitions", "vrrp_skip_check_adv_addr", Global, "vrrp_skip_check_adv_addr", Warned),
    row("Global definitions", "vrrp_strict", Global, "vrrp_strict", Applied("crates/control/src/vrrp/strict_tests.rs::vrrp_strict_applies_keepalived_s_checks_and_refusals")),
    row("Global definitions", "vrrp_notify_priority_changes", Global, "vrrp_notify_priority_changes", Warned),
    row("Global definitions", "max_auto_priority", Global, "max_auto_priority", Quiet),
    row("Global definitions", "min_auto_priority_delay", Global, "min_auto_priority_delay 1 in usecs>", Quiet),
    row("Global definitions", "vrrp_priority", Global, "vrrp_priority x to 19>", Quiet),
    row("Global definitions", "checker_priority", Global, "checker_priority x to 19>", Quiet),
    row("Global definitions", "bfd_priority", Global, "bfd_priority x to 19>", Quiet),
    row("Global definitions", "vrrp_no_swap", Global, "vrrp_no_swap", Quiet),
    row("Global definitions", "checker_no_swap", Global, "checker_no_swap", Quiet),
    row("Global definitions", "bfd_no_swap", Global, "bfd_no_swap", Quiet),
    row("Global definitions", "vrrp_cpu_affinity", Global, "vrrp_cpu_affinity 1", Quiet),
    row("Global definitions", "checker_cpu_affinity", Global, "checker_cpu_affinity 1", Quiet),
    row("Global definitions", "bfd_cpu_affinity", Global, "bfd_cpu_affinity 1", Quiet),
    row("Global definitions", "vrrp_rt_priority", Global, "vrrp_rt_priority x", Quiet),
    row("Global definitions", "checker_rt_priority", Global, "checker_rt_priority x", Quiet),
    row("Global definitions", "bfd_rt_priority", Global, "bfd_rt_priority x", Quiet),
    row("Global definitions", "vrrp_rlimit_rttime", Global, "vrrp_rlimit_rttime >=2", Quiet),
    row("Global definitions", "checker_rlimit_rttime", Global, "checker_rlimit_rttime >=2", Quiet),
    row("Global definitions", "bfd_rlimit_rttime", Global, "bfd_rlimit_rttime >=2", Quiet),
    row("Global definitions", "snmp_socket", Global, "snmp_socket udp:1.2.3.4:705", Quiet),
    row("Global definitions", "enable_snmp_vrrp", Global, "enable_snmp_vrrp", Quiet),
    row("Global definitions", "enable_snmp_checker", Global, "enable_snmp_checker", Quiet),
    row("Global definitions", "enable_snmp_rfc", Global, "enable_snmp_rfc", Quiet),
    row("Global definitions", "enable_snmp_rfcv2", Global, "enable_snmp_rfcv2", Quiet),
    row("Global definitions", "enable_snmp_rfcv3", Global, "enable_snmp_rfcv3", Quiet),
    row("Global definitions", "enable_traps", Global, "enable_traps", Quiet),
    row("Global definitions", "enable_dbus", Global, "enable_dbus", Quiet),
    row("Global definitions", "dbus_service_name", Global, "dbus_service_name x", Quiet),
    row("Global definitions", "script_user", Global, "script_user username", Applied("crates/rvs/tests/e2e/script_security.rs::script_user_runs_scripts_as_that_user_and_script_security_refuses_writable_ones")),
    row("Global definitions", "enable_script_security", Global, "enable_script_security", Applied("crates/rvs/tests/e2e/script_security.rs::script_user_runs_scripts_as_that_user_and_script_security_refuses_writable_ones")),
    row("Global definitions", "notify_fifo", Global, "notify_fifo x", Untested),
    row("Global definitions", "notify_fifo_script", Global, "notify_fifo_script x", Untested),
    row("Global definitions", "vrrp_notify_fifo", Global, "vrrp_notify_fifo x", Applied("crates/rvs/tests/e2e/notify_fifo.rs::notify_fifo_lines_match_keepalived_s")),
    row("Global definitions", "vrrp_notify_fifo_script", Global, "vrrp_notify_fifo_script x", Applied("crates/rvs/tests/e2e/notify_fifo.rs::notify_fifo_lines_match_keepalived_s")),
    row("Global definitions", "lvs_notify_fifo", Global, "lvs_notify_fifo x", Untested),
    row("Global definitions", "lvs_notify_fifo_script", Global, "lvs_notify_fifo_script x", Untested),
    row("Global definitions", "fifo_write_vrrp_states_on_reload", Global, "fifo_write_vrrp_states_on_reload", Warned),
    row("Global definitions", "dynamic_interfaces", Global, "dynamic_interfaces", Warned),
    row("Global definitions", "vrrp_netlink_cmd_rcv_bufs", Global, "vrrp_netlink_cmd_rcv_bufs 1", Quiet),
    row("Global definitions", "vrrp_netlink_cmd_rcv_bufs_force", Global, "vrrp_netlink_cmd_rcv_bufs_force", Quiet),
    row("Global definitions", "vrrp_netlink_monitor_rcv_bufs", Global, "vrrp_netlink_monitor_rcv_bufs 1", Quiet),
    row("Global definitions", "vrrp_netlink_monitor_rcv_bufs_force", Global, "vrrp_netlink_monitor_rcv_bufs_force", Quiet),
    row("Global definitions", "lvs_netlink_cmd_rcv_bufs", Global, "lvs_netlink_cmd_rcv_bufs 1", Quiet),
    row("Global definitions", "lvs_netlink_cmd_rcv_bufs_force", Global, "lvs_netlink_cmd_rcv_bufs_force", Quiet),
    row("Global definitions", "lvs_netlink_monitor_rcv_bufs", Global, "lvs_netlink_monitor_rcv_bufs 1", Quiet),
    row("Global definitions", "lvs_netlink_monitor_rcv_bufs_force", Global, "lvs_netlink_monitor_rcv_bufs_force", Quiet),
    row("Global definitions", "process_monitor_rcv_bufs", Global, "process_monitor_rcv_bufs 1", Quiet),
    row("Global definitions", "process_monitor_rcv_bufs_force", Global, "process_monitor_rcv_bufs_force", Quiet),
    row("Global definitions", "vrrp_rx_bufs_policy", Global, "vrrp_rx_bufs_policy", Quiet),
    row("Global definitions", "vrrp_rx_bufs_multiplier", Global, "vrrp_rx_bufs_multiplier 1", Quiet),
    row("Global definitions", "rs_init_notifies", Global, "rs_init_notifies", Applied("crates/check/src/policy_tests.rs::rs_init_notifies_runs_up_notifiers_for_servers_starting_alive")),
    row("Global definitions", "no_checker_emails", Global, "no_checker_emails", Applied("crates/check/src/policy_tests.rs::no_checker_emails_mails_only_real_server_changes")),
    row("Global definitions", "umask", Global, "umask", Quiet),
    row("Global definitions", "vrrp_startup_delay", Global, "vrrp_startup_delay 5.5", Warned),
    row("Global definitions", "log_unknown_vrids", Global, "log_unknown_vrids", Warned),
    row("Global definitions", "vmac_prefix", Global, "vmac_prefix x", Warned),
    row("Global definitions", "vmac_addr_prefix", Global, "vmac_addr_prefix x", Warned),
    row("Global definitions", "random_seed", Global, "random_seed 1", Quiet),
    row("Global definitions", "reload_check_config", Global, "reload_check_config", Quiet),
    row("Global definitions", "include_check", Global, "include_check", Warned),
    row("Global definitions", "reload_time_file", Global, "reload_time_file x", Warned),
    row("Global definitions", "reload_repeat", Global, "reload_repeat", Warned),
    row("Global definitions", "reload_file", Global, "reload_file", Warned),
    row("Global definitions", "data_use_instance", Global, "data_use_instance", Quiet),
    row("Linkbeat interfaces", "linkbeat_interfaces", Top, "linkbeat_interfaces {\n}", Warned),
    row("Static track groups", "track_group", Top, "track_group {\n}", Warned),
    row("Static track groups", "group", In("track_group"), "group {\n}", InBlock),
    row("Static routes/addresses/rules", "static_ipaddress", Top, "static_ipaddress {\n}", Applied("crates/rvs/tests/e2e/routes.rs::virtual_routes_and_rules_follow_the_master")),
    row("Static routes/addresses/rules", "static_routes", Top, "static_routes {\n}", Applied("crates/rvs/tests/e2e/routes.rs::virtual_routes_and_rules_follow_the_master")),
    row("Static routes/addresses/rules", "static_rules", Top, "static_rules {\n}", Applied("crates/rvs/tests/e2e/routes.rs::virtual_routes_and_rules_follow_the_master")),
    row("Track files", "track_file", Top, "track_file t {\n file /x\n}", Applied("crates/rvs/tests/e2e/track.rs::track_file_weight_moves_mastership")),
    row("Track files", "file", In("track_file"), "file x", Applied("crates/rvs/tests/e2e/track.rs::track_file_weight_moves_mastership")),
    row("Track files", "weight", In("track_file"), "file x\n weight -2 reverse", Applied("crates/rvs/tests/e2e/track.rs::track_file_weight_moves_mastership")),
    row("Track files", "init_file", In("track_file"), "file x\n init_file 3 overwrite", Applied("crates/rvs/tests/e2e/track.rs::track_file_weight_moves_mastership")),
    row("VRRP track processes", "vrrp_track_process", Top, "vrrp_track_process p {\n process x\n}", Applied("crates/rvs/tests/e2e/track.rs::track_process_moves_mastership_and_faults")),
    row("VRRP track processes", "process", In("vrrp_track_process"), "process x", Applied("crates/rvs/tests/e2e/track.rs::track_process_moves_mastership_and_faults")),
    row("VRRP track processes", "weight", In("vrrp_track_process"), "process x\n weight -3 reverse", Applied("crates/rvs/tests/e2e/track.rs::track_process_moves_mastership_and_faults")),
    row("VRRP track processes", "quorum", In("vrrp_track_process"), "process x\n quorum 1", Applied("crates/control/src/vrrp/process.rs::processes_match_as_keepalived_matches_them")),
    row("VRRP track processes", "quorum_max", In("vrrp_track_process"), "process x\n quorum_max 1", Applied("crates/control/src/vrrp/process.rs::processes_match_as_keepalived_matches_them")),
    row("VRRP track processes", "fork_delay", In("vrrp_track_process"), "process x\n fork_delay 1", Applied("crates/control/src/vrrp/process.rs::processes_match_as_keepalived_matches_them")),
    row("VRRP track processes", "terminate_delay", In("vrrp_track_process"), "process x\n terminate_delay 1", Applied("crates/control/src/vrrp/process.rs::processes_match_as_keepalived_matches_them")),
    row("VRRP track processes", "delay", In("vrrp_track_process"), "process x\n delay 1", Applied("crates/control/src/vrrp/process.rs::processes_match_as_keepalived_matches_them")),
    row("VRRP track processes", "full_command", In("vrrp_track_process"), "process x\n full_command", Applied("crates/control/src/vrrp/process.rs::processes_match_as_keepalived_matches_them")),
    row("BFD CONFIGURATION", "bfd_instance", Top, "bfd_instance {\n}", Warned),
    row("BFD CONFIGURATION", "neighbor_ip", In("bfd_instance"), "neighbor_ip 192.0.2.1 192.0.2.1", InBlock),
    row("BFD CONFIGURATION", "source_ip", In("bfd_instance"), "source_ip 192.0.2.1 192.0.2.1", InBlock),
    row("BFD CONFIGURATION", "min_rx", In("bfd_instance"), "min_rx 1", InBlock),
    row("BFD CONFIGURATION", "min_tx", In("bfd_instance"), "min_tx 1", InBlock),
    row("BFD CONFIGURATION", "idle_tx", In("bfd_instance"), "idle_tx 1", InBlock),
    row("BFD CONFIGURATION", "multiplier", In("bfd_instance"), "multiplier 1", InBlock),
    row("BFD CONFIGURATION", "passive", In("bfd_instance"), "passive", InBlock),
    row("BFD CONFIGURATION", "ttl", In("bfd_instance"), "ttl 1", InBlock),
    row("BFD CONFIGURATION", "hoplimit", In("bfd_instance"), "hoplimit 1", InBlock),
    row("BFD CONFIGURATION", "max_hops", In("bfd_instance"), "max_hops 1", InBlock),
    row("BFD CONFIGURATION", "weight", In("bfd_instance"), "weight x", InBlock),
    row("BFD CONFIGURATION", "vrrp", In("bfd_instance"), "vrrp", InBlock),
    row("BFD CONFIGURATION", "checker", In("bfd_instance"), "checker", InBlock),
    row("VRRP script(s)", "vrrp_script", Top, "vrrp_script S {\n script /bin/true\n}", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_a_failing_track_script_lowers_priority_and_moves_the_address")),
    row("VRRP script(s)", "script", VrrpScript, "script x", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_a_failing_track_script_lowers_priority_and_moves_the_address")),
    row("VRRP script(s)", "interval", VrrpScript, "interval 1", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_a_failing_track_script_lowers_priority_and_moves_the_address")),
    row("VRRP script(s)", "timeout", VrrpScript, "timeout 1", Applied("crates/rvs/tests/e2e/golden.rs::connections_timeouts_and_tunnels")),
    row("VRRP script(s)", "weight", VrrpScript, "weight 1", Applied("crates/rvs/tests/e2e/health.rs::dead_server_is_removed_within_keepalived_formula_and_recovers_with_its_weight")),
    row("VRRP script(s)", "rise", VrrpScript, "rise 1", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_a_failing_track_script_lowers_priority_and_moves_the_address")),
    row("VRRP script(s)", "fall", VrrpScript, "fall 1", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_a_failing_track_script_lowers_priority_and_moves_the_address")),
    row("VRRP script(s)", "user", VrrpScript, "user x", Applied("crates/check/src/probe/misc.rs::resolves_users")),
    row("VRRP script(s)", "init_fail", VrrpScript, "init_fail", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP synchronization group(s)", "vrrp_sync_group", Top, "vrrp_instance VI_K {\n state BACKUP\n interface lo\n virtual_router_id 9\n}\nvrrp_sync_group G {\n group {\n VI_K\n }\n}", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_sync_group_moves_its_members_together")),
    row("VRRP synchronization group(s)", "group", SyncGroup, "group {\n}", Applied("crates/rvs/tests/e2e/sync.rs::sync_daemon_carries_connections_and_templates_to_the_backup")),
    row("VRRP synchronization group(s)", "track_interface", SyncGroup, "track_interface {\n}", Applied("crates/control/src/vrrp/tests.rs::an_instance_is_resolved_with_keepalived_defaults")),
    row("VRRP synchronization group(s)", "track_script", SyncGroup, "track_script {\n}", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_a_failing_track_script_lowers_priority_and_moves_the_address")),
    row("VRRP synchronization group(s)", "track_file", SyncGroup, "track_file {\n}", Warned),
    row("VRRP synchronization group(s)", "track_process", SyncGroup, "track_process {\n}", Warned),
    row("VRRP synchronization group(s)", "track_bfd", SyncGroup, "track_bfd {\n}", Warned),
    row("VRRP synchronization group(s)", "notify_master", SyncGroup, "notify_master /path/to_master.sh", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP synchronization group(s)", "notify_backup", SyncGroup, "notify_backup /path/to_backup.sh", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP synchronization group(s)", "notify_fault", SyncGroup, "notify_fault \"/path/fault.sh VG_1\"", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP synchronization group(s)", "notify_stop", SyncGroup, "notify_stop x", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP synchronization group(s)", "notify_deleted", SyncGroup, "notify_deleted", Warned),
    row("VRRP synchronization group(s)", "notify", SyncGroup, "notify x", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_elects_fails_over_preempts_back_and_resigns_on_stop")),
    row("VRRP synchronization group(s)", "notify_priority_changes", SyncGroup, "notify_priority_changes", Warned),
    row("VRRP synchronization group(s)", "smtp_alert", SyncGroup, "smtp_alert", Warned),
    row("VRRP synchronization group(s)", "global_tracking", SyncGroup, "global_tracking", Warned),
    row("VRRP synchronization group(s)", "sync_group_tracking_weight", SyncGroup, "sync_group_tracking_weight", Warned),
    row("VRRP gratuitous ARP and unsolicited neighbour advert delay group(s)", "garp_group", Top, "garp_group {\n}", Warned),
    row("VRRP gratuitous ARP and unsolicited neighbour advert delay group(s)", "garp_interval", In("garp_group"), "garp_interval 1", InBlock),
    row("VRRP gratuitous ARP and unsolicited neighbour advert delay group(s)", "gna_interval", In("garp_group"), "gna_interval 1", InBlock),
    row("VRRP gratuitous ARP and unsolicited neighbour advert delay group(s)", "interface", In("garp_group"), "interface x", InBlock),
    row("VRRP gratuitous ARP and unsolicited neighbour advert delay group(s)", "interfaces", In("garp_group"), "interfaces {\n}", InBlock),
    row("VRRP instance(s)", "vrrp_instance", Top, "vrrp_instance VI_K {\n state BACKUP\n interface lo\n virtual_router_id 9\n}", Applied("crates/rvs/tests/e2e/package.rs::shipped_keepalived_conf_example_is_valid")),
    row("VRRP instance(s)", "state", VrrpInstance, "state MASTER", Applied("crates/rvs/tests/e2e/golden.rs::connections_timeouts_and_tunnels")),
    row("VRRP instance(s)", "interface", VrrpInstance, "interface eth0", Applied("crates/rvs/tests/e2e/package.rs::debian_package_installs_upgrades_under_load_and_removes_cleanly")),
    row("VRRP instance(s)", "vrf", VrrpInstance, "vrf x", Warned),
    row("VRRP instance(s)", "use_vmac", VrrpInstance, "use_vmac", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_use_vmac_announces_the_virtual_mac")),
    row("VRRP instance(s)", "use_vmac_addr", VrrpInstance, "use_vmac_addr", Warned),
    row("VRRP instance(s)", "vmac_xmit_base", VrrpInstance, "vmac_xmit_base", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP instance(s)", "use_ipvlan", VrrpInstance, "use_ipvlan", Warned),
    row("VRRP instance(s)", "native_ipv6", VrrpInstance, "native_ipv6", Warned),
    row("VRRP instance(s)", "dont_track_primary", VrrpInstance, "dont_track_primary", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP instance(s)", "track_interface", VrrpInstance, "track_interface {\n}", Applied("crates/control/src/vrrp/tests.rs::an_instance_is_resolved_with_keepalived_defaults")),
    row("VRRP instance(s)", "track_script", VrrpInstance, "track_script {\n}", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_a_failing_track_script_lowers_priority_and_moves_the_address")),
    row("VRRP instance(s)", "track_file", VrrpInstance, "track_file {\n}", Applied("crates/rvs/tests/e2e/track.rs::track_file_weight_moves_mastership")),
    row("VRRP instance(s)", "track_process", VrrpInstance, "track_process {\n}", Applied("crates/rvs/tests/e2e/track.rs::track_process_moves_mastership_and_faults")),
    row("VRRP instance(s)", "track_bfd", VrrpInstance, "track_bfd {\n}", Warned),
    row("VRRP instance(s)", "mcast_src_ip", VrrpInstance, "mcast_src_ip 192.0.2.1", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP instance(s)", "unicast_src_ip", VrrpInstance, "unicast_src_ip 192.0.2.1", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_unicast_peers_elect_and_fail_over")),
    row("VRRP instance(s)", "mcast_dst_ip", VrrpInstance, "mcast_dst_ip 192.0.2.1", Warned),
    row("VRRP instance(s)", "track_src_ip", VrrpInstance, "track_src_ip", Warned),
    row("VRRP instance(s)", "version", VrrpInstance, "version 3", Applied("crates/rvs/tests/e2e/golden.rs::save_clear_restore_reproduces_the_listing")),
    row("VRRP instance(s)", "check_unicast_src", VrrpInstance, "check_unicast_src", Warned),
    row("VRRP instance(s)", "unicast_peer", VrrpInstance, "unicast_peer {\n}", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_unicast_peers_elect_and_fail_over")),
    row("VRRP instance(s)", "unicast_fault_no_peer", VrrpInstance, "unicast_fault_no_peer", Warned),
    row("VRRP instance(s)", "unicast_ttl", VrrpInstance, "unicast_ttl {0..255}", Warned),
    row("VRRP instance(s)", "old_unicast_checksum", VrrpInstance, "old_unicast_checksum", Warned),
    row("VRRP instance(s)", "garp_master_delay", VrrpInstance, "garp_master_delay 10", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP instance(s)", "garp_master_repeat", VrrpInstance, "garp_master_repeat 1", Applied("crates/config/tests/parse.rs::vrrp_instance_keywords")),
    row("VRRP instance(s)", "garp_lower_prio_delay", VrrpInstance, "garp_lower_prio_delay 10", Warned),
    row("VRRP instance(s)", "garp_lower_prio_repeat", VrrpInstance, "garp_lower_prio_repeat 1", Warned),
    row("VRRP instance(s)", "garp_master_refresh", VrrpInstance, "garp_master_refresh 60", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP instance(s)", "garp_master_refresh_repeat", VrrpInstance, "garp_master_refresh_repeat 2", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP instance(s)", "garp_extra_if", VrrpInstance, "garp_extra_if", Warned),
    row("VRRP instance(s)", "down_timer_adverts", VrrpInstance, "down_timer_adverts 3", Applied("crates/control/src/vrrp/tests.rs::vrrp_down_timer_adverts_is_the_instances_default")),
    row("VRRP instance(s)", "lower_prio_no_advert", VrrpInstance, "lower_prio_no_advert", Warned),
    row("VRRP instance(s)", "higher_prio_send_advert", VrrpInstance, "higher_prio_send_advert", Warned),
    row("VRRP instance(s)", "virtual_router_id", VrrpInstance, "virtual_router_id 51", Applied("crates/rvs/tests/e2e/sync.rs::lvs_sync_daemon_follows_the_vrrp_state")),
    row("VRRP instance(s)", "priority", VrrpInstance, "priority 100", Applied("crates/rvs/tests/e2e/sync.rs::lvs_sync_daemon_follows_the_vrrp_state")),
    row("VRRP instance(s)", "advert_int", VrrpInstance, "advert_int 1", Applied("crates/rvs/tests/e2e/sync.rs::lvs_sync_daemon_follows_the_vrrp_state")),
    row("VRRP instance(s)", "authentication", VrrpInstance, "authentication {\n}", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_no_host_but_the_master_answers_arp_after_kill_restart_and_stop")),
    row("VRRP instance(s)", "auth_type", Auth, "auth_type PASS", Applied("crates/control/src/vrrp/tests.rs::an_instance_is_resolved_with_keepalived_defaults")),
    row("VRRP instance(s)", "auth_pass", Auth, "auth_pass 1234", Applied("crates/control/src/vrrp/tests.rs::an_instance_is_resolved_with_keepalived_defaults")),
    row("VRRP instance(s)", "virtual_ipaddress", VrrpInstance, "virtual_ipaddress {\n}", Applied("crates/rvs/tests/e2e/sync.rs::lvs_sync_daemon_follows_the_vrrp_state")),
    row("VRRP instance(s)", "virtual_ipaddress_excluded", VrrpInstance, "virtual_ipaddress_excluded {\n}", Applied("crates/control/src/vrrp/tests.rs::an_instance_is_resolved_with_keepalived_defaults")),
    row("VRRP instance(s)", "promote_secondaries", VrrpInstance, "promote_secondaries", Warned),
    row("VRRP instance(s)", "virtual_routes", VrrpInstance, "virtual_routes {\n}", Applied("crates/rvs/tests/e2e/routes.rs::virtual_routes_and_rules_follow_the_master")),
    row("VRRP instance(s)", "virtual_rules", VrrpInstance, "virtual_rules {\n}", Applied("crates/rvs/tests/e2e/routes.rs::virtual_routes_and_rules_follow_the_master")),
    row("VRRP instance(s)", "accept", VrrpInstance, "accept", Quiet),
    row("VRRP instance(s)", "no_accept", VrrpInstance, "no_accept", Warned),
    row("VRRP instance(s)", "nopreempt", VrrpInstance, "nopreempt", Applied("crates/control/src/vrrp/tests.rs::an_instance_is_resolved_with_keepalived_defaults")),
    row("VRRP instance(s)", "preempt", VrrpInstance, "preempt", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP instance(s)", "preempt_delay", VrrpInstance, "preempt_delay 300", Applied("crates/config/tests/parse.rs::vrrp_instance_keywords")),
    row("VRRP instance(s)", "skip_check_adv_addr", VrrpInstance, "skip_check_adv_addr", Warned),
    row("VRRP instance(s)", "strict_mode", VrrpInstance, "strict_mode", Applied("crates/control/src/vrrp/strict_tests.rs::vrrp_strict_applies_keepalived_s_checks_and_refusals")),
    row("VRRP instance(s)", "debug", VrrpInstance, "debug 1", Quiet),
    row("VRRP instance(s)", "notify_master", VrrpInstance, "notify_master x", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP instance(s)", "notify_backup", VrrpInstance, "notify_backup x", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP instance(s)", "notify_fault", VrrpInstance, "notify_fault \"/path/fault.sh VG_1\"", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP instance(s)", "notify_stop", VrrpInstance, "notify_stop x", Applied("crates/control/src/vrrp/tests.rs::instance_keywords_reach_the_running_instance")),
    row("VRRP instance(s)", "notify", VrrpInstance, "notify x", Applied("crates/rvs/tests/e2e/vrrp.rs::vrrp_elects_fails_over_preempts_back_and_resigns_on_stop")),
    row("VRRP instance(s)", "notify_master_rx_lower_pri", VrrpInstance, "notify_master_rx_lower_pri x", Warned),
    row("VRRP instance(s)", "notify_priority_changes", VrrpInstance, "notify_priority_changes", Warned),
    row("VRRP instance(s)", "smtp_alert", VrrpInstance, "smtp_alert", Applied("crates/rvs/tests/e2e/smtp_alert.rs::smtp_alert_mails_vrrp_transitions_to_a_real_smtp_server")),
    row("VRRP instance(s)", "kernel_rx_buf_size", VrrpInstance, "kernel_rx_buf_size", Quiet),
    row("VRRP instance(s)", "linkbeat_use_polling", VrrpInstance, "linkbeat_use_polling", Warned),
    row("Virtual server group(s)", "virtual_server_group", Top, "virtual_server_group G {\n 192.0.2.10 80\n}\nvirtual_server group G {\n protocol TCP\n}", Applied("crates/config/tests/parse.rs::group_range_expansion")),
    row("Virtual server group(s)", "fwmark", Vsg, "fwmark 1", Applied("crates/config/tests/parse.rs::group_range_expansion")),
    row("Virtual server(s)", "fwmark", Vsg, "fwmark 1", Applied("crates/config/tests/parse.rs::group_range_expansion")),
    row("Virtual server(s)", "group", Top, "virtual_server_group G {\n 192.0.2.10 80\n}\nvirtual_server group G {\n protocol TCP\n}", Applied("crates/rvs/tests/e2e/sync.rs::sync_daemon_carries_connections_and_templates_to_the_backup")),
    row("Virtual server(s)", "virtual_server", Top, "virtual_server 192.0.2.10 80 {\n protocol TCP\n real_server 192.0.2.20 80 {\n }\n}", Applied("crates/rvs/tests/e2e/health.rs::reload_keeps_a_down_server_out_and_metrics_show_it")),
    row("Virtual server(s)", "lvs_sched", VirtualServer, "lvs_sched rr", Applied("crates/config/tests/parse.rs::scheduler_flags_tunnel_and_persistence")),
    row("Virtual server(s)", "ops", VirtualServer, "ops", Applied("crates/config/tests/parse.rs::scheduler_flags_tunnel_and_persistence")),
    row("Virtual server(s)", "lvs_method", VirtualServer, "lvs_method NAT", Applied("crates/config/tests/parse.rs::scheduler_flags_tunnel_and_persistence")),
    row("Virtual server(s)", "persistence_engine", VirtualServer, "persistence_engine sip", Applied("crates/config/tests/parse.rs::scheduler_flags_tunnel_and_persistence")),
    row("Virtual server(s)", "persistence_timeout", VirtualServer, "persistence_timeout", Applied("crates/config/tests/parse.rs::persistence_timeout_without_value_is_360")),
    row("Virtual server(s)", "persistence_granularity", VirtualServer, "persistence_granularity 255.255.255.0", Applied("crates/config/tests/parse.rs::scheduler_flags_tunnel_and_persistence")),
    row("Virtual server(s)", "protocol", VirtualServer, "protocol TCP", Applied("crates/rvs/tests/e2e/golden.rs::save_clear_restore_reproduces_the_listing")),
    row("Virtual server(s)", "ha_suspend", VirtualServer, "ha_suspend", Warned),
    row("Virtual server(s)", "smtp_alert", VirtualServer, "smtp_alert", Applied("crates/rvs/tests/e2e/smtp_alert.rs::smtp_alert_mails_checker_and_quorum_changes_to_a_real_smtp_server")),
    row("Virtual server(s)", "virtualhost", VirtualServer, "virtualhost x", Applied("crates/config/tests/parse.rs::inheritance_vs_rs_checker")),
    row("Virtual server(s)", "snmp_name", VirtualServer, "snmp_name x", Quiet),
    row("Virtual server(s)", "alpha", VirtualServer, "alpha", Applied("crates/check/src/policy_tests.rs::alpha_starts_down_and_first_success_adds")),
    row("Virtual server(s)", "omega", VirtualServer, "omega", Applied("crates/check/src/policy_tests.rs::omega_runs_down_notifiers_on_shutdown")),
    row("Virtual server(s)", "quorum", VirtualServer, "quorum 1", Applied("crates/rvs/tests/e2e/health.rs::quorum_loss_swaps_in_the_sorry_server_and_back")),
    row("Virtual server(s)", "hysteresis", VirtualServer, "hysteresis 1", Applied("crates/check/src/build.rs::plan_resolves_targets_timing_and_quorum")),
    row("Virtual server(s)", "quorum_up", VirtualServer, "quorum_up x", Applied("crates/rvs/tests/e2e/health.rs::quorum_loss_swaps_in_the_sorry_server_and_back")),
    row("Virtual server(s)", "quorum_down", VirtualServer, "quorum_down x", Applied("crates/rvs/tests/e2e/health.rs::quorum_loss_swaps_in_the_sorry_server_and_back")),
    row("Virtual server(s)", "ip_family", VirtualServer, "ip_family inet", Applied("crates/config/tests/parse.rs::services_carry_the_family_the_sorry_method_and_thresholds")),
    row("Virtual server(s)", "sorry_server", VirtualServer, "sorry_server 192.0.2.1", Applied("crates/rvs/tests/e2e/health.rs::quorum_loss_swaps_in_the_sorry_server_and_back")),
    row("Virtual server(s)", "sorry_server_inhibit", VirtualServer, "sorry_server_inhibit", Applied("crates/check/src/build.rs::checker_keywords_reach_the_probes_and_the_policy")),
    row("Virtual server(s)", "sorry_server_lvs_method", VirtualServer, "sorry_server_lvs_method NAT", Applied("crates/config/tests/parse.rs::services_carry_the_family_the_sorry_method_and_thresholds")),
    row("Virtual server(s)", "connect_timeout", VirtualServer, "connect_timeout 1", Applied("crates/rvs/tests/e2e/health.rs::blackholed_server_times_out_within_the_bound")),
    row("Virtual server(s)", "retry", VirtualServer, "retry 1", Applied("crates/rvs/tests/e2e/health.rs::dead_server_is_removed_within_keepalived_formula_and_recovers_with_its_weight")),
    row("Virtual server(s)", "delay_before_retry", VirtualServer, "delay_before_retry 1", Applied("crates/rvs/tests/e2e/health.rs::dead_server_is_removed_within_keepalived_formula_and_recovers_with_its_weight")),
    row("Virtual server(s)", "warmup", VirtualServer, "warmup 1", Applied("crates/check/src/policy_tests.rs::warmup_delays_first_check_deterministically")),
    row("Virtual server(s)", "delay_loop", VirtualServer, "delay_loop 1", Applied("crates/rvs/tests/e2e/health.rs::dead_server_is_removed_within_keepalived_formula_and_recovers_with_its_weight")),
    row("Virtual server(s)", "inhibit_on_failure", VirtualServer, "inhibit_on_failure", Applied("crates/rvs/tests/e2e/health.rs::inhibit_on_failure_keeps_the_server_listed_at_weight_zero")),
    row("Virtual server(s)", "real_server", VirtualServer, "real_server 192.0.2.21 80 {\n}", Applied("crates/rvs/tests/e2e/health.rs::reload_keeps_a_down_server_out_and_metrics_show_it")),
    row("Virtual server(s)", "weight", RealServer, "weight 1", Applied("crates/rvs/tests/e2e/health.rs::dead_server_is_removed_within_keepalived_formula_and_recovers_with_its_weight")),
    row("Virtual server(s)", "lvs_method", RealServer, "lvs_method NAT", Applied("crates/config/tests/parse.rs::scheduler_flags_tunnel_and_persistence")),
    row("Virtual server(s)", "lvs_method", RealServer, "lvs_method TUN type gre csum", Applied("crates/config/tests/parse.rs::scheduler_flags_tunnel_and_persistence")),
    row("Virtual server(s)", "lvs_method", RealServer, "lvs_method TUN type geneve nocsum", Applied("crates/config/tests/parse.rs::scheduler_flags_tunnel_and_persistence")),
    row("Virtual server(s)", "notify_up", RealServer, "notify_up x", Applied("crates/check/src/policy_tests.rs::notify_scripts_run_on_real_server_transitions_only")),
    row("Virtual server(s)", "notify_down", RealServer, "notify_down x", Applied("crates/check/src/build.rs::plan_resolves_targets_timing_and_quorum")),
    row("Virtual server(s)", "uthreshold", RealServer, "uthreshold 1", Applied("crates/config/tests/parse.rs::services_carry_the_family_the_sorry_method_and_thresholds")),
    row("Virtual server(s)", "lthreshold", RealServer, "lthreshold 1", Applied("crates/config/tests/parse.rs::services_carry_the_family_the_sorry_method_and_thresholds")),
    row("Virtual server(s)", "smtp_alert", RealServer, "smtp_alert", Applied("crates/rvs/tests/e2e/smtp_alert.rs::smtp_alert_mails_checker_and_quorum_changes_to_a_real_smtp_server")),
    row("Virtual server(s)", "virtualhost", RealServer, "virtualhost x", Applied("crates/config/tests/parse.rs::inheritance_vs_rs_checker")),
    row("Virtual server(s)", "snmp_name", RealServer, "snmp_name x", Quiet),
    row("Virtual server(s)", "alpha", RealServer, "alpha", Applied("crates/check/src/policy_tests.rs::alpha_starts_down_and_first_success_adds")),
    row("Virtual server(s)", "connect_timeout", RealServer, "connect_timeout 1", Applied("crates/rvs/tests/e2e/health.rs::blackholed_server_times_out_within_the_bound")),
    row("Virtual server(s)", "retry", RealServer, "retry 1", Applied("crates/rvs/tests/e2e/health.rs::dead_server_is_removed_within_keepalived_formula_and_recovers_with_its_weight")),
    row("Virtual server(s)", "delay_before_retry", RealServer, "delay_before_retry 1", Applied("crates/rvs/tests/e2e/health.rs::dead_server_is_removed_within_keepalived_formula_and_recovers_with_its_weight")),
    row("Virtual server(s)", "warmup", RealServer, "warmup 1", Applied("crates/check/src/policy_tests.rs::warmup_delays_first_check_deterministically")),
    row("Virtual server(s)", "delay_loop", RealServer, "delay_loop 1", Applied("crates/rvs/tests/e2e/health.rs::dead_server_is_removed_within_keepalived_formula_and_recovers_with_its_weight")),
    row("Virtual server(s)", "inhibit_on_failure", RealServer, "inhibit_on_failure", Applied("crates/rvs/tests/e2e/health.rs::inhibit_on_failure_keeps_the_server_listed_at_weight_zero")),
    row("Virtual server(s)", "connect_ip", Checker("TCP_CHECK"), "connect_ip 192.0.2.1", Applied("crates/rvs/tests/e2e/health_probes.rs::smtp_check_hosts_are_each_checked_against_a_real_smtp_server")),
    row("Virtual server(s)", "connect_port", Checker("TCP_CHECK"), "connect_port 1", Applied("crates/check/src/build.rs::plan_resolves_targets_timing_and_quorum")),
    row("Virtual server(s)", "bindto", Checker("TCP_CHECK"), "bindto 192.0.2.1", Applied("crates/check/src/build.rs::checker_keywords_reach_the_probes_and_the_policy")),
    row("Virtual server(s)", "bind_if", Checker("TCP_CHECK"), "bind_if x", Applied("crates/check/tests/probes/tcp.rs::tcp_bind_if")),
    row("Virtual server(s)", "bind_port", Checker("TCP_CHECK"), "bind_port 1", Applied("crates/check/src/build.rs::checker_keywords_reach_the_probes_and_the_policy")),
    row("Virtual server(s)", "fwmark", Checker("TCP_CHECK"), "fwmark 1", Applied("crates/check/tests/probes/tcp.rs::tcp_fwmark_reaches_policy_routing")),
    row("Virtual server(s)", "alpha", Checker("TCP_CHECK"), "alpha", Applied("crates/check/src/policy_tests.rs::alpha_starts_down_and_first_success_adds")),
    row("Virtual server(s)", "connect_timeout", Checker("TCP_CHECK"), "connect_timeout 1", Applied("crates/rvs/tests/e2e/health.rs::blackholed_server_times_out_within_the_bound")),
    row("Virtual server(s)", "retry", Checker("TCP_CHECK"), "retry 1", Applied("crates/rvs/tests/e2e/health.rs::dead_server_is_removed_within_keepalived_formula_and_recovers_with_its_weight")),
    row("Virtual server(s)", "delay_before_retry", Checker("TCP_CHECK"), "delay_before_retry 1", Applied("crates/rvs/tests/e2e/health.rs::dead_server_is_removed_within_keepalived_formula_and_recovers_with_its_weight")),
    row("Virtual server(s)", "warmup", Checker("TCP_CHECK"), "warmup 1", Applied("crates/check/src/policy_tests.rs::warmup_delays_first_check_deterministically")),
    row("Virtual server(s)", "delay_loop", Checker("TCP_CHECK"), "delay_loop 1", Applied("crates/rvs/tests/e2e/health.rs::dead_server_is_removed_within_keepalived_formula_and_recovers_with_its_weight")),
    row("Virtual server(s)", "log_all_failures", Checker("TCP_CHECK"), "log_all_failures", Applied("crates/check/src/policy_tests.rs::log_all_failures_reports_retried_failures")),
    row("Virtual server(s)", "HTTP_GET", RealServer, "HTTP_GET {\n}", Applied("crates/rvs/tests/e2e/health_probes.rs::http_status_and_digest_failures_are_detected")),
    row("Virtual server(s)", "http_protocol", Checker("HTTP_GET"), "http_protocol 1.1", Applied("crates/check/src/build.rs::checker_keywords_reach_the_probes_and_the_policy")),
    row("Virtual server(s)", "fast_recovery", Checker("HTTP_GET"), "fast_recovery", Warned),
    row("Virtual server(s)", "url", Checker("HTTP_GET"), "url {\n}", Applied("crates/rvs/tests/e2e/health_probes.rs::http_status_and_digest_failures_are_detected")),
    row("Virtual server(s)", "path", Url, "path x", Applied("crates/rvs/tests/e2e/health_probes.rs::http_status_and_digest_failures_are_detected")),
    row("Virtual server(s)", "digest", Url, "digest 9b3a0c85a887a256d6939da88aabd8cd", Applied("crates/rvs/tests/e2e/health_probes.rs::http_status_and_digest_failures_are_detected")),
    row("Virtual server(s)", "status_code", Url, "status_code 200", Applied("crates/config/tests/parse.rs::seed_3_loads_with_expected_warnings")),
    row("Virtual server(s)", "virtualhost", Url, "virtualhost x", Applied("crates/check/tests/probes/http.rs::http_chunked_body_digest_and_vhost_1_1")),
    row("Virtual server(s)", "regex", Url, "regex x", Warned),
    row("Virtual server(s)", "regex_no_match", Url, "regex_no_match", Warned),
    row("Virtual server(s)", "regex_options", Url, "regex_options x", Warned),
    row("Virtual server(s)", "regex_stack", Url, "regex_stack 1 1", Warned),
    row("Virtual server(s)", "regex_min_offset", Url, "regex_min_offset 1", Warned),
    row("Virtual server(s)", "regex_max_offset", Url, "regex_max_offset 1", Warned),
    row("Virtual server(s)", "SSL_GET", RealServer, "SSL_GET {\n}", Applied("crates/config/tests/parse.rs::checker_types")),
    row("Virtual server(s)", "enable_sni", Checker("SSL_GET"), "enable_sni", Applied("crates/config/tests/parse.rs::checker_types")),
    row("Virtual server(s)", "TCP_CHECK", RealServer, "TCP_CHECK {\n}", Applied("crates/check/src/build.rs::plan_resolves_targets_timing_and_quorum")),
    row("Virtual server(s)", "SMTP_CHECK", RealServer, "SMTP_CHECK {\n}", Applied("crates/config/tests/parse.rs::checker_types")),
    row("Virtual server(s)", "helo_name", Checker("SMTP_CHECK"), "helo_name x", Applied("crates/config/tests/parse.rs::checker_types")),
    row("Virtual server(s)", "DNS_CHECK", RealServer, "DNS_CHECK {\n}", Applied("crates/rvs/tests/e2e/health_probes.rs::dns_check_against_a_real_responder")),
    row("Virtual server(s)", "type", Checker("DNS_CHECK"), "type A", Applied("crates/rvs/tests/e2e/golden.rs::connections_timeouts_and_tunnels")),
    row("Virtual server(s)", "name", Checker("DNS_CHECK"), "name x", Applied("crates/rvs/tests/e2e/health_probes.rs::dns_check_against_a_real_responder")),
    row("Virtual server(s)", "MISC_CHECK", RealServer, "MISC_CHECK {\n misc_path /bin/true\n}", Applied("crates/rvs/tests/e2e/health_probes.rs::misc_dynamic_exit_codes_set_weights_and_state")),
    row("Virtual server(s)", "misc_path", Checker("MISC_CHECK"), "misc_path x", Applied("crates/rvs/tests/e2e/health_probes.rs::misc_dynamic_exit_codes_set_weights_and_state")),
    row("Virtual server(s)", "misc_timeout", Checker("MISC_CHECK"), "misc_timeout 1", Applied("crates/check/src/build.rs::checker_keywords_reach_the_probes_and_the_policy")),
    row("Virtual server(s)", "misc_dynamic", Checker("MISC_CHECK"), "misc_dynamic", Applied("crates/rvs/tests/e2e/health_probes.rs::misc_dynamic_exit_codes_set_weights_and_state")),
    row("Virtual server(s)", "user", Checker("MISC_CHECK"), "user x", Applied("crates/check/src/probe/misc.rs::resolves_users")),
    row("Virtual server(s)", "BFD_CHECK", RealServer, "BFD_CHECK {\n}", Applied("crates/config/tests/parse.rs::checker_types")),
    row("Virtual server(s)", "PING_CHECK", RealServer, "PING_CHECK {\n}", Applied("crates/config/tests/parse.rs::checker_types")),
    row("Virtual server(s)", "UDP_CHECK", RealServer, "UDP_CHECK {\n}", Applied("crates/config/tests/parse.rs::checker_types")),
    row("Virtual server(s)", "payload", Checker("UDP_CHECK"), "payload 00ff", Applied("crates/config/tests/parse.rs::checker_types")),
    row("Virtual server(s)", "require_reply", Checker("UDP_CHECK"), "require_reply", Applied("crates/config/tests/parse.rs::checker_types")),
    row("Virtual server(s)", "FILE_CHECK", RealServer, "FILE_CHECK {\n}", Applied("crates/config/tests/parse.rs::checker_types")),
    row("Virtual server(s)", "track_file", Checker("FILE_CHECK"), "track_file x", Applied("crates/config/tests/parse.rs::checker_types")),
    row("Virtual server(s)", "dynamic", Checker("FILE_CHECK"), "dynamic", Applied("crates/config/tests/parse.rs::seed_3_loads_with_expected_warnings")),
    row("Virtual server(s)", "weight", Checker("FILE_CHECK"), "weight 10", Applied("crates/rvs/tests/e2e/health.rs::dead_server_is_removed_within_keepalived_formula_and_recovers_with_its_weight")),
    row("Virtual server(s)", "SSL", Top, "SSL {\n}", Warned),
    row("Virtual server(s)", "password", Ssl, "password x", Warned),
    row("Virtual server(s)", "ca", Ssl, "ca x", Warned),
    row("Virtual server(s)", "certificate", Ssl, "certificate x", Warned),
    row("Virtual server(s)", "key", Ssl, "key x", Warned),
    row("Top level (not in the 2.2.7 man page)", "interface_up_down_delays", Top, "interface_up_down_delays {\n}", Warned),
    row("Top level (not in the 2.2.7 man page)", "net_namespace", Top, "net_namespace x", Applied("crates/rvs/tests/e2e/netns_daemon.rs::net_namespace_runs_the_daemon_inside_the_named_namespace")),
    row("Top level (not in the 2.2.7 man page)", "net_namespace_ipvs", Top, "net_namespace_ipvs x", Refused),
    row("Top level (not in the 2.2.7 man page)", "instance", Top, "instance x", Warned),
    row("Top level (not in the 2.2.7 man page)", "use_pid_dir", Top, "use_pid_dir", Quiet),
    row("Top level (not in the 2.2.7 man page)", "linkbeat_use_polling", Top, "linkbeat_use_polling", Warned),
    row("Top level (not in the 2.2.7 man page)", "child_wait_time", Top, "child_wait_time 1", Quiet),
    row("Top level (not in the 2.2.7 man page)", "includer", Top, "includer /x", Refused),
    row("Top level (not in the 2.2.7 man page)", "includem", Top, "includem /x", Refused),
    row("Top level (not in the 2.2.7 man page)", "includew", Top, "includew /x", Refused),
    row("Top level (not in the 2.2.7 man page)", "includeb", Top, "includeb /x", Refused),
    row("Top level (not in the 2.2.7 man page)", "includea", Top, "includea /x", Refused),
    row("Top level (not in the 2.2.7 man page)", "namespace_with_ipsets", Top, "namespace_with_ipsets", Warned),
    row("Top level (not in the 2.2.7 man page)", "vrrp_track_file", Top, "vrrp_track_file t {\n file /x\n}", Applied("crates/control/src/vrrp/tests.rs::track_files_are_resolved_with_keepalived_weights")),
    row("Top level (not in the 2.2.7 man page)", "track_process", Top, "track_process p {\n process x\n}", Applied("crates/rvs/tests/e2e/track.rs::track_process_moves_mastership_and_faults")),
    row("Global definitions (not in the 2.2.7 man page)", "email_faults", Global, "email_faults", Applied("crates/control/src/vrrp/tests.rs::no_email_faults_leaves_fault_transitions_unmailed")),
    row("Global definitions (not in the 2.2.7 man page)", "notify_fifo_user", Global, "notify_fifo_user x", Warned),
    row("Global definitions (not in the 2.2.7 man page)", "use_symlink_paths", Global, "use_symlink_paths", Warned),
    row("Global definitions (not in the 2.2.7 man page)", "vrrp_ipvs_garp", Global, "vrrp_ipvs_garp", Warned),
    row("Global definitions (not in the 2.2.7 man page)", "vrrp_owner_ignore_adverts", Global, "vrrp_owner_ignore_adverts", Warned),
    row("Global definitions (not in the 2.2.7 man page)", "disable_local_igmp", Global, "disable_local_igmp", Warned),
    row("Global definitions (not in the 2.2.7 man page)", "vrrp_track_process", Global, "vrrp_track_process", Warned),
    row("Global definitions (not in the 2.2.7 man page)", "linkbeat_interfaces", Global, "linkbeat_interfaces {\n}", Warned),
    row("Global definitions (not in the 2.2.7 man page)", "iproute_usr_dir", Global, "iproute_usr_dir /x", Warned),
    row("Global definitions (not in the 2.2.7 man page)", "iproute_etc_dir", Global, "iproute_etc_dir /x", Warned),
    row("Global definitions (not in the 2.2.7 man page)", "local_name", Global, "local_name x", Warned),
    row("Global definitions (not in the 2.2.7 man page)", "network_namespace", Global, "network_namespace x", Refused),
    row("Global definitions (not in the 2.2.7 man page)", "vrrp_rlimit_rtime", Global, "vrrp_rlimit_rtime 1", Quiet),
    row("Global definitions (not in the 2.2.7 man page)", "checker_rlimit_rtime", Global, "checker_rlimit_rtime 1", Quiet),
    row("Global definitions (not in the 2.2.7 man page)", "bfd_rlimit_rtime", Global, "bfd_rlimit_rtime 1", Quiet),
    row("Global definitions (not in the 2.2.7 man page)", "enable_snmp_keepalived", Global, "enable_snmp_keepalived", Quiet),
    row("Global definitions (not in the 2.2.7 man page)", "enable_dbus_instance", Global, "enable_dbus_instance x", Quiet),
    row("Global definitions (not in the 2.2.7 man page)", "dbus_no_interface_name", Global, "dbus_no_interface_name", Quiet),
    row("Global definitions (not in the 2.2.7 man page)", "v3_checksum_as_v2", Global, "v3_checksum_as_v2", Applied("crates/config/tests/parse.rs::global_defs_keywords")),
    row("VRRP instance(s) (not in the 2.2.7 man page)", "smtp_alert_vrrp", VrrpInstance, "smtp_alert_vrrp", Warned),
    row("VRRP instance(s) (not in the 2.2.7 man page)", "notify_deleted", VrrpInstance, "notify_deleted", Warned),
    row("VRRP instance(s) (not in the 2.2.7 man page)", "vrrp_skip_check_adv_addr", VrrpInstance, "vrrp_skip_check_adv_addr", Warned),
    row("VRRP instance(s) (not in the 2.2.7 man page)", "auth_hmac", VrrpInstance, "auth_hmac x", Warned),
    row("VRRP instance(s) (not in the 2.2.7 man page)", "no_accept_prio", VrrpInstance, "no_accept_prio", Warned),
    row("VRRP instance(s) (not in the 2.2.7 man page)", "mcast_group", VrrpInstance, "mcast_group 224.0.0.18", Warned),
    row("VRRP instance(s) (not in the 2.2.7 man page)", "unicast_src_port", VrrpInstance, "unicast_src_port 1", Warned),
    row("VRRP instance(s) (not in the 2.2.7 man page)", "snmp_name", VrrpInstance, "snmp_name x", Quiet),
    row("Virtual server(s) (not in the 2.2.7 man page)", "syn_proxy", VirtualServer, "syn_proxy", Warned),
    row("Virtual server(s) (not in the 2.2.7 man page)", "nat_mask", VirtualServer, "nat_mask 255.255.255.0", Warned),
    row("Virtual server(s) (not in the 2.2.7 man page)", "hashed", VirtualServer, "hashed", Quiet),
    row("Virtual server(s) (not in the 2.2.7 man page)", "lb_algo", VirtualServer, "lb_algo rr", Applied("crates/rvs/tests/e2e/reload.rs::reload_counters_in_metrics")),
    row("Virtual server(s) (not in the 2.2.7 man page)", "lb_kind", VirtualServer, "lb_kind NAT", Applied("crates/rvs/tests/e2e/reload.rs::sighup_and_rvsadm_reload_apply_the_difference")),
    row("Virtual server(s) (not in the 2.2.7 man page)", "nb_get_retry", VirtualServer, "nb_get_retry 1", Untested),
    row("Virtual server(s) (not in the 2.2.7 man page)", "lb_kind", RealServer, "lb_kind NAT", Applied("crates/rvs/tests/e2e/reload.rs::sighup_and_rvsadm_reload_apply_the_difference")),
    row("Virtual server(s) (not in the 2.2.7 man page)", "nb_get_retry", RealServer, "nb_get_retry 1", Untested),
    row("Virtual server(s) (not in the 2.2.7 man page)", "nb_get_retry", Checker("TCP_CHECK"), "nb_get_retry 1", Applied("crates/check/src/build.rs::checker_keywords_reach_the_probes_and_the_policy")),
    row("Virtual server(s) (not in the 2.2.7 man page)", "virtualhost", Checker("HTTP_GET"), "virtualhost x", Applied("crates/check/tests/probes/http.rs::http_chunked_body_digest_and_vhost_1_1")),
    row("Virtual server(s) (not in the 2.2.7 man page)", "sni_name", Checker("SSL_GET"), "sni_name x", Applied("crates/config/tests/parse.rs::checker_types")),
    row("Virtual server(s) (not in the 2.2.7 man page)", "tls_compliant", Checker("HTTP_GET"), "tls_compliant", Untested),
    row("Virtual server(s) (not in the 2.2.7 man page)", "min_reply_length", Checker("UDP_CHECK"), "min_reply_length 1", Applied("crates/check/src/build.rs::checker_keywords_reach_the_probes_and_the_policy")),
    row("Virtual server(s) (not in the 2.2.7 man page)", "max_reply_length", Checker("UDP_CHECK"), "max_reply_length 10", Applied("crates/check/src/build.rs::checker_keywords_reach_the_probes_and_the_policy")),
    row("Virtual server(s) (not in the 2.2.7 man page)", "host", Checker("SMTP_CHECK"), "host {\n connect_ip 127.0.0.1\n}", Applied("crates/rvs/tests/e2e/health_probes.rs::smtp_check_hosts_are_each_checked_against_a_real_smtp_server")),
];
