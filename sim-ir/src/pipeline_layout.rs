//! `parallel.pipeline_layout`: Megatron-Core's pipeline layout language
//! (`--pipeline-model-parallel-layout`, `megatron/core/transformer/pipeline_parallel_layer_layout.py`,
//! `PipelineParallelLayerLayout.parse_str_to_list` and `validate_layer_layout`).
//!
//! A layout lists the virtual pipeline stages in execution order (virtual stage `chunk·pp +
//! stage`), separated by `|`: `E` the embedding, `t` a transformer layer, `m` a multi-token
//! prediction module, `L` the loss. `x*n` repeats one character, `(…)*n` a group; commas are
//! cosmetic. DeepSeek-V3 on PP 16: `Et*3|(tttt|)*14tmL`.

/// What is wrong with a layout; the caller names the key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error(
        "`{0}` is not a layout character; use E (embedding), t (transformer layer), m (multi-token prediction), L (loss), | between virtual stages, x*n and (...)*n to repeat"
    )]
    UnknownCharacter(char),
    #[error(
        "a repeat `*` must follow a character or a (...) group and be followed by a count, at `{0}`"
    )]
    BadRepeat(String),
    #[error(
        "nested or unbalanced parentheses at `{0}` (Megatron-Core's layout language has one level of (...)*n)"
    )]
    Parentheses(String),
    #[error("unrolls to more than {0} characters; the layout of any real model is far shorter")]
    TooLong(usize),
    #[error("has {stages} virtual stages, which is not a multiple of PP {pp}")]
    StagesNotMultipleOfPp { stages: usize, pp: u32 },
    #[error(
        "has {stages} virtual stages, so VP = {derived} on PP {pp}, but parallel.vp = {vp}; leave parallel.vp out or make them agree"
    )]
    VpDisagrees {
        stages: usize,
        derived: u32,
        pp: u32,
        vp: u32,
    },
    #[error("{0}")]
    Placement(String),
}

/// The longest unrolled layout accepted: bounds what a few bytes (`t*999999999`) can allocate.
pub const MAX_UNROLLED: usize = 1 << 20;

/// One element of a virtual stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Embedding,
    Transformer,
    Mtp,
    Loss,
}

/// A checked layout: the layer ids of every model chunk of every pipeline stage,
/// `chunks[stage][chunk]` (transformer layers `0..layers`, MTP modules `layers..layers + mtp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineLayout {
    pub vp: u32,
    pub chunks: Vec<Vec<Vec<u64>>>,
}

/// Expands `(…)*n` groups, then `x*n`, as `parse_str_to_list`'s two regular expressions do.
fn unroll(text: &str) -> Result<String, LayoutError> {
    let text: String = text.chars().filter(|&c| c != ',').collect();
    let groups = expand(&text, true)?;
    expand(&groups, false)
}

/// One pass: groups (`(…)*n`) or single characters (`x*n`).
fn expand(text: &str, groups: bool) -> Result<String, LayoutError> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    let rest = |i: usize| chars[i..].iter().take(16).collect::<String>();
    while i < chars.len() {
        let c = chars[i];
        if groups && c == '(' {
            let close = chars[i + 1..]
                .iter()
                .position(|&c| c == ')')
                .map(|p| i + 1 + p)
                .ok_or_else(|| LayoutError::Parentheses(rest(i)))?;
            let body: String = chars[i + 1..close].iter().collect();
            if body.is_empty() || body.contains('(') {
                return Err(LayoutError::Parentheses(rest(i)));
            }
            let (count, next) =
                repeat_count(&chars, close + 1).ok_or_else(|| LayoutError::BadRepeat(rest(i)))?;
            push_repeated(&mut out, &body, count)?;
            i = next;
        } else if groups && c == ')' {
            return Err(LayoutError::Parentheses(rest(i)));
        } else if !groups && c == '*' {
            return Err(LayoutError::BadRepeat(rest(i)));
        } else if !groups && chars.get(i + 1) == Some(&'*') {
            let (count, next) =
                repeat_count(&chars, i + 1).ok_or_else(|| LayoutError::BadRepeat(rest(i)))?;
            push_repeated(&mut out, &c.to_string(), count)?;
            i = next;
        } else {
            push_repeated(&mut out, &c.to_string(), 1)?;
            i += 1;
        }
    }
    Ok(out)
}

