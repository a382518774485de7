//! RE2's regular expression tree (`re2::Regexp`) as its parser builds it and its simplifier
//! rewrites it: the same operators, flags and character classes, so that the compiler makes
//! the same program from it.

/// RE2's parse flags (`Regexp::ParseFlags`), with RE2's bit values: compared whole in places
/// (`flags == sub->parse_flags()`), as RE2 compares them.
pub(super) mod flags {
    pub const FOLD_CASE: u32 = 1 << 0;
    pub const CLASS_NL: u32 = 1 << 2;
    pub const DOT_NL: u32 = 1 << 3;
    pub const ONE_LINE: u32 = 1 << 4;
    pub const LATIN1: u32 = 1 << 5;
    pub const NON_GREEDY: u32 = 1 << 6;
    pub const PERL_CLASSES: u32 = 1 << 7;
    pub const PERL_B: u32 = 1 << 8;
    pub const PERL_X: u32 = 1 << 9;
    pub const UNICODE_GROUPS: u32 = 1 << 10;
    pub const NEVER_NL: u32 = 1 << 11;
    pub const WAS_DOLLAR: u32 = 1 << 13;
    /// `RE2::Options` as Envoy 1.40 builds them: Latin-1 (the pattern's bytes are its
    /// characters, as Envoy 1.40 refuses `\x{100}` and counts `\pL` as 11), Perl syntax,
    /// case sensitive: `ClassNL | LikePerl | Latin1`.
    pub const ENVOY: u32 =
        CLASS_NL | ONE_LINE | PERL_CLASSES | PERL_B | PERL_X | UNICODE_GROUPS | LATIN1;
}

/// The largest code point (RE2's `Runemax`).
pub(super) const RUNE_MAX: u32 = 0x10FFFF;

/// The largest character in Latin-1 (RE2's `rune_max_` for Envoy's options).
pub(super) const LATIN1_MAX: u32 = 0xFF;

/// A node of the tree, with the flags it was parsed under.
#[derive(Clone, Debug)]
pub(super) struct Re {
    pub op: Op,
    pub flags: u32,
}

#[derive(Clone, Debug)]
pub(super) enum Op {
    NoMatch,
    EmptyMatch,
    Literal(u32),
    LiteralString(Vec<u32>),
    Concat(Vec<Re>),
    Alternate(Vec<Re>),
    Star(Box<Re>),
    Plus(Box<Re>),
    Quest(Box<Re>),
    Repeat {
        sub: Box<Re>,
        min: i32,
        max: i32,
    },
    Capture {
        sub: Box<Re>,
        cap: i32,
        name: Option<String>,
    },
    AnyChar,
    AnyByte,
    BeginLine,
    EndLine,
    WordBoundary,
    NoWordBoundary,
    BeginText,
    EndText,
    /// `builder`: still RE2's `CharClassBuilder` (as parsed, not yet finished): only then
    /// does pushing it turn a one-rune class into a literal.
    CharClass {
        class: Class,
        builder: bool,
    },
    /// Parse-stack markers.
    LeftParen {
        cap: i32,
        name: Option<String>,
    },
    VerticalBar,
}

/// The kind of a node, for RE2's comparisons of operators.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Kind {
    NoMatch,
    EmptyMatch,
    Literal,
    LiteralString,
    Concat,
    Alternate,
    Star,
    Plus,
    Quest,
    Repeat,
    Capture,
    AnyChar,
    AnyByte,
    BeginLine,
    EndLine,
    WordBoundary,
    NoWordBoundary,
    BeginText,
    EndText,
    CharClass,
    LeftParen,
    VerticalBar,
}

impl Re {
    pub fn new(op: Op, flags: u32) -> Re {
        Re { op, flags }
    }

    pub fn kind(&self) -> Kind {
        match &self.op {
            Op::NoMatch => Kind::NoMatch,
            Op::EmptyMatch => Kind::EmptyMatch,
            Op::Literal(_) => Kind::Literal,
            Op::LiteralString(_) => Kind::LiteralString,
            Op::Concat(_) => Kind::Concat,
            Op::Alternate(_) => Kind::Alternate,
            Op::Star(_) => Kind::Star,
            Op::Plus(_) => Kind::Plus,
            Op::Quest(_) => Kind::Quest,
            Op::Repeat { .. } => Kind::Repeat,
            Op::Capture { .. } => Kind::Capture,
            Op::AnyChar => Kind::AnyChar,
            Op::AnyByte => Kind::AnyByte,
            Op::BeginLine => Kind::BeginLine,
            Op::EndLine => Kind::EndLine,
            Op::WordBoundary => Kind::WordBoundary,
            Op::NoWordBoundary => Kind::NoWordBoundary,
            Op::BeginText => Kind::BeginText,
            Op::EndText => Kind::EndText,
            Op::CharClass { .. } => Kind::CharClass,
            Op::LeftParen { .. } => Kind::LeftParen,
            Op::VerticalBar => Kind::VerticalBar,
        }
    }

    pub fn is_marker(&self) -> bool {
        matches!(self.op, Op::LeftParen { .. } | Op::VerticalBar)
    }

