//! RE2's parser (`Regexp::Parse`), step for step: the same parse stack, the same merging of
//! literals into strings, of alternations into classes and common prefixes, so that the
//! tree is the one RE2 compiles. Errors are RE2's words (`invalid regex: ...`), as Envoy
//! reports them.

use super::factor::factor_alternation;
use super::regexp::{flags, unicode, Class, Kind, Op, Re, LATIN1_MAX, RUNE_MAX};

/// RE2 refuses repeat counts over this (and nested repeats whose product is over it).
const MAX_REPEAT: i32 = 1000;

pub(super) fn parse(pattern: &str, global: u32) -> Result<Re, String> {
    let mut ps = State {
        flags: global,
        stack: Vec::new(),
        ncap: 0,
    };
    // Latin-1: each byte of the pattern is a character (RE2's `ConvertLatin1ToUTF8`).
    let t: Vec<char> = pattern.bytes().map(char::from).collect();
    let mut i = 0;
    // Where the previous repetition operator began, if the previous token was one.
    let mut last_unary: Option<usize> = None;
    while i < t.len() {
        let mut is_unary = None;
        match t[i] {
            '(' => {
                if ps.flags & flags::PERL_X != 0 && t.get(i + 1) == Some(&'?') {
                    i = ps.parse_perl_flags(&t, i)?;
                } else {
                    ps.do_left_paren(None);
                    i += 1;
                }
            }
            '|' => {
                ps.do_vertical_bar();
                i += 1;
            }
            ')' => {
                ps.do_right_paren(pattern)?;
                i += 1;
            }
            '^' => {
                let op = if ps.flags & flags::ONE_LINE != 0 {
                    Op::BeginText
                } else {
                    Op::BeginLine
                };
                ps.push_simple(op);
                i += 1;
            }
            '$' => {
                if ps.flags & flags::ONE_LINE != 0 {
                    let re = Re::new(Op::EndText, ps.flags | flags::WAS_DOLLAR);
                    ps.push_regexp(re);
                } else {
                    ps.push_simple(Op::EndLine);
                }
                i += 1;
            }
            '.' => {
                ps.push_dot();
                i += 1;
            }
            '[' => {
                let (class, next) = ps.parse_char_class(&t, i)?;
                ps.push_regexp(class);
                i = next;
            }
            c @ ('*' | '+' | '?') => {
                let kind = match c {
                    '*' => Kind::Star,
                    '+' => Kind::Plus,
                    _ => Kind::Quest,
                };
                let start = i;
                i += 1;
                let nongreedy = ps.after_repetition(&t, &mut i, last_unary)?;
                ps.push_repeat_op(kind, nongreedy, &t[start..i])?;
                is_unary = Some(start);
            }
            '{' => match repetition(&t, i) {
                None => {
                    ps.push_literal(u32::from('{'));
                    i += 1;
                }
                Some((lo, hi, next)) => {
                    let start = i;
                    i = next;
                    let nongreedy = ps.after_repetition(&t, &mut i, last_unary)?;
                    ps.push_repetition(lo, hi, nongreedy, &t[start..i])?;
                    is_unary = Some(start);
                }
            },
            '\\' => i = ps.parse_backslash(&t, i)?,
            c => {
                ps.push_literal(u32::from(c));
                i += 1;
            }
        }
        last_unary = is_unary;
    }
    ps.do_finish(pattern)
}

/// `{n}`, `{n,}` or `{n,m}` at `i`: (min, max or -1, index after it). Leading zeros and
/// counts over 100,000,000 are not repetitions (RE2's `ParseInteger`).
fn repetition(t: &[char], i: usize) -> Option<(i32, i32, usize)> {
    let integer = |mut j: usize| -> Option<(i32, usize)> {
        let start = j;
        if !t.get(j)?.is_ascii_digit() {
            return None;
        }
        if t[j] == '0' && t.get(j + 1).is_some_and(char::is_ascii_digit) {
            return None;
        }
        let mut n: i32 = 0;
        while let Some(d) = t.get(j).and_then(|c| c.to_digit(10)) {
            if n >= 100_000_000 {
                return None;
            }
            n = n * 10 + d as i32;
            j += 1;
        }
        (j > start).then_some((n, j))
    };
    let (lo, mut j) = integer(i + 1)?;
    let hi;
    if *t.get(j)? == ',' {
        j += 1;
        if *t.get(j)? == '}' {
            hi = -1;
        } else {
            let (h, k) = integer(j)?;
            hi = h;
            j = k;
        }
    } else {
        hi = lo;
    }
    (*t.get(j)? == '}').then_some((lo, hi, j + 1))
}

