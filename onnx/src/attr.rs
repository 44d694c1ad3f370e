use alloc::{format, string::String, vec::Vec};

use crate::proto::attribute_proto::AttributeType;
use crate::{AttributeProto, GraphProto, NodeProto, OnnxError, TensorProto};

/// Typed access to a node's attributes, for importers.
///
/// Each `attr_*` getter returns `Ok(None)` when the attribute is absent (ONNX defaults then
/// apply), and an error naming the node, the attribute, the type asked for and the type found
/// when it has another type, no value, or is a reference to a function attribute.
///
/// ```
/// use kiln_onnx::{AttributeProto, NodeAttrs, NodeProto};
///
/// let axis = AttributeProto { name: Some("axis".into()), r#type: Some(2), i: Some(1), ..Default::default() };
/// let node = NodeProto { op_type: Some("Concat".into()), attribute: vec![axis], ..Default::default() };
/// assert_eq!(node.attr_int("axis")?, Some(1));
/// assert_eq!(node.attr_int("keepdims")?.unwrap_or(1), 1);
/// assert_eq!(
///     node.attr_float("axis").unwrap_err().to_string(),
///     "node '' (Concat): attribute 'axis' is INT, expected FLOAT"
/// );
/// # Ok::<(), kiln_onnx::OnnxError>(())
/// ```
pub trait NodeAttrs {
    /// The attribute called `name`, if the node has one.
    ///
    /// ```
    /// use kiln_onnx::NodeAttrs;
    /// assert!(kiln_onnx::NodeProto::default().attr("axis").is_none());
    /// ```
    fn attr(&self, name: &str) -> Option<&AttributeProto>;

    /// An `INT` attribute.
    ///
    /// ```
    /// use kiln_onnx::NodeAttrs;
    /// assert_eq!(kiln_onnx::NodeProto::default().attr_int("axis")?, None);
    /// # Ok::<(), kiln_onnx::OnnxError>(())
    /// ```
    fn attr_int(&self, name: &str) -> Result<Option<i64>, OnnxError>;

    /// A `FLOAT` attribute.
    ///
    /// ```
    /// use kiln_onnx::NodeAttrs;
    /// assert_eq!(kiln_onnx::NodeProto::default().attr_float("alpha")?, None);
    /// # Ok::<(), kiln_onnx::OnnxError>(())
    /// ```
    fn attr_float(&self, name: &str) -> Result<Option<f32>, OnnxError>;

    /// A `STRING` attribute; an error if it is not UTF-8 (use [`NodeAttrs::attr`] for the bytes).
    ///
    /// ```
    /// use kiln_onnx::NodeAttrs;
    /// assert_eq!(kiln_onnx::NodeProto::default().attr_string("mode")?, None);
    /// # Ok::<(), kiln_onnx::OnnxError>(())
    /// ```
    fn attr_string(&self, name: &str) -> Result<Option<&str>, OnnxError>;

    /// A `TENSOR` attribute (e.g. `Constant`'s `value`); read it with [`crate::tensor_value`].
    ///
    /// ```
    /// use kiln_onnx::NodeAttrs;
    /// assert!(kiln_onnx::NodeProto::default().attr_tensor("value")?.is_none());
    /// # Ok::<(), kiln_onnx::OnnxError>(())
    /// ```
    fn attr_tensor(&self, name: &str) -> Result<Option<&TensorProto>, OnnxError>;

    /// A `GRAPH` attribute (the bodies of `If`, `Loop`, `Scan`).
    ///
    /// ```
    /// use kiln_onnx::NodeAttrs;
    /// assert!(kiln_onnx::NodeProto::default().attr_graph("body")?.is_none());
    /// # Ok::<(), kiln_onnx::OnnxError>(())
    /// ```
    fn attr_graph(&self, name: &str) -> Result<Option<&GraphProto>, OnnxError>;

    /// An `INTS` attribute.
    ///
    /// ```
    /// use kiln_onnx::NodeAttrs;
    /// assert_eq!(kiln_onnx::NodeProto::default().attr_ints("perm")?, None);
    /// # Ok::<(), kiln_onnx::OnnxError>(())
    /// ```
    fn attr_ints(&self, name: &str) -> Result<Option<&[i64]>, OnnxError>;

    /// A `FLOATS` attribute.
    ///
    /// ```
    /// use kiln_onnx::NodeAttrs;
    /// assert_eq!(kiln_onnx::NodeProto::default().attr_floats("scales")?, None);
    /// # Ok::<(), kiln_onnx::OnnxError>(())
    /// ```
    fn attr_floats(&self, name: &str) -> Result<Option<&[f32]>, OnnxError>;

