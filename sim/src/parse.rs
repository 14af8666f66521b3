//! A PTX text parser: module directives, entry signatures, register declarations,
//! labels and instructions (with guards) are read; anything else in a body is an error
//! naming the line. Each kernel's instructions are then decoded ([`crate::decode`]), which
//! reads only the syntax types ([`crate::syntax`]), never this module.

use std::collections::HashMap;

use crate::decode::{Inst, KernelInfo, decode_body};
use crate::error::SimError;
use crate::syntax::{Opnd, RawInst};

/// A kernel parameter.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamDecl {
    /// Name.
    pub name: String,
    /// Size in bytes.
    pub size: usize,
    /// Alignment in bytes.
    pub align: usize,
}

/// A parsed `.entry`.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// Entry name.
    pub name: String,
    /// Parameters in order.
    pub params: Vec<ParamDecl>,
    /// Byte offset of each parameter in the parameter buffer (natural alignment).
    pub param_offsets: Vec<usize>,
    /// Register slots.
    pub reg_count: usize,
    /// Register slot of each declared name.
    pub reg_names: HashMap<String, usize>,
    /// Instructions, decoded.
    pub body: Vec<Inst>,
    /// Label → instruction index.
    pub labels: HashMap<String, usize>,
    /// Name of the extern dynamic shared array, if any.
    pub dynamic_shared: Option<String>,
    /// `.reqntid` x, if declared.
    pub reqntid: Option<u32>,
    /// `.reqnctapercluster` x, if declared.
    pub reqnctapercluster: Option<u32>,
    /// `.maxnreg`, if declared: the registers per thread at launch that `setmaxnreg` moves
    /// between warpgroups.
    pub maxnreg: Option<u32>,
    /// Register slots the decoded body refers to (the parsed `reg_count`, kept private so
    /// that an edited `reg_count` cannot make a register access go out of bounds).
    regs_needed: usize,
    /// The body has warpgroup instructions (wgmma, setmaxnreg): CTAs keep their state.
    pub(crate) warpgroups: bool,
}

impl Kernel {
    /// Register slots a thread needs.
    pub(crate) fn registers(&self) -> usize {
        self.reg_count.max(self.regs_needed)
    }
}

/// A parsed module.
#[derive(Clone, Debug, PartialEq)]
pub struct Module {
    /// `.target`.
    pub target: String,
    /// Entries.
    pub kernels: Vec<Kernel>,
}

/// Register slots per kernel: far above any real kernel, low enough that a malformed
/// declaration cannot exhaust memory.
const MAX_REGS: usize = 1 << 16;

fn err(line: usize, msg: impl Into<String>) -> SimError {
    SimError::Parse { line, message: msg.into() }
}

fn strip_comment(line: &str) -> &str {
    line.find("//").map_or(line, |i| &line[..i])
}

