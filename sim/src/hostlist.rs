//! Slurm host lists (`host[0-15,32-47]`, `gpu[01-03,07],login`), bounded before they are
//! expanded.
//!
//! `hostlist_parser::parse` builds every name a list stands for before anything can look at
//! how many there are: `host[0-4000000000]` grows past 16 GB, and it reads a reversed range
//! (`host[3-1]`) as hosts 3, 2, 1 without a word. [`expand`] first scans the list's bracket
//! groups without allocating per name: it counts the names (a sum over the comma-separated
//! items of the product of each item's bracket groups, with saturating arithmetic), refuses a
//! reversed range and a count above the caller's limit, and bounds the length of every name
//! and the bracket groups per name. Only then does it call the crate, whose expansion is then
//! bounded too: at most `limit` names of at most [`MAX_NAME_CHARS`] characters each with at
//! most [`MAX_GROUPS`] bracket groups, about 2 KiB of memory per name at the very worst (the
//! crate keeps each combination of bracket entries, each name and a copy of it while it
//! removes repeats).
//!
//! The scan reads a superset of what the crate accepts (whitespace anywhere around a number,
//! a dash or a comma inside brackets), so a list the scan cannot read is one the crate refuses:
//! such a list goes on to the crate for its own error message, with nothing to expand.

/// The most characters a host name may have (a fully qualified DNS name has at most 255
/// octets, RFC 1035 §2.3.4).
pub const MAX_NAME_CHARS: u64 = 255;

/// The most bracket groups one name may have (`rack[0-3]-node[00-15]` has two; Slurm's own
/// host lists have at most five dimensions).
pub const MAX_GROUPS: usize = 8;

/// Why a host list is not expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostListError {
    #[error("`{list}`: the range `{range}` runs backwards; write it from low to high, `{fixed}`")]
    Reversed {
        list: String,
        range: String,
        fixed: String,
    },
    #[error("`{list}` names {} hosts, more than {limit_words}", count_words(*.count))]
    TooMany {
        list: String,
        count: u64,
        limit_words: String,
    },
    #[error(
        "`{list}` makes host names of up to {chars} characters; a host name has at most {MAX_NAME_CHARS}"
    )]
    NameTooLong { list: String, chars: u64 },
    #[error("`{list}`: `{item}` has {groups} bracket groups; a host name has at most {MAX_GROUPS}")]
    TooManyGroups {
        list: String,
        item: String,
        groups: usize,
    },
    #[error("`{list}` is not a Slurm host list ({why})")]
    Syntax { list: String, why: String },
}

fn count_words(count: u64) -> String {
    if count == u64::MAX {
        format!("at least {count}")
    } else {
        count.to_string()
    }
}

/// What [`scan`] learnt of a list without expanding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scan {
    /// The names the list expands to, repeats included (saturating at `u64::MAX`).
    pub names: u64,
    /// The longest name it makes, at most (whitespace around the names counted).
    pub longest: u64,
    /// The most bracket groups of one name.
    pub groups: usize,
}

/// One bracket group's entries: (how many names, widest entry in characters).
fn group(list: &str, body: &str) -> Result<Option<(u64, u64)>, HostListError> {
    let mut names = 0u64;
    let mut widest = 0u64;
    for piece in body.split(',') {
        let piece = piece.trim();
        let number = |s: &str| -> Option<u64> {
            let s = s.trim();
            if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            s.parse().ok()
        };
        match piece.split_once('-') {
            Some((a, b)) => {
                let (Some(low), Some(high)) = (number(a), number(b)) else {
                    return Ok(None);
                };
                let (a, b) = (a.trim(), b.trim());
                if low > high {
                    return Err(HostListError::Reversed {
                        list: list.to_string(),
                        range: format!("{a}-{b}"),
                        fixed: format!("{b}-{a}"),
                    });
                }
                names = names.saturating_add((high - low).saturating_add(1));
                widest = widest.max(a.len().max(b.len()) as u64);
            }
            None => {
                if number(piece).is_none() {
                    return Ok(None);
                }
                names = names.saturating_add(1);
                widest = widest.max(piece.len() as u64);
            }
        }
    }
    Ok(Some((names, widest)))
}

