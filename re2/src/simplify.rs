//! RE2's simplifier (`Regexp::Simplify`): first coalescing neighbours such as `a*a+` into
//! one repeat, then rewriting counted repeats into copies and `?`s, and empty or full
//! classes into no match or any character, as RE2 does before compiling.

use super::regexp::{equal, flags, Kind, Op, Re};

pub(super) fn simplify(re: Re) -> Re {
    simplify_walk(coalesce(re)).0
}

// ---- CoalesceWalker ----

fn coalesce(re: Re) -> Re {
    let fl = re.flags;
    match re.op {
        Op::Concat(subs) => {
            let mut children: Vec<Re> = subs.into_iter().map(coalesce).collect();
            let can = children
                .windows(2)
                .any(|pair| can_coalesce(&pair[0], &pair[1]));
            if !can {
                return Re::new(Op::Concat(children), fl);
            }
            for i in 0..children.len().saturating_sub(1) {
                if can_coalesce(&children[i], &children[i + 1]) {
                    do_coalesce(&mut children, i);
                }
            }
            children.retain(|c| c.kind() != Kind::EmptyMatch);
            Re::new(Op::Concat(children), fl)
        }
        Op::Alternate(subs) => Re::new(Op::Alternate(subs.into_iter().map(coalesce).collect()), fl),
        Op::Star(s) => Re::new(Op::Star(Box::new(coalesce(*s))), fl),
        Op::Plus(s) => Re::new(Op::Plus(Box::new(coalesce(*s))), fl),
        Op::Quest(s) => Re::new(Op::Quest(Box::new(coalesce(*s))), fl),
        Op::Repeat { sub, min, max } => Re::new(
            Op::Repeat {
                sub: Box::new(coalesce(*sub)),
                min,
                max,
            },
            fl,
        ),
        Op::Capture { sub, cap, name } => Re::new(
            Op::Capture {
                sub: Box::new(coalesce(*sub)),
                cap,
                name,
            },
            fl,
        ),
        op => Re::new(op, fl),
    }
}

fn is_repeat(re: &Re) -> bool {
    matches!(
        re.kind(),
        Kind::Star | Kind::Plus | Kind::Quest | Kind::Repeat
    )
}

fn can_coalesce(r1: &Re, r2: &Re) -> bool {
    if !is_repeat(r1) {
        return false;
    }
    let Some(sub1) = r1.only_sub() else {
        return false;
    };
    if !matches!(
        sub1.kind(),
        Kind::Literal | Kind::CharClass | Kind::AnyChar | Kind::AnyByte
    ) {
        return false;
    }
    if is_repeat(r2)
        && r2.only_sub().is_some_and(|sub2| equal(sub1, sub2))
        && (r1.flags & flags::NON_GREEDY) == (r2.flags & flags::NON_GREEDY)
    {
        return true;
    }
    if equal(sub1, r2) {
        return true;
    }
    if let (Op::Literal(r), Op::LiteralString(runes)) = (&sub1.op, &r2.op) {
        return runes.first() == Some(r)
            && (sub1.flags & flags::FOLD_CASE) == (r2.flags & flags::FOLD_CASE);
    }
    false
}

/// `DoCoalesce` of children i and i+1: i+1 becomes the repeat, i an empty match (or, for a
/// string only partly absorbed, i the repeat and i+1 the rest of the string).
fn do_coalesce(children: &mut [Re], i: usize) {
    let r1 = std::mem::replace(&mut children[i], Re::new(Op::EmptyMatch, 0));
    let r2 = std::mem::replace(&mut children[i + 1], Re::new(Op::EmptyMatch, 0));
    let (mut min, mut max) = match &r1.op {
        Op::Star(_) => (0, -1),
        Op::Plus(_) => (1, -1),
        Op::Quest(_) => (0, 1),
        Op::Repeat { min, max, .. } => (*min, *max),
        _ => unreachable!("can_coalesce checked"),
    };
    let sub = r1.only_sub().cloned().expect("can_coalesce checked");
    let bump = |max: &mut i32, n: i32| {
        if *max != -1 {
            *max += n;
        }
    };
    let empty = Re::new(Op::EmptyMatch, 0);
    match &r2.op {
        Op::Star(_) => max = -1,
        Op::Plus(_) => {
            min += 1;
            max = -1;
        }
        Op::Quest(_) => bump(&mut max, 1),
        Op::Repeat {
            min: min2,
            max: max2,
            ..
        } => {
            min += min2;
            if *max2 == -1 {
                max = -1;
            } else {
                bump(&mut max, *max2);
            }
        }
        Op::Literal(_) | Op::CharClass { .. } | Op::AnyChar | Op::AnyByte => {
            min += 1;
            bump(&mut max, 1);
        }
        Op::LiteralString(runes) => {
            let r = match sub.op {
                Op::Literal(r) => r,
                _ => unreachable!("can_coalesce checked"),
            };
            let n = runes.iter().take_while(|&&x| x == r).count().max(1);
            min += n as i32;
            bump(&mut max, n as i32);
            let repeat = Re::new(
                Op::Repeat {
                    sub: Box::new(sub),
                    min,
                    max,
                },
                r1.flags,
            );
            if n == runes.len() {
                children[i] = empty;
                children[i + 1] = repeat;
            } else {
                children[i] = repeat;
                children[i + 1] = Re::literal_string(&runes[n..], r2.flags);
            }
            return;
        }
        _ => unreachable!("can_coalesce checked"),
    }
    children[i] = empty;
    children[i + 1] = Re::new(
        Op::Repeat {
            sub: Box::new(sub),
            min,
            max,
        },
        r1.flags,
    );
}

