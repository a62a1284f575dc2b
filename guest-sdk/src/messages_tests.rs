//! Every rule of `add_messages` and of message coercion.

use serde_json::{Value, json};

use super::*;

fn add(left: Value, right: Value) -> Value {
    add_messages(left, right).unwrap()
}

#[test]
fn appends_with_deterministic_ids() {
    assert_eq!(
        add(Value::Null, json!("hi")),
        json!([{"type": "human", "content": "hi", "id": "msg-0"}])
    );
    let left = json!([{"type": "human", "content": "a", "id": "x"}]);
    assert_eq!(
        add(left, json!([["assistant", "b"], ["system", "c"]])),
        json!([
            {"type": "human", "content": "a", "id": "x"},
            {"type": "ai", "content": "b", "id": "msg-1", "tool_calls": []},
            {"type": "system", "content": "c", "id": "msg-2"},
        ])
    );
}

#[test]
fn assigned_ids_skip_ids_in_use() {
    // msg-1 is taken on the left, msg-2 by an explicit right id.
    let left = json!([{"type": "human", "content": "a", "id": "msg-1"}]);
    let right = json!(["b", {"role": "user", "content": "c", "id": "msg-2"}, "d"]);
    let ids: Vec<Value> = add(left, right)
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].clone())
        .collect();
    assert_eq!(
        ids,
        [
            json!("msg-1"),
            json!("msg-3"),
            json!("msg-2"),
            json!("msg-4")
        ]
    );
}

#[test]
fn a_known_id_replaces_in_place_and_the_last_duplicate_wins() {
    let left = json!([
        {"type": "human", "content": "a", "id": "1"},
        {"type": "human", "content": "b", "id": "2"},
    ]);
    let right = json!([
        {"type": "ai", "content": "first", "id": "1"},
        {"type": "human", "content": "new", "id": "3"},
        {"type": "ai", "content": "last", "id": "1"},
    ]);
    assert_eq!(
        add(left, right),
        json!([
            {"type": "ai", "content": "last", "id": "1", "tool_calls": []},
            {"type": "human", "content": "b", "id": "2"},
            {"type": "human", "content": "new", "id": "3"},
        ])
    );
}

#[test]
fn remove_markers_delete_and_a_later_message_restores() {
    let left = json!([
        {"type": "human", "content": "a", "id": "1"},
        {"type": "human", "content": "b", "id": "2"},
    ]);
    assert_eq!(
        add(left.clone(), json!([Message::remove("1")])),
        json!([{"type": "human", "content": "b", "id": "2"}])
    );
    let right = json!([Message::remove("2"), {"type": "human", "content": "again", "id": "2"}]);
    assert_eq!(
        add(left.clone(), right),
        json!([
            {"type": "human", "content": "a", "id": "1"},
            {"type": "human", "content": "again", "id": "2"},
        ])
    );
    assert_eq!(
        add_messages(left, json!({"type": "remove", "id": "9"})),
        Err("attempting to delete a message with an id that doesn't exist ('9')".into())
    );
}

#[test]
fn remove_all_keeps_what_follows_the_last_marker() {
    let left = json!([{"type": "human", "content": "a", "id": "1"}]);
    let right = json!([
        "dropped",
        Message::remove(REMOVE_ALL_MESSAGES),
        "also dropped",
        Message::remove(REMOVE_ALL_MESSAGES),
        {"type": "human", "content": "kept", "id": "k"},
        "kept too",
    ]);
    // Ids were assigned over the whole right side: "kept too" is msg-3.
    assert_eq!(
        add(left.clone(), right),
        json!([
            {"type": "human", "content": "kept", "id": "k"},
            {"type": "human", "content": "kept too", "id": "msg-3"},
        ])
    );
    // After the marker, removes see an empty left.
    let right = json!([Message::remove(REMOVE_ALL_MESSAGES), Message::remove("1")]);
    assert_eq!(
        add_messages(left.clone(), right),
        Err("attempting to delete a message with an id that doesn't exist ('1')".into())
    );
    assert_eq!(
        add(left, json!([Message::remove(REMOVE_ALL_MESSAGES)])),
        json!([])
    );
}

