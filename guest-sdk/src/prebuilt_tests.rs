//! ToolNode, tools_condition, the chat model's wire mapping and the agent
//! graph, with a fake host for graph tools.

use std::cell::RefCell;

use serde_json::{Value, json};

use super::*;
use crate::llm::{Role, Usage};

/// Graph tools `search` and `broken` (which fails with a host error).
#[derive(Default)]
struct FakeTools {
    calls: RefCell<Vec<(String, Value)>>,
}

impl GraphTools for FakeTools {
    fn list(&self) -> Vec<ToolInfo> {
        ["search", "broken"]
            .map(|name| ToolInfo {
                name: name.into(),
                description: Some(format!("{name} things")),
                parameters: json!({"type": "object"}),
            })
            .into()
    }

    fn call(&self, name: &str, args: &Value) -> Result<Value, ToolError> {
        self.calls.borrow_mut().push((name.into(), args.clone()));
        match name {
            "search" => Ok(json!({"hits": [args["q"].clone()]})),
            _ => Err(ToolError::Denied("not granted".into())),
        }
    }
}

fn add() -> Tool {
    Tool::new("add", "Adds.", json!({"type": "object"}), |args| {
        match (args["a"].as_i64(), args["b"].as_i64()) {
            (Some(a), Some(b)) => Ok(json!(a + b)),
            _ => Err("a and b must be integers".into()),
        }
    })
}

fn echo() -> Tool {
    Tool::new("echo", "Echoes.", json!({"type": "object"}), |args| {
        Ok(args["text"].clone())
    })
}

fn state_calling(calls: Value) -> Value {
    json!({"messages": [
        {"type": "ai", "content": "old", "id": "0", "tool_calls": [{"id": "z", "name": "add", "args": {}}]},
        {"type": "human", "content": "go", "id": "1"},
        {"type": "ai", "content": "", "id": "2", "tool_calls": calls},
    ]})
}

#[test]
fn tool_node_runs_every_call_of_the_latest_ai_message_in_order() {
    let node = ToolNode::new([add().into(), echo().into(), "search".into()]);
    let host = FakeTools::default();
    let input = state_calling(json!([
        {"id": "c1", "name": "add", "args": {"a": 2, "b": 3}},
        {"id": "c2", "name": "echo", "args": {"text": "hi"}},
        {"id": "c3", "name": "search", "args": {"q": "rust"}},
    ]));
    let out = node.run(&input, &host).unwrap();
    assert_eq!(
        out,
        json!({"messages": [
            {"type": "tool", "content": "5", "name": "add", "tool_call_id": "c1", "status": "success"},
            {"type": "tool", "content": "hi", "name": "echo", "tool_call_id": "c2", "status": "success"},
            {"type": "tool", "content": "{\"hits\":[\"rust\"]}", "name": "search", "tool_call_id": "c3", "status": "success"},
        ]})
    );
    assert_eq!(
        *host.calls.borrow(),
        [("search".to_owned(), json!({"q": "rust"}))]
    );
}

#[test]
fn tool_node_turns_mistakes_into_error_messages() {
    let node = ToolNode::new([add().into(), echo().into()]);
    let host = FakeTools::default();
    let input = state_calling(json!([
        {"id": "c1", "name": "nope", "args": {}},
        {"id": "c2", "name": "add", "args": "{bad"},
        {"id": "c3", "name": "add", "args": {"a": "x"}},
        {"id": "c4", "name": "broken", "args": {}},
    ]));
    let out = node.run(&input, &host).unwrap();
    let contents: Vec<&str> = out["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            assert_eq!(m["status"], "error", "{m}");
            m["content"].as_str().unwrap()
        })
        .collect();
    assert_eq!(
        contents,
        [
            "Error: nope is not a valid tool, try one of [add, echo, search, broken].",
            "Error: the arguments of add are not a JSON object",
            "Error: a and b must be integers\n Please fix your mistakes.",
            "Error: denied: not granted\n Please fix your mistakes.",
        ]
    );

    // Without handling, a failing call fails the node.
    let strict = node.handle_tool_errors(false);
    let input = state_calling(json!([{"id": "c", "name": "broken", "args": {}}]));
    let err = strict.run(&input, &host).unwrap_err();
    assert_eq!(
        format!("{err:?}"),
        format!("{:?}", NodeError::msg("denied: not granted"))
    );
}

