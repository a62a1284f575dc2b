//! Property tests of the lossless JSON reader, an untrusted parser: every
//! value serde_json writes (within the lossless rules) reads back as
//! serde_json reads it; no text makes it panic; a bounded parse never takes
//! more than its budget plus one chunk.
//!
//! Cases: `SANDGRAPH_PROPTEST_CASES` (default 256). The RNG seed is fixed so
//! CI runs the same cases every time; `SANDGRAPH_PROPTEST_SEED` picks another.

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, RngSeed};
use serde_json::{Map, Number, Value};

use super::*;

/// Cases per property: `SANDGRAPH_PROPTEST_CASES`, 256 when unset.
fn cases() -> u32 {
    std::env::var("SANDGRAPH_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(256)
}

/// A fixed seed unless `SANDGRAPH_PROPTEST_SEED` names another.
fn seed() -> u64 {
    std::env::var("SANDGRAPH_PROPTEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5a4d_6772_6170_6801)
}

fn config() -> Config {
    Config {
        cases: cases(),
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed()),
        ..Config::default()
    }
}

/// Strings of any characters, control characters and astral ones included,
/// at most 12 of them (48 bytes: far below one grant chunk).
fn any_text() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..12).prop_map(String::from_iter)
}

/// Keys: mostly a few short names, so objects built from pairs often repeat
/// one (the map keeps it once), sometimes any text.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(vec!["a", "b", "c", "a b", "", "\u{0}", "é"]).prop_map(str::to_owned),
        2 => any_text(),
    ]
}

/// Finite floats but `-0.0` (lossless JSON refuses it); integral floats
/// beyond 2^63 included, since the reader checks those against the text.
fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        any::<f64>(),
        -1e25..1e25f64,
        (-1e4..1e4f64).prop_map(f64::trunc),
        prop::sample::select(vec![
            9_223_372_036_854_775_808.0,
            -9_223_372_036_854_775_808.0,
            18_446_744_073_709_551_616.0,
            1e300,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            0.0,
        ]),
    ]
    .prop_filter("finite", |f| f.is_finite())
    .prop_map(|f| if f == 0.0 { 0.0 } else { f })
}

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        (-MAX_SAFE_INTEGER..=MAX_SAFE_INTEGER).prop_map(Value::from),
        prop::sample::select(vec![MAX_SAFE_INTEGER, -MAX_SAFE_INTEGER, 0, -1])
            .prop_map(Value::from),
        float().prop_map(|f| Value::Number(Number::from_f64(f).expect("finite"))),
        any_text().prop_map(Value::String),
    ]
}

/// Lossless JSON values: arrays and objects nested up to 6 deep, keys
/// unique (a [`Map`] holds each once).
fn lossless_value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..8)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect::<Map<_, _>>())),
        ]
    })
}

/// The text serde_json writes for `value`, compact or pretty.
fn written(value: &Value, pretty: bool) -> String {
    if pretty {
        serde_json::to_string_pretty(value).expect("a value serializes")
    } else {
        serde_json::to_string(value).expect("a value serializes")
    }
}

/// Text that is nearly JSON: its characters.
fn jsonish() -> impl Strategy<Value = String> {
    let alphabet: Vec<char> = "[]{}\",: \n\t\\/-+.0123456789eEtrufalsnNIiy\u{0}\u{1f}é\u{1F600}"
        .chars()
        .collect();
    prop::collection::vec(prop::sample::select(alphabet), 0..48).prop_map(String::from_iter)
}

