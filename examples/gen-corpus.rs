//! Writes a realistic transcript corpus for benchmarks: Claude and Codex stores under `<out>/home`,
//! repos with `.almanac/` under `<out>/repos`, real record shapes, Codex first lines of ~20 KiB, half of
//! the Claude sessions with subagents, 10% of sessions in directories without a wiki, mtimes in the past.
//!
//! Tool results are real-sized: on real Claude Code sessions they are a third to two thirds of the bytes
//! (a tool-result line is 1.9 KB at the median, 19 KB at the 90th percentile, 58 KB at the 99th, two thirds
//! of it the `toolUseResult` copy), so each turn makes 0-3 calls (Read with numbered lines, Edit with
//! the original file in `toolUseResult`, Bash, Grep; Codex `exec_command` with its preamble, and in half
//! the Codex sessions code-mode `exec` scripts), each result 150 B to 16 KiB, log-uniform.
//!
//! cargo run --release --example gen-corpus -- --out DIR --sessions 10000 [--repos 50] [--seed 1]
//!     [--max-turns 24]  smaller sessions for very large corpora (e.g. 100k sessions with --max-turns 1)
//!     [--big-mib N]   also write one transcript of about N MiB (for the large-file memory check)

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic corpora from a seed.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545F4914F6CDD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn uuid(&mut self) -> String {
        let h = format!("{:016x}{:016x}", self.next(), self.next());
        format!(
            "{}-{}-4{}-8{}-{}",
            &h[0..8],
            &h[8..12],
            &h[13..16],
            &h[17..20],
            &h[20..32]
        )
    }
    /// A tool output's size: log-uniform from 150 B to 16 KiB (median ~1.6 KB, like real results).
    fn result_size(&mut self) -> usize {
        (150.0 * (109.0f64).powf(self.below(1000) as f64 / 1000.0)) as usize
    }
    /// About `bytes` of text in lines of 6-14 words, JSON-escaped (`\\n` between lines); each line
    /// prefixed as `number(i)` says (a Read's `     N→`).
    fn text_lines(&mut self, bytes: usize, number: bool) -> String {
        let mut s = String::new();
        let mut i = 1;
        while s.len() < bytes {
            if i > 1 {
                s.push_str("\\n");
            }
            if number {
                s.push_str(&format!("{i:>6}\u{2192}"));
            }
            let n = 6 + self.below(9) as usize;
            s.push_str(&self.words(n));
            i += 1;
        }
        s
    }
    fn words(&mut self, n: usize) -> String {
        const W: &[&str] = &[
            "the", "cache", "timeout", "deploy", "config", "retry", "parser", "ledger", "cursor",
            "test", "flaky", "index", "schema", "build", "module", "error", "client", "queue",
            "worker", "lock",
        ];
        (0..n)
            .map(|_| W[self.below(W.len() as u64) as usize])
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn set_age(p: &Path, age: Duration) {
    let f = std::fs::File::options().write(true).open(p).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

fn claude_session(rng: &mut Rng, sid: &str, cwd: &str, turns: usize) -> String {
    let mut s = String::new();
    s.push_str(&format!("{{\"type\":\"file-history-snapshot\",\"messageId\":\"{}\",\"snapshot\":{{\"messageId\":\"x\",\"trackedFileBackups\":{{}},\"timestamp\":\"2026-10-01T10:00:00.000Z\"}},\"isSnapshotUpdate\":false}}\n", rng.uuid()));
    for t in 0..turns {
        let ts = format!("2026-10-01T10:{:02}:{:02}.000Z", (t / 60) % 60, t % 60);
        let prompt = {
            let n = 8 + rng.below(30) as usize;
            rng.words(n)
        };
        s.push_str(&format!("{{\"parentUuid\":null,\"isSidechain\":false,\"userType\":\"external\",\"cwd\":\"{cwd}\",\"sessionId\":\"{sid}\",\"version\":\"2.1.332\",\"gitBranch\":\"main\",\"type\":\"user\",\"message\":{{\"role\":\"user\",\"content\":\"{prompt}\"}},\"uuid\":\"{}\",\"timestamp\":\"{ts}\"}}\n", rng.uuid()));
        let mid = format!("msg_{:016x}", rng.next());
        for _ in 0..(1 + rng.below(3)) {
            let text = {
                let n = 40 + rng.below(200) as usize;
                rng.words(n)
            };
            s.push_str(&format!("{{\"parentUuid\":\"{}\",\"isSidechain\":false,\"userType\":\"external\",\"cwd\":\"{cwd}\",\"sessionId\":\"{sid}\",\"version\":\"2.1.332\",\"type\":\"assistant\",\"message\":{{\"id\":\"{mid}\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-opus-5-5\",\"content\":[{{\"type\":\"text\",\"text\":\"{text}\"}}],\"stop_reason\":null,\"usage\":{{\"input_tokens\":{},\"output_tokens\":{}}}}},\"requestId\":\"req_{:x}\",\"uuid\":\"{}\",\"timestamp\":\"{ts}\"}}\n", rng.uuid(), rng.below(90000), rng.below(4000), rng.next(), rng.uuid()));
        }
        for _ in 0..rng.below(4) {
            claude_tool(rng, &mut s, sid, cwd, &mid, &ts);
        }
    }
    s.push_str(&format!(
        "{{\"type\":\"ai-title\",\"aiTitle\":\"{}\",\"sessionId\":\"{sid}\"}}\n",
        rng.words(4)
    ));
    s
}

/// One tool call and its result, shaped as Claude Code writes them (the result's `toolUseResult` copy too).
fn claude_tool(rng: &mut Rng, s: &mut String, sid: &str, cwd: &str, mid: &str, ts: &str) {
    let id = format!("toolu_{:016x}", rng.next());
    let file = format!("{cwd}/src/{}.rs", rng.words(1));
    let size = rng.result_size();
    let (name, input, content, extra, error) = match rng.below(4) {
        0 => {
            let body = rng.text_lines(size, false);
            let numbered = rng.text_lines(size, true);
            (
                "Read",
                format!("{{\"file_path\":\"{file}\"}}"),
                numbered,
                format!("{{\"type\":\"text\",\"file\":{{\"filePath\":\"{file}\",\"content\":\"{body}\",\"numLines\":40,\"startLine\":1,\"totalLines\":40}}}}"),
                false,
            )
        }
        1 => {
            let old = rng.words(12);
            let new = rng.words(16);
            let original = rng.text_lines(size, false);
            (
                "Edit",
                format!("{{\"file_path\":\"{file}\",\"old_string\":\"{old}\",\"new_string\":\"{new}\",\"replace_all\":false}}"),
                format!("The file {file} has been updated successfully."),
                format!("{{\"filePath\":\"{file}\",\"oldString\":\"{old}\",\"newString\":\"{new}\",\"originalFile\":\"{original}\",\"structuredPatch\":[{{\"oldStart\":3,\"oldLines\":1,\"newStart\":3,\"newLines\":1,\"lines\":[\"-{old}\",\"+{new}\"]}}],\"userModified\":false,\"replaceAll\":false}}"),
                false,
            )
        }
        2 => {
            let command = format!("cargo test -q {}", rng.words(2));
            let out = rng.text_lines(size, false);
            let error = rng.below(8) == 0;
            let content = if error {
                format!("Exit code 101\\n{out}\\nerror: test failed")
            } else {
                out.clone()
            };
            (
                "Bash",
                format!("{{\"command\":\"{command}\",\"description\":\"{}\"}}", rng.words(4)),
                content,
                format!("{{\"stdout\":\"{out}\",\"stderr\":\"\",\"interrupted\":false,\"isImage\":false}}"),
                error,
            )
        }
        _ => {
            let pattern = rng.words(1);
            let files = rng.text_lines(size / 2, false);
            (
                "Grep",
                format!("{{\"pattern\":\"{pattern}\",\"path\":\"{cwd}\",\"output_mode\":\"files_with_matches\"}}"),
                files.clone(),
                format!("{{\"mode\":\"files_with_matches\",\"filenames\":[\"{files}\"],\"numFiles\":12}}"),
                false,
            )
        }
    };
    s.push_str(&format!("{{\"parentUuid\":\"{}\",\"isSidechain\":false,\"userType\":\"external\",\"cwd\":\"{cwd}\",\"sessionId\":\"{sid}\",\"version\":\"2.1.332\",\"type\":\"assistant\",\"message\":{{\"id\":\"{mid}\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-opus-5-5\",\"content\":[{{\"type\":\"tool_use\",\"id\":\"{id}\",\"name\":\"{name}\",\"input\":{input}}}],\"stop_reason\":null}},\"uuid\":\"{}\",\"timestamp\":\"{ts}\"}}\n", rng.uuid(), rng.uuid()));
    s.push_str(&format!("{{\"parentUuid\":\"{}\",\"isSidechain\":false,\"userType\":\"external\",\"cwd\":\"{cwd}\",\"sessionId\":\"{sid}\",\"version\":\"2.1.332\",\"type\":\"user\",\"message\":{{\"role\":\"user\",\"content\":[{{\"tool_use_id\":\"{id}\",\"type\":\"tool_result\",\"content\":\"{content}\",\"is_error\":{error}}}]}},\"uuid\":\"{}\",\"timestamp\":\"{ts}\",\"toolUseResult\":{extra},\"sourceToolAssistantUUID\":\"{}\"}}\n", rng.uuid(), rng.uuid(), rng.uuid()));
}

/// One Codex shell call and its output: a classic `exec_command` function call, or (code mode) a
/// `custom_tool_call` `exec` whose script calls `tools.exec_command`, its output a list of parts.
fn codex_tool(rng: &mut Rng, s: &mut String, ts: &str, code_mode: bool) {
    let call = format!("call_{:016x}", rng.next());
    let cmd = format!("rg -n {} src", rng.words(2));
    let size = rng.result_size();
    let out = rng.text_lines(size, false);
    let exit = if rng.below(8) == 0 { 1 } else { 0 };
    let preamble = format!("Chunk ID: {:06x}\\nWall time: 0.{} seconds\\nProcess exited with code {exit}\\nOriginal token count: {}\\nOutput:\\n", rng.below(1 << 24), rng.below(1000), size / 4);
    if code_mode {
        s.push_str(&format!("{{\"timestamp\":\"{ts}\",\"type\":\"response_item\",\"payload\":{{\"type\":\"custom_tool_call\",\"status\":\"completed\",\"call_id\":\"{call}\",\"name\":\"exec\",\"input\":\"const r = await tools.exec_command({{\\\"cmd\\\":\\\"{cmd}\\\",\\\"workdir\\\":\\\"/repo\\\",\\\"yield_time_ms\\\":10000}});\\ntext(r.output);\"}}}}\n"));
        s.push_str(&format!("{{\"timestamp\":\"{ts}\",\"type\":\"response_item\",\"payload\":{{\"type\":\"custom_tool_call_output\",\"call_id\":\"{call}\",\"output\":[{{\"type\":\"input_text\",\"text\":\"Script completed\\nWall time 0.4 seconds\\nOutput:\\n\"}},{{\"type\":\"input_text\",\"text\":\"{preamble}{out}\"}}]}}}}\n"));
    } else {
        s.push_str(&format!("{{\"timestamp\":\"{ts}\",\"type\":\"response_item\",\"payload\":{{\"type\":\"function_call\",\"name\":\"exec_command\",\"arguments\":\"{{\\\"cmd\\\":\\\"{cmd}\\\",\\\"workdir\\\":\\\"/repo\\\"}}\",\"call_id\":\"{call}\"}}}}\n"));
        s.push_str(&format!("{{\"timestamp\":\"{ts}\",\"type\":\"response_item\",\"payload\":{{\"type\":\"function_call_output\",\"call_id\":\"{call}\",\"output\":\"{preamble}{out}\"}}}}\n"));
    }
}

fn codex_session(rng: &mut Rng, id: &str, cwd: &str, turns: usize, instructions: &str) -> String {
    let code_mode = rng.below(2) == 0;
    let mut s = format!(
        "{{\"timestamp\":\"2026-10-01T10:00:00.000Z\",\"type\":\"session_meta\",\"payload\":{{\"session_id\":\"{id}\",\"id\":\"{id}\",\"timestamp\":\"2026-10-01T10:00:00.000Z\",\"cwd\":\"{cwd}\",\"originator\":\"codex-tui\",\"cli_version\":\"0.171.0\",\"source\":\"cli\",\"thread_source\":\"user\",\"model_provider\":\"openai\",\"base_instructions\":{{\"text\":\"{instructions}\"}}}}}}\n"
    );
    s.push_str(&format!("{{\"timestamp\":\"2026-10-01T10:00:00.100Z\",\"type\":\"response_item\",\"payload\":{{\"type\":\"message\",\"role\":\"user\",\"content\":[{{\"type\":\"input_text\",\"text\":\"<environment_context>\\n  <cwd>{cwd}</cwd>\\n</environment_context>\"}}]}}}}\n"));
    for t in 0..turns {
        let ts = format!("2026-10-01T10:{:02}:{:02}.000Z", (t / 60) % 60, t % 60);
        let prompt = {
            let n = 8 + rng.below(30) as usize;
            rng.words(n)
        };
        s.push_str(&format!("{{\"timestamp\":\"{ts}\",\"type\":\"response_item\",\"payload\":{{\"type\":\"message\",\"role\":\"user\",\"content\":[{{\"type\":\"input_text\",\"text\":\"{prompt}\"}}]}}}}\n"));
        s.push_str(&format!("{{\"timestamp\":\"{ts}\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"user_message\",\"message\":\"{prompt}\",\"images\":[]}}}}\n"));
        s.push_str(&format!("{{\"timestamp\":\"{ts}\",\"type\":\"turn_context\",\"payload\":{{\"cwd\":\"{cwd}\",\"approval_policy\":\"on-request\",\"model\":\"gpt-6\"}}}}\n"));
        for _ in 0..rng.below(4) {
            codex_tool(rng, &mut s, &ts, code_mode);
        }
        let answer = {
            let n = 30 + rng.below(150) as usize;
            rng.words(n)
        };
        s.push_str(&format!("{{\"timestamp\":\"{ts}\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"agent_message\",\"message\":\"{answer}\"}}}}\n"));
        s.push_str(&format!("{{\"timestamp\":\"{ts}\",\"type\":\"event_msg\",\"payload\":{{\"type\":\"token_count\",\"info\":{{\"total_token_usage\":{{\"input_tokens\":{},\"output_tokens\":{}}}}}}}}}\n", rng.below(100000), rng.below(5000)));
    }
    s
}

fn write(p: &Path, body: &str, age: Duration) {
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::File::create(p)
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    set_age(p, age);
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let out = PathBuf::from(arg(&args, "--out").expect("--out DIR"));
    let sessions: usize = arg(&args, "--sessions")
        .map(|s| s.parse().unwrap())
        .unwrap_or(10_000);
    let repos: usize = arg(&args, "--repos")
        .map(|s| s.parse().unwrap())
        .unwrap_or(50);
    // Turns per session vary from 3 to 3 + max_turns - 1 (the default gives ~90 KiB sessions).
    let max_turns: u64 = arg(&args, "--max-turns")
        .map(|s| s.parse().unwrap())
        .unwrap_or(24);
    let mut rng = Rng(arg(&args, "--seed")
        .map(|s| s.parse().unwrap())
        .unwrap_or(1)
        ^ 0x9E3779B97F4A7C15);
    let home = out.join("home");
    let repo_dirs: Vec<PathBuf> = (0..repos)
        .map(|i| out.join(format!("repos/repo-{i:03}")))
        .collect();
    for r in &repo_dirs {
        std::fs::create_dir_all(r.join(".almanac/runs")).unwrap();
        std::fs::create_dir_all(r.join("src")).unwrap();
    }
    let instructions = "You are Codex, a coding agent. ".repeat(20 * 1024 / 31);
    let mut bytes = 0u64;
    for i in 0..sessions {
        let age = Duration::from_secs(3600 * (2 + rng.below(24 * 60)));
        let cwd = if rng.below(10) == 0 {
            out.join(format!("elsewhere/proj-{}", rng.below(20)))
                .display()
                .to_string()
        } else {
            let r = &repo_dirs[rng.below(repos as u64) as usize];
            if rng.below(3) == 0 {
                r.join("src").display().to_string()
            } else {
                r.display().to_string()
            }
        };
        let turns = 3 + rng.below(max_turns) as usize;
        if i % 2 == 0 {
            let sid = rng.uuid();
            let enc = cwd.replace(|c: char| !c.is_ascii_alphanumeric(), "-");
            let dir = home.join(".claude/projects").join(&enc);
            let body = claude_session(&mut rng, &sid, &cwd, turns);
            bytes += body.len() as u64;
            write(&dir.join(format!("{sid}.jsonl")), &body, age);
            // Half the Claude sessions spawned subagents.
            if rng.below(2) == 0 {
                for _ in 0..(1 + rng.below(3)) {
                    let agent = format!("{:016x}", rng.next());
                    let body = claude_session(&mut rng, &sid, &cwd, 2)
                        .replace("\"isSidechain\":false", "\"isSidechain\":true");
                    bytes += body.len() as u64;
                    write(
                        &dir.join(&sid)
                            .join("subagents")
                            .join(format!("agent-{agent}.jsonl")),
                        &body,
                        age,
                    );
                }
            }
        } else {
            let id = rng.uuid();
            let day = 1 + rng.below(28);
            let body = codex_session(&mut rng, &id, &cwd, turns, &instructions);
            bytes += body.len() as u64;
            write(
                &home.join(format!(
                    ".codex/sessions/2026/10/{day:02}/rollout-2026-10-{day:02}T10-00-00-{id}.jsonl"
                )),
                &body,
                age,
            );
        }
    }
    if let Some(mib) = arg(&args, "--big-mib").map(|s| s.parse::<u64>().unwrap()) {
        let sid = rng.uuid();
        let cwd = repo_dirs[0].display().to_string();
        let p = home.join(format!(".claude/projects/-big/{sid}.jsonl"));
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        let mut f = std::io::BufWriter::new(std::fs::File::create(&p).unwrap());
        let mut written = 0u64;
        while written < mib << 20 {
            let chunk = claude_session(&mut rng, &sid, &cwd, 50);
            f.write_all(chunk.as_bytes()).unwrap();
            written += chunk.len() as u64;
        }
        drop(f);
        set_age(&p, Duration::from_secs(7200));
        bytes += written;
        println!("big transcript: {} ({} MiB)", p.display(), written >> 20);
    }
    println!(
        "corpus: {} sessions, {} repos, {} MiB of transcripts under {}",
        sessions,
        repos,
        bytes >> 20,
        out.display()
    );
}
