//! RE2's compiler (`re2::Compiler`) for Latin-1 and the two passes that settle a program's
//! size (`Prog::Optimize`, `Prog::Flatten`): instructions are allocated in RE2's order, and
//! the flattened program is counted as `RE2::ProgramSize` reports it.

use super::regexp::{flags, Op, Re, LATIN1_MAX, RUNE_MAX};

/// RE2's instruction budget for Envoy's options: two thirds of the default 8 MiB `max_mem`
/// over 8-byte instructions, less the program's header (about 700,000 instructions). Past
/// it RE2 says "pattern too large - compile failed".
const MAX_INST: usize = (8 << 20) * 2 / 3 / 8 - 64;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
enum Opcode {
    /// RE2's opcode 0: an instruction freshly zeroed reads as an Alt.
    #[default]
    Alt,
    AltMatch,
    ByteRange,
    Capture,
    EmptyWidth,
    Match,
    Nop,
    Fail,
}

#[derive(Clone, Copy, Debug, Default)]
struct Inst {
    op: Opcode,
    out: u32,
    out1: u32,
    lo: u8,
    hi: u8,
    fold: bool,
}

/// RE2's `PatchList`: holes threaded through the `out`/`out1` fields they will fill
/// (`id << 1`, or `id << 1 | 1` for `out1`).
#[derive(Clone, Copy, Debug, Default)]
struct PatchList {
    head: u32,
    tail: u32,
}

