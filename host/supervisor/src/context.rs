//! The supervisor's context budget (seed-contracts §2.11: "on context
//! overflow there is one compaction, then one bounded partial delivery").
//!
//! A supervisor turn's conversation is the system prompt, the turn's
//! opening message (a wake, or the goal) and the model's tool calls with
//! their results. Before every model call its size is estimated; when it is
//! over the budget, or when the provider refuses it as over the model's
//! context, the conversation is compacted, once per turn:
//!
//! * every tool call of the turn so far and its result are replaced by a
//!   digest (one line per call: the tool, its arguments and the first line
//!   of its result, cut); the graph's state is durable, so
//!   `view_agent_graph` shows again whatever the digest leaves out;
//! * the opening message becomes a bounded partial one: its list (the
//!   wake's records, the goal's workers) keeps as many entries, in order,
//!   as fit in half the budget, and an `Omitted: records=N (...)` line,
//!   worded as the view's `Omitted:` line, says how many were left out.
//!
//! Half the budget, so that the rest of the turn has room. A conversation
//! still over the budget after its compaction, or refused again by the
//! provider, ends the turn with [`crate::SuperviseError::ContextOverflow`].

use sandgraph_llm::{ChatRequest, LlmError, Message, ToolSpec};

/// Why a supervisor turn's conversation cannot fit the context budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ContextError {
    /// Over the budget again after the turn's one compaction.
    #[error(
        "the conversation needs about {estimate} tokens after its compaction, over the context budget of {budget} tokens"
    )]
    OverAfterCompaction {
        /// The estimated tokens of the request.
        estimate: u64,
        /// The budget.
        budget: u64,
    },
    /// The provider refused the conversation as over the model's context
    /// after its compaction (the provider's error, in words).
    #[error("the model refused the compacted conversation as over its context: {0}")]
    RefusedCompacted(String),
    /// Over the budget even with the compaction's digest and the fewest
    /// entries of the opening.
    #[error(
        "the conversation needs about {estimate} tokens even compacted, with {omitted} of its {total} {kind} left out, over the context budget of {budget} tokens"
    )]
    OverEvenCompacted {
        /// The estimated tokens of the compacted request.
        estimate: u64,
        /// The entries of the opening left out.
        omitted: usize,
        /// The entries of the opening.
        total: usize,
        /// What the entries are ("work items", ...).
        kind: &'static str,
        /// The budget.
        budget: u64,
    },
}

/// The default context budget of a supervisor request, in estimated tokens
/// (see [`estimate_tokens`]): under the window of the hosted models that
/// call tools well (32 K and more), with room for their replies.
pub const DEFAULT_CONTEXT_BUDGET_TOKENS: u64 = 24_000;

/// Bytes counted as one token by [`estimate_tokens`].
pub const BYTES_PER_TOKEN: u64 = 4;

/// Digest lines of a compaction; further calls are counted on one line.
const DIGEST_MAX_CALLS: usize = 32;

/// Characters of a call's arguments, and of its result's first line, in
/// the digest.
const DIGEST_MAX_CHARS: usize = 160;

/// The estimated size of `request` in tokens: the bytes of its messages
/// and tool definitions as JSON, one token per [`BYTES_PER_TOKEN`] bytes,
/// rounded up. An estimate, not a tokenizer's count: English text runs
/// about four bytes a token, while text in other scripts may take more
/// tokens than this counts.
pub fn estimate_tokens(request: &ChatRequest) -> u64 {
    let bytes = json_len(&request.messages) + json_len(&request.tools);
    bytes.div_ceil(BYTES_PER_TOKEN)
}

fn json_len<T: serde::Serialize>(value: &T) -> u64 {
    serde_json::to_vec(value).map_or(0, |bytes| bytes.len() as u64)
}

/// The opening message of a turn, in parts: a bounded partial one leaves
/// out the last entries of its list.
#[derive(Debug, Clone)]
pub(crate) struct Brief {
    /// Text before the list.
    pub head: String,
    /// The entries, each a line ending in `\n`.
    pub items: Vec<String>,
    /// Text in place of an empty list.
    pub empty: &'static str,
    /// Text after the list.
    pub tail: String,
    /// What the entries are, as the `Omitted:` line names them.
    pub kind: &'static str,
    /// Where the model finds the entries left out.
    pub hint: &'static str,
}