/// One edit of a text: replace, insert or delete the character at a place.
#[derive(Debug, Clone)]
enum Edit {
    Replace(Index, char),
    Insert(Index, char),
    Delete(Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    let c = prop_oneof![
        prop::sample::select("[]{}\",:-.0eE\\u9n".chars().collect::<Vec<_>>()),
        any::<char>(),
    ];
    prop_oneof![
        (any::<Index>(), c.clone()).prop_map(|(i, c)| Edit::Replace(i, c)),
        (any::<Index>(), c).prop_map(|(i, c)| Edit::Insert(i, c)),
        any::<Index>().prop_map(Edit::Delete),
    ]
}

fn apply(text: &str, edits: &[Edit]) -> String {
    let mut chars: Vec<char> = text.chars().collect();
    for e in edits {
        match e {
            Edit::Replace(i, c) if !chars.is_empty() => {
                let at = i.index(chars.len());
                chars[at] = *c;
            }
            Edit::Insert(i, c) => {
                let at = i.index(chars.len() + 1);
                chars.insert(at, *c);
            }
            Edit::Delete(i) if !chars.is_empty() => {
                let at = i.index(chars.len());
                chars.remove(at);
            }
            _ => {}
        }
    }
    chars.into_iter().collect()
}

/// Texts no one vetted: any characters, near-JSON, serde_json's output cut
/// short or edited, and bytes read as UTF-8 lossily.
fn untrusted_text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::collection::vec(any::<char>(), 0..32).prop_map(String::from_iter),
        jsonish(),
        (lossless_value(), any::<bool>(), any::<Index>()).prop_map(|(v, pretty, cut)| {
            let text = written(&v, pretty);
            let chars: Vec<char> = text.chars().collect();
            chars[..cut.index(chars.len() + 1)].iter().collect()
        }),
        (
            lossless_value(),
            any::<bool>(),
            prop::collection::vec(edit(), 1..4)
        )
            .prop_map(|(v, pretty, edits)| apply(&written(&v, pretty), &edits)),
        prop::collection::vec(any::<u8>(), 0..48)
            .prop_map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
    ]
}

/// Every ask to the grant callback, in order, and whether it was granted.
#[derive(Default)]
struct Grants {
    asks: Vec<(usize, bool)>,
    total: usize,
}

impl Grants {
    fn granted(&self) -> usize {
        self.total
    }

    /// Whether any ask came after a refusal.
    fn asked_after_refusal(&self) -> bool {
        self.asks
            .iter()
            .position(|&(_, ok)| !ok)
            .is_some_and(|at| at + 1 < self.asks.len())
    }
}

/// Parses with a callback that grants every ask while less than `budget`
/// was granted, whatever its size, and refuses from then on.
fn parse_refusing_after(text: &str, budget: usize) -> (Result<Bounded, BoundedError>, Grants) {
    let mut grants = Grants::default();
    let mut grant = |n: usize| {
        let ok = grants.total < budget;
        if ok {
            grants.total += n;
        }
        grants.asks.push((n, ok));
        ok
    };
    let r = parse_lossless_within(text, "t", &mut grant);
    (r, grants)
}

/// Parses with a callback that refuses any ask that would pass `budget`.
fn parse_strictly_within(text: &str, budget: usize) -> (Result<Bounded, BoundedError>, usize) {
    let mut total = 0usize;
    let mut grant = |n: usize| {
        let ok = total.saturating_add(n) <= budget;
        if ok {
            total += n;
        }
        ok
    };
    let r = parse_lossless_within(text, "t", &mut grant);
    (r, total)
}

/// A text that grows ~30x when parsed: an array of `n` zeros, or of `n`
/// empty objects, or an object of `n` members.
fn blow_up() -> impl Strategy<Value = String> {
    (0usize..20_000, 0u8..3).prop_map(|(n, kind)| match kind {
        0 => format!("[{}]", vec!["0"; n].join(",")),
        1 => format!("[{}]", vec!["{}"; n].join(",")),
        _ => {
            let members: Vec<String> = (0..n).map(|i| format!("\"{i}\":null")).collect();
            format!("{{{}}}", members.join(","))
        }
    })
}