/// Counts the names `list` stands for without expanding it. `Ok(None)`: the list is not one
/// the scan can read (an unclosed or nested bracket, an entry that is not a number or a
/// range), and so not one `hostlist_parser` accepts. A reversed range is an error.
pub fn scan(list: &str) -> Result<Option<Scan>, HostListError> {
    let mut total = Scan {
        names: 0,
        longest: 0,
        groups: 0,
    };
    // Items are separated by commas outside brackets.
    let mut rest = list;
    loop {
        let mut names = 1u64;
        let mut chars = 0u64;
        let mut groups = 0usize;
        let end = loop {
            match rest.find(['[', ']', ',']) {
                None => {
                    chars += rest.chars().count() as u64;
                    break None;
                }
                Some(at) => {
                    chars += rest[..at].chars().count() as u64;
                    match rest.as_bytes()[at] {
                        b',' => break Some(at),
                        b']' => return Ok(None),
                        _ => {
                            let after = &rest[at + 1..];
                            let Some(close) = after.find(']') else {
                                return Ok(None);
                            };
                            let body = &after[..close];
                            if body.contains('[') {
                                return Ok(None);
                            }
                            let Some((n, widest)) = group(list, body)? else {
                                return Ok(None);
                            };
                            names = names.saturating_mul(n);
                            chars = chars.saturating_add(widest);
                            groups += 1;
                            rest = &after[close + 1..];
                        }
                    }
                }
            }
        };
        total.names = total.names.saturating_add(names);
        total.longest = total.longest.max(chars);
        total.groups = total.groups.max(groups);
        match end {
            Some(at) => rest = &rest[at + 1..],
            None => return Ok(Some(total)),
        }
    }
}

/// The item of `list` with the most bracket groups, for the error that names it.
fn item_with_groups(list: &str, groups: usize) -> String {
    let mut depth = 0usize;
    let mut start = 0;
    let mut items = Vec::new();
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                items.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&list[start..]);
    items
        .into_iter()
        .find(|item| item.matches('[').count() >= groups)
        .unwrap_or(list)
        .trim()
        .to_string()
}