impl Brief {
    /// The whole message.
    pub fn text(&self) -> String {
        self.partial(self.items.len())
    }

    /// The message with the first `kept` entries and an `Omitted:` line
    /// counting the others.
    pub fn partial(&self, kept: usize) -> String {
        let kept = kept.min(self.items.len());
        let mut s = self.head.clone();
        if self.items.is_empty() {
            s.push_str(self.empty);
        }
        for item in &self.items[..kept] {
            s.push_str(item);
        }
        let omitted = self.items.len() - kept;
        if omitted > 0 {
            s.push_str(&format!(
                "Omitted: {}={omitted} (left out to fit the context budget; {})\n",
                self.kind, self.hint
            ));
        }
        s.push_str(&self.tail);
        s
    }
}

/// What a compaction did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Compaction {
    /// The estimated tokens of the conversation that did not fit.
    pub estimated_tokens: u64,
    /// The budget it was compacted to.
    pub budget_tokens: u64,
    /// Tool calls replaced by the digest.
    pub digested_calls: usize,
    /// Entries left out of the opening message.
    pub omitted: usize,
    /// Whether the provider reported the overflow (rather than the
    /// estimate).
    pub reported: bool,
}

/// One supervisor turn's conversation under its context budget.
#[derive(Debug)]
pub(crate) struct Conversation {
    model: String,
    tools: Vec<ToolSpec>,
    system: String,
    brief: Brief,
    opening: String,
    exchanges: Vec<Message>,
    budget: u64,
    compaction: Option<Compaction>,
}

impl Conversation {
    /// A turn opening with `brief`, over `budget` estimated tokens.
    pub fn new(
        model: String,
        tools: Vec<ToolSpec>,
        system: String,
        brief: Brief,
        budget: u64,
    ) -> Self {
        Conversation {
            model,
            tools,
            system,
            opening: brief.text(),
            brief,
            exchanges: Vec::new(),
            budget,
            compaction: None,
        }
    }

    /// The next request.
    pub fn request(&self) -> ChatRequest {
        let mut messages = Vec::with_capacity(self.exchanges.len() + 2);
        messages.push(Message::System {
            content: self.system.clone(),
        });
        messages.push(Message::User {
            content: self.opening.clone(),
        });
        messages.extend(self.exchanges.iter().cloned());
        ChatRequest {
            model: self.model.clone(),
            messages,
            tools: self.tools.clone(),
            temperature: None,
            max_tokens: None,
        }
    }

    /// Appends a message of the model or a tool result.
    pub fn push(&mut self, message: Message) {
        self.exchanges.push(message);
    }

    /// Makes the next request fit the budget, compacting the conversation
    /// when it does not and it was not compacted yet; `Some` when it
    /// compacted now. The error says why it cannot fit.
    pub fn fit(&mut self) -> Result<Option<Compaction>, ContextError> {
        let estimate = estimate_tokens(&self.request());
        if estimate <= self.budget {
            return Ok(None);
        }
        if self.compaction.is_some() {
            return Err(ContextError::OverAfterCompaction {
                estimate,
                budget: self.budget,
            });
        }
        self.compact(estimate, self.budget, false).map(Some)
    }

    /// The provider refused the next request as over the model's context
    /// (`error`): compacts it to half its estimated size (or the budget,
    /// when smaller), unless it was compacted already.
    pub fn refused(&mut self, error: &LlmError) -> Result<Compaction, ContextError> {
        if self.compaction.is_some() {
            return Err(ContextError::RefusedCompacted(error.to_string()));
        }
        let estimate = estimate_tokens(&self.request());
        self.budget = self.budget.min(estimate / 2);
        self.compact(estimate, self.budget, true)
    }

    /// The one compaction of the turn: the exchanges become a digest, the
    /// opening keeps the entries that fit in half the budget.
    fn compact(
        &mut self,
        estimate: u64,
        budget: u64,
        reported: bool,
    ) -> Result<Compaction, ContextError> {
        let (digest, digested_calls) = digest(&self.exchanges);
        self.exchanges.clear();
        let kept = self.most_kept_within(budget / 2, &digest);
        self.opening = opening(&self.brief, kept, &digest);
        let compaction = Compaction {
            estimated_tokens: estimate,
            budget_tokens: budget,
            digested_calls,
            omitted: self.brief.items.len() - kept,
            reported,
        };
        self.compaction = Some(compaction);
        let after = estimate_tokens(&self.request());
        if after > budget {
            return Err(ContextError::OverEvenCompacted {
                estimate: after,
                omitted: compaction.omitted,
                total: self.brief.items.len(),
                kind: self.brief.kind,
                budget,
            });
        }
        Ok(compaction)
    }