struct State {
    flags: u32,
    /// The parse stack, top last.
    stack: Vec<Re>,
    ncap: i32,
}

fn is_literal(re: &Re) -> bool {
    matches!(re.op, Op::Literal(_) | Op::LiteralString(_))
}

/// `FinishRegexp`: a class builder becomes a finished class.
fn finish(mut re: Re) -> Re {
    if let Op::CharClass { builder, .. } = &mut re.op {
        *builder = false;
    }
    re
}

impl State {
    /// After a repetition operator at `i`: a `?` makes it non-greedy; and Perl syntax has no
    /// repetition of a repetition (`a**`), whose words span both (`last_unary` on).
    fn after_repetition(
        &self,
        t: &[char],
        i: &mut usize,
        last_unary: Option<usize>,
    ) -> Result<bool, String> {
        if self.flags & flags::PERL_X == 0 {
            return Ok(false);
        }
        let nongreedy = t.get(*i) == Some(&'?');
        if nongreedy {
            *i += 1;
        }
        if let Some(last) = last_unary {
            return Err(format!(
                "bad repetition operator: {}",
                t[last..*i].iter().collect::<String>()
            ));
        }
        Ok(nongreedy)
    }

    /// A class as the parser builds it: case folding already applied to its ranges, so the
    /// node itself does not fold.
    fn new_class(&self, class: Class) -> Re {
        Re::new(
            Op::CharClass {
                class,
                builder: true,
            },
            self.flags & !flags::FOLD_CASE,
        )
    }

    fn push_class(&mut self, class: Class) {
        let re = self.new_class(class);
        self.push_regexp(re);
    }

    fn push_simple(&mut self, op: Op) {
        let re = Re::new(op, self.flags);
        self.push_regexp(re);
    }

    /// `PushRegexp`: a class of one rune is a literal, and `[Aa]` a case-folded `a`.
    fn push_regexp(&mut self, mut re: Re) {
        self.maybe_concat_string(None);
        if let Op::CharClass {
            class,
            builder: true,
        } = &mut re.op
        {
            class.remove_above(LATIN1_MAX);
            if class.size() == 1 {
                re = Re::new(Op::Literal(class.ranges[0].0), self.flags);
            } else if class.size() == 2 {
                let r = class.ranges[0].0;
                if (u32::from(b'A')..=u32::from(b'Z')).contains(&r) && class.contains(r + 32) {
                    re = Re::new(Op::Literal(r + 32), self.flags | flags::FOLD_CASE);
                }
            }
        }
        self.stack.push(re);
    }

    /// `MaybeConcatString`: the top two literals (or strings) of one case sensitivity become
    /// one string; with `r`, the top is then reused for the literal `r`.
    fn maybe_concat_string(&mut self, r: Option<(u32, u32)>) -> bool {
        let n = self.stack.len();
        if n < 2 {
            return false;
        }
        let (re2, re1) = (&self.stack[n - 2], &self.stack[n - 1]);
        if !is_literal(re1) || !is_literal(re2) {
            return false;
        }
        if (re1.flags & flags::FOLD_CASE) != (re2.flags & flags::FOLD_CASE) {
            return false;
        }
        let moved: Vec<u32> = match &self.stack[n - 1].op {
            Op::Literal(x) => vec![*x],
            Op::LiteralString(runes) => runes.clone(),
            _ => return false,
        };
        let below = &mut self.stack[n - 2];
        if let Op::Literal(x) = below.op {
            below.op = Op::LiteralString(vec![x]);
        }
        if let Op::LiteralString(runes) = &mut below.op {
            runes.extend(moved);
        }
        match r {
            Some((rune, fl)) => {
                self.stack[n - 1] = Re::new(Op::Literal(rune), fl);
                true
            }
            None => {
                self.stack.pop();
                false
            }
        }
    }