#[test]
fn tool_node_needs_an_ai_message_and_takes_a_list_too() {
    let node = ToolNode::new([add().into()]);
    let host = FakeTools::default();
    let err = node.run(&json!({"messages": ["hi"]}), &host).unwrap_err();
    assert_eq!(
        format!("{err:?}"),
        format!("{:?}", NodeError::msg("no ai message found in input"))
    );
    let list = json!([{"type": "ai", "content": "", "tool_calls": [{"id": "c", "name": "add", "args": {"a": 1, "b": 1}}]}]);
    assert_eq!(
        node.run(&list, &host).unwrap()["messages"][0]["content"],
        "2"
    );
}

#[test]
fn tools_condition_routes_on_the_last_message() {
    let calls = json!([{"id": "c", "name": "add", "args": {}}]);
    assert_eq!(tools_condition(state_calling(calls)), Ok("tools"));
    assert_eq!(tools_condition(state_calling(json!([]))), Ok(END));
    assert_eq!(tools_condition(json!([["ai", "done"]])), Ok(END));
    assert_eq!(
        tools_condition(json!({"messages": []})),
        Err("no messages found in input state".into())
    );
}

#[test]
fn the_chat_model_maps_messages_to_the_wire_and_back() {
    let model = ChatModel::new(Some("fast"))
        .max_tokens(50)
        .bind_tools(vec![add().definition()]);
    let request = model
        .request(&json!([
            ["system", "be brief"],
            "hi",
            {"type": "ai", "content": "", "tool_calls": [
                {"id": "c1", "name": "add", "args": {"a": 1}},
                {"id": "c2", "name": "add", "args": "raw"},
            ]},
            {"type": "tool", "content": "1", "name": "add", "tool_call_id": "c1"},
        ]))
        .unwrap();
    assert_eq!(request.model.as_deref(), Some("fast"));
    assert_eq!(request.max_tokens, Some(50));
    assert_eq!(request.tools[0].name, "add");
    let roles: Vec<Role> = request.messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [Role::System, Role::User, Role::Assistant, Role::Tool]
    );
    let args: Vec<&str> = request.messages[2]
        .tool_calls
        .iter()
        .map(|c| c.arguments.as_str())
        .collect();
    assert_eq!(args, [r#"{"a":1}"#, "raw"]);
    assert_eq!(request.messages[3].tool_call_id.as_deref(), Some("c1"));
    assert!(matches!(
        model.request(&json!([7])),
        Err(LlmError::Malformed(_))
    ));

    let reply = answer(ChatResponse {
        content: String::new(),
        tool_calls: vec![
            llm::ToolCall {
                id: "a".into(),
                name: "add".into(),
                arguments: r#"{"a":1}"#.into(),
            },
            llm::ToolCall {
                id: "b".into(),
                name: "add".into(),
                arguments: "[1]".into(),
            },
        ],
        finish_reason: "tool_calls".into(),
        usage: Usage {
            prompt_tokens: 10,
            completion_tokens: 5,
        },
    });
    assert_eq!(
        reply,
        json!({
            "type": "ai", "content": "",
            "tool_calls": [
                {"id": "a", "name": "add", "args": {"a": 1}},
                {"id": "b", "name": "add", "args": "[1]"},
            ],
            "usage_metadata": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
            "response_metadata": {"finish_reason": "tool_calls"},
        })
    );
}

#[test]
fn the_agent_graph_has_the_react_shape() {
    let graph = create_react_agent("fast", [add().into(), "search".into()], Some("hi"));
    assert_eq!(graph.check(), Ok(()));
    let names: Vec<&str> = graph.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["agent", "tools"]);
    assert_eq!(graph.entry_points, ["agent"]);
    assert_eq!(
        graph.conditional_edges[0].path_map,
        [
            ("tools".to_owned(), "tools".to_owned()),
            (END.to_owned(), END.to_owned())
        ]
    );
    assert_eq!(graph.edges[0].sources, ["tools"]);
    assert_eq!(graph.edges[0].target, "agent");

    let host = FakeTools::default();
    let bound = definitions(&[add().into(), "search".into(), "unlisted".into()], &host);
    let names: Vec<&str> = bound.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["add", "search"]);

    let bare = create_react_agent("fast", [], None);
    assert_eq!(bare.check(), Ok(()));
    assert_eq!(bare.nodes.len(), 1);
    assert_eq!(bare.finish_points, ["agent"]);
}