    /// The only child of a star, plus, quest, repeat or capture.
    pub fn only_sub(&self) -> Option<&Re> {
        match &self.op {
            Op::Star(s) | Op::Plus(s) | Op::Quest(s) => Some(s),
            Op::Repeat { sub, .. } | Op::Capture { sub, .. } => Some(sub),
            _ => None,
        }
    }

    /// `Regexp::LiteralString`: empty is an empty match, one rune a literal.
    pub fn literal_string(runes: &[u32], flags: u32) -> Re {
        match runes {
            [] => Re::new(Op::EmptyMatch, flags),
            [r] => Re::new(Op::Literal(*r), flags),
            _ => Re::new(Op::LiteralString(runes.to_vec()), flags),
        }
    }

    /// `Regexp::Concat` (and `AlternateNoFactor`): one sub is itself, none is an empty match
    /// (no match for an alternation).
    pub fn concat_or_alternate(alternate: bool, mut subs: Vec<Re>, flags: u32) -> Re {
        match subs.len() {
            0 if alternate => Re::new(Op::NoMatch, flags),
            0 => Re::new(Op::EmptyMatch, flags),
            1 => subs.pop().unwrap_or_else(|| Re::new(Op::EmptyMatch, flags)),
            _ if alternate => Re::new(Op::Alternate(subs), flags),
            _ => Re::new(Op::Concat(subs), flags),
        }
    }

    /// `Regexp::Star`, `Plus` and `Quest`, which squash `**`, `++`, `??` and mixed pairs.
    pub fn star_plus_or_quest(kind: Kind, sub: Re, flags: u32) -> Re {
        if sub.kind() == kind && sub.flags == flags {
            return sub;
        }
        if matches!(sub.kind(), Kind::Star | Kind::Plus | Kind::Quest) && sub.flags == flags {
            if sub.kind() == Kind::Star {
                return sub;
            }
            let inner = match sub.op {
                Op::Plus(s) | Op::Quest(s) => s,
                _ => unreachable!("checked above"),
            };
            return Re::new(Op::Star(inner), flags);
        }
        let sub = Box::new(sub);
        let op = match kind {
            Kind::Star => Op::Star(sub),
            Kind::Plus => Op::Plus(sub),
            _ => Op::Quest(sub),
        };
        Re::new(op, flags)
    }
}

/// `Regexp::Equal`: the same tree, as RE2 compares it (only the flags that matter to each
/// operator).
pub(super) fn equal(a: &Re, b: &Re) -> bool {
    if a.kind() != b.kind() {
        return false;
    }
    let differ = |bit: u32| (a.flags ^ b.flags) & bit != 0;
    match (&a.op, &b.op) {
        (Op::EndText, Op::EndText) => !differ(flags::WAS_DOLLAR),
        (Op::Literal(x), Op::Literal(y)) => x == y && !differ(flags::FOLD_CASE),
        (Op::LiteralString(x), Op::LiteralString(y)) => x == y && !differ(flags::FOLD_CASE),
        (Op::Concat(x), Op::Concat(y)) | (Op::Alternate(x), Op::Alternate(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(x, y)| equal(x, y))
        }
        (Op::Star(x), Op::Star(y)) | (Op::Plus(x), Op::Plus(y)) | (Op::Quest(x), Op::Quest(y)) => {
            !differ(flags::NON_GREEDY) && equal(x, y)
        }
        (
            Op::Repeat {
                sub: x,
                min: a1,
                max: a2,
            },
            Op::Repeat {
                sub: y,
                min: b1,
                max: b2,
            },
        ) => !differ(flags::NON_GREEDY) && a1 == b1 && a2 == b2 && equal(x, y),
        (
            Op::Capture {
                sub: x,
                cap: c1,
                name: n1,
            },
            Op::Capture {
                sub: y,
                cap: c2,
                name: n2,
            },
        ) => c1 == c2 && n1 == n2 && equal(x, y),
        (Op::CharClass { class: x, .. }, Op::CharClass { class: y, .. }) => x.ranges == y.ranges,
        _ => true,
    }
}

/// A set of code points as sorted, disjoint, non-adjacent ranges (RE2's `CharClassBuilder`
/// and `CharClass` alike).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Class {
    pub ranges: Vec<(u32, u32)>,
}