    /// `PushLiteral`: under `(?i)` an ASCII letter is the class of its two cases (Latin-1
    /// folds nothing else).
    fn push_literal(&mut self, r: u32) {
        if self.flags & flags::FOLD_CASE != 0
            && char::from_u32(r).is_some_and(|c| c.is_ascii_alphabetic())
        {
            let mut class = Class::default();
            class.add_folded_range_latin1(r, r);
            self.push_class(class);
            return;
        }
        if self.maybe_concat_string(Some((r, self.flags))) {
            return;
        }
        let re = Re::new(Op::Literal(r), self.flags);
        self.push_regexp(re);
    }

    /// `.`: any character but `\n`, unless `(?s)`.
    fn push_dot(&mut self) {
        if self.flags & flags::DOT_NL != 0 && self.flags & flags::NEVER_NL == 0 {
            self.push_simple(Op::AnyChar);
            return;
        }
        let mut class = Class::default();
        class.add_range(0, u32::from(b'\n') - 1);
        class.add_range(u32::from(b'\n') + 1, LATIN1_MAX);
        self.push_class(class);
    }

    fn top_operand(&self, op: &[char]) -> Result<(), String> {
        match self.stack.last() {
            Some(top) if !top.is_marker() => Ok(()),
            _ => Err(format!(
                "no argument for repetition operator: {}",
                op.iter().collect::<String>()
            )),
        }
    }

    /// `PushRepeatOp`: `*`, `+` or `?` on the top of the stack.
    fn push_repeat_op(&mut self, kind: Kind, nongreedy: bool, op: &[char]) -> Result<(), String> {
        self.top_operand(op)?;
        let mut fl = self.flags;
        if nongreedy {
            fl ^= flags::NON_GREEDY;
        }
        let top = self.stack.last_mut().expect("checked");
        if top.kind() == kind && top.flags == fl {
            return Ok(());
        }
        if matches!(top.kind(), Kind::Star | Kind::Plus | Kind::Quest) && top.flags == fl {
            let taken = std::mem::replace(&mut top.op, Op::NoMatch);
            top.op = match taken {
                Op::Star(s) | Op::Plus(s) | Op::Quest(s) => Op::Star(s),
                other => other,
            };
            return Ok(());
        }
        let sub = Box::new(finish(self.stack.pop().expect("checked")));
        let op = match kind {
            Kind::Star => Op::Star(sub),
            Kind::Plus => Op::Plus(sub),
            _ => Op::Quest(sub),
        };
        self.stack.push(Re::new(op, fl));
        Ok(())
    }

    /// `PushRepetition`: `{min,max}` on the top of the stack.
    fn push_repetition(
        &mut self,
        min: i32,
        max: i32,
        nongreedy: bool,
        op: &[char],
    ) -> Result<(), String> {
        let text: String = op.iter().collect();
        if (max != -1 && max < min) || min > MAX_REPEAT || max > MAX_REPEAT {
            return Err(format!("invalid repetition size: {text}"));
        }
        self.top_operand(op)?;
        let mut fl = self.flags;
        if nongreedy {
            fl ^= flags::NON_GREEDY;
        }
        let sub = Box::new(finish(self.stack.pop().expect("checked")));
        let re = Re::new(Op::Repeat { sub, min, max }, fl);
        if (min >= 2 || max >= 2) && repetition_budget(&re, MAX_REPEAT) == 0 {
            return Err(format!("invalid repetition size: {text}"));
        }
        self.stack.push(re);
        Ok(())
    }

    fn do_left_paren(&mut self, name: Option<String>) {
        self.ncap += 1;
        let re = Re::new(
            Op::LeftParen {
                cap: self.ncap,
                name,
            },
            self.flags,
        );
        self.push_regexp(re);
    }

    fn do_left_paren_no_capture(&mut self) {
        let re = Re::new(
            Op::LeftParen {
                cap: -1,
                name: None,
            },
            self.flags,
        );
        self.push_regexp(re);
    }

