//! The `orchestration:graph` system-prompt section (seed-contracts §2.10).

/// The section's name.
pub const PROMPT_SECTION_NAME: &str = "orchestration:graph";

/// Where the section sorts among the system prompt's sections.
pub const PROMPT_SECTION_ORDER: u32 = 127;

/// The three paragraphs of the section, joined with `\n`.
pub const GRAPH_MODE_PROMPT: &str = concat!(
    "Agent Graph mode (port of Maka): you are the root supervisor of one durable agent graph. ",
    "Inspect with `view_agent_graph` (bounded: work statuses, recent records, omitted counts \u{2014} ",
    "page with the returned nextCursor), schedule with `update_agent_graph` (addWork with exactly one ",
    "of subagentId/agentId/operatorId, stop, or finish; pass idempotencyKey for retry-safe updates), ",
    "and hand back control with `yield_agent_graph`.\n",
    "Yield, don't poll: after each scheduling wave with no immediate decision, end the turn with ",
    "`yield_agent_graph` \u{2014} the host wakes you at the next durable graph checkpoint. Do not sleep, ",
    "loop on view, or emit waiting messages; `yield_agent_graph` returns `nothing_to_yield` when ",
    "nothing is pending.\n",
    "Report outcomes, not mechanics: one block per wave \u{2014} what work was added/stopped/finished, ",
    "what remains pending, what is blocked, and what the graph needs. Keep work instructions concrete ",
    "and bounded (60000 chars, 64 inputs); never invent work ids \u{2014} read them from a view, and ",
    "`replaces` only existing ones.",
);

/// A section of the system prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptSection {
    /// `orchestration:graph`.
    pub name: String,
    /// 127.
    pub order: u32,
    /// The section text; empty when disabled.
    pub text: String,
}

/// The `orchestration:graph` section: [`GRAPH_MODE_PROMPT`] when `enabled`,
/// empty text otherwise.
pub fn prompt_section(enabled: bool) -> PromptSection {
    PromptSection {
        name: PROMPT_SECTION_NAME.to_owned(),
        order: PROMPT_SECTION_ORDER,
        text: if enabled {
            GRAPH_MODE_PROMPT.to_owned()
        } else {
            String::new()
        },
    }
}