#[test]
fn objects_coerce_with_their_optional_keys() {
    let right = json!([
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "name": "search", "args": {"q": "x"}},
            {"id": "c2", "name": "raw", "args": "not json"},
        ]},
        {"type": "tool", "content": "42", "name": "search", "tool_call_id": "c1"},
        {"role": "developer", "content": "be brief", "name": "ops", "extra": 1},
    ]);
    assert_eq!(
        add(json!([]), right),
        json!([
            {"type": "ai", "content": "", "id": "msg-0", "tool_calls": [
                {"id": "c1", "name": "search", "args": {"q": "x"}},
                {"id": "c2", "name": "raw", "args": "not json"},
            ]},
            {"type": "tool", "content": "42", "id": "msg-1", "name": "search",
             "tool_call_id": "c1", "status": "success"},
            {"type": "system", "content": "be brief", "id": "msg-2", "name": "ops"},
        ])
    );
}

#[test]
fn bad_items_name_their_index_and_why() {
    let cases = [
        (
            json!(["ok", 7]),
            "message 1: expected a message (a string, a [role, content] pair or an object with type and content), not a number",
        ),
        (
            json!([["tool", "x"]]),
            "message 0: a [role, content] pair cannot make a tool message (it needs a tool_call_id)",
        ),
        (json!([["robot", "x"]]), "message 0: unknown role \"robot\""),
        (
            json!([["human"]]),
            "message 0: a [role, content] pair needs exactly two strings",
        ),
        (
            json!([{"content": "x"}]),
            "message 0: a message object needs a type or role",
        ),
        (
            json!([{"type": "human"}]),
            "message 0: a message object needs a string content",
        ),
        (
            json!([{"type": "human", "content": 1}]),
            "message 0: content must be a string, not a number",
        ),
        (
            json!([{"type": "tool", "content": "x"}]),
            "message 0: a tool message needs a tool_call_id",
        ),
        (
            json!([{"type": "tool", "content": "x", "tool_call_id": "c", "status": "ok"}]),
            "message 0: status must be success or error, not \"ok\"",
        ),
        (
            json!([{"type": "remove"}]),
            "message 0: a remove marker needs an id",
        ),
        (
            json!([{"type": "ai", "content": "", "tool_calls": [{"id": "c"}]}]),
            "message 0: tool_calls: missing field `name`",
        ),
    ];
    for (right, expected) in cases {
        assert_eq!(add_messages(json!([]), right), Err(expected.to_owned()));
        assert!(!expected.ends_with('.'));
    }
    // The left side too.
    assert_eq!(
        add_messages(json!([1]), json!([])),
        Err("message 0: expected a message (a string, a [role, content] pair or an object with type and content), not a number".into())
    );
}

#[test]
fn messages_serialize_and_deserialize_as_their_json() {
    let call = ToolCall {
        id: "c".into(),
        name: "t".into(),
        args: json!({}),
    };
    let ai = Message::ai("x").with_tool_calls(vec![call]).with_id("1");
    let value = serde_json::to_value(&ai).unwrap();
    assert_eq!(
        value,
        json!({"type": "ai", "content": "x", "id": "1", "tool_calls": [{"id": "c", "name": "t", "args": {}}]})
    );
    assert_eq!(serde_json::from_value::<Message>(value).unwrap(), ai);
    let tool = Message::tool("r", "t", "c").with_error_status();
    assert_eq!(
        tool.to_value(),
        json!({"type": "tool", "content": "r", "name": "t", "tool_call_id": "c", "status": "error"})
    );
    assert_eq!(
        Message::remove("z").to_value(),
        json!({"type": "remove", "id": "z"})
    );
}

#[test]
fn the_messages_channel_reduces_with_add_messages() {
    let graph = Graph::new("g").messages_channel();
    let reduced = graph
        .reduce(MESSAGES, "[]", r#"["hi",{"type":"ai","content":"yo"}]"#)
        .unwrap();
    let reduced: Value = serde_json::from_str(&reduced).unwrap();
    assert_eq!(reduced[1]["id"], "msg-1");
    assert_eq!(graph.channels[0].default.as_deref(), Some("[]"));
    let err = graph.reduce(MESSAGES, "[]", r#"[{"type":"remove","id":"q"}]"#);
    assert!(
        format!("{err:?}").contains("id that doesn't exist ('q')"),
        "{err:?}"
    );
}
