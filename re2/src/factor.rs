//! RE2's factoring of alternations (`Regexp::FactorAlternation`), which its parser applies
//! to every alternation it finishes: `abc|abd|aef` becomes `a(?:b[cd]|ef)`.

use super::regexp::{equal, flags, Class, Kind, Op, Re};

/// RE2's four rounds over an alternation's subexpressions: common literal prefixes, common
/// simple leading pieces, runs of literals and classes merged into one class, and (the
/// fourth) done. Prefixes factored in rounds 1 and 2 have their suffixes factored in turn.
pub(super) fn factor_alternation(mut subs: Vec<Re>, fl: u32) -> Vec<Re> {
    for round in 1..=3 {
        let splices = match round {
            1 => round1(&mut subs),
            2 => round2(&mut subs),
            _ => round3(&mut subs, fl),
        };
        if splices.is_empty() {
            continue;
        }
        let mut out = Vec::with_capacity(subs.len());
        let mut rest = subs.into_iter().enumerate().peekable();
        for (prefix, start, len) in splices {
            while rest.peek().is_some_and(|(i, _)| *i < start) {
                out.push(rest.next().expect("peeked").1);
            }
            let span: Vec<Re> = rest.by_ref().take(len).map(|(_, re)| re).collect();
            if round == 3 {
                out.push(prefix);
            } else {
                let suffixes = factor_alternation(span, fl);
                let alternation = Re::concat_or_alternate(true, suffixes, fl);
                out.push(Re::new(Op::Concat(vec![prefix, alternation]), fl));
            }
        }
        out.extend(rest.map(|(_, re)| re));
        subs = out;
    }
    subs
}

/// `LeadingString`: the literal runes `re` starts with, and the case flags of the piece.
fn leading_string(mut re: &Re) -> (Vec<u32>, u32) {
    while let Op::Concat(subs) = &re.op {
        match subs.first() {
            Some(first) => re = first,
            None => break,
        }
    }
    let fl = re.flags & (flags::FOLD_CASE | flags::LATIN1);
    match &re.op {
        Op::Literal(r) => (vec![*r], fl),
        Op::LiteralString(runes) => (runes.clone(), fl),
        _ => (Vec::new(), fl),
    }
}

/// `RemoveLeadingString`: `n` runes off the front; concatenations left starting with an
/// empty match shrink (the outer four levels, as RE2 tracks them).
fn remove_leading_string(re: &mut Re, n: usize) {
    remove_leading_string_at(re, n, 0);
}

fn remove_leading_string_at(re: &mut Re, n: usize, depth: usize) {
    if let Op::Concat(subs) = &mut re.op {
        if let Some(first) = subs.first_mut() {
            remove_leading_string_at(first, n, depth + 1);
        }
        if depth < 4 {
            let empty_first = match &re.op {
                Op::Concat(subs) => subs.first().is_some_and(|s| s.kind() == Kind::EmptyMatch),
                _ => false,
            };
            if empty_first {
                let taken = std::mem::replace(&mut re.op, Op::NoMatch);
                if let Op::Concat(mut subs) = taken {
                    if subs.len() == 2 {
                        *re = subs.pop().expect("two");
                    } else {
                        subs.remove(0);
                        re.op = Op::Concat(subs);
                    }
                }
            }
        }
        return;
    }
    match &mut re.op {
        Op::Literal(_) => re.op = Op::EmptyMatch,
        Op::LiteralString(runes) => {
            if n >= runes.len() {
                re.op = Op::EmptyMatch;
            } else if n == runes.len() - 1 {
                let last = runes[runes.len() - 1];
                re.op = Op::Literal(last);
            } else {
                runes.drain(..n);
            }
        }
        _ => {}
    }
}

fn round1(subs: &mut [Re]) -> Vec<(Re, usize, usize)> {
    let mut splices = Vec::new();
    let mut start = 0;
    let mut rune: Vec<u32> = Vec::new();
    let mut nrune = 0;
    let mut rune_flags = 0;
    for i in 0..=subs.len() {
        let mut next = None;
        if i < subs.len() {
            let (rune_i, flags_i) = leading_string(&subs[i]);
            if flags_i == rune_flags {
                let same = rune[..nrune]
                    .iter()
                    .zip(&rune_i)
                    .take_while(|(a, b)| a == b)
                    .count();
                if same > 0 {
                    nrune = same;
                    continue;
                }
            }
            next = Some((rune_i, flags_i));
        }
        if i >= start + 2 {
            let prefix = Re::literal_string(&rune[..nrune], rune_flags);
            for sub in &mut subs[start..i] {
                remove_leading_string(sub, nrune);
            }
            splices.push((prefix, start, i - start));
        }
        if let Some((rune_i, flags_i)) = next {
            start = i;
            nrune = rune_i.len();
            rune = rune_i;
            rune_flags = flags_i;
        }
    }
    splices
}