/// Splits an operand list on top-level commas.
fn split_operands(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(s[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = s[start..].trim();
    if !last.is_empty() {
        out.push(last);
    }
    out
}

fn parse_int(s: &str) -> Option<i64> {
    let (neg, body) = s.strip_prefix('-').map_or((false, s), |r| (true, r));
    let v = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else {
        body.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

fn parse_operand(s: &str, regs: &HashMap<String, usize>, line: usize) -> Result<Opnd, SimError> {
    let s = s.trim();
    if s == "_" {
        return Ok(Opnd::Sink);
    }
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        let parts = split_operands(inner);
        if parts.len() == 2 && parts[1].starts_with('{') {
            let base = parse_operand(parts[0], regs, line)?;
            let Opnd::Vector(coords) = parse_operand(parts[1], regs, line)? else {
                return Err(err(line, format!("bad tensor reference {s}")));
            };
            return Ok(Opnd::TensorRef(Box::new(base), coords));
        }
        // [base], [base+off], [base-off]
        let (base, off) = match inner.rfind(['+', '-']).filter(|&i| i > 0) {
            Some(i) => {
                let off = parse_int(inner[i..].trim_start_matches('+').trim())
                    .ok_or_else(|| err(line, format!("bad offset in {s}")))?;
                (&inner[..i], off)
            }
            None => (inner, 0),
        };
        return Ok(Opnd::Addr(Box::new(parse_operand(base, regs, line)?), off));
    }
    if let Some(inner) = s.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
        let items = split_operands(inner)
            .into_iter()
            .map(|x| parse_operand(x, regs, line))
            .collect::<Result<_, _>>()?;
        return Ok(Opnd::Vector(items));
    }
    if let Some(r) = s.strip_prefix('!') {
        return match regs.get(r) {
            Some(&slot) => Ok(Opnd::NotReg(slot)),
            None => Err(err(line, format!("unknown register {r}"))),
        };
    }
    if let Some(&slot) = regs.get(s) {
        return Ok(Opnd::Reg(slot));
    }
    if let Some(h) = s.strip_prefix("0f").or_else(|| s.strip_prefix("0F"))
        && h.len() == 8
    {
        return u32::from_str_radix(h, 16)
            .map(Opnd::F32)
            .map_err(|_| err(line, format!("bad f32 {s}")));
    }
    if let Some(v) = parse_int(s) {
        return Ok(Opnd::Imm(v));
    }
    if s.starts_with('%')
        && !s.contains('.')
        && s.chars().nth(1).is_some_and(|c| c.is_ascii_lowercase())
    {
        // %r12 style names must be declared registers; special registers contain a dot
        // (%tid.x) or are whole words (%cluster_ctarank).
        if s[1..].chars().any(|c| c.is_ascii_digit()) && !s.contains('_') {
            return Err(err(line, format!("undeclared register {s}")));
        }
    }
    Ok(Opnd::Name(s.to_owned()))
}

/// Offsets of `params` laid out in order, each at its alignment.
fn param_offsets(params: &[ParamDecl]) -> Vec<usize> {
    let mut end = 0usize;
    params
        .iter()
        .map(|p| {
            let off = end.next_multiple_of(p.align.max(1));
            end = off + p.size;
            off
        })
        .collect()
}

fn parse_params(text: &str, line: usize) -> Result<Vec<ParamDecl>, SimError> {
    let mut out = Vec::new();
    for p in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let words: Vec<&str> = p.split_whitespace().collect();
        if words.first() != Some(&".param") {
            return Err(err(line, format!("bad parameter {p}")));
        }
        let mut align: usize = 0;
        let mut i = 1;
        if words.get(i) == Some(&".align") {
            align = words
                .get(i + 1)
                .and_then(|a| a.parse().ok())
                .ok_or_else(|| err(line, "bad .align"))?;
            i += 2;
        }
        let ty = words.get(i).ok_or_else(|| err(line, "missing parameter type"))?;
        let name = words.get(i + 1).ok_or_else(|| err(line, "missing parameter name"))?;
        let elem = match *ty {
            ".u8" | ".b8" | ".s8" => 1,
            ".u16" | ".b16" | ".s16" | ".f16" => 2,
            ".u32" | ".b32" | ".s32" | ".f32" => 4,
            ".u64" | ".b64" | ".s64" | ".f64" => 8,
            _ => return Err(err(line, format!("unsupported parameter type {ty}"))),
        };
        let (name, count) = match name.find('[') {
            Some(b) => {
                let n: usize = name
                    .get(b + 1..name.len().saturating_sub(1))
                    .and_then(|x| x.parse().ok())
                    .ok_or_else(|| err(line, "bad array size"))?;
                (&name[..b], n)
            }
            None => (*name, 1),
        };
        // Kernel parameters are limited to a few KB on every target; anything near these
        // bounds is malformed, and keeping them small keeps the layout arithmetic exact.
        let size = elem * count.min(1 << 20);
        if count > 1 << 20 || align > 4096 || (align != 0 && !align.is_power_of_two()) {
            return Err(err(line, format!("unsupported parameter {p}")));
        }
        out.push(ParamDecl {
            name: name.to_owned(),
            size,
            align: if align > 0 { align } else { elem },
        });
    }
    Ok(out)
}

/// Parses a module.
pub fn parse_module(text: &str) -> Result<Module, SimError> {
    let lines: Vec<&str> = text.lines().collect();
    let mut target = String::new();
    let mut kernels = Vec::new();
    let mut extern_shared = None;
    let mut i = 0;
    while i < lines.len() {
        let line = strip_comment(lines[i]).trim();
        if line.is_empty() {
            i += 1;
            continue;
        }
        if let Some(t) = line.strip_prefix(".target") {
            target = t.trim().to_owned();
        } else if line.starts_with(".extern .shared") {
            let name = line.split_whitespace().last().unwrap_or("").trim_end_matches(';');
            extern_shared = name.find('[').map(|b| name[..b].to_owned());
        } else if line.starts_with(".visible .entry") || line.starts_with(".entry") {
            // Signature up to ')', then directives, then '{' … '}'.
            let mut sig = String::new();
            let start = i;
            while i < lines.len() && !strip_comment(lines[i]).contains(')') {
                sig.push_str(strip_comment(lines[i]));
                i += 1;
            }
            if i >= lines.len() {
                return Err(err(start + 1, "unterminated entry signature"));
            }
            sig.push_str(strip_comment(lines[i]));
            let open = sig.find('(').ok_or_else(|| err(start + 1, "missing '('"))?;
            let close = sig.rfind(')').ok_or_else(|| err(start + 1, "missing ')'"))?;
            let name = sig[..open].split_whitespace().last().unwrap_or("").to_owned();
            let params = parse_params(&sig[open + 1..close], start + 1)?;
            let mut reqntid = None;
            let mut reqnctapercluster = None;
            let mut maxnreg = None;
            i += 1;
            while i < lines.len() && strip_comment(lines[i]).trim() != "{" {
                let d = strip_comment(lines[i]).trim();
                let first_num =
                    |rest: &str| rest.split(',').next().and_then(|x| x.trim().parse::<u32>().ok());
                if let Some(rest) = d.strip_prefix(".reqntid") {
                    reqntid = first_num(rest);
                } else if let Some(rest) = d.strip_prefix(".reqnctapercluster") {
                    reqnctapercluster = first_num(rest);
                } else if let Some(rest) = d.strip_prefix(".maxnreg") {
                    maxnreg = first_num(rest);
                }
                i += 1;
            }
            i += 1;
            let offsets = param_offsets(&params);
            let mut k = Kernel {
                name,
                params,
                param_offsets: offsets,
                reg_count: 0,
                reg_names: HashMap::new(),
                body: Vec::new(),
                labels: HashMap::new(),
                dynamic_shared: extern_shared.clone(),
                reqntid,
                reqnctapercluster,
                maxnreg,
                regs_needed: 0,
                warpgroups: false,
            };
            let mut raw_body = Vec::new();
            while i < lines.len() {
                let raw = strip_comment(lines[i]).trim();
                let ln = i + 1;
                i += 1;
                if raw.is_empty() {
                    continue;
                }
                if raw == "}" {
                    break;
                }
                if let Some(decl) = raw.strip_prefix(".reg") {
                    // .reg .b32 %r<12>;  or  .reg .b32 %x;
                    let name = decl.split_whitespace().last().unwrap_or("").trim_end_matches(';');
                    match name.find('<') {
                        Some(lt) => {
                            let n: usize = name
                                .get(lt + 1..name.len().saturating_sub(1))
                                .and_then(|x| x.parse().ok())
                                .ok_or_else(|| err(ln, "bad .reg count"))?;
                            if n > MAX_REGS || k.reg_count + n > MAX_REGS {
                                return Err(err(ln, format!("more than {MAX_REGS} registers")));
                            }
                            for j in 0..n {
                                k.reg_names.insert(format!("{}{j}", &name[..lt]), k.reg_count);
                                k.reg_count += 1;
                            }
                        }
                        None => {
                            k.reg_names.insert(name.to_owned(), k.reg_count);
                            k.reg_count += 1;
                        }
                    }
                    continue;
                }
                if let Some(label) = raw.strip_suffix(':') {
                    k.labels.insert(label.to_owned(), raw_body.len());
                    continue;
                }
                let stmt = raw
                    .strip_suffix(';')
                    .ok_or_else(|| err(ln, format!("expected ';' in: {raw}")))?;
                let (guard, rest) = if let Some(g) = stmt.strip_prefix('@') {
                    let (p, rest) =
                        g.split_once(char::is_whitespace).ok_or_else(|| err(ln, "bad guard"))?;
                    let (neg, p) = p.strip_prefix('!').map_or((false, p), |x| (true, x));
                    let slot = *k
                        .reg_names
                        .get(p)
                        .ok_or_else(|| err(ln, format!("unknown predicate {p}")))?;
                    (Some((slot, neg)), rest.trim())
                } else {
                    (None, stmt)
                };
                let (opcode, ops) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
                // `elect.sync _|%p, mask` carries two destinations joined by '|'.
                let operands = split_operands(ops)
                    .into_iter()
                    .flat_map(|o| {
                        if o.contains('|') {
                            o.split('|').map(str::trim).collect::<Vec<_>>()
                        } else {
                            vec![o]
                        }
                    })
                    .map(|o| parse_operand(o, &k.reg_names, ln))
                    .collect::<Result<Vec<_>, _>>()?;
                raw_body.push(RawInst { guard, opcode: opcode.to_owned(), operands, line: ln });
            }
            let names: Vec<(String, usize)> = k
                .params
                .iter()
                .map(|p| p.name.clone())
                .zip(k.param_offsets.iter().copied())
                .collect();
            let info = KernelInfo {
                labels: &k.labels,
                params: &names,
                dynamic_shared: k.dynamic_shared.as_deref(),
            };
            k.body = decode_body(raw_body, &info)?;
            k.regs_needed = k.reg_count;
            k.warpgroups = k.body.iter().any(|i| i.op.is_warpgroup());
            kernels.push(k);
            continue;
        }
        i += 1;
    }
    Ok(Module { target, kernels })
}