    /// A `STRINGS` attribute; an error if an element is not UTF-8.
    ///
    /// ```
    /// use kiln_onnx::NodeAttrs;
    /// assert_eq!(kiln_onnx::NodeProto::default().attr_strings("activations")?, None);
    /// # Ok::<(), kiln_onnx::OnnxError>(())
    /// ```
    fn attr_strings(&self, name: &str) -> Result<Option<Vec<&str>>, OnnxError>;

    /// The error for a required attribute that is absent.
    ///
    /// ```
    /// use kiln_onnx::{NodeAttrs, NodeProto};
    /// let node = NodeProto { name: Some("t".into()), op_type: Some("Transpose".into()), ..Default::default() };
    /// let err = node.attr_ints("perm")?.ok_or_else(|| node.missing_attr("perm")).unwrap_err();
    /// assert_eq!(err.to_string(), "node 't' (Transpose): required attribute 'perm' is missing");
    /// # Ok::<(), kiln_onnx::OnnxError>(())
    /// ```
    fn missing_attr(&self, name: &str) -> OnnxError;
}

impl NodeAttrs for NodeProto {
    fn attr(&self, name: &str) -> Option<&AttributeProto> {
        self.attribute.iter().find(|a| a.name() == name)
    }

    fn attr_int(&self, name: &str) -> Result<Option<i64>, OnnxError> {
        typed(self, name, AttributeType::Int, |a| a.i.ok_or(NO_VALUE))
    }

    fn attr_float(&self, name: &str) -> Result<Option<f32>, OnnxError> {
        typed(self, name, AttributeType::Float, |a| a.f.ok_or(NO_VALUE))
    }

    fn attr_string(&self, name: &str) -> Result<Option<&str>, OnnxError> {
        typed(self, name, AttributeType::String, |a| {
            utf8(a.s.as_deref().ok_or(NO_VALUE)?)
        })
    }

    fn attr_tensor(&self, name: &str) -> Result<Option<&TensorProto>, OnnxError> {
        typed(self, name, AttributeType::Tensor, |a| {
            a.t.as_ref().ok_or(NO_VALUE)
        })
    }

    fn attr_graph(&self, name: &str) -> Result<Option<&GraphProto>, OnnxError> {
        typed(self, name, AttributeType::Graph, |a| {
            a.g.as_ref().ok_or(NO_VALUE)
        })
    }

    fn attr_ints(&self, name: &str) -> Result<Option<&[i64]>, OnnxError> {
        typed(self, name, AttributeType::Ints, |a| Ok(&a.ints[..]))
    }

    fn attr_floats(&self, name: &str) -> Result<Option<&[f32]>, OnnxError> {
        typed(self, name, AttributeType::Floats, |a| Ok(&a.floats[..]))
    }

    fn attr_strings(&self, name: &str) -> Result<Option<Vec<&str>>, OnnxError> {
        typed(self, name, AttributeType::Strings, |a| {
            a.strings.iter().map(|s| utf8(s)).collect()
        })
    }

    fn missing_attr(&self, name: &str) -> OnnxError {
        OnnxError::MissingAttribute {
            node: self.name().into(),
            op_type: self.op_type().into(),
            attr: name.into(),
        }
    }
}

const NO_VALUE: &str = "without a value";

fn utf8(bytes: &[u8]) -> Result<&str, &'static str> {
    core::str::from_utf8(bytes).map_err(|_| "that is not UTF-8")
}

/// Looks up `name` and reads it with `get` if it has type `expected`; `get` says what is wrong
/// with the value otherwise.
fn typed<'a, T>(
    node: &'a NodeProto,
    name: &str,
    expected: AttributeType,
    get: impl FnOnce(&'a AttributeProto) -> Result<T, &'static str>,
) -> Result<Option<T>, OnnxError> {
    let Some(a) = node.attr(name) else {
        return Ok(None);
    };
    let type_code = a.r#type.unwrap_or_default();
    let found: String = if !a.ref_attr_name().is_empty() {
        format!(
            "a reference to the function attribute '{}'",
            a.ref_attr_name()
        )
    } else if type_code != expected as i32 {
        match AttributeType::try_from(type_code) {
            Ok(t) => t.as_str_name().into(),
            Err(_) => format!("of unknown type code {type_code}"),
        }
    } else {
        match get(a) {
            Ok(value) => return Ok(Some(value)),
            Err(problem) => format!("{} {problem}", expected.as_str_name()),
        }
    };
    Err(OnnxError::Attribute {
        node: node.name().into(),
        op_type: node.op_type().into(),
        attr: name.into(),
        expected: expected.as_str_name(),
        found,
    })
}
