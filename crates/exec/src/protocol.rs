//! The envelope of the worker protocol: what a worker may send its parent on the protocol
//! channel (one JSON object a line), parsed strictly, and the bounds on how much it may send.
//!
//! A worker sends, in this order: one [`Envelope::Ready`] line as it starts, then for each
//! request any number of [`Envelope::Aside`] lines (each answered by the parent with one
//! [`AsideReply`] line) and one [`Envelope::Reply`]. Anything else — a line that is not a JSON
//! object, an aside with an unknown `op`, a reply whose `result` is neither `ok` nor `error`,
//! an error reply without a string `kind` and `message`, a line longer than
//! [`Bounds::message`], or more than [`Bounds::request`] bytes for one request — is a
//! [`ProtocolError`], and the parent kills the worker at once: it can no longer be believed.
//!
//! The body of an `ok` reply is request-specific and stays a JSON map here (the engine reads
//! the fields it asked for); what the envelope types buy is that a worker cannot smuggle an
//! aside the parent does not know, or a reply the parent would half-read, past the parser.

use serde::Deserialize;
use serde_json::{Map, Value};

/// Bytes any single message may take besides its timing samples: far above the largest
/// legitimate reply that is not about timed calls (the judge's `hello` environment is a few
/// KiB; error messages and tracebacks are cut to [`ERROR_TEXT_LIMIT`] each by the workers).
pub const MESSAGE_BASE: usize = 1 << 20;
/// Bytes allowed per timed call on top of [`MESSAGE_BASE`]: a timing reply carries per call a
/// time, a set index and a CUPTI span (each under 25 bytes of JSON), the judge's timed-set
/// reply a key and a sealing time; 256 leaves room for all of them with margin.
pub const BYTES_PER_TIMED_CALL: usize = 256;
/// Bytes allowed per correctness round on top of [`MESSAGE_BASE`]: a batch reply carries per
/// round a digest, timings and a status line (about 200 bytes).
pub const BYTES_PER_ROUND: usize = 1024;
/// Characters of an error reply's `message` and of its `traceback` the workers send at most
/// (head and tail kept; `kg_wire.error_reply`), so that a compiler's full output or a deep
/// recursion cannot push a legitimate error past [`MESSAGE_BASE`].
pub const ERROR_TEXT_LIMIT: usize = 32 * 1024;
/// How many times one message's bound a request's messages may add up to (its asides and
/// its reply): the time request sends one aside per timed call and a reply of the same order.
pub const REQUEST_FACTOR: usize = 4;

/// How much a worker may send: per message, and per request (all its asides and its reply).
///
/// The parent buffers at most `message + 1` bytes of one worker's unread line at any time
/// (the buffer grows geometrically but is clamped there), so a worker streaming bytes with no
/// newline costs kg-bench at most that much memory per worker (two per lane: judge and
/// candidate) plus the parsed JSON of one message, and is killed when it passes the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// The most bytes one line (one message) may take, newline excluded.
    pub message: usize,
    /// The most bytes the worker may send while answering one request.
    pub request: usize,
}

impl Bounds {
    /// The bounds of the untrusted candidate in a run that asks for up to `timed_calls` timed
    /// calls (`--iterations`) and `rounds` correctness rounds per workload: [`MESSAGE_BASE`]
    /// plus [`BYTES_PER_TIMED_CALL`] per call and [`BYTES_PER_ROUND`] per round, and
    /// [`REQUEST_FACTOR`] times that per request: 1.02 MiB and 4.09 MiB for the default 50
    /// calls and 10 rounds.
    pub fn for_run(timed_calls: u32, rounds: u32) -> Bounds {
        let message = MESSAGE_BASE
            .saturating_add((timed_calls as usize).saturating_mul(BYTES_PER_TIMED_CALL))
            .saturating_add((rounds as usize).saturating_mul(BYTES_PER_ROUND));
        Bounds {
            message,
            request: message.saturating_mul(REQUEST_FACTOR),
        }
    }

    /// The bounds of the trusted judge: a safety net against a harness bug, not an attacker's
    /// limit (no candidate can reach the judge's channel). Its replies carry what the candidate
    /// needs to draw each round (custom inputs: the reference's whole source, per round), so
    /// they can be far larger than a candidate's: 256 MiB per message, 1 GiB per request.
    pub const TRUSTED: Bounds = Bounds {
        message: 256 << 20,
        request: 1 << 30,
    };
}

impl Default for Bounds {
    /// The candidate's bounds for the default 50 timed calls and 10 rounds.
    fn default() -> Self {
        Bounds::for_run(50, 10)
    }
}