// ---- SimplifyWalker ----

/// The simplified node, and whether it differs from the one given (RE2 compares
/// pointers: an unchanged star keeps itself even where a changed one would squash).
fn simplify_walk(re: Re) -> (Re, bool) {
    let fl = re.flags;
    match re.op {
        Op::Concat(subs) => {
            let (subs, changed) = simplify_all(subs);
            (Re::new(Op::Concat(subs), fl), changed)
        }
        Op::Alternate(subs) => {
            let (subs, changed) = simplify_all(subs);
            (Re::new(Op::Alternate(subs), fl), changed)
        }
        Op::Capture { sub, cap, name } => {
            let (sub, changed) = simplify_walk(*sub);
            (
                Re::new(
                    Op::Capture {
                        sub: Box::new(sub),
                        cap,
                        name,
                    },
                    fl,
                ),
                changed,
            )
        }
        op @ (Op::Star(_) | Op::Plus(_) | Op::Quest(_)) => {
            let kind = Re::new(op, fl);
            let k = kind.kind();
            let sub = match kind.op {
                Op::Star(s) | Op::Plus(s) | Op::Quest(s) => *s,
                _ => unreachable!("matched above"),
            };
            let (newsub, changed) = simplify_walk(sub);
            if newsub.kind() == Kind::EmptyMatch {
                return (newsub, true);
            }
            if changed && newsub.kind() == k && newsub.flags == fl {
                return (newsub, true);
            }
            let boxed = Box::new(newsub);
            let op = match k {
                Kind::Star => Op::Star(boxed),
                Kind::Plus => Op::Plus(boxed),
                _ => Op::Quest(boxed),
            };
            (Re::new(op, fl), changed)
        }
        Op::Repeat { sub, min, max } => {
            let (newsub, _) = simplify_walk(*sub);
            if newsub.kind() == Kind::EmptyMatch {
                return (newsub, true);
            }
            (simplify_repeat(newsub, min, max, fl), true)
        }
        Op::CharClass { class, builder } => {
            if class.is_empty() {
                (Re::new(Op::NoMatch, fl), true)
            } else if class.is_full() {
                (Re::new(Op::AnyChar, fl), true)
            } else {
                (Re::new(Op::CharClass { class, builder }, fl), false)
            }
        }
        op => (Re::new(op, fl), false),
    }
}

fn simplify_all(subs: Vec<Re>) -> (Vec<Re>, bool) {
    let mut changed = false;
    let subs = subs
        .into_iter()
        .map(|s| {
            let (s, c) = simplify_walk(s);
            changed |= c;
            s
        })
        .collect();
    (subs, changed)
}

fn is_empty_op(re: &Re) -> bool {
    matches!(
        re.kind(),
        Kind::BeginLine
            | Kind::EndLine
            | Kind::WordBoundary
            | Kind::NoWordBoundary
            | Kind::BeginText
            | Kind::EndText
    )
}

/// `SimplifyRepeat`: `x{n,m}` as n copies of x and nested `(x(x)?)?` for the rest.
fn simplify_repeat(re: Re, mut min: i32, mut max: i32, f: u32) -> Re {
    let all_empty = match &re.op {
        Op::Concat(subs) | Op::Alternate(subs) => subs.iter().all(is_empty_op),
        _ => is_empty_op(&re),
    };
    if all_empty {
        min = min.min(1);
        max = max.min(1);
    }
    if max == -1 {
        if min == 0 {
            return Re::star_plus_or_quest(Kind::Star, re, f);
        }
        if min == 1 {
            return Re::star_plus_or_quest(Kind::Plus, re, f);
        }
        let mut subs: Vec<Re> = (0..min - 1).map(|_| re.clone()).collect();
        subs.push(Re::star_plus_or_quest(Kind::Plus, re, f));
        return Re::concat_or_alternate(false, subs, f);
    }
    if min == 0 && max == 0 {
        return Re::new(Op::EmptyMatch, f);
    }
    if min == 1 && max == 1 {
        return re;
    }
    let mut nre = None;
    if min > 0 {
        let subs: Vec<Re> = (0..min).map(|_| re.clone()).collect();
        nre = Some(Re::concat_or_alternate(false, subs, f));
    }
    if max > min {
        let mut suf = Re::star_plus_or_quest(Kind::Quest, re.clone(), f);
        for _ in min + 1..max {
            let pair = Re::new(Op::Concat(vec![re.clone(), suf]), f);
            suf = Re::star_plus_or_quest(Kind::Quest, pair, f);
        }
        nre = Some(match nre {
            None => suf,
            Some(prefix) => Re::new(Op::Concat(vec![prefix, suf]), f),
        });
    }
    nre.unwrap_or_else(|| Re::new(Op::NoMatch, f))
}
