//! MCP prompts: with a controller, the `orchestration:graph` system-prompt
//! section of [`sandgraph_controller`] (how to supervise an agent graph with
//! the three tools: yield, don't poll), so a client's model gets the same
//! guidance the supervisor of `sandgraph supervise` gets. Without a
//! controller the server has no prompts and does not declare the
//! capability.

use rmcp::ErrorData;
use rmcp::model::{GetPromptResult, Prompt, PromptMessage, Role};
use sandgraph_controller::{PROMPT_SECTION_NAME, prompt_section};
use sandgraph_core::text::guest_name;

/// What `prompts/list` says the prompt is for.
const DESCRIPTION: &str = "How to supervise a durable agent graph with view_agent_graph, \
     update_agent_graph and yield_agent_graph (yield, don't poll): the orchestration:graph \
     section of the supervisor's system prompt.";

/// The prompts of a server with a controller: `orchestration:graph`, with
/// no arguments.
pub(crate) fn list() -> Vec<Prompt> {
    vec![Prompt::new(PROMPT_SECTION_NAME, Some(DESCRIPTION), None)]
}

/// `prompts/get`: the section's text as one user message (MCP prompts have
/// no system role); any other name is invalid params naming it and the
/// prompts there are.
pub(crate) fn get(name: &str) -> Result<GetPromptResult, ErrorData> {
    if name != PROMPT_SECTION_NAME {
        return Err(ErrorData::invalid_params(
            format!(
                "no prompt named {}; available: {PROMPT_SECTION_NAME}",
                guest_name(name)
            ),
            None,
        ));
    }
    let section = prompt_section(true);
    Ok(
        GetPromptResult::new(vec![PromptMessage::new_text(Role::User, section.text)])
            .with_description(DESCRIPTION),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_section_is_one_user_message_and_other_names_are_refused() {
        let r = get("orchestration:graph").unwrap();
        assert_eq!(r.messages.len(), 1);
        assert_eq!(r.messages[0].role, Role::User);
        let e = get("nope\u{1b}").unwrap_err();
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(e.message.starts_with("no prompt named "), "{}", e.message);
        assert!(!e.message.contains('\u{1b}'), "{}", e.message);
    }
}