    /// `DoVerticalBar`: the concatenation above the bar goes below it, where `.` swallows
    /// a literal or class next to it.
    fn do_vertical_bar(&mut self) {
        self.maybe_concat_string(None);
        self.do_concatenation();
        let n = self.stack.len();
        if n >= 2 && matches!(self.stack[n - 2].op, Op::VerticalBar) {
            if n >= 3 {
                let r1 = self.stack[n - 1].kind();
                let r3 = self.stack[n - 3].kind();
                let swallowed =
                    |k: Kind| matches!(k, Kind::Literal | Kind::CharClass | Kind::AnyChar);
                if r3 == Kind::AnyChar && swallowed(r1) {
                    self.stack.pop();
                    return;
                }
                if r1 == Kind::AnyChar && swallowed(r3) {
                    let r1 = self.stack.pop().expect("n >= 3");
                    self.stack[n - 3] = r1;
                    return;
                }
            }
            self.stack.swap(n - 1, n - 2);
            return;
        }
        self.push_simple(Op::VerticalBar);
    }

    fn do_right_paren(&mut self, pattern: &str) -> Result<(), String> {
        self.do_alternation();
        let n = self.stack.len();
        if n < 2 || !matches!(self.stack[n - 2].op, Op::LeftParen { .. }) {
            return Err(format!("unexpected ): {pattern}"));
        }
        let r1 = self.stack.pop().expect("n >= 2");
        let r2 = self.stack.pop().expect("n >= 2");
        self.flags = r2.flags;
        let re = match r2.op {
            Op::LeftParen { cap, name } if cap > 0 => Re::new(
                Op::Capture {
                    sub: Box::new(finish(r1)),
                    cap,
                    name,
                },
                r2.flags,
            ),
            _ => r1,
        };
        self.push_regexp(re);
        Ok(())
    }

    fn do_finish(mut self, pattern: &str) -> Result<Re, String> {
        self.do_alternation();
        if self.stack.len() != 1 {
            return Err(format!("missing ): {pattern}"));
        }
        Ok(finish(self.stack.pop().expect("one")))
    }

    fn do_concatenation(&mut self) {
        if self.stack.last().is_none_or(Re::is_marker) {
            self.push_simple(Op::EmptyMatch);
        }
        self.do_collapse(false);
    }

    fn do_alternation(&mut self) {
        self.do_vertical_bar();
        // The top is the vertical bar.
        self.stack.pop();
        self.do_collapse(true);
    }

    /// `DoCollapse`: what is above the nearest marker becomes one concatenation or
    /// alternation, flattening ones of the same kind.
    fn do_collapse(&mut self, alternate: bool) {
        let from = self
            .stack
            .iter()
            .rposition(Re::is_marker)
            .map_or(0, |m| m + 1);
        if self.stack.len() - from == 1 {
            return;
        }
        let items: Vec<Re> = self.stack.drain(from..).collect();
        let mut subs = Vec::with_capacity(items.len());
        for item in items {
            match item.op {
                Op::Alternate(children) if alternate => subs.extend(children),
                Op::Concat(children) if !alternate => subs.extend(children),
                op => subs.push(finish(Re::new(op, item.flags))),
            }
        }
        let re = if alternate {
            let mut subs = subs;
            if subs.len() > 1 {
                subs = factor_alternation(subs, self.flags);
            }
            Re::concat_or_alternate(true, subs, self.flags)
        } else {
            Re::concat_or_alternate(false, subs, self.flags)
        };
        self.stack.push(re);
    }