/// The names of `list`, in its order, each once, after checking that it names at most
/// `limit` hosts (`limit_words` says what the limit is, e.g. "the cluster's 4 hosts").
pub fn expand(list: &str, limit: u64, limit_words: &str) -> Result<Vec<String>, HostListError> {
    if let Some(scan) = scan(list)? {
        if scan.names > limit {
            return Err(HostListError::TooMany {
                list: list.to_string(),
                count: scan.names,
                limit_words: limit_words.to_string(),
            });
        }
        if scan.groups > MAX_GROUPS {
            return Err(HostListError::TooManyGroups {
                list: list.to_string(),
                item: item_with_groups(list, scan.groups),
                groups: scan.groups,
            });
        }
        if scan.longest > MAX_NAME_CHARS {
            return Err(HostListError::NameTooLong {
                list: list.to_string(),
                chars: scan.longest,
            });
        }
    }
    hostlist_parser::parse(list).map_err(|e| HostListError::Syntax {
        list: list.to_string(),
        why: e
            .to_string()
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" "),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &str) -> u64 {
        scan(list).expect("scans").expect("readable").names
    }

    #[test]
    fn counts_products_of_groups_and_sums_of_items() {
        assert_eq!(names("host0"), 1);
        assert_eq!(names("host[0-15]"), 16);
        assert_eq!(names("host[0-15,32-47]"), 32);
        assert_eq!(names("gpu[01-03,07],login"), 5);
        assert_eq!(names("rack[0-3]-node[001-128]"), 512);
        assert_eq!(names("a[1-2],b[1-3]c[1-4], d"), 2 + 12 + 1);
        assert_eq!(names("host[ 1 - 3 , 5 ]"), 4);
        assert_eq!(
            names("h[0-18446744073709551615]"),
            u64::MAX,
            "saturates rather than overflows"
        );
        assert_eq!(
            names("h[0-4294967295][0-4294967295][0-4294967295]"),
            u64::MAX
        );
    }

    #[test]
    fn the_count_is_the_crates_count() {
        for list in [
            "host[0-15]",
            "gpu[01-03,07],login",
            "rack[0-3]-node[001-128]",
            "node[001-128]",
            "hostname[10,11-12,002-003,5].iml.com",
            "hostname[1,2-3].iml[2,3].com,hostname[4,5].iml[3,4].com",
            "a1, a2",
        ] {
            let expanded = hostlist_parser::parse(list).expect("a host list").len() as u64;
            assert_eq!(names(list), expanded, "{list}");
            assert!(
                hostlist_parser::parse(list)
                    .expect("a host list")
                    .iter()
                    .all(|n| n.chars().count() as u64
                        <= scan(list).expect("scans").expect("readable").longest),
                "{list}"
            );
        }
    }

    #[test]
    fn zero_padded_ranges_keep_their_width() {
        let hosts = expand("node[001-128]", 128, "128").expect("expands");
        assert_eq!(hosts.len(), 128);
        assert_eq!(hosts[0], "node001");
        assert_eq!(hosts[127], "node128");
        assert_eq!(scan("node[001-128]").unwrap().unwrap().longest, 7);
    }

    #[test]
    fn a_huge_range_is_refused_before_it_is_expanded() {
        let err = expand("host[0-4000000000]", 4, "the cluster's 4 hosts").unwrap_err();
        assert_eq!(
            err.to_string(),
            "`host[0-4000000000]` names 4000000001 hosts, more than the cluster's 4 hosts"
        );
        let err = expand("h[0-9][0-9][0-9]", 999, "999").unwrap_err();
        assert!(matches!(err, HostListError::TooMany { count: 1000, .. }));
        let err = expand("h[0-18446744073709551615][0-9]", 10, "10").unwrap_err();
        assert!(
            err.to_string().contains("at least 18446744073709551615"),
            "{err}"
        );
    }

    #[test]
    fn a_reversed_range_is_refused() {
        let err = expand("host[3-1]", 100, "100").unwrap_err();
        assert_eq!(
            err.to_string(),
            "`host[3-1]`: the range `3-1` runs backwards; write it from low to high, `1-3`"
        );
        let err = expand("n[07-03]", 100, "100").unwrap_err();
        assert!(err.to_string().contains("`03-07`"), "{err}");
    }

    #[test]
    fn long_names_and_many_groups_are_refused() {
        let long = format!("{}[0-1]", "a".repeat(255));
        assert!(matches!(
            expand(&long, 10, "10"),
            Err(HostListError::NameTooLong { chars: 256, .. })
        ));
        assert!(expand(&"a".repeat(255), 10, "10").is_ok());
        let many = "h[0][0][0][0][0][0][0][0][0],x";
        let err = expand(many, 10, "10").unwrap_err();
        assert_eq!(
            err.to_string(),
            "`h[0][0][0][0][0][0][0][0][0],x`: `h[0][0][0][0][0][0][0][0][0]` has 9 bracket groups; a host name has at most 8"
        );
        assert!(expand("h[0][0][0][0][0][0][0][0]", 10, "10").is_ok());
    }

    #[test]
    fn what_the_scan_cannot_read_the_crate_refuses() {
        for list in [
            "host[0-",
            "host[[0]]",
            "host]",
            "host[a-b]",
            "host[1-2-3]",
            "host[99999999999999999999]",
            "host[]",
            "host[1,,2]",
        ] {
            assert_eq!(scan(list), Ok(None), "{list}");
            assert!(
                matches!(expand(list, 10, "10"), Err(HostListError::Syntax { .. })),
                "{list}"
            );
        }
        let err = expand("host[0-", 10, "10").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("`host[0-` is not a Slurm host list (Parse error at 6"),
            "{err}"
        );
    }
}