/// Why a worker's messages broke the protocol (the parent kills the worker).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProtocolError {
    /// A line grew past the per-message bound without ending.
    #[error(
        "the worker sent a message longer than the per-message bound of {limit} bytes (no newline within it); it was killed"
    )]
    MessageTooLong {
        /// The bound, in bytes.
        limit: usize,
    },
    /// The messages answering one request added up to more than the per-request bound.
    #[error(
        "the worker sent more than the per-request bound of {limit} bytes while answering one request; it was killed"
    )]
    RequestTooLarge {
        /// The bound, in bytes.
        limit: usize,
    },
    /// A line is not JSON.
    #[error("the worker sent a line that is not JSON ({error}): `{excerpt}`")]
    NotJson {
        /// The parser's complaint.
        error: String,
        /// The end of the line, at most 200 bytes.
        excerpt: String,
    },
    /// A line is JSON but not an object.
    #[error("the worker sent a message that is not a JSON object: `{excerpt}`")]
    NotObject {
        /// The start of the line, at most 200 bytes.
        excerpt: String,
    },
    /// The object is not a ready line, an aside or a reply as the envelope defines them.
    #[error("the worker sent a malformed message: {0}")]
    Envelope(String),
    /// A well-formed message came where another kind was due (e.g. a reply before `ready`).
    #[error("the worker sent {got} where {expected} was due")]
    Unexpected {
        /// What came.
        got: &'static str,
        /// What the parent waited for.
        expected: &'static str,
    },
}

/// A question a worker asks in the middle of answering a request (`{"aside": true, "op": ...}`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Aside {
    /// The key of timed input set `index`, asked as the call that uses it starts.
    TimedKey {
        /// Which timed set (0-based, in call order).
        index: u64,
    },
}

/// The parent's answer to one [`Aside`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsideReply {
    /// The key asked for (`{"key": "..."}`).
    Key(String),
    /// Acknowledged, nothing to hand out (`{"result": "ok"}`: the judge's reference calls make
    /// the same round trip as the candidate's key requests).
    Ack,
    /// Refused, with why (`{"error": "..."}`).
    Refused(String),
}

impl AsideReply {
    /// The JSON line sent back.
    pub fn to_json(&self) -> Value {
        match self {
            AsideReply::Key(k) => serde_json::json!({ "key": k }),
            AsideReply::Ack => serde_json::json!({ "result": "ok" }),
            AsideReply::Refused(why) => serde_json::json!({ "error": why }),
        }
    }
}

/// A worker's answer to a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// `{"result": "ok", ...}`: the whole object, request-specific fields included.
    Ok(Map<String, Value>),
    /// `{"result": "error", "kind": ..., "message": ..., "traceback"?: ...}`.
    Error {
        /// The kind (`compile`, `runtime`, `exception`, `protocol`, `invalid_reference`...).
        kind: String,
        /// What went wrong.
        message: String,
        /// The worker-side traceback, if any.
        traceback: Option<String>,
        /// The whole object.
        body: Map<String, Value>,
    },
}

impl Reply {
    /// The reply as the JSON object it came as.
    pub fn into_value(self) -> Value {
        match self {
            Reply::Ok(body) | Reply::Error { body, .. } => Value::Object(body),
        }
    }
}

/// One message from a worker.
#[derive(Debug, Clone, PartialEq)]
pub enum Envelope {
    /// `{"ready": true}`: the worker's first line, once it serves requests.
    Ready,
    /// A question during a request.
    Aside(Aside),
    /// The answer to the request.
    Reply(Reply),
}

impl Envelope {
    /// What kind of message this is, for errors.
    pub fn kind(&self) -> &'static str {
        match self {
            Envelope::Ready => "a ready line",
            Envelope::Aside(_) => "an aside",
            Envelope::Reply(_) => "a reply",
        }
    }
}

/// The fields of an error reply the envelope requires.
#[derive(Deserialize)]
struct ErrorFields {
    kind: String,
    message: String,
    #[serde(default)]
    traceback: Option<String>,
}

fn excerpt(line: &[u8], from_end: bool) -> String {
    let s = String::from_utf8_lossy(line);
    if from_end {
        crate::process::tail(&s, 200).to_string()
    } else {
        s.chars().take(200).collect()
    }
}