    /// `ParsePerlFlags`: `(?flags)`, `(?flags:`, `(?P<name>` and `(?<name>`.
    fn parse_perl_flags(&mut self, t: &[char], start: usize) -> Result<usize, String> {
        let bad = |end: usize| {
            format!(
                "invalid perl operator: {}",
                t[start..end.min(t.len())].iter().collect::<String>()
            )
        };
        let at = |k: usize| t.get(start + k).copied();
        if (at(2) == Some('P') && at(3) == Some('<')) || at(2) == Some('<') {
            if at(3) == Some('=') || at(3) == Some('!') {
                return Err(bad(start + 4));
            }
            let begin = if at(2) == Some('P') { 4 } else { 3 };
            let Some(close) = t[start + begin..].iter().position(|&c| c == '>') else {
                return Err(format!(
                    "invalid named capture group: {}",
                    t[start..].iter().collect::<String>()
                ));
            };
            let name: String = t[start + begin..start + begin + close].iter().collect();
            if !valid_capture_name(&name) {
                return Err(format!(
                    "invalid named capture group: {}",
                    t[start..start + begin + close + 1]
                        .iter()
                        .collect::<String>()
                ));
            }
            self.do_left_paren(Some(name));
            return Ok(start + begin + close + 1);
        }
        if matches!(at(2), Some('=' | '!')) {
            return Err(bad(start + 3));
        }
        let mut i = start + 2;
        let mut negated = false;
        let mut saw = false;
        let mut nflags = self.flags;
        loop {
            let Some(&c) = t.get(i) else {
                return Err(bad(i));
            };
            i += 1;
            let set = |nflags: &mut u32, bit: u32, on: bool| {
                if on {
                    *nflags |= bit;
                } else {
                    *nflags &= !bit;
                }
            };
            match c {
                'i' => {
                    saw = true;
                    set(&mut nflags, flags::FOLD_CASE, !negated);
                }
                'm' => {
                    saw = true;
                    set(&mut nflags, flags::ONE_LINE, negated);
                }
                's' => {
                    saw = true;
                    set(&mut nflags, flags::DOT_NL, !negated);
                }
                'U' => {
                    saw = true;
                    set(&mut nflags, flags::NON_GREEDY, !negated);
                }
                '-' => {
                    if negated {
                        return Err(bad(i));
                    }
                    negated = true;
                    saw = false;
                }
                ':' => {
                    self.do_left_paren_no_capture();
                    break;
                }
                ')' => break,
                _ => return Err(bad(i)),
            }
        }
        if negated && !saw {
            return Err(bad(i));
        }
        self.flags = nflags;
        Ok(i)
    }

    /// A backslash outside a class: `\b`, `\B`, `\A`, `\z`, `\C`, `\Q...\E`, `\p{..}`,
    /// `\d` and friends, or an escaped character.
    fn parse_backslash(&mut self, t: &[char], i: usize) -> Result<usize, String> {
        let next = t.get(i + 1).copied();
        if self.flags & flags::PERL_B != 0 && matches!(next, Some('b' | 'B')) {
            let op = if next == Some('b') {
                Op::WordBoundary
            } else {
                Op::NoWordBoundary
            };
            self.push_simple(op);
            return Ok(i + 2);
        }
        if self.flags & flags::PERL_X != 0 {
            match next {
                Some('A') => {
                    self.push_simple(Op::BeginText);
                    return Ok(i + 2);
                }
                Some('z') => {
                    self.push_simple(Op::EndText);
                    return Ok(i + 2);
                }
                Some('C') => {
                    self.push_simple(Op::AnyByte);
                    return Ok(i + 2);
                }
                Some('Q') => {
                    let mut j = i + 2;
                    while j < t.len() {
                        if t[j] == '\\' && t.get(j + 1) == Some(&'E') {
                            j += 2;
                            break;
                        }
                        self.push_literal(u32::from(t[j]));
                        j += 1;
                    }
                    return Ok(j);
                }
                _ => {}
            }
        }
        if matches!(next, Some('p' | 'P')) && self.flags & flags::UNICODE_GROUPS != 0 {
            let mut class = Class::default();
            let j = unicode_group(t, i, self.flags, &mut class)?;
            self.push_class(class);
            return Ok(j);
        }
        if let Some((group, sign)) = perl_group(t, i, self.flags) {
            let mut class = Class::default();
            add_group(&mut class, group, sign, self.flags);
            self.push_class(class);
            return Ok(i + 2);
        }
        let (r, j) = escape(t, i)?;
        self.push_literal(r);
        Ok(j)
    }

