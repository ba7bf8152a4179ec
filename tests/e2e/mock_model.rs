//! A mock model server for the real agent CLIs: std only, one thread per connection on a free loopback
//! port, answering `Connection: close` HTTP/1.1. It speaks just enough of two streaming protocols for
//! Claude Code 2.1.332 and Codex 0.171.0 to complete a turn offline in seconds:
//! - Anthropic Messages: `POST /v1/messages` (server-sent events `message_start`,
//!   `content_block_start/delta/stop`, `message_delta`, `message_stop`; a JSON body when `stream` is
//!   false) and `POST /v1/messages/count_tokens`.
//! - OpenAI Responses: `POST /v1/responses` (`response.created`, `response.output_item.added/done`,
//!   `response.output_text.delta`, `response.completed`; a tool call is a `function_call` item).
//! - OpenAI chat completions, for GitHub Copilot CLI, Qwen Code, pi and Factory Droid:
//!   `POST /v1/chat/completions` (streamed `chat.completion.chunk`s with `delta.content` or
//!   `delta.tool_calls`, a usage chunk, then `data: [DONE]`; one JSON `chat.completion` when `stream` is
//!   false) and `GET /v1/models`.
//! - Augment's API, for Auggie: `/get-models`, `/agents/list-remote-tools` and `/chat-stream`
//!   (newline-delimited JSON chunks); and Amp's own routes beside its model route (`/api/…`, answered
//!   `{}`; its model route is Anthropic Messages under `/api/provider/anthropic`).
//! - Gemini (`generativelanguage` v1beta), for Gemini CLI: `POST .../models/<m>:streamGenerateContent`
//!   (server-sent `data:` events, one `GenerateContentResponse` whose candidate holds a `text` or a
//!   `functionCall` part), `:generateContent` (the same response as one JSON body) and `:countTokens`.
//!   A JSON-mode request (`generationConfig.responseMimeType` `application/json`: Gemini CLI's model
//!   router and next-speaker checks) is answered with JSON that fits its `responseJsonSchema`, whatever
//!   the queue holds (it offers no tools, so it takes no turn).
//!
//! Replies are scripted: a queue of turns per server. Only requests that offer tools (the agent's main
//! loop) take a turn from the queue (or, after `turns_without_tools`, every streamed request: Aider
//! offers no tools); side requests (titles, quota checks) and requests after the queue ran dry get a
//! short text. Every request is logged for the test to read.

use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One scripted model turn.
#[derive(Clone, Debug)]
pub enum Turn {
    /// The model answers with text and ends its turn.
    Text(String),
    /// The model calls a tool with these arguments (the client runs it and calls again).
    Tool { name: String, input: Value },
    /// The server answers with this HTTP status and an API error body (for failing-agent tests).
    Error(u16),
    /// The server reads the request and never answers (for hanging-agent tests; the connection is held
    /// for 10 minutes).
    Hang,
    /// The model calls a tool on something the request names (the path of a file the prompt points
    /// at): group 1 of `pattern`'s first match in the request's JSON text replaces `{}` in `input`'s
    /// string values. No match: the model answers that it found nothing.
    ToolOnRequest {
        name: String,
        input: Value,
        pattern: String,
    },
}

impl Turn {
    /// The turn as it answers `req`.
    fn resolve(self, req: &Request) -> Turn {
        let Turn::ToolOnRequest {
            name,
            input,
            pattern,
        } = self
        else {
            return self;
        };
        let text = req.body.to_string();
        let re = regex::Regex::new(&pattern).expect("a pattern");
        let Some(found) = re.captures(&text).and_then(|c| c.get(1)) else {
            return Turn::Text(format!("nothing matches {pattern}"));
        };
        let fill = |v: &Value| match v {
            Value::String(s) => Value::String(s.replace("{}", found.as_str())),
            other => other.clone(),
        };
        let input = match &input {
            Value::Object(o) => {
                Value::Object(o.iter().map(|(k, v)| (k.clone(), fill(v))).collect())
            }
            other => fill(other),
        };
        Turn::Tool { name, input }
    }
}

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub body: Value,
}