/// Parses one line (without its newline) strictly.
pub fn parse(line: &[u8]) -> Result<Envelope, ProtocolError> {
    let v: Value = serde_json::from_slice(line).map_err(|e| ProtocolError::NotJson {
        error: e.to_string(),
        excerpt: excerpt(line, true),
    })?;
    let Value::Object(mut m) = v else {
        return Err(ProtocolError::NotObject {
            excerpt: excerpt(line, false),
        });
    };
    if let Some(flag) = m.remove("aside") {
        if flag != Value::Bool(true) {
            return Err(ProtocolError::Envelope(format!(
                "`aside` is {flag}, expected true"
            )));
        }
        let aside = Aside::deserialize(Value::Object(m)).map_err(|e| {
            ProtocolError::Envelope(format!(
                "an aside the parent does not know ({e}); expected {{\"aside\": true, \"op\": \"timed_key\", \"index\": N}}"
            ))
        })?;
        return Ok(Envelope::Aside(aside));
    }
    if let Some(flag) = m.get("ready") {
        if *flag != Value::Bool(true) || m.len() != 1 {
            return Err(ProtocolError::Envelope(
                "a ready line must be exactly {\"ready\": true}".into(),
            ));
        }
        return Ok(Envelope::Ready);
    }
    match m.get("result").and_then(Value::as_str) {
        Some("ok") => Ok(Envelope::Reply(Reply::Ok(m))),
        Some("error") => {
            let f = ErrorFields::deserialize(&Value::Object(m.clone())).map_err(|e| {
                ProtocolError::Envelope(format!(
                    "an error reply needs a string `kind` and `message` ({e})"
                ))
            })?;
            Ok(Envelope::Reply(Reply::Error {
                kind: f.kind,
                message: f.message,
                traceback: f.traceback,
                body: m,
            }))
        }
        _ => Err(ProtocolError::Envelope(format!(
            "`result` is {}, expected \"ok\" or \"error\"",
            m.get("result")
                .map_or_else(|| "missing".to_string(), Value::to_string)
        ))),
    }
}

/// Unread bytes of one worker's protocol channel: complete lines are taken off the front, and
/// the buffer never holds more than a message's bound plus one byte (the one that proves a
/// line too long), however fast the worker writes.
#[derive(Debug, Default)]
pub struct LineBuffer {
    buf: Vec<u8>,
    /// The largest capacity the buffer ever had (bytes), for tests and diagnostics.
    peak: usize,
}

/// Bytes read from the channel per `read` call at most.
const CHUNK: usize = 64 * 1024;

impl LineBuffer {
    /// Takes the next complete line (without its newline) if one is buffered; an error if the
    /// buffered start of a line is already longer than `limit`.
    pub fn take_line(&mut self, limit: usize) -> Result<Option<Vec<u8>>, ProtocolError> {
        let window = &self.buf[..self.buf.len().min(limit.saturating_add(1))];
        match window.iter().position(|&b| b == b'\n') {
            Some(i) => {
                let line = self.buf[..i].to_vec();
                self.buf.drain(..=i);
                Ok(Some(line))
            }
            None if self.buf.len() > limit => Err(ProtocolError::MessageTooLong { limit }),
            None => Ok(None),
        }
    }

    /// Reads once from `src` (at most what keeps the buffer within `limit + 1` bytes) and
    /// returns how many bytes came (0: end of stream). Call [`LineBuffer::take_line`] first:
    /// it refuses a buffer already past `limit`, so the buffer never exceeds `limit + 1`.
    pub fn fill(&mut self, src: &mut impl std::io::Read, limit: usize) -> std::io::Result<usize> {
        let room = limit.saturating_add(1).saturating_sub(self.buf.len());
        let want = room.clamp(1, CHUNK);
        let mut chunk = [0u8; CHUNK];
        let n = src.read(&mut chunk[..want])?;
        let need = self.buf.len() + n;
        if need > self.buf.capacity() {
            // Geometric growth (amortised copies), but never past the bound.
            let target = need
                .max(self.buf.capacity().saturating_mul(2))
                .min(limit.saturating_add(1).max(need));
            self.buf.reserve_exact(target - self.buf.len());
        }
        self.buf.extend_from_slice(&chunk[..n]);
        self.peak = self.peak.max(self.buf.capacity());
        Ok(n)
    }