    /// `ParseCharClass`: `[...]` at `start`; the class and the index after it.
    fn parse_char_class(&mut self, t: &[char], start: usize) -> Result<(Re, usize), String> {
        let whole = || t[start..].iter().collect::<String>();
        let mut class = Class::default();
        let mut i = start + 1;
        let mut negated = false;
        if t.get(i) == Some(&'^') {
            i += 1;
            negated = true;
            if self.flags & flags::CLASS_NL == 0 || self.flags & flags::NEVER_NL != 0 {
                class.add_range(u32::from(b'\n'), u32::from(b'\n'));
            }
        }
        let mut first = true;
        while i < t.len() && (t[i] != ']' || first) {
            if t[i] == '-'
                && !first
                && self.flags & flags::PERL_X == 0
                && t.get(i + 1) != Some(&']')
            {
                return Err(format!(
                    "invalid character class range: {}",
                    t[i..(i + 2).min(t.len())].iter().collect::<String>()
                ));
            }
            first = false;
            if t[i] == '[' && t.get(i + 1) == Some(&':') && i + 2 < t.len() {
                if let Some(j) = self.posix_class(t, i, &mut class)? {
                    i = j;
                    continue;
                }
            }
            if t[i] == '\\'
                && matches!(t.get(i + 1), Some('p' | 'P'))
                && i + 2 < t.len()
                && self.flags & flags::UNICODE_GROUPS != 0
            {
                i = unicode_group(t, i, self.flags, &mut class)?;
                continue;
            }
            if let Some((group, sign)) = perl_group(t, i, self.flags) {
                add_group(&mut class, group, sign, self.flags);
                i += 2;
                continue;
            }
            // A character or a range.
            let lo_start = i;
            let (lo, next) = class_char(t, i, &whole)?;
            i = next;
            let mut hi = lo;
            if t.get(i) == Some(&'-') && t.get(i + 1).is_some_and(|&c| c != ']') {
                let (h, next) = class_char(t, i + 1, &whole)?;
                if h < lo {
                    return Err(format!(
                        "invalid character class range: {}",
                        t[lo_start..next].iter().collect::<String>()
                    ));
                }
                hi = h;
                i = next;
            }
            class.add_range_flags(lo, hi, self.flags | flags::CLASS_NL);
        }
        if i >= t.len() {
            return Err(format!("missing ]: {}", whole()));
        }
        i += 1;
        if negated {
            class.negate();
        }
        Ok((self.new_class(class), i))
    }

    /// `[:alpha:]` and the other POSIX classes at `i`, or nothing when there is no `:]`.
    fn posix_class(
        &self,
        t: &[char],
        i: usize,
        class: &mut Class,
    ) -> Result<Option<usize>, String> {
        let mut q = i + 2;
        while q + 1 < t.len() && !(t[q] == ':' && t[q + 1] == ']') {
            q += 1;
        }
        if q + 1 >= t.len() {
            return Ok(None);
        }
        let name: String = t[i..q + 2].iter().collect();
        let Some((ranges, sign)) = posix_group(&name) else {
            return Err(format!("invalid character class range: {name}"));
        };
        add_group(class, ranges, sign, self.flags);
        Ok(Some(q + 2))
    }
}

/// `IsValidCaptureName`: letters, marks, digits, letter numbers and connector punctuation.
fn valid_capture_name(name: &str) -> bool {
    static ALLOWED: std::sync::OnceLock<Class> = std::sync::OnceLock::new();
    let allowed = ALLOWED.get_or_init(|| {
        let mut class = Class::default();
        for group in ["Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Mn", "Mc", "Nd", "Pc"] {
            for (lo, hi) in unicode::group(group).unwrap_or_default() {
                class.add_range(lo, hi);
            }
        }
        class
    });
    !name.is_empty() && name.chars().all(|c| allowed.contains(u32::from(c)))
}

/// A character inside a class (escapes allowed).
fn class_char(t: &[char], i: usize, whole: &dyn Fn() -> String) -> Result<(u32, usize), String> {
    match t.get(i) {
        None => Err(format!("missing ]: {}", whole())),
        Some('\\') => escape(t, i),
        Some(&c) => Ok((u32::from(c), i + 1)),
    }
}