impl Request {
    /// Whether the client offered tools: a request of the agent's main loop.
    pub fn has_tools(&self) -> bool {
        self.body["tools"].as_array().is_some_and(|t| !t.is_empty())
    }
}

#[derive(Default)]
struct State {
    turns: VecDeque<Turn>,
    log: Vec<Request>,
    counter: u64,
    /// Streamed requests without tools take turns too.
    text_turns: bool,
}

pub struct MockModel {
    pub port: u16,
    state: Arc<Mutex<State>>,
}

impl MockModel {
    /// Starts a server on 127.0.0.1 with these turns queued; it lives as long as the test process.
    pub fn start(turns: Vec<Turn>) -> MockModel {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            turns: turns.into(),
            ..State::default()
        }));
        let shared = state.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let st = shared.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, &st);
                });
            }
        });
        MockModel { port, state }
    }

    /// `http://127.0.0.1:<port>` (Claude's ANTHROPIC_BASE_URL; Codex's base_url adds `/v1`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every request so far, in arrival order.
    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().unwrap().log.clone()
    }

    /// Queues more turns after those not yet taken.
    pub fn queue(&self, turns: Vec<Turn>) {
        self.state.lock().unwrap().turns.extend(turns);
    }

    /// Makes streamed requests take turns whether or not they offer tools: Aider offers none (its
    /// edits are text), while its side requests (commit messages from its weak model) are not
    /// streamed and still get a short text.
    pub fn turns_without_tools(&self) {
        self.state.lock().unwrap().text_turns = true;
    }

    /// The turns not yet taken.
    pub fn remaining(&self) -> usize {
        self.state.lock().unwrap().turns.len()
    }
}

