//! Chakra execution traces (MLCommons Chakra, `schema/protobuf/et_def.proto`, vendored in
//! `et_def.proto` with its source and license): the generated message types and the file
//! framing.
//!
//! A `.et` file is a stream of length-delimited messages, each a varint length then the
//! message (`chakra/src/third_party/utils/protolib.py`, `encodeMessage` / `decodeMessage`):
//! one `GlobalMetadata` first, then `Node`s. Per-rank traces are named `prefix.<rank>.et`
//! (ASTRA-sim's `Workload::Workload` opens `et_filename + "." + id + ".et"`).
//!
//! Invariant: wire types and framing only; what a node means to fleetsim is
//! `sim::interop::chakra_convert`'s business.
#![allow(missing_debug_implementations, unreachable_pub, clippy::all)]

pub use prost::Message;

/// The messages of `et_def.proto` (package `ChakraProtoMsg`).
pub mod et {
    include!(concat!(env!("OUT_DIR"), "/chakra_proto_msg.rs"));
}

use et::attribute_proto::Value;
use et::{AttributeProto, GlobalMetadata, Node};

/// What is wrong with a trace file's framing or messages; `offset` is the byte where the
/// message (its length prefix) starts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("the file is empty: a Chakra trace starts with a GlobalMetadata message")]
    Empty,
    #[error("the file is gzip-compressed; decompress it (gunzip) and name the .et file it holds")]
    Gzip,
    #[error("byte {offset}: the length prefix of message {index} is not a valid varint")]
    BadVarint { offset: usize, index: usize },
    #[error(
        "byte {offset}: message {index} says it is {length} bytes long but only {left} remain; the file is truncated or its length prefix is wrong"
    )]
    Truncated {
        offset: usize,
        index: usize,
        length: u64,
        left: usize,
    },
    #[error(
        "byte {offset}: message {index} is empty (a Node with every field at its default); a node has at least an id or a type, so the file is damaged or padded with zero bytes"
    )]
    EmptyNode { offset: usize, index: usize },
    #[error("byte {offset}: message {index} is not a valid {what}: {reason}")]
    Decode {
        offset: usize,
        index: usize,
        what: &'static str,
        reason: String,
    },
}

/// A decoded trace: its metadata and its nodes, each with the byte offset it starts at.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    pub metadata: GlobalMetadata,
    pub nodes: Vec<Node>,
    /// Byte offset of each node's frame, for errors.
    pub offsets: Vec<usize>,
}

/// Reads a varint at `bytes[at..]`: (value, bytes used), or `None` when it is cut short or
/// longer than ten bytes.
fn varint(bytes: &[u8], at: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for (i, &b) in bytes.get(at..)?.iter().take(10).enumerate() {
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((value, i + 1));
        }
    }
    None
}

/// The frames of a trace, one at a time: (offset of the length prefix, message bytes). Every
/// length is checked against the bytes left before anything is taken from it.
#[derive(Debug, Clone)]
pub struct Frames<'a> {
    bytes: &'a [u8],
    at: usize,
    index: usize,
    failed: bool,
}

impl<'a> Frames<'a> {
    /// The frames of `bytes`; the first item is an error for an empty or gzip-compressed file.
    pub fn new(bytes: &'a [u8]) -> Self {
        Frames {
            bytes,
            at: 0,
            index: 0,
            failed: false,
        }
    }
}

impl<'a> Iterator for Frames<'a> {
    type Item = Result<(usize, &'a [u8]), FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        let fail = |me: &mut Self, e| {
            me.failed = true;
            Some(Err(e))
        };
        if self.failed {
            return None;
        }
        let bytes = self.bytes;
        if self.at == 0 {
            if bytes.is_empty() {
                return fail(self, FrameError::Empty);
            }
            if bytes.starts_with(&[0x1f, 0x8b]) {
                return fail(self, FrameError::Gzip);
            }
        }
        if self.at >= bytes.len() {
            return None;
        }
        let (at, index) = (self.at, self.index);
        let Some((length, used)) = varint(bytes, at) else {
            return fail(self, FrameError::BadVarint { offset: at, index });
        };
        let start = at + used;
        let left = bytes.len() - start;
        if length > left as u64 {
            return fail(
                self,
                FrameError::Truncated {
                    offset: at,
                    index,
                    length,
                    left,
                },
            );
        }
        let end = start + length as usize;
        self.at = end;
        self.index += 1;
        Some(Ok((at, &bytes[start..end])))
    }
}

/// Splits `bytes` into its frames: (offset of the length prefix, message bytes).
pub fn frames(bytes: &[u8]) -> Result<Vec<(usize, &[u8])>, FrameError> {
    Frames::new(bytes).collect()
}