/// `ParseEscape`: the escaped character at `i` (a backslash) and the index after it.
fn escape(t: &[char], i: usize) -> Result<(u32, usize), String> {
    let bad = |end: usize| {
        format!(
            "invalid escape sequence: {}",
            t[i..end.min(t.len())].iter().collect::<String>()
        )
    };
    let Some(&c) = t.get(i + 1) else {
        return Err("trailing \\".into());
    };
    let mut j = i + 2;
    let octal = |c: char| ('0'..='7').contains(&c);
    match c {
        '1'..='7' if !t.get(j).copied().is_some_and(octal) => Err(bad(j)),
        '0'..='7' => {
            let mut code = c as u32 - '0' as u32;
            for _ in 0..2 {
                match t.get(j) {
                    Some(&d) if octal(d) => {
                        code = code * 8 + (d as u32 - '0' as u32);
                        j += 1;
                    }
                    _ => break,
                }
            }
            if code > LATIN1_MAX {
                return Err(bad(j));
            }
            Ok((code, j))
        }
        'x' => {
            let Some(&c) = t.get(j) else {
                return Err(bad(j));
            };
            j += 1;
            if c == '{' {
                let mut code: u32 = 0;
                let mut n = 0;
                loop {
                    let Some(&d) = t.get(j) else {
                        return Err(bad(j));
                    };
                    j += 1;
                    match d.to_digit(16) {
                        Some(v) => {
                            n += 1;
                            code = code * 16 + v;
                            if code > LATIN1_MAX {
                                return Err(bad(j));
                            }
                        }
                        None if d == '}' && n > 0 => return Ok((code, j)),
                        None => return Err(bad(j)),
                    }
                }
            }
            let Some(&c1) = t.get(j) else {
                return Err(bad(j));
            };
            j += 1;
            match (c.to_digit(16), c1.to_digit(16)) {
                (Some(a), Some(b)) => Ok((a * 16 + b, j)),
                _ => Err(bad(j)),
            }
        }
        'n' => Ok((u32::from(b'\n'), j)),
        'r' => Ok((u32::from(b'\r'), j)),
        't' => Ok((u32::from(b'\t'), j)),
        'a' => Ok((7, j)),
        'f' => Ok((12, j)),
        'v' => Ok((11, j)),
        c if c.is_ascii() && !c.is_ascii_alphanumeric() => Ok((u32::from(c), j)),
        _ => Err(bad(j)),
    }
}

/// `\d \s \w \D \S \W` at `i`: ASCII, as RE2 has them.
fn perl_group(t: &[char], i: usize, parse_flags: u32) -> Option<(&'static [(u32, u32)], i32)> {
    if parse_flags & flags::PERL_CLASSES == 0 || t.get(i) != Some(&'\\') {
        return None;
    }
    const D: &[(u32, u32)] = &[(0x30, 0x39)];
    const S: &[(u32, u32)] = &[(0x9, 0xa), (0xc, 0xd), (0x20, 0x20)];
    const W: &[(u32, u32)] = &[(0x30, 0x39), (0x41, 0x5a), (0x5f, 0x5f), (0x61, 0x7a)];
    match t.get(i + 1)? {
        'd' => Some((D, 1)),
        'D' => Some((D, -1)),
        's' => Some((S, 1)),
        'S' => Some((S, -1)),
        'w' => Some((W, 1)),
        'W' => Some((W, -1)),
        _ => None,
    }
}