proptest! {
    #![proptest_config(config())]

    /// Whatever serde_json writes of a lossless value, both readers give
    /// back what serde_json reads (and that is the value written).
    #[test]
    fn written_values_read_back_as_serde_json_reads_them(
        value in lossless_value(),
        pretty in any::<bool>(),
    ) {
        let text = written(&value, pretty);
        let reference: Value = serde_json::from_str(&text).expect("serde_json reads its own output");
        prop_assert_eq!(&reference, &value);
        prop_assert_eq!(parse_lossless(&text, "t"), Ok(reference.clone()));
        let (bounded, grants) = parse_refusing_after(&text, usize::MAX);
        let bounded = bounded.expect("an unlimited budget never refuses");
        prop_assert_eq!(&bounded.value, &reference);
        prop_assert_eq!(bounded.granted, grants.granted());
        prop_assert!(bounded.granted >= value_cost(&bounded.value));
        prop_assert!(check_lossless(&bounded.value).is_ok());
    }

    /// No text makes either reader panic; what they accept, serde_json reads
    /// to the same value, and the bounded reader with an unlimited budget
    /// answers exactly as the unbounded one.
    #[test]
    fn untrusted_text_never_panics_and_accepted_text_agrees_with_serde_json(
        text in untrusted_text(),
    ) {
        let plain = parse_lossless(&text, "t");
        let (bounded, grants) = parse_refusing_after(&text, usize::MAX);
        match (&plain, &bounded) {
            (Ok(value), Ok(b)) => {
                prop_assert_eq!(&b.value, value);
                prop_assert_eq!(b.granted, grants.granted());
                let reference: Result<Value, _> = serde_json::from_str(&text);
                prop_assert!(reference.is_ok(), "accepted {:?}, serde_json refuses it", text);
                prop_assert_eq!(&reference.unwrap(), value);
                prop_assert!(check_lossless(value).is_ok());
            }
            (Err(e), Err(BoundedError::Json(f))) => prop_assert_eq!(e, f),
            _ => prop_assert!(false, "{:?}: parse_lossless {:?}, within {:?}", text, plain, bounded),
        }
    }

    /// A callback that refuses once `budget` bytes were granted: the total
    /// granted never passes the budget by more than one chunk, nothing is
    /// asked after the refusal, and the parse fails for the budget exactly
    /// when the value costs more than the budget.
    #[test]
    fn a_refusing_grant_bounds_the_total_to_the_budget_plus_one_chunk(
        text in prop_oneof![
            lossless_value().prop_map(|v| written(&v, false)),
            blow_up(),
        ],
        permille in 0usize..=2_000,
    ) {
        let reference: Value = serde_json::from_str(&text).expect("valid json");
        let cost = value_cost(&reference);
        let budget = cost / 1000 * permille + cost % 1000 * permille / 1000;
        let (r, grants) = parse_refusing_after(&text, budget);
        prop_assert!(
            grants.granted() <= budget + GRANT_CHUNK,
            "granted {} for a budget of {}", grants.granted(), budget
        );
        prop_assert!(grants.asks.iter().all(|&(n, _)| n <= GRANT_CHUNK));
        prop_assert!(!grants.asked_after_refusal());
        prop_assert!(cost > budget || r.is_ok(), "a value of cost {} refused within {}", cost, budget);
        match r {
            Ok(b) => {
                prop_assert_eq!(&b.value, &reference);
                prop_assert_eq!(b.granted, grants.granted());
                prop_assert!(b.granted >= cost);
            }
            Err(BoundedError::OverBudget { granted }) => {
                prop_assert_eq!(granted, grants.granted());
                prop_assert!(cost > budget, "refused at {} a value of cost {} within {}", granted, cost, budget);
            }
            Err(BoundedError::Json(e)) => prop_assert!(false, "valid json refused: {}", e),
        }

        let (r, total) = parse_strictly_within(&text, budget);
        prop_assert!(total <= budget);
        match r {
            Ok(b) => {
                prop_assert_eq!(b.granted, total);
                prop_assert!(cost <= total);
            }
            Err(BoundedError::OverBudget { granted }) => prop_assert_eq!(granted, total),
            Err(BoundedError::Json(e)) => prop_assert!(false, "valid json refused: {}", e),
        }
    }
}