impl PatchList {
    fn mk(p: u32) -> PatchList {
        PatchList { head: p, tail: p }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Frag {
    begin: u32,
    end: PatchList,
    nullable: bool,
}

pub(super) struct Compiler {
    inst: Vec<Inst>,
    ninst: usize,
    failed: bool,
    rune_range: Frag,
}

impl Compiler {
    fn new() -> Compiler {
        let mut c = Compiler {
            inst: Vec::new(),
            ninst: 0,
            failed: false,
            rune_range: Frag::default(),
        };
        let fail = c.alloc().unwrap_or(0);
        c.inst[fail as usize].op = Opcode::Fail;
        c
    }

    fn alloc_n(&mut self, n: usize) -> Option<u32> {
        if self.failed || self.ninst + n > MAX_INST {
            self.failed = true;
            return None;
        }
        if self.ninst + n > self.inst.len() {
            self.inst.resize(self.ninst + n, Inst::default());
        }
        let id = self.ninst as u32;
        self.ninst += n;
        Some(id)
    }

    fn alloc(&mut self) -> Option<u32> {
        self.alloc_n(1)
    }

    fn patch(&mut self, mut l: PatchList, p: u32) {
        while l.head != 0 {
            let ip = &mut self.inst[(l.head >> 1) as usize];
            if l.head & 1 != 0 {
                l.head = ip.out1;
                ip.out1 = p;
            } else {
                l.head = ip.out;
                ip.out = p;
            }
        }
    }

    fn append(&mut self, l1: PatchList, l2: PatchList) -> PatchList {
        if l1.head == 0 {
            return l2;
        }
        if l2.head == 0 {
            return l1;
        }
        let ip = &mut self.inst[(l1.tail >> 1) as usize];
        if l1.tail & 1 != 0 {
            ip.out1 = l2.head;
        } else {
            ip.out = l2.head;
        }
        PatchList {
            head: l1.head,
            tail: l2.tail,
        }
    }

    fn no_match() -> Frag {
        Frag::default()
    }

    fn cat(&mut self, a: Frag, b: Frag) -> Frag {
        if a.begin == 0 || b.begin == 0 {
            return Self::no_match();
        }
        let begin = self.inst[a.begin as usize];
        if begin.op == Opcode::Nop && a.end.head == (a.begin << 1) && begin.out == 0 {
            self.patch(a.end, b.begin);
            return b;
        }
        self.patch(a.end, b.begin);
        Frag {
            begin: a.begin,
            end: b.end,
            nullable: a.nullable && b.nullable,
        }
    }

    fn alt(&mut self, a: Frag, b: Frag) -> Frag {
        if a.begin == 0 {
            return b;
        }
        if b.begin == 0 {
            return a;
        }
        let Some(id) = self.alloc() else {
            return Self::no_match();
        };
        self.inst[id as usize] = Inst {
            op: Opcode::Alt,
            out: a.begin,
            out1: b.begin,
            ..Inst::default()
        };
        let end = self.append(a.end, b.end);
        Frag {
            begin: id,
            end,
            nullable: a.nullable || b.nullable,
        }
    }

    /// An Alt for a loop or option: greedy takes `out` first, non-greedy `out1`.
    fn loop_alt(&mut self, a: Frag, nongreedy: bool) -> Option<(u32, PatchList)> {
        let id = self.alloc()?;
        let (out, out1, pl) = if nongreedy {
            (0, a.begin, PatchList::mk(id << 1))
        } else {
            (a.begin, 0, PatchList::mk((id << 1) | 1))
        };
        self.inst[id as usize] = Inst {
            op: Opcode::Alt,
            out,
            out1,
            ..Inst::default()
        };
        Some((id, pl))
    }

    fn plus(&mut self, a: Frag, nongreedy: bool) -> Frag {
        let Some((id, pl)) = self.loop_alt(a, nongreedy) else {
            return Self::no_match();
        };
        self.patch(a.end, id);
        Frag {
            begin: a.begin,
            end: pl,
            nullable: a.nullable,
        }
    }

    fn star(&mut self, a: Frag, nongreedy: bool) -> Frag {
        // A nullable loop is (a+)?, as RE2 compiles it for the right priorities.
        if a.nullable {
            let plus = self.plus(a, nongreedy);
            return self.quest(plus, nongreedy);
        }
        let Some((id, pl)) = self.loop_alt(a, nongreedy) else {
            return Self::no_match();
        };
        self.patch(a.end, id);
        Frag {
            begin: id,
            end: pl,
            nullable: true,
        }
    }

    fn quest(&mut self, a: Frag, nongreedy: bool) -> Frag {
        if a.begin == 0 {
            return self.nop();
        }
        let Some((id, pl)) = self.loop_alt(a, nongreedy) else {
            return Self::no_match();
        };
        let end = self.append(pl, a.end);
        Frag {
            begin: id,
            end,
            nullable: true,
        }
    }

    fn simple(&mut self, op: Opcode, nullable: bool) -> Frag {
        let Some(id) = self.alloc() else {
            return Self::no_match();
        };
        self.inst[id as usize] = Inst {
            op,
            ..Inst::default()
        };
        Frag {
            begin: id,
            end: PatchList::mk(id << 1),
            nullable,
        }
    }

    fn byte_range(&mut self, lo: u8, hi: u8, fold: bool) -> Frag {
        let f = self.simple(Opcode::ByteRange, false);
        if f.begin != 0 {
            let ip = &mut self.inst[f.begin as usize];
            ip.lo = lo;
            ip.hi = hi;
            ip.fold = fold;
        }
        f
    }

    fn nop(&mut self) -> Frag {
        self.simple(Opcode::Nop, true)
    }

    fn empty_width(&mut self) -> Frag {
        self.simple(Opcode::EmptyWidth, true)
    }

    fn matched(&mut self) -> Frag {
        let Some(id) = self.alloc() else {
            return Self::no_match();
        };
        self.inst[id as usize] = Inst {
            op: Opcode::Match,
            ..Inst::default()
        };
        Frag {
            begin: id,
            end: PatchList::default(),
            nullable: false,
        }
    }

    fn capture(&mut self, a: Frag) -> Frag {
        if a.begin == 0 {
            return Self::no_match();
        }
        let Some(id) = self.alloc_n(2) else {
            return Self::no_match();
        };
        self.inst[id as usize] = Inst {
            op: Opcode::Capture,
            out: a.begin,
            ..Inst::default()
        };
        self.inst[id as usize + 1] = Inst {
            op: Opcode::Capture,
            ..Inst::default()
        };
        self.patch(a.end, id + 1);
        Frag {
            begin: id,
            end: PatchList::mk((id + 1) << 1),
            nullable: a.nullable,
        }
    }

    // ---- Rune ranges in Latin-1 ----

    fn begin_range(&mut self) {
        self.rune_range = Frag::default();
    }

    /// `AddRuneRangeLatin1`: one byte range per class range (clipped to Latin-1), joined by
    /// a chain of Alts (`AddSuffix`).
    fn add_rune_range(&mut self, lo: u32, hi: u32, fold: bool) {
        if lo > hi || lo > LATIN1_MAX || self.failed {
            return;
        }
        let hi = hi.min(LATIN1_MAX);
        let f = self.byte_range(lo as u8, hi as u8, fold);
        if f.begin == 0 {
            return;
        }
        self.rune_range.end = self.append(self.rune_range.end, f.end);
        if self.rune_range.begin == 0 {
            self.rune_range.begin = f.begin;
            return;
        }
        let Some(alt) = self.alloc() else {
            self.rune_range.begin = 0;
            return;
        };
        self.inst[alt as usize] = Inst {
            op: Opcode::Alt,
            out: self.rune_range.begin,
            out1: f.begin,
            ..Inst::default()
        };
        self.rune_range.begin = alt;
    }

    fn literal(&mut self, r: u32, fold: bool) -> Frag {
        self.byte_range(r as u8, r as u8, fold)
    }

    /// The children compiled in order, then joined left to right (`Cat` or `Alt`).
    fn join(&mut self, subs: &[Re], joined: fn(&mut Self, Frag, Frag) -> Frag) -> Frag {
        let frags: Vec<Frag> = subs.iter().map(|s| self.walk(s)).collect();
        if self.failed {
            return Self::no_match();
        }
        let mut it = frags.into_iter();
        let mut f = it.next().unwrap_or_default();
        for next in it {
            f = joined(self, f, next);
        }
        f
    }

    /// `PostVisit`: the fragment for `re`, its children compiled first, in order.
    fn walk(&mut self, re: &Re) -> Frag {
        if self.failed {
            return Self::no_match();
        }
        let nongreedy = re.flags & flags::NON_GREEDY != 0;
        match &re.op {
            Op::NoMatch => Self::no_match(),
            Op::EmptyMatch => self.nop(),
            Op::Concat(subs) => self.join(subs, Self::cat),
            Op::Alternate(subs) => self.join(subs, Self::alt),
            Op::Star(sub) => {
                let f = self.walk(sub);
                self.star(f, nongreedy)
            }
            Op::Plus(sub) => {
                let f = self.walk(sub);
                self.plus(f, nongreedy)
            }
            Op::Quest(sub) => {
                let f = self.walk(sub);
                self.quest(f, nongreedy)
            }
            Op::Literal(r) => self.literal(*r, re.flags & flags::FOLD_CASE != 0),
            Op::LiteralString(runes) => {
                if runes.is_empty() {
                    return self.nop();
                }
                let fold = re.flags & flags::FOLD_CASE != 0;
                let mut f = Frag::default();
                for (i, &r) in runes.iter().enumerate() {
                    let f1 = self.literal(r, fold);
                    f = if i == 0 { f1 } else { self.cat(f, f1) };
                }
                f
            }
            Op::AnyChar => {
                self.begin_range();
                self.add_rune_range(0, RUNE_MAX, false);
                self.rune_range
            }
            Op::AnyByte => self.byte_range(0x00, 0xFF, false),
            Op::CharClass { class, .. } => {
                if class.is_empty() {
                    self.failed = true;
                    return Self::no_match();
                }
                let fold_ascii = class.folds_ascii();
                self.begin_range();
                let (a, z, upper_z, lower_a) = (
                    u32::from(b'A'),
                    u32::from(b'z'),
                    u32::from(b'Z'),
                    u32::from(b'a'),
                );
                for &(lo, hi) in &class.ranges {
                    if fold_ascii && a <= lo && hi <= upper_z {
                        continue;
                    }
                    let mut fold = fold_ascii;
                    if (lo <= a && z <= hi) || hi < a || z < lo || (upper_z < lo && hi < lower_a) {
                        fold = false;
                    }
                    self.add_rune_range(lo, hi, fold);
                }
                self.rune_range
            }
            Op::Capture { sub, cap, .. } => {
                let f = self.walk(sub);
                if *cap < 0 {
                    f
                } else {
                    self.capture(f)
                }
            }
            Op::BeginLine
            | Op::EndLine
            | Op::BeginText
            | Op::EndText
            | Op::WordBoundary
            | Op::NoWordBoundary => self.empty_width(),
            Op::Repeat { .. } | Op::LeftParen { .. } | Op::VerticalBar => {
                self.failed = true;
                Self::no_match()
            }
        }
    }
}

/// `IsAnchorStart` (`start`) and `IsAnchorEnd`: a leading `\A` (a trailing `\z`, or `$`
/// outside multi-line mode), through concatenations and captures four deep, comes out, and
/// the program is anchored at that end.
fn strip_anchor(re: &mut Re, depth: usize, start: bool) -> bool {
    if depth >= 4 {
        return false;
    }
    match &mut re.op {
        Op::Concat(subs) => {
            let edge = if start {
                subs.first_mut()
            } else {
                subs.last_mut()
            };
            edge.is_some_and(|edge| strip_anchor(edge, depth + 1, start))
        }
        Op::Capture { sub, .. } => strip_anchor(sub, depth + 1, start),
        Op::BeginText if start => {
            re.op = Op::LiteralString(Vec::new());
            true
        }
        Op::EndText if !start => {
            re.op = Op::LiteralString(Vec::new());
            true
        }
        _ => false,
    }
}

/// The size of the forward program RE2 compiles from the simplified `sre`, or `None` when
/// RE2 would give up ("pattern too large - compile failed").
pub(super) fn program_size(mut sre: Re) -> Option<usize> {
    let mut c = Compiler::new();
    let anchor_start = strip_anchor(&mut sre, 0, true);
    // Anchored at the end or not, the program is the same size (only `\z` comes out).
    strip_anchor(&mut sre, 0, false);
    let all = c.walk(&sre);
    if c.failed {
        return None;
    }
    let m = c.matched();
    let all = c.cat(all, m);
    let start = all.begin;
    let mut start_unanchored = start;
    if !anchor_start {
        let any = c.byte_range(0x00, 0xFF, false);
        let dot_star = c.star(any, true);
        start_unanchored = c.cat(dot_star, all).begin;
    }
    if c.failed {
        return None;
    }
    if start == 0 && start_unanchored == 0 {
        c.ninst = 1;
    }
    let mut prog = Prog {
        inst: c.inst[..c.ninst].to_vec(),
        start,
        start_unanchored,
    };
    prog.optimize();
    Some(prog.flattened_size())
}

struct Prog {
    inst: Vec<Inst>,
    start: u32,
    start_unanchored: u32,
}

/// An insertion-ordered set of instruction ids (RE2's `SparseSet`).
struct Ordered {
    seen: Vec<bool>,
    order: Vec<u32>,
}

impl Ordered {
    fn new(n: usize) -> Ordered {
        Ordered {
            seen: vec![false; n],
            order: Vec::new(),
        }
    }
    fn clear(&mut self) {
        for &i in &self.order {
            self.seen[i as usize] = false;
        }
        self.order.clear();
    }
    fn contains(&self, i: u32) -> bool {
        self.seen[i as usize]
    }
    fn insert(&mut self, i: u32) {
        if !self.seen[i as usize] {
            self.seen[i as usize] = true;
            self.order.push(i);
        }
    }
}

impl Prog {
    fn op(&self, id: u32) -> Opcode {
        self.inst[id as usize].op
    }

    fn is_match(&self, mut id: u32) -> bool {
        loop {
            match self.op(id) {
                Opcode::Capture | Opcode::Nop => id = self.inst[id as usize].out,
                Opcode::Match => return true,
                _ => return false,
            }
        }
    }

    /// `Prog::Optimize`: Nops skipped, and a loop of any byte beside a match made AltMatch.
    fn optimize(&mut self) {
        let mut q = Ordered::new(self.inst.len());
        let add = |q: &mut Ordered, id: u32| {
            if id != 0 {
                q.insert(id);
            }
        };
        add(&mut q, self.start);
        let mut k = 0;
        while k < q.order.len() {
            let id = q.order[k] as usize;
            k += 1;
            let mut j = self.inst[id].out;
            while j != 0 && self.op(j) == Opcode::Nop {
                j = self.inst[j as usize].out;
            }
            self.inst[id].out = j;
            add(&mut q, j);
            if self.inst[id].op == Opcode::Alt {
                let mut j = self.inst[id].out1;
                while j != 0 && self.op(j) == Opcode::Nop {
                    j = self.inst[j as usize].out;
                }
                self.inst[id].out1 = j;
                add(&mut q, j);
            }
        }
        q.clear();
        add(&mut q, self.start);
        let mut k = 0;
        while k < q.order.len() {
            let id = q.order[k];
            k += 1;
            let ip = self.inst[id as usize];
            add(&mut q, ip.out);
            if ip.op == Opcode::Alt {
                add(&mut q, ip.out1);
                let (j, kk) = (self.inst[ip.out as usize], self.inst[ip.out1 as usize]);
                let any_loop = |x: &Inst| {
                    x.op == Opcode::ByteRange && x.out == id && x.lo == 0 && x.hi == 0xFF
                };
                if (any_loop(&j) && self.is_match(ip.out1))
                    || (self.is_match(ip.out) && any_loop(&kk))
                {
                    self.inst[id as usize].op = Opcode::AltMatch;
                }
            }
        }
    }

    /// `Prog::Flatten`'s count: one list per root, each the instructions reachable from it
    /// through Alts and Nops, with a Nop where a list reaches another root.
    fn flattened_size(&self) -> usize {
        let n = self.inst.len();
        let mut is_root = vec![false; n];
        let mut roots: Vec<u32> = Vec::new();
        let mark_root = |is_root: &mut Vec<bool>, roots: &mut Vec<u32>, id: u32| {
            if !is_root[id as usize] {
                is_root[id as usize] = true;
                roots.push(id);
            }
        };
        let mut preds: Vec<Vec<u32>> = vec![Vec::new(); n];
        let mut reachable = Ordered::new(n);
        let mut stk: Vec<u32> = Vec::new();

        // MarkSuccessors.
        mark_root(&mut is_root, &mut roots, 0);
        mark_root(&mut is_root, &mut roots, self.start_unanchored);
        mark_root(&mut is_root, &mut roots, self.start);
        stk.push(self.start_unanchored);
        while let Some(mut id) = stk.pop() {
            loop {
                if reachable.contains(id) {
                    break;
                }
                reachable.insert(id);
                let ip = self.inst[id as usize];
                match ip.op {
                    Opcode::Alt | Opcode::AltMatch => {
                        preds[ip.out as usize].push(id);
                        preds[ip.out1 as usize].push(id);
                        stk.push(ip.out1);
                        id = ip.out;
                    }
                    Opcode::ByteRange | Opcode::Capture | Opcode::EmptyWidth => {
                        mark_root(&mut is_root, &mut roots, ip.out);
                        id = ip.out;
                    }
                    Opcode::Nop => id = ip.out,
                    Opcode::Match | Opcode::Fail => break,
                }
            }
        }

        // MarkDominator, for each root but the first (by id), from the highest id down.
        let mut sorted = roots.clone();
        sorted.sort_unstable();
        for &root in sorted.iter().skip(1).rev() {
            if root == self.start_unanchored || root == self.start {
                continue;
            }
            reachable.clear();
            stk.clear();
            stk.push(root);
            while let Some(mut id) = stk.pop() {
                loop {
                    if reachable.contains(id) {
                        break;
                    }
                    reachable.insert(id);
                    if id != root && is_root[id as usize] {
                        break;
                    }
                    let ip = self.inst[id as usize];
                    match ip.op {
                        Opcode::Alt | Opcode::AltMatch => {
                            stk.push(ip.out1);
                            id = ip.out;
                        }
                        Opcode::Nop => id = ip.out,
                        _ => break,
                    }
                }
            }
            let found: Vec<u32> = reachable.order.clone();
            for id in found {
                if preds[id as usize].iter().any(|&p| !reachable.contains(p)) {
                    mark_root(&mut is_root, &mut roots, id);
                }
            }
        }

        // EmitList, counted.
        let mut size = 0;
        for &root in &roots {
            reachable.clear();
            stk.clear();
            stk.push(root);
            while let Some(mut id) = stk.pop() {
                loop {
                    if reachable.contains(id) {
                        break;
                    }
                    reachable.insert(id);
                    if id != root && is_root[id as usize] {
                        size += 1;
                        break;
                    }
                    let ip = self.inst[id as usize];
                    match ip.op {
                        Opcode::AltMatch | Opcode::Alt => {
                            if ip.op == Opcode::AltMatch {
                                size += 1;
                            }
                            stk.push(ip.out1);
                            id = ip.out;
                        }
                        Opcode::Nop => id = ip.out,
                        _ => {
                            size += 1;
                            break;
                        }
                    }
                }
            }
        }
        size
    }
}