impl Class {
    /// How many code points.
    pub fn size(&self) -> u64 {
        self.ranges
            .iter()
            .map(|(lo, hi)| u64::from(hi - lo) + 1)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    pub fn is_full(&self) -> bool {
        self.size() == u64::from(RUNE_MAX) + 1
    }

    pub fn contains(&self, r: u32) -> bool {
        let i = self.ranges.partition_point(|&(_, hi)| hi < r);
        self.ranges.get(i).is_some_and(|&(lo, _)| lo <= r)
    }

    fn contains_range(&self, lo: u32, hi: u32) -> bool {
        let i = self.ranges.partition_point(|&(_, h)| h < lo);
        self.ranges.get(i).is_some_and(|&(l, h)| l <= lo && hi <= h)
    }

    /// `CharClassBuilder::AddRange`: whether the class grew.
    pub fn add_range(&mut self, lo: u32, hi: u32) -> bool {
        if hi < lo || self.contains_range(lo, hi) {
            return false;
        }
        // Every range that overlaps or touches lo..=hi merges into it.
        let start = self
            .ranges
            .partition_point(|&(_, h)| h.saturating_add(1) < lo);
        let end = self
            .ranges
            .partition_point(|&(l, _)| l <= hi.saturating_add(1));
        let (mut new_lo, mut new_hi) = (lo, hi);
        if start < end {
            new_lo = new_lo.min(self.ranges[start].0);
            new_hi = new_hi.max(self.ranges[end - 1].1);
        }
        self.ranges.splice(start..end, [(new_lo, new_hi)]);
        true
    }

    pub fn add_class(&mut self, other: &Class) {
        for &(lo, hi) in &other.ranges {
            self.add_range(lo, hi);
        }
    }

    /// `CharClassBuilder::Negate`.
    pub fn negate(&mut self) {
        let mut out = Vec::with_capacity(self.ranges.len() + 1);
        let mut next = 0u32;
        for &(lo, hi) in &self.ranges {
            if lo > next {
                out.push((next, lo - 1));
            }
            next = hi + 1;
        }
        if next <= RUNE_MAX {
            out.push((next, RUNE_MAX));
        }
        self.ranges = out;
    }

    /// `CharClass::FoldsASCII`: every ASCII letter is in the class with its other case, or
    /// neither is.
    pub fn folds_ascii(&self) -> bool {
        (u32::from(b'A')..=u32::from(b'Z')).all(|c| self.contains(c) == self.contains(c + 32))
    }

    /// `CharClassBuilder::AddRangeFlags`: with case folding under `(?i)`, and without `\n`
    /// when the flags say classes never match it.
    pub fn add_range_flags(&mut self, lo: u32, hi: u32, parse_flags: u32) {
        let cut_nl = parse_flags & flags::CLASS_NL == 0 || parse_flags & flags::NEVER_NL != 0;
        let nl = u32::from(b'\n');
        if cut_nl && lo <= nl && nl <= hi {
            if lo < nl {
                self.add_range_flags(lo, nl - 1, parse_flags);
            }
            if hi > nl {
                self.add_range_flags(nl + 1, hi, parse_flags);
            }
            return;
        }
        if parse_flags & flags::FOLD_CASE != 0 {
            // Envoy's RE2 reads Latin-1, where only ASCII letters have another case.
            self.add_folded_range_latin1(lo, hi);
        } else {
            self.add_range(lo, hi);
        }
    }

    /// `AddFoldedRangeLatin1`: the range, and the other case of the ASCII letters in it.
    pub fn add_folded_range_latin1(&mut self, lo: u32, hi: u32) {
        self.add_range(lo, hi);
        for (from, to) in [(b'A', b'a'), (b'a', b'A')] {
            let (l, h) = (lo.max(u32::from(from)), hi.min(u32::from(from) + 25));
            if l <= h {
                let shift = |c: u32| c - u32::from(from) + u32::from(to);
                self.add_range(shift(l), shift(h));
            }
        }
    }

    /// `CharClassBuilder::RemoveAbove`.
    pub fn remove_above(&mut self, r: u32) {
        self.ranges.retain(|&(lo, _)| lo <= r);
        if let Some(last) = self.ranges.last_mut() {
            last.1 = last.1.min(r);
        }
    }
}

/// Unicode's general categories and scripts, which RE2 keeps in its own tables (of Unicode
/// 15.1), taken here from regex-syntax's. Envoy's RE2 reads Latin-1, so only the first 256
/// code points of a group count, and their properties have not changed in decades.
pub(super) mod unicode {
    use regex_syntax::hir::{Class, HirKind};

    /// A Unicode group as RE2 names them: a general category (one or two letters), a script,
    /// or `Any`. RE2's `C` is Cc, Cf, Co and Cs (no unassigned code points).
    pub fn group(name: &str) -> Option<Vec<(u32, u32)>> {
        if name == "Any" {
            return Some(vec![(0, super::RUNE_MAX)]);
        }
        if name == "C" {
            let mut all = super::Class::default();
            for part in ["Cc", "Cf", "Co", "Cs"] {
                for (lo, hi) in group(part)? {
                    all.add_range(lo, hi);
                }
            }
            return Some(all.ranges);
        }
        if name == "Cs" {
            return Some(vec![(0xD800, 0xDFFF)]);
        }
        let hir = regex_syntax::ParserBuilder::new()
            .build()
            .parse(&format!("\\p{{{name}}}"))
            .ok()?;
        match hir.kind() {
            HirKind::Class(Class::Unicode(class)) => Some(
                class
                    .iter()
                    .map(|r| (u32::from(r.start()), u32::from(r.end())))
                    .collect(),
            ),
            HirKind::Literal(lit) => {
                let c = std::str::from_utf8(&lit.0).ok()?.chars().next()?;
                Some(vec![(u32::from(c), u32::from(c))])
            }
            _ => None,
        }
    }
}