    /// Whether bytes of an unfinished line are buffered.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The largest capacity the buffer ever reached, in bytes.
    pub fn peak(&self) -> usize {
        self.peak
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_asides_and_ready_parse_strictly() {
        assert_eq!(parse(br#"{"ready": true}"#), Ok(Envelope::Ready));
        assert!(parse(br#"{"ready": true, "x": 1}"#).is_err());
        assert_eq!(
            parse(br#"{"aside": true, "op": "timed_key", "index": 3}"#),
            Ok(Envelope::Aside(Aside::TimedKey { index: 3 }))
        );
        for bad in [
            r#"{"aside": true, "op": "other"}"#,
            r#"{"aside": true, "op": "timed_key"}"#,
            r#"{"aside": true, "op": "timed_key", "index": -1}"#,
            r#"{"aside": true, "op": "timed_key", "index": 1, "extra": 2}"#,
            r#"{"aside": 1, "op": "timed_key", "index": 1}"#,
        ] {
            let e = parse(bad.as_bytes()).unwrap_err();
            assert!(matches!(e, ProtocolError::Envelope(_)), "{bad}: {e}");
        }
        let Ok(Envelope::Reply(Reply::Ok(m))) = parse(br#"{"result": "ok", "times_ms": [1.5]}"#)
        else {
            panic!("not an ok reply")
        };
        assert_eq!(m["times_ms"][0], 1.5);
        let Ok(Envelope::Reply(Reply::Error { kind, message, .. })) =
            parse(br#"{"result": "error", "kind": "runtime", "message": "boom"}"#)
        else {
            panic!("not an error reply")
        };
        assert_eq!((kind.as_str(), message.as_str()), ("runtime", "boom"));
        for bad in [
            r#"{"result": "error", "kind": "runtime"}"#,
            r#"{"result": "error", "kind": 3, "message": "x"}"#,
            r#"{"result": "PASSED"}"#,
            r#"{"evaluation": {"status": "PASSED"}}"#,
        ] {
            assert!(
                matches!(parse(bad.as_bytes()), Err(ProtocolError::Envelope(_))),
                "{bad}"
            );
        }
        assert!(matches!(
            parse(b"[1]"),
            Err(ProtocolError::NotObject { .. })
        ));
        assert!(matches!(
            parse(b"{\"a\""),
            Err(ProtocolError::NotJson { .. })
        ));
    }

    #[test]
    fn bounds_grow_with_the_timed_calls_and_rounds() {
        let b = Bounds::for_run(50, 10);
        assert_eq!(
            b.message,
            MESSAGE_BASE + 50 * BYTES_PER_TIMED_CALL + 10 * BYTES_PER_ROUND
        );
        assert_eq!(b.request, REQUEST_FACTOR * b.message);
        assert_eq!(b, Bounds::default());
        assert!(Bounds::for_run(u32::MAX, u32::MAX).message > MESSAGE_BASE);
        assert!(Bounds::TRUSTED.message > 100 * b.message);
    }

    /// A source that streams `b'x'` forever, never a newline.
    struct Flood;
    impl std::io::Read for Flood {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            buf.fill(b'x');
            Ok(buf.len())
        }
    }

    #[test]
    fn a_line_with_no_end_is_refused_once_past_the_bound_and_the_buffer_stays_within_it() {
        let limit = 300_000;
        let mut lb = LineBuffer::default();
        let mut reads = 0;
        let err = loop {
            match lb.take_line(limit) {
                Ok(None) => {}
                Ok(Some(_)) => panic!("a line without a newline"),
                Err(e) => break e,
            }
            lb.fill(&mut Flood, limit).unwrap();
            reads += 1;
            assert!(reads < 1000, "never refused");
        };
        assert_eq!(err, ProtocolError::MessageTooLong { limit });
        assert!(lb.peak() <= limit + 1, "buffer grew to {}", lb.peak());
    }

    #[test]
    fn lines_are_split_and_the_rest_kept() {
        let mut lb = LineBuffer::default();
        let mut src: &[u8] = b"{\"ready\": true}\n{\"result\": \"ok\"}\npart";
        while lb.fill(&mut src, 100).unwrap() > 0 {}
        assert_eq!(lb.take_line(100).unwrap().unwrap(), b"{\"ready\": true}");
        assert_eq!(lb.take_line(100).unwrap().unwrap(), b"{\"result\": \"ok\"}");
        assert_eq!(lb.take_line(100).unwrap(), None);
        assert!(!lb.is_empty());
        // A line of exactly the bound is fine; one byte more is not.
        let mut lb = LineBuffer::default();
        let mut src: &[u8] = b"12345\n";
        while lb.fill(&mut src, 5).unwrap() > 0 {}
        assert_eq!(lb.take_line(5).unwrap().unwrap(), b"12345");
        let mut lb = LineBuffer::default();
        let mut src: &[u8] = b"123456\n";
        while lb.fill(&mut src, 5).unwrap() > 0 {}
        assert!(lb.take_line(5).is_err());
    }
}