/// `*n` at `at`: the count and the index after it.
fn repeat_count(chars: &[char], at: usize) -> Option<(usize, usize)> {
    if chars.get(at) != Some(&'*') {
        return None;
    }
    let digits: String = chars[at + 1..]
        .iter()
        .take_while(|c| c.is_ascii_digit())
        .collect();
    let count = digits.parse::<usize>().ok()?;
    Some((count, at + 1 + digits.len()))
}

fn push_repeated(out: &mut String, piece: &str, count: usize) -> Result<(), LayoutError> {
    let grown = piece
        .len()
        .checked_mul(count)
        .and_then(|n| n.checked_add(out.len()));
    match grown {
        Some(n) if n <= MAX_UNROLLED => {
            for _ in 0..count {
                out.push_str(piece);
            }
            Ok(())
        }
        _ => Err(LayoutError::TooLong(MAX_UNROLLED)),
    }
}

/// The virtual stages of a layout string, in execution order.
fn parse_stages(text: &str) -> Result<Vec<Vec<Slot>>, LayoutError> {
    unroll(text)?
        .split('|')
        .map(|stage| {
            stage
                .chars()
                .map(|c| match c {
                    'E' => Ok(Slot::Embedding),
                    't' => Ok(Slot::Transformer),
                    'm' => Ok(Slot::Mtp),
                    'L' => Ok(Slot::Loss),
                    other => Err(LayoutError::UnknownCharacter(other)),
                })
                .collect()
        })
        .collect()
}