/// RE2's POSIX classes (ASCII), `[:name:]` and `[:^name:]`.
fn posix_group(name: &str) -> Option<(&'static [(u32, u32)], i32)> {
    let inner = name.strip_prefix("[:")?.strip_suffix(":]")?;
    let (inner, sign) = match inner.strip_prefix('^') {
        Some(rest) => (rest, -1),
        None => (inner, 1),
    };
    let ranges: &'static [(u32, u32)] = match inner {
        "alnum" => &[(0x30, 0x39), (0x41, 0x5a), (0x61, 0x7a)],
        "alpha" => &[(0x41, 0x5a), (0x61, 0x7a)],
        "ascii" => &[(0x0, 0x7f)],
        "blank" => &[(0x9, 0x9), (0x20, 0x20)],
        "cntrl" => &[(0x0, 0x1f), (0x7f, 0x7f)],
        "digit" => &[(0x30, 0x39)],
        "graph" => &[(0x21, 0x7e)],
        "lower" => &[(0x61, 0x7a)],
        "print" => &[(0x20, 0x7e)],
        "punct" => &[(0x21, 0x2f), (0x3a, 0x40), (0x5b, 0x60), (0x7b, 0x7e)],
        "space" => &[(0x9, 0xd), (0x20, 0x20)],
        "upper" => &[(0x41, 0x5a)],
        "word" => &[(0x30, 0x39), (0x41, 0x5a), (0x5f, 0x5f), (0x61, 0x7a)],
        "xdigit" => &[(0x30, 0x39), (0x41, 0x46), (0x61, 0x66)],
        _ => return None,
    };
    Some((ranges, sign))
}

/// `ParseUnicodeGroup`: `\pN`, `\p{Name}`, `\PN`, `\p{^Name}` at `i`, added to `class`.
fn unicode_group(
    t: &[char],
    i: usize,
    parse_flags: u32,
    class: &mut Class,
) -> Result<usize, String> {
    let mut sign = if t.get(i + 1) == Some(&'P') { -1 } else { 1 };
    let Some(&c) = t.get(i + 2) else {
        return Err("invalid character class range: \\p".into());
    };
    let (mut name, next) = if c == '{' {
        let Some(close) = t[i + 3..].iter().position(|&c| c == '}') else {
            return Err(format!(
                "invalid character class range: {}",
                t[i..].iter().collect::<String>()
            ));
        };
        (
            t[i + 3..i + 3 + close].iter().collect::<String>(),
            i + 3 + close + 1,
        )
    } else {
        (c.to_string(), i + 3)
    };
    if let Some(rest) = name.strip_prefix('^') {
        sign = -sign;
        name = rest.to_string();
    }
    let Some(ranges) = unicode::group(&name) else {
        return Err(format!(
            "invalid character class range: {}",
            t[i..next].iter().collect::<String>()
        ));
    };
    add_group(class, &ranges, sign, parse_flags);
    Ok(next)
}

/// `AddUGroup`: a group or its negation, case-folded under `(?i)`.
fn add_group(class: &mut Class, ranges: &[(u32, u32)], sign: i32, parse_flags: u32) {
    if sign > 0 {
        for &(lo, hi) in ranges {
            class.add_range_flags(lo, hi, parse_flags);
        }
        return;
    }
    if parse_flags & flags::FOLD_CASE != 0 {
        let mut positive = Class::default();
        add_group(&mut positive, ranges, 1, parse_flags);
        let cut_nl = parse_flags & flags::CLASS_NL == 0 || parse_flags & flags::NEVER_NL != 0;
        if cut_nl {
            positive.add_range(u32::from(b'\n'), u32::from(b'\n'));
        }
        positive.negate();
        class.add_class(&positive);
        return;
    }
    let mut next = 0;
    for &(lo, hi) in ranges {
        if next < lo {
            class.add_range_flags(next, lo - 1, parse_flags);
        }
        next = hi + 1;
    }
    if next <= RUNE_MAX {
        class.add_range_flags(next, RUNE_MAX, parse_flags);
    }
}

/// RE2's `RepetitionWalker`: what is left of `budget` after dividing by every nested
/// repeat's count; 0 means more than `budget` copies of the innermost thing.
fn repetition_budget(re: &Re, budget: i32) -> i32 {
    let mut arg = budget;
    if let Op::Repeat { min, max, .. } = &re.op {
        let m = if *max < 0 { *min } else { *max };
        if m > 0 {
            arg /= m;
        }
    }
    let mut least = arg;
    let mut visit = |child: &Re| least = least.min(repetition_budget(child, arg));
    match &re.op {
        Op::Concat(subs) | Op::Alternate(subs) => subs.iter().for_each(&mut visit),
        _ => {
            if let Some(sub) = re.only_sub() {
                visit(sub);
            }
        }
    }
    least
}