    /// The most entries of the opening (with `digest`) whose request takes
    /// at most `target` estimated tokens; 0 when none fits. The estimate
    /// grows with the entries kept, so this searches by halves.
    fn most_kept_within(&mut self, target: u64, digest: &str) -> usize {
        let fits = |this: &mut Self, kept: usize| {
            this.opening = opening(&this.brief, kept, digest);
            estimate_tokens(&this.request()) <= target
        };
        let (mut low, mut high) = (0, self.brief.items.len());
        if fits(self, high) {
            return high;
        }
        // Invariant: `high` does not fit; `low` fits or is 0.
        while high - low > 1 {
            let mid = low + (high - low) / 2;
            if fits(self, mid) {
                low = mid;
            } else {
                high = mid;
            }
        }
        low
    }
}

/// The opening message keeping `kept` entries, followed by the digest.
fn opening(brief: &Brief, kept: usize, digest: &str) -> String {
    let mut s = brief.partial(kept);
    if !digest.is_empty() {
        s.push_str("\n\n");
        s.push_str(digest);
    }
    s
}

/// The digest of a turn's exchanges and the number of tool calls in it;
/// empty when the model called no tool yet.
fn digest(exchanges: &[Message]) -> (String, usize) {
    let calls: Vec<(&str, &str, &str)> = exchanges
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { tool_calls, .. } => Some(tool_calls),
            _ => None,
        })
        .flatten()
        .map(|call| {
            let result = exchanges.iter().find_map(|m| match m {
                Message::Tool {
                    tool_call_id,
                    content,
                } if *tool_call_id == call.id => Some(content.as_str()),
                _ => None,
            });
            (
                call.name.as_str(),
                call.arguments.as_str(),
                result.unwrap_or(""),
            )
        })
        .collect();
    if calls.is_empty() {
        return (String::new(), 0);
    }
    let mut s = format!(
        "Compacted to fit the context budget: the results of your {} earlier tool calls in this turn are left out (the graph's state is durable: view_agent_graph shows it). The calls, in order:\n",
        calls.len()
    );
    for (name, arguments, result) in calls.iter().take(DIGEST_MAX_CALLS) {
        s.push_str(&format!(
            "- {name} {} -> {}\n",
            cut(arguments),
            cut(result.lines().next().unwrap_or(""))
        ));
    }
    if calls.len() > DIGEST_MAX_CALLS {
        s.push_str(&format!("- and {} more\n", calls.len() - DIGEST_MAX_CALLS));
    }
    (s, calls.len())
}