impl PipelineLayout {
    /// Parses `text` and checks it as `validate_layer_layout` does for a model of `layers`
    /// transformer layers and `mtp_layers` MTP modules on `pp` stages (`vp` as configured; 1
    /// lets the layout set it).
    pub fn parse(
        text: &str,
        pp: u32,
        vp: u32,
        layers: u64,
        mtp_layers: u64,
    ) -> Result<PipelineLayout, LayoutError> {
        let stages = parse_stages(text)?;
        let pp_usize = pp.max(1) as usize;
        if !stages.len().is_multiple_of(pp_usize) {
            return Err(LayoutError::StagesNotMultipleOfPp {
                stages: stages.len(),
                pp,
            });
        }
        let derived = u32::try_from(stages.len() / pp_usize).unwrap_or(u32::MAX);
        if vp != 1 && vp != derived {
            return Err(LayoutError::VpDisagrees {
                stages: stages.len(),
                derived,
                pp,
                vp,
            });
        }
        let flat: Vec<Slot> = stages.iter().flatten().copied().collect();
        let count = |slot: Slot| flat.iter().filter(|&&s| s == slot).count() as u64;
        let placement = |msg: String| Err(LayoutError::Placement(msg));
        if count(Slot::Embedding) != 1 || stages[0].first() != Some(&Slot::Embedding) {
            return placement(
                "must hold the embedding `E` exactly once, first in the first virtual stage".into(),
            );
        }
        if count(Slot::Loss) != 1 || stages[stages.len() - 1].last() != Some(&Slot::Loss) {
            return placement(
                "must hold the loss `L` exactly once, last in the last virtual stage".into(),
            );
        }
        if count(Slot::Transformer) != layers {
            return placement(format!(
                "places {} transformer layers `t` but model.layers = {layers}",
                count(Slot::Transformer)
            ));
        }
        if count(Slot::Mtp) != mtp_layers {
            return placement(format!(
                "places {} multi-token prediction modules `m` but model.mtp_layers = {mtp_layers}",
                count(Slot::Mtp)
            ));
        }
        if let Some(first_mtp) = flat.iter().position(|&s| s == Slot::Mtp)
            && flat[first_mtp..].contains(&Slot::Transformer)
        {
            return placement(
                "places a transformer layer after a multi-token prediction module; decoder layers must come before MTP layers (Megatron-Core)".into(),
            );
        }
        let mut chunks = vec![vec![Vec::new(); derived as usize]; pp_usize];
        let (mut next_layer, mut next_mtp) = (0, layers);
        for (virtual_stage, slots) in stages.iter().enumerate() {
            let (chunk, stage) = (virtual_stage / pp_usize, virtual_stage % pp_usize);
            for slot in slots {
                let ids: &mut Vec<u64> = &mut chunks[stage][chunk];
                match slot {
                    Slot::Transformer => {
                        ids.push(next_layer);
                        next_layer += 1;
                    }
                    Slot::Mtp => {
                        ids.push(next_mtp);
                        next_mtp += 1;
                    }
                    Slot::Embedding | Slot::Loss => {}
                }
            }
        }
        Ok(PipelineLayout {
            vp: derived,
            chunks,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `parse_str_to_list`'s docstring example: "Ettt|(tt|)*29,m|L" is
    /// [E,t,t,t] + [t,t]*29 + [m] + [L]: 32 virtual stages.
    #[test]
    fn megatron_docstring_example() {
        let stages = parse_stages("Ettt|(tt|)*29,m|L").unwrap();
        assert_eq!(stages.len(), 32);
        assert_eq!(stages[0].len(), 4);
        assert_eq!(stages[30], vec![Slot::Mtp]);
        assert_eq!(stages[31], vec![Slot::Loss]);
        // On PP 16 that is VP 2: virtual stage 30 is chunk 1 of stage 14.
        let l = PipelineLayout::parse("Ettt|(tt|)*29,m|L", 16, 1, 61, 1).unwrap();
        assert_eq!(l.vp, 2);
        assert_eq!(l.chunks[0][0], vec![0, 1, 2]);
        assert_eq!(l.chunks[1][0], vec![3, 4]);
        assert_eq!(l.chunks[0][1], vec![33, 34]);
        assert_eq!(l.chunks[14][1], vec![61]);
        assert!(l.chunks[15][1].is_empty());
    }

    /// DeepSeek-V3 on PP 16 as in issue 16: `Et*4|(t*4|)*14tmL` is 4 + 56 + 1 = 61 layers.
    #[test]
    fn deepseek_v3_on_sixteen_stages() {
        let l = PipelineLayout::parse("Et*4|(t*4|)*14tmL", 16, 1, 61, 1).unwrap();
        assert_eq!(l.vp, 1);
        let counts: Vec<usize> = l.chunks.iter().map(|c| c[0].len()).collect();
        assert_eq!(counts[0], 4);
        assert!(counts[1..15].iter().all(|&c| c == 4));
        assert_eq!(l.chunks[15][0], vec![60, 61]);
    }

    #[test]
    fn bad_layouts_say_what_is_wrong() {
        let err = |text: &str, pp: u32, vp: u32, layers: u64, mtp: u64| {
            PipelineLayout::parse(text, pp, vp, layers, mtp)
                .unwrap_err()
                .to_string()
        };
        assert!(err("Etx|tL", 2, 1, 2, 0).contains("`x` is not a layout character"));
        assert!(err("Et|t|tL", 2, 1, 3, 0).contains("3 virtual stages"));
        assert!(err("Et|tL", 2, 2, 2, 0).contains("parallel.vp = 2"));
        assert!(err("tE|tL", 2, 1, 2, 0).contains("embedding `E` exactly once"));
        assert!(err("Et|Lt", 2, 1, 2, 0).contains("loss `L` exactly once"));
        assert!(err("Et|tL", 2, 1, 3, 0).contains("places 2 transformer layers"));
        assert!(err("Et|tL", 2, 1, 2, 1).contains("places 0 multi-token"));
        assert!(err("Em|tL", 2, 1, 1, 1).contains("decoder layers must come before MTP"));
        assert!(err("E(t|)*2*|L", 1, 1, 2, 0).contains("repeat"));
        assert!(err("E((t)*2)*2|L", 1, 1, 4, 0).contains("parentheses"));
        assert!(err("Et*999999999999|L", 1, 1, 1, 0).contains("more than"));
        assert!(err("E(t*4|)*999999999L", 1, 1, 1, 0).contains("more than"));
    }
}