fn serve(stream: TcpStream, state: &Mutex<State>) -> std::io::Result<()> {
    stream.set_read_timeout(Some(std::time::Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" || h == "\n" {
            break;
        }
        let (name, value) = h.split_once(':').unwrap_or((&h, ""));
        let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
        if name == "content-length" {
            length = value.parse().unwrap_or(0);
        } else if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
            chunked = true;
        }
    }
    let body = if chunked {
        read_chunked(&mut reader)?
    } else {
        let mut b = vec![0; length];
        reader.read_exact(&mut b)?;
        b
    };
    let req = Request {
        method,
        path,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let (turn, n) = {
        let mut st = state.lock().unwrap();
        st.log.push(req.clone());
        st.counter += 1;
        let takes = req.method == "POST"
            && (req.has_tools() || (st.text_turns && req.body["stream"] == true))
            && !req.path.contains("count_tokens")
            && !req.path.contains(":countTokens");
        let turn = if takes { st.turns.pop_front() } else { None };
        let turn = turn.map(|t| t.resolve(&req));
        (turn.unwrap_or(Turn::Text("ok".into())), st.counter)
    };
    let mut out = stream;
    let p = req.path.split('?').next().unwrap_or("");
    if req.method == "GET" && p.ends_with("/models") {
        let list = json!({"object": "list", "data": [{"id": "gpt-4.1", "object": "model",
            "created": 0, "owned_by": "mock"}]});
        return respond(
            &mut out,
            200,
            "application/json",
            list.to_string().as_bytes(),
        );
    }
    // Augment's own API, for Auggie 0.36 (its session's tenant URL is the mock): the model list must
    // name a default model, or the prompt is silently dropped.
    if p.ends_with("/get-models") {
        let body = json!({"default_model": "mock-model", "models": [], "feature_flags": {},
            "languages": []});
        return respond(
            &mut out,
            200,
            "application/json",
            body.to_string().as_bytes(),
        );
    }
    if p.ends_with("/list-remote-tools") {
        return respond(&mut out, 200, "application/json", br#"{"tools":[]}"#);
    }
    // Amp's own API besides its model route (user info, thread upload, credits): answered empty.
    if p.starts_with("/api/") && !p.contains("/provider/") {
        return respond(&mut out, 200, "application/json", b"{}");
    }
    if req.method != "POST" {
        return respond(&mut out, 404, "application/json", b"{}");
    }
    if let Turn::Hang = turn {
        std::thread::sleep(std::time::Duration::from_secs(600));
        return Ok(());
    }
    if let Turn::Error(code) = turn {
        let body =
            json!({"type": "error", "error": {"type": "api_error", "message": "mock failure"}});
        return respond(
            &mut out,
            code,
            "application/json",
            body.to_string().as_bytes(),
        );
    }
    if p.ends_with("/count_tokens") {
        return respond(&mut out, 200, "application/json", br#"{"input_tokens":10}"#);
    }
    if p.ends_with(":countTokens") {
        return respond(&mut out, 200, "application/json", br#"{"totalTokens":10}"#);
    }
    if p.ends_with(":streamGenerateContent") || p.ends_with(":generateContent") {
        let model = p
            .rsplit("/models/")
            .next()
            .and_then(|m| m.split(':').next())
            .unwrap_or("gemini-mock");
        let reply = gemini_response(&turn, n, model, &req.body);
        if p.ends_with(":streamGenerateContent") {
            return data_only_sse(&mut out, &[reply], false);
        }
        return respond(
            &mut out,
            200,
            "application/json",
            reply.to_string().as_bytes(),
        );
    }
    if p.ends_with("/v1/messages") {
        if req.body["stream"] == true {
            return sse(&mut out, &anthropic_events(&turn, n, &req.body["model"]));
        }
        let msg = anthropic_message(&turn, n, &req.body["model"]);
        return respond(
            &mut out,
            200,
            "application/json",
            msg.to_string().as_bytes(),
        );
    }
    if p.ends_with("/chat-stream") {
        // Augment's chat stream: newline-delimited JSON chunks, the text then the end of the turn.
        let text = match &turn {
            Turn::Text(t) => t.clone(),
            _ => "ok".to_string(),
        };
        let chunks = [
            json!({"text": text, "nodes": [{"id": 0, "type": 0, "content": text}]}),
            json!({"text": "", "nodes": [{"id": 1, "type": 2, "content": ""}], "stop_reason": 1}),
        ];
        let body: String = chunks.iter().map(|c| format!("{c}\n")).collect();
        return respond(&mut out, 200, "application/json", body.as_bytes());
    }
    if p.ends_with("/v1/responses") {
        return sse(&mut out, &responses_events(&turn, n));
    }
    if p.ends_with("/chat/completions") {
        if req.body["stream"] == true {
            return data_only_sse(&mut out, &chat_chunks(&turn, n, &req.body["model"]), true);
        }
        let done = chat_completion(&turn, n, &req.body["model"]);
        return respond(
            &mut out,
            200,
            "application/json",
            done.to_string().as_bytes(),
        );
    }
    respond(&mut out, 404, "application/json", b"{}")
}

fn read_chunked(r: &mut impl BufRead) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let mut size = String::new();
        r.read_line(&mut size)?;
        let n =
            usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16).unwrap_or(0);
        let mut chunk = vec![0; n + 2];
        r.read_exact(&mut chunk)?;
        if n == 0 {
            return Ok(out);
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

fn respond(out: &mut TcpStream, code: u16, ctype: &str, body: &[u8]) -> std::io::Result<()> {
    write!(
        out,
        "HTTP/1.1 {code} {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        if code == 200 { "OK" } else { "Error" },
        body.len()
    )?;
    out.write_all(body)?;
    out.flush()
}

/// Server-sent events, then the connection closes (the body ends with it).
fn sse(out: &mut TcpStream, events: &[Value]) -> std::io::Result<()> {
    let mut text = String::from(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
    );
    for e in events {
        text.push_str(&format!(
            "event: {}\ndata: {e}\n\n",
            e["type"].as_str().unwrap_or("")
        ));
    }
    out.write_all(text.as_bytes())?;
    out.flush()
}

fn model_name(model: &Value) -> Value {
    model.as_str().map_or(json!("claude-mock"), |m| json!(m))
}

/// The content block and stop reason of a turn, Anthropic style.
fn anthropic_block(turn: &Turn, n: u64) -> (Value, &'static str) {
    match turn {
        Turn::Tool { name, input } => (
            json!({"type": "tool_use", "id": format!("toolu_mock{n}"), "name": name, "input": input}),
            "tool_use",
        ),
        Turn::Text(t) => (json!({"type": "text", "text": t}), "end_turn"),
        Turn::Error(_) | Turn::Hang | Turn::ToolOnRequest { .. } => {
            (json!({"type": "text", "text": ""}), "end_turn")
        }
    }
}

fn anthropic_message(turn: &Turn, n: u64, model: &Value) -> Value {
    let (block, stop) = anthropic_block(turn, n);
    json!({"id": format!("msg_mock{n}"), "type": "message", "role": "assistant", "model": model_name(model),
        "content": [block], "stop_reason": stop, "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 5}})
}

fn anthropic_events(turn: &Turn, n: u64, model: &Value) -> Vec<Value> {
    let (block, stop) = anthropic_block(turn, n);
    let (start, delta) = match turn {
        Turn::Tool { input, .. } => {
            let mut b = block.clone();
            b["input"] = json!({});
            (
                b,
                json!({"type": "input_json_delta", "partial_json": input.to_string()}),
            )
        }
        _ => (
            json!({"type": "text", "text": ""}),
            json!({"type": "text_delta", "text": block["text"]}),
        ),
    };
    vec![
        json!({"type": "message_start", "message": {"id": format!("msg_mock{n}"), "type": "message",
            "role": "assistant", "model": model_name(model), "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": 10, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": start}),
        json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
            "usage": {"output_tokens": 5}}),
        json!({"type": "message_stop"}),
    ]
}

fn responses_events(turn: &Turn, n: u64) -> Vec<Value> {
    let id = format!("resp_mock{n}");
    let item = match turn {
        Turn::Tool { name, input } => json!({"type": "function_call", "id": format!("fc_mock{n}"),
            "call_id": format!("call_mock{n}"), "name": name, "arguments": input.to_string(),
            "status": "completed"}),
        Turn::Text(t) => {
            json!({"type": "message", "id": format!("msg_mock{n}"), "status": "completed",
            "role": "assistant", "content": [{"type": "output_text", "text": t, "annotations": []}]})
        }
        Turn::Error(_) | Turn::Hang | Turn::ToolOnRequest { .. } => json!({}),
    };
    let mut added = item.clone();
    added["status"] = json!("in_progress");
    let mut events = vec![
        json!({"type": "response.created", "sequence_number": 0, "response": {"id": id,
            "object": "response", "status": "in_progress", "model": "gpt-4.1", "output": []}}),
    ];
    if let Turn::Text(t) = turn {
        added["content"] = json!([]);
        events
            .push(json!({"type": "response.output_item.added", "output_index": 0, "item": added}));
        events.push(
            json!({"type": "response.output_text.delta", "item_id": item["id"],
            "output_index": 0, "content_index": 0, "delta": t}),
        );
    } else {
        events
            .push(json!({"type": "response.output_item.added", "output_index": 0, "item": added}));
    }
    events.push(json!({"type": "response.output_item.done", "output_index": 0, "item": item}));
    events.push(
        json!({"type": "response.completed", "response": {"id": id, "object": "response",
        "status": "completed", "model": "gpt-4.1", "output": [item],
        "usage": {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 15}}}),
    );
    events
}

/// Server-sent events without `event:` lines, ending `data: [DONE]` when `done` (the chat completions
/// stream; Gemini's just ends).
fn data_only_sse(out: &mut TcpStream, events: &[Value], done: bool) -> std::io::Result<()> {
    let mut text = String::from(
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
    );
    for e in events {
        text.push_str(&format!("data: {e}\n\n"));
    }
    if done {
        text.push_str("data: [DONE]\n\n");
    }
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// The assistant message of a turn, chat-completions style, and its finish reason.
fn chat_message(turn: &Turn, n: u64) -> (Value, &'static str) {
    match turn {
        Turn::Tool { name, input } => (
            json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0,
                "id": format!("call_mock{n}"), "type": "function",
                "function": {"name": name, "arguments": input.to_string()}}]}),
            "tool_calls",
        ),
        Turn::Text(t) => (json!({"role": "assistant", "content": t}), "stop"),
        Turn::Error(_) | Turn::Hang | Turn::ToolOnRequest { .. } => {
            (json!({"role": "assistant", "content": ""}), "stop")
        }
    }
}

fn chat_usage() -> Value {
    json!({"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15})
}

fn chat_completion(turn: &Turn, n: u64, model: &Value) -> Value {
    let (mut message, finish) = chat_message(turn, n);
    if let Some(calls) = message["tool_calls"].as_array_mut() {
        for c in calls {
            c.as_object_mut().unwrap().remove("index");
        }
    }
    json!({"id": format!("chatcmpl-mock{n}"), "object": "chat.completion", "created": 0,
        "model": model_or(model, "gpt-4.1"), "choices": [{"index": 0, "message": message,
        "finish_reason": finish}], "usage": chat_usage()})
}

fn chat_chunks(turn: &Turn, n: u64, model: &Value) -> Vec<Value> {
    let (delta, finish) = chat_message(turn, n);
    let chunk = |choices: Value| {
        json!({"id": format!("chatcmpl-mock{n}"), "object": "chat.completion.chunk", "created": 0,
            "model": model_or(model, "gpt-4.1"), "choices": choices})
    };
    let mut usage = chunk(json!([]));
    usage["usage"] = chat_usage();
    vec![
        chunk(json!([{"index": 0, "delta": delta, "finish_reason": null}])),
        chunk(json!([{"index": 0, "delta": {}, "finish_reason": finish}])),
        usage,
    ]
}

fn model_or(model: &Value, default: &str) -> Value {
    model.as_str().map_or(json!(default), |m| json!(m))
}

/// One Gemini `GenerateContentResponse`: the turn as a `text` or `functionCall` part, or, for a
/// JSON-mode request, JSON text that fits the request's response schema.
fn gemini_response(turn: &Turn, n: u64, model: &str, body: &Value) -> Value {
    let config = &body["generationConfig"];
    let part = if config["responseMimeType"] == "application/json" {
        let schema = if config["responseJsonSchema"].is_object() {
            &config["responseJsonSchema"]
        } else {
            &config["responseSchema"]
        };
        json!({"text": schema_value(schema).to_string()})
    } else {
        match turn {
            Turn::Tool { name, input } => {
                json!({"functionCall": {"name": name, "args": input, "id": format!("call_mock{n}")}})
            }
            Turn::Text(t) => json!({"text": t}),
            Turn::Error(_) | Turn::Hang | Turn::ToolOnRequest { .. } => json!({"text": ""}),
        }
    };
    json!({"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP",
        "index": 0}],
        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 5, "totalTokenCount": 15},
        "modelVersion": model, "responseId": format!("mockresp{n}")})
}

/// A value that fits a JSON schema (OpenAPI-style upper-case types too): every property, the first
/// enum value (`user` or `flash` where offered: the next-speaker check then hands the turn back, the
/// router picks the flash model), numbers at their `minimum` or 1 (the router's complexity score
/// must be at least 1), empty arrays, `false`, and `"mock"` for strings.
pub fn schema_value(schema: &Value) -> Value {
    if let Some(choices) = schema["enum"].as_array().filter(|e| !e.is_empty()) {
        return ["user", "flash"]
            .iter()
            .find(|p| choices.iter().any(|c| c == **p))
            .map_or_else(|| choices[0].clone(), |p| json!(p));
    }
    let kind = match &schema["type"] {
        Value::String(t) => t.to_ascii_lowercase(),
        Value::Array(ts) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| !t.eq_ignore_ascii_case("null"))
            .unwrap_or("string")
            .to_ascii_lowercase(),
        _ if schema["properties"].is_object() => "object".into(),
        _ => "string".into(),
    };
    match kind.as_str() {
        "object" => Value::Object(
            schema["properties"]
                .as_object()
                .map(|props| {
                    props
                        .iter()
                        .map(|(k, v)| (k.clone(), schema_value(v)))
                        .collect()
                })
                .unwrap_or_default(),
        ),
        "array" => json!([]),
        "integer" | "number" => {
            if schema["minimum"].is_number() {
                schema["minimum"].clone()
            } else {
                json!(1)
            }
        }
        "boolean" => json!(false),
        _ => json!("mock"),
    }
}