/// `text` on one line, at most [`DIGEST_MAX_CHARS`] characters.
fn cut(text: &str) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= DIGEST_MAX_CHARS {
        return flat;
    }
    let mut s: String = flat.chars().take(DIGEST_MAX_CHARS).collect();
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use sandgraph_llm::ToolCall;

    fn brief(n: usize) -> Brief {
        Brief {
            head: "Agent graph g: the wave settled. New records:\n".to_owned(),
            items: (0..n)
                .map(|i| format!("- graph_record_{i}: {}\n", "x".repeat(400)))
                .collect(),
            empty: "none\n",
            tail: "0 work items are still pending.".to_owned(),
            kind: "records",
            hint: "view_agent_graph lists every record",
        }
    }

    fn conversation(n: usize, budget: u64) -> Conversation {
        Conversation::new("m".into(), Vec::new(), "sys".into(), brief(n), budget)
    }

    fn view_exchange(c: &mut Conversation, id: &str, result: &str) {
        c.push(Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "view_agent_graph".into(),
                arguments: r#"{"graphId":"g"}"#.into(),
            }],
        });
        c.push(Message::Tool {
            tool_call_id: id.into(),
            content: result.into(),
        });
    }

    #[test]
    fn the_estimate_is_the_json_bytes_over_four_rounded_up() {
        let request = conversation(0, 1).request();
        let bytes = serde_json::to_vec(&request.messages).unwrap().len()
            + serde_json::to_vec(&request.tools).unwrap().len();
        assert_eq!(estimate_tokens(&request), (bytes as u64).div_ceil(4));
    }

    #[test]
    fn under_budget_the_conversation_is_unchanged() {
        let mut c = conversation(10, 1);
        let whole = estimate_tokens(&c.request());
        c.budget = whole;
        assert_eq!(c.fit(), Ok(None));
        assert_eq!(c.opening, c.brief.text());
        assert!(!c.opening.contains("Omitted"));
    }

    #[test]
    fn one_compaction_digests_the_calls_and_bounds_the_opening() {
        let mut c = conversation(40, 4_000);
        view_exchange(
            &mut c,
            "c1",
            &format!("Agent graph g\n{}", "y".repeat(9_000)),
        );
        view_exchange(&mut c, "c2", "Agent graph g again");
        let before = estimate_tokens(&c.request());
        let compaction = c.fit().unwrap().expect("over budget: compacted");
        assert_eq!(compaction.estimated_tokens, before);
        assert_eq!(compaction.digested_calls, 2);
        assert!(!compaction.reported);
        let request = c.request();
        assert_eq!(request.messages.len(), 2, "the exchanges are digested");
        assert!(estimate_tokens(&request) <= 2_000, "half the budget");
        let Message::User { content } = &request.messages[1] else {
            panic!("the opening is a user message");
        };
        let kept = 40 - compaction.omitted;
        assert!(kept > 0 && compaction.omitted > 0, "{compaction:?}");
        assert!(content.contains(&format!("graph_record_{}:", kept - 1)));
        assert!(!content.contains(&format!("graph_record_{kept}:")));
        assert!(content.contains(&format!(
            "Omitted: records={} (left out to fit the context budget; view_agent_graph lists every record)\n",
            compaction.omitted
        )));
        assert!(content.contains("the results of your 2 earlier tool calls"));
        assert!(content.contains("- view_agent_graph {\"graphId\":\"g\"} -> Agent graph g\n"));
        assert!(!content.contains("yyy"), "results are left out");
        // One entry more would not have fit.
        let more = opening(&c.brief, kept + 1, &digest_of_two());
        c.opening = more;
        assert!(estimate_tokens(&c.request()) > 2_000);
    }

    fn digest_of_two() -> String {
        let mut c = conversation(0, 1);
        view_exchange(
            &mut c,
            "c1",
            &format!("Agent graph g\n{}", "y".repeat(9_000)),
        );
        view_exchange(&mut c, "c2", "Agent graph g again");
        digest(&c.exchanges).0
    }

    #[test]
    fn a_second_overflow_is_an_error() {
        let mut c = conversation(4, 1_000);
        assert_eq!(c.fit(), Ok(None));
        view_exchange(&mut c, "c1", &"z".repeat(8_000));
        assert_eq!(c.fit().unwrap().unwrap().digested_calls, 1);
        view_exchange(&mut c, "c2", &"z".repeat(8_000));
        let err = c.fit().unwrap_err();
        assert!(
            matches!(err, ContextError::OverAfterCompaction { budget: 1000, .. }),
            "{err}"
        );
        let err = err.to_string();
        assert!(err.contains("after its compaction"), "{err}");
        assert!(err.contains("context budget of 1000 tokens"), "{err}");
    }

    #[test]
    fn what_does_not_fit_even_compacted_is_an_error() {
        let mut c = Conversation::new("m".into(), Vec::new(), "s".repeat(8_000), brief(3), 100);
        let err = c.fit().unwrap_err().to_string();
        assert!(
            err.contains("even compacted, with 3 of its 3 records left out"),
            "{err}"
        );
    }

    #[test]
    fn a_refusal_compacts_to_half_the_refused_size_once() {
        let mut c = conversation(40, 1_000_000);
        let refused = LlmError::Status {
            status: 400,
            message: "maximum context length is 4096 tokens".into(),
        };
        let before = estimate_tokens(&c.request());
        let compaction = c.refused(&refused).unwrap();
        assert!(compaction.reported);
        assert_eq!(compaction.budget_tokens, before / 2);
        assert!(compaction.omitted > 0);
        assert!(estimate_tokens(&c.request()) <= before / 4 + 1);
        let err = c.refused(&refused).unwrap_err().to_string();
        assert!(
            err.starts_with("the model refused the compacted conversation"),
            "{err}"
        );
    }
}