/// `LeadingRegexp`.
fn leading_regexp(re: &Re) -> Option<&Re> {
    match &re.op {
        Op::EmptyMatch => None,
        Op::Concat(subs) if subs.len() >= 2 => {
            (subs[0].kind() != Kind::EmptyMatch).then(|| &subs[0])
        }
        _ => Some(re),
    }
}

/// `RemoveLeadingRegexp`.
fn remove_leading_regexp(re: Re) -> Re {
    match re.op {
        Op::EmptyMatch => re,
        Op::Concat(mut subs) if subs.len() >= 2 => {
            if subs[0].kind() == Kind::EmptyMatch {
                return Re::new(Op::Concat(subs), re.flags);
            }
            subs.remove(0);
            if subs.len() == 1 {
                subs.pop().expect("one")
            } else {
                Re::new(Op::Concat(subs), re.flags)
            }
        }
        _ => Re::new(Op::EmptyMatch, re.flags),
    }
}

/// What round 2 may factor: an empty-width op, a class, any char or byte, or a fixed
/// repeat of a literal, class, any char or any byte.
fn factorable(first: &Re) -> bool {
    match &first.op {
        Op::BeginLine
        | Op::EndLine
        | Op::WordBoundary
        | Op::NoWordBoundary
        | Op::BeginText
        | Op::EndText
        | Op::CharClass { .. }
        | Op::AnyChar
        | Op::AnyByte => true,
        Op::Repeat { sub, min, max } => {
            min == max
                && matches!(
                    sub.kind(),
                    Kind::Literal | Kind::CharClass | Kind::AnyChar | Kind::AnyByte
                )
        }
        _ => false,
    }
}

fn round2(subs: &mut [Re]) -> Vec<(Re, usize, usize)> {
    let mut splices = Vec::new();
    let mut start = 0;
    let mut first: Option<Re> = None;
    for i in 0..=subs.len() {
        let mut first_i = None;
        if i < subs.len() {
            first_i = leading_regexp(&subs[i]).cloned();
            if let (Some(f), Some(fi)) = (&first, &first_i) {
                if factorable(f) && equal(f, fi) {
                    continue;
                }
            }
        }
        if i >= start + 2 {
            if let Some(prefix) = first.clone() {
                for sub in &mut subs[start..i] {
                    let taken = std::mem::replace(sub, Re::new(Op::NoMatch, 0));
                    *sub = remove_leading_regexp(taken);
                }
                splices.push((prefix, start, i - start));
            }
        }
        if i < subs.len() {
            start = i;
            first = first_i;
        }
    }
    splices
}

fn round3(subs: &mut [Re], fl: u32) -> Vec<(Re, usize, usize)> {
    let mut splices = Vec::new();
    let mut start = 0;
    let literal_or_class = |re: &Re| matches!(re.kind(), Kind::Literal | Kind::CharClass);
    for i in 0..=subs.len() {
        if i < subs.len()
            && i > start
            && literal_or_class(&subs[start])
            && literal_or_class(&subs[i])
        {
            continue;
        }
        if i >= start + 2 {
            let mut class = Class::default();
            for re in &subs[start..i] {
                match &re.op {
                    Op::CharClass { class: cc, .. } => {
                        for &(lo, hi) in &cc.ranges {
                            class.add_range_flags(lo, hi, re.flags);
                        }
                    }
                    Op::Literal(r) => {
                        if re.flags & flags::FOLD_CASE != 0 {
                            let mut folded = Class::default();
                            folded.add_range_flags(*r, *r, re.flags);
                            class.add_class(&folded);
                        } else {
                            class.add_range_flags(*r, *r, re.flags);
                        }
                    }
                    _ => {}
                }
            }
            splices.push((
                Re::new(
                    Op::CharClass {
                        class,
                        builder: false,
                    },
                    fl & !flags::FOLD_CASE,
                ),
                start,
                i - start,
            ));
        }
        if i < subs.len() {
            start = i;
        }
    }
    splices
}