/// Decodes a whole trace file.
///
/// Memory follows the file: the framing is checked over the whole file first (every length
/// prefix against the bytes left, no allocation), then the nodes are decoded into a vector of
/// exactly their number. A node frame of zero bytes (every field at its default: id 0,
/// `INVALID_NODE`, nothing else) is refused: it describes nothing, and a file of zero bytes
/// would otherwise hold one such node per byte, each a few hundred bytes in memory. A node
/// therefore takes at least three bytes of the file; prost checks every length inside a
/// message against the bytes left, and its in-memory messages take at most about a hundred
/// bytes per byte they were decoded from (an empty attribute: two bytes in the file).
pub fn decode(bytes: &[u8]) -> Result<Trace, FrameError> {
    let mut count = 0usize;
    for frame in Frames::new(bytes) {
        let (offset, body) = frame?;
        if count > 0 && body.is_empty() {
            return Err(FrameError::EmptyNode {
                offset,
                index: count,
            });
        }
        count += 1;
    }
    let decode_error = |offset, index, what, e: prost::DecodeError| FrameError::Decode {
        offset,
        index,
        what,
        reason: e.to_string(),
    };
    let nodes = count.saturating_sub(1);
    let mut trace = Trace {
        metadata: GlobalMetadata::default(),
        nodes: Vec::with_capacity(nodes),
        offsets: Vec::with_capacity(nodes),
    };
    for (index, frame) in Frames::new(bytes).enumerate() {
        let (offset, body) = frame?;
        if index == 0 {
            trace.metadata = GlobalMetadata::decode(body)
                .map_err(|e| decode_error(offset, index, "GlobalMetadata", e))?;
        } else {
            trace
                .nodes
                .push(Node::decode(body).map_err(|e| decode_error(offset, index, "Node", e))?);
            trace.offsets.push(offset);
        }
    }
    Ok(trace)
}

/// Encodes a trace file: the metadata, then every node, each length-delimited.
pub fn encode(metadata: &GlobalMetadata, nodes: &[Node]) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing into a Vec cannot run out of space.
    let _ = metadata.encode_length_delimited(&mut out);
    for node in nodes {
        let _ = node.encode_length_delimited(&mut out);
    }
    out
}

/// The attribute `name` of a node or metadata, if present.
pub fn attr<'a>(attrs: &'a [AttributeProto], name: &str) -> Option<&'a Value> {
    attrs
        .iter()
        .find(|a| a.name == name)
        .and_then(|a| a.value.as_ref())
}

/// An integer attribute of any of the schema's integer kinds; `None` for another kind or a
/// negative value.
pub fn as_u64(value: &Value) -> Option<u64> {
    match *value {
        Value::Int32Val(v) | Value::Sint32Val(v) | Value::Sfixed32Val(v) => u64::try_from(v).ok(),
        Value::Int64Val(v) | Value::Sint64Val(v) | Value::Sfixed64Val(v) => u64::try_from(v).ok(),
        Value::Uint32Val(v) | Value::Fixed32Val(v) => Some(u64::from(v)),
        Value::Uint64Val(v) | Value::Fixed64Val(v) => Some(v),
        _ => None,
    }
}

/// A string attribute.
pub fn as_str(value: &Value) -> Option<&str> {
    match value {
        Value::StringVal(s) => Some(s),
        _ => None,
    }
}

/// A named attribute holding `value`.
pub fn attribute(name: &str, value: Value) -> AttributeProto {
    AttributeProto {
        name: name.to_string(),
        doc_string: String::new(),
        value: Some(value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(id: u64) -> Node {
        Node {
            id,
            name: format!("n{id}"),
            r#type: et::NodeType::CompNode as i32,
            duration_micros: 7,
            attr: vec![attribute("num_ops", Value::Int64Val(1 << 40))],
            ..Node::default()
        }
    }

    #[test]
    fn a_trace_round_trips() {
        let metadata = GlobalMetadata {
            version: "0.0.4".into(),
            attr: Vec::new(),
        };
        let nodes = vec![node(0), node(1)];
        let bytes = encode(&metadata, &nodes);
        let trace = decode(&bytes).expect("decodes");
        assert_eq!(trace.metadata, metadata);
        assert_eq!(trace.nodes, nodes);
        assert_eq!(trace.offsets[0], metadata.encoded_len() + 1);
        assert_eq!(
            attr(&trace.nodes[0].attr, "num_ops").and_then(as_u64),
            Some(1 << 40)
        );
    }

    #[test]
    fn a_cut_file_is_truncated() {
        let bytes = encode(&GlobalMetadata::default(), &[node(0)]);
        let err = decode(&bytes[..bytes.len() - 2]).expect_err("cut");
        assert!(
            matches!(err, FrameError::Truncated { index: 1, .. }),
            "{err}"
        );
    }

    /// A file of zero bytes is a metadata message then empty frames: refused at the first
    /// node, before anything is allocated for the rest (it used to ask for gigabytes).
    #[test]
    fn zero_bytes_are_refused_at_the_first_empty_node() {
        let zeros = vec![0u8; 10 << 20];
        assert_eq!(
            decode(&zeros).expect_err("zeros"),
            FrameError::EmptyNode {
                offset: 1,
                index: 1
            }
        );
        // A lone empty metadata message is a trace without nodes.
        assert_eq!(decode(&[0]).expect("metadata only").nodes.len(), 0);
    }

    /// Every length prefix is checked against the bytes left, also one that would not fit
    /// in memory.
    #[test]
    fn a_length_beyond_the_file_is_truncated_not_allocated() {
        let mut bytes = vec![0u8];
        bytes.extend([0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert!(matches!(
            decode(&bytes).expect_err("huge length"),
            FrameError::Truncated {
                offset: 1,
                index: 1,
                length: u64::MAX,
                left: 0
            }
        ));
    }

    #[test]
    fn frames_stop_after_the_first_error() {
        let frames: Vec<_> = Frames::new(&[0, 0x80]).collect();
        assert_eq!(frames.len(), 2);
        assert!(frames[1].is_err());
        assert_eq!(Frames::new(&[]).count(), 1);
    }

    #[test]
    fn an_unfinished_varint_is_an_error() {
        assert_eq!(
            frames(&[0x80]).expect_err("varint"),
            FrameError::BadVarint {
                offset: 0,
                index: 0
            }
        );
    }
}
