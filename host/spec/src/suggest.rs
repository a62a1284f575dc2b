//! "Did you mean" hints for names that are not known: a node an edge
//! points at, a channel a node writes, a key of a run's input.
//!
//! `did_you_mean` picks the known name closest to the unknown one by edit
//! distance (Levenshtein with swaps, over characters, plus a
//! case-insensitive match),
//! and [`hint`] renders it for the end of a message. Names come from
//! guests and callers, so both the compared lengths and the number of
//! candidates are bounded: a hint is a courtesy and must stay cheap.

/// Longest name (in characters) compared: real node and channel names are
/// short identifiers, and the distance costs the product of both lengths.
/// Longer names get no hint.
pub const MAX_SUGGEST_LEN: usize = 64;

/// Most candidates compared for one hint; a spec has at most
/// [`MAX_NODES`](crate::MAX_NODES) nodes and [`MAX_CHANNELS`](crate::MAX_CHANNELS)
/// channels, so this never cuts a real graph short.
pub const MAX_SUGGEST_CANDIDATES: usize = 512;

/// The candidate closest to `unknown`, if one is close enough to be the
/// name that was meant: the same name in another case, or at most one edit
/// per four characters, rounded up (`minItems` is three edits from `items`
/// but not a typo of it). Ties go to the first candidate.
pub(crate) fn did_you_mean<'a, I>(unknown: &str, candidates: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    let wanted: Vec<char> = unknown.chars().take(MAX_SUGGEST_LEN + 1).collect();
    if wanted.is_empty() || wanted.len() > MAX_SUGGEST_LEN {
        return None;
    }
    let budget = wanted.len().div_ceil(4);
    let mut best: Option<(usize, &str)> = None;
    for candidate in candidates.into_iter().take(MAX_SUGGEST_CANDIDATES) {
        if candidate == unknown || candidate.chars().count() > MAX_SUGGEST_LEN {
            continue;
        }
        let distance = if candidate.to_lowercase() == unknown.to_lowercase() {
            0
        } else {
            edit_distance(&wanted, candidate)
        };
        if distance <= budget && best.is_none_or(|(d, _)| distance < d) {
            best = Some((distance, candidate));
        }
    }
    best.map(|(_, name)| name)
}

/// `"; did you mean \"name\"?"` for the closest candidate, or nothing: for
/// the end of a message that names `unknown`.
pub fn hint<'a, I>(unknown: &str, candidates: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    match did_you_mean(unknown, candidates) {
        Some(name) => format!("; did you mean {name:?}?"),
        None => String::new(),
    }
}

/// `" (did you mean \"name\"?)"` for the closest candidate, or nothing:
/// for a name inside a list or a message that goes on after it.
pub fn aside<'a, I>(unknown: &str, candidates: I) -> String
where
    I: IntoIterator<Item = &'a str>,
{
    match did_you_mean(unknown, candidates) {
        Some(name) => format!(" (did you mean {name:?}?)"),
        None => String::new(),
    }
}

/// Edit distance between `a` and `b` in characters, counting insertions,
/// deletions, substitutions and swaps of two neighbours (the optimal
/// string alignment distance: `tpoic` is one edit from `topic`). Both are
/// at most [`MAX_SUGGEST_LEN`] long.
fn edit_distance(a: &[char], b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut previous: Vec<usize> = (0..=b.len()).collect();
    let mut current = vec![0; b.len() + 1];
    for (i, ca) in a.iter().enumerate() {
        current[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = previous[j] + usize::from(ca != cb);
            let mut best = substitution.min(previous[j + 1] + 1).min(current[j] + 1);
            let swapped = i > 0 && j > 0 && a[i - 1] == *cb && b[j - 1] == *ca;
            if swapped {
                best = best.min(before[j - 1] + 1);
            }
            current[j + 1] = best;
        }
        std::mem::swap(&mut before, &mut previous);
        std::mem::swap(&mut previous, &mut current);
    }
    previous[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance() {
        let d = |a: &str, b: &str| edit_distance(&a.chars().collect::<Vec<_>>(), b);
        assert_eq!(d("kitten", "sitting"), 3);
        assert_eq!(d("", "abc"), 3);
        assert_eq!(d("abc", ""), 3);
        assert_eq!(d("tags", "tgas"), 1);
        assert_eq!(d("ca", "abc"), 3);
        assert_eq!(d("héllo", "hello"), 1);
    }

    #[test]
    fn suggests_the_closest_name() {
        let names = ["topic", "tags", "log", "summary"];
        assert_eq!(did_you_mean("tpoic", names), Some("topic"));
        assert_eq!(did_you_mean("tag", names), Some("tags"));
        assert_eq!(did_you_mean("Summary", names), Some("summary"));
        assert_eq!(did_you_mean("sumary", names), Some("summary"));
        assert_eq!(did_you_mean("lgo", names), Some("log"));
        assert_eq!(
            did_you_mean("lxx", names),
            None,
            "two edits on three characters"
        );
        assert_eq!(did_you_mean("nothing_alike", names), None);
        assert_eq!(did_you_mean("", names), None);
        assert_eq!(
            did_you_mean("topic", names),
            None,
            "a known name is not a typo"
        );
        assert_eq!(did_you_mean("__end", ["a", "__end__"]), Some("__end__"));
        // Ties go to the first candidate.
        assert_eq!(did_you_mean("ab", ["aa", "bb"]), Some("aa"));
    }

    #[test]
    fn long_names_get_no_hint() {
        let long = "n".repeat(MAX_SUGGEST_LEN + 1);
        let near = "n".repeat(MAX_SUGGEST_LEN);
        assert_eq!(did_you_mean(&long, [near.as_str()]), None);
        assert_eq!(did_you_mean(&near[1..], [long.as_str()]), None);
        assert_eq!(
            did_you_mean(&near[1..], [near.as_str()]),
            Some(near.as_str())
        );
    }

    #[test]
    fn hint_text() {
        assert_eq!(hint("tpoic", ["topic"]), "; did you mean \"topic\"?");
        assert_eq!(hint("zzz", ["topic"]), "");
        assert_eq!(aside("tpoic", ["topic"]), " (did you mean \"topic\"?)");
        assert_eq!(aside("zzz", ["topic"]), "");
    }
}
