//! The error messages of every error path, and the encodings the suites do not cover.

use kiln_onnx::proto::{StringStringEntryProto, tensor_proto};
use kiln_onnx::{
    AttributeProto, DataType, GraphProto, ModelProto, NodeAttrs, NodeProto, OnnxError, TensorElems,
    TensorProto, decode_model, read_model, tensor_value,
};
use prost::Message;

/// A tensor called 'W' with `dtype` and `dims` and no data yet.
fn tensor(dtype: DataType, dims: &[i64]) -> TensorProto {
    TensorProto {
        name: Some("W".into()),
        data_type: Some(dtype as i32),
        dims: dims.to_vec(),
        ..Default::default()
    }
}

fn message(t: &TensorProto) -> String {
    tensor_value(t).unwrap_err().to_string()
}

fn values(t: &TensorProto) -> TensorElems {
    tensor_value(t).unwrap().data
}

#[test]
fn truncated_and_graphless_models() {
    let node = NodeProto {
        op_type: Some("Relu".into()),
        ..Default::default()
    };
    let graph = GraphProto {
        node: vec![node; 3],
        ..Default::default()
    };
    let bytes = ModelProto {
        graph: Some(graph),
        ..Default::default()
    }
    .encode_to_vec();
    assert!(decode_model(&bytes).is_ok());
    let err = decode_model(&bytes[..bytes.len() - 2])
        .unwrap_err()
        .in_file("model.onnx");
    assert_eq!(
        err.to_string(),
        "model.onnx: not an ONNX model (ModelProto): failed to decode Protobuf message: \
         ModelProto.graph: buffer underflow"
    );
    assert_eq!(
        decode_model(&[]).unwrap_err().to_string(),
        "not an ONNX model (ModelProto): it has no graph"
    );
}

#[test]
fn unreadable_file() {
    let err = read_model("/nonexistent/model.onnx")
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("/nonexistent/model.onnx: cannot read: "),
        "{err}"
    );
}

#[test]
fn data_of_the_wrong_length() {
    let raw = TensorProto {
        raw_data: Some(vec![0; 10]),
        ..tensor(DataType::Float, &[3])
    };
    assert_eq!(
        message(&raw),
        "tensor 'W': raw_data holds 10 bytes, 12 expected for FLOAT [3]"
    );
    let typed = TensorProto {
        float_data: vec![1.0; 2],
        ..tensor(DataType::Float, &[3])
    };
    assert_eq!(
        message(&typed),
        "tensor 'W': float_data holds 2 values, 3 expected for FLOAT [3]"
    );
    // A scalar has one element; no data at all is a mismatch, not an empty tensor.
    assert_eq!(
        message(&tensor(DataType::Int64, &[])),
        "tensor 'W': int64_data holds 0 values, 1 expected for INT64 []"
    );
    // Five INT4 elements pack into three int32_data entries.
    let int4 = TensorProto {
        int32_data: vec![0; 5],
        ..tensor(DataType::Int4, &[5])
    };
    assert_eq!(
        message(&int4),
        "tensor 'W': int32_data holds 5 values, 3 expected for INT4 [5]"
    );
    let strings = TensorProto {
        string_data: vec![vec![]],
        ..tensor(DataType::String, &[2])
    };
    assert_eq!(
        message(&strings),
        "tensor 'W': string_data holds 1 values, 2 expected for STRING [2]"
    );
}

#[test]
fn external_data() {
    let entry = |k: &str, v: &str| StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v.into()),
    };
    let t = TensorProto {
        data_location: Some(tensor_proto::DataLocation::External as i32),
        external_data: vec![entry("offset", "0"), entry("location", "weights.bin")],
        ..tensor(DataType::Float, &[3])
    };
    assert_eq!(
        message(&t),
        "tensor 'W' uses external data (location 'weights.bin'); external data is not supported yet"
    );
}

#[test]
fn huge_and_negative_dims() {
    // 2^60 elements: an error from comparing lengths, before any allocation.
    let huge = TensorProto {
        raw_data: Some(vec![0; 4]),
        ..tensor(DataType::Uint8, &[1 << 60])
    };
    assert_eq!(
        message(&huge),
        "tensor 'W': raw_data holds 4 bytes, 1152921504606846976 expected for UINT8 [1152921504606846976]"
    );
    let overflow = tensor(DataType::Float, &[1 << 40, 1 << 40]);
    assert_eq!(
        message(&overflow),
        "tensor 'W': dims [1099511627776, 1099511627776] hold more elements than this platform \
         can address"
    );
    // The element count fits, its size in bytes does not.
    let bytes = TensorProto {
        raw_data: Some(vec![]),
        ..tensor(DataType::Double, &[1 << 62])
    };
    assert!(message(&bytes).ends_with("hold more elements than this platform can address"));
    assert_eq!(
        message(&tensor(DataType::Float, &[2, -1])),
        "tensor 'W': dims [2, -1] contain a negative dimension"
    );
    // A zero dim makes the tensor empty whatever the others are.
    assert_eq!(
        values(&tensor(DataType::Float, &[0, 1 << 62])),
        TensorElems::F32(vec![])
    );
}

#[test]
fn unsupported_types_and_layouts() {
    let mut unknown = tensor(DataType::Float, &[1]);
    unknown.data_type = Some(99);
    assert_eq!(
        message(&unknown),
        "tensor 'W' uses unknown data type code 99, which is not supported"
    );
    assert_eq!(
        message(&tensor(DataType::Complex64, &[1])),
        "tensor 'W' uses data type COMPLEX64, which is not supported"
    );
    assert_eq!(
        message(&TensorProto {
            name: Some("W".into()),
            ..Default::default()
        }),
        "tensor 'W' uses data type UNDEFINED, which is not supported"
    );
    let raw_strings = TensorProto {
        raw_data: Some(vec![]),
        ..tensor(DataType::String, &[0])
    };
    assert_eq!(
        message(&raw_strings),
        "tensor 'W' uses raw_data for STRING elements (ONNX requires string_data), which is not \
         supported"
    );
    let segment = tensor_proto::Segment {
        begin: Some(0),
        end: Some(2),
    };
    let segment = TensorProto {
        segment: Some(segment),
        ..tensor(DataType::Float, &[2])
    };
    assert_eq!(
        message(&segment),
        "tensor 'W' uses a segment [0, 2) of a larger tensor, which is not supported"
    );
}

#[test]
fn encodings_not_in_the_suites() {
    let t = |dtype, dims: &[i64]| tensor(dtype, dims);
    let scalar = TensorProto {
        raw_data: Some(2.5f64.to_le_bytes().into()),
        ..t(DataType::Double, &[])
    };
    assert_eq!(tensor_value(&scalar).unwrap().dims, Vec::<usize>::new());
    assert_eq!(values(&scalar), TensorElems::F64(vec![2.5]));
    let u32s = TensorProto {
        uint64_data: vec![7, 1 << 32 | 5],
        ..t(DataType::Uint32, &[2])
    };
    assert_eq!(values(&u32s), TensorElems::U32(vec![7, 5]));
    let bools = TensorProto {
        int32_data: vec![0, 1, 2],
        ..t(DataType::Bool, &[3])
    };
    assert_eq!(values(&bools), TensorElems::Bool(vec![false, true, true]));
    let i8s = TensorProto {
        int32_data: vec![-3, 127],
        ..t(DataType::Int8, &[2])
    };
    assert_eq!(values(&i8s), TensorElems::I8(vec![-3, 127]));
    // Three UINT4 values in two raw bytes, low nibble first.
    let u4 = TensorProto {
        raw_data: Some(vec![0x21, 0x03]),
        ..t(DataType::Uint4, &[3])
    };
    assert_eq!(
        values(&u4),
        TensorElems::Codes {
            dtype: DataType::Uint4,
            codes: vec![1, 2, 3]
        }
    );
    // FLOAT6: four codes in three raw bytes (the layout formula of onnx.proto) or one per int32.
    let f6 = TensorProto {
        raw_data: Some(vec![0x81, 0x30, 0x10]),
        ..t(DataType::Float6e2m3, &[4])
    };
    let codes = TensorElems::Codes {
        dtype: DataType::Float6e2m3,
        codes: vec![1, 2, 3, 4],
    };
    assert_eq!(values(&f6), codes);
    let f6 = TensorProto {
        int32_data: vec![1, 2, 3, 4],
        ..t(DataType::Float6e2m3, &[4])
    };
    assert_eq!(values(&f6), codes);
}

fn node(attribute: AttributeProto) -> NodeProto {
    NodeProto {
        name: Some("n1".into()),
        op_type: Some("Pad".into()),
        attribute: vec![attribute],
        ..Default::default()
    }
}

fn attr(r#type: i32) -> AttributeProto {
    AttributeProto {
        name: Some("mode".into()),
        r#type: Some(r#type),
        ..Default::default()
    }
}

#[test]
fn attribute_errors() {
    use kiln_onnx::proto::attribute_proto::AttributeType as A;
    let err = |n: &NodeProto| n.attr_string("mode").unwrap_err().to_string();
    let ints = node(AttributeProto {
        ints: vec![1],
        ..attr(A::Ints as i32)
    });
    assert_eq!(
        err(&ints),
        "node 'n1' (Pad): attribute 'mode' is INTS, expected STRING"
    );
    let empty = node(attr(A::String as i32));
    assert_eq!(
        err(&empty),
        "node 'n1' (Pad): attribute 'mode' is STRING without a value, expected STRING"
    );
    let latin1 = node(AttributeProto {
        s: Some(vec![0xe9]),
        ..attr(A::String as i32)
    });
    assert_eq!(
        err(&latin1),
        "node 'n1' (Pad): attribute 'mode' is STRING that is not UTF-8, expected STRING"
    );
    let unknown = node(attr(42));
    assert_eq!(
        err(&unknown),
        "node 'n1' (Pad): attribute 'mode' is of unknown type code 42, expected STRING"
    );
    let reference = node(AttributeProto {
        ref_attr_name: Some("m".into()),
        ..attr(A::String as i32)
    });
    assert_eq!(
        err(&reference),
        "node 'n1' (Pad): attribute 'mode' is a reference to the function attribute 'm', expected STRING"
    );
    let ok = node(AttributeProto {
        s: Some(b"reflect".to_vec()),
        ..attr(A::String as i32)
    });
    assert_eq!(ok.attr_string("mode").unwrap(), Some("reflect"));
    assert_eq!(ok.attr_ints("pads").unwrap(), None);
    assert_eq!(
        ok.missing_attr("pads").to_string(),
        "node 'n1' (Pad): required attribute 'pads' is missing"
    );
    let strings = node(AttributeProto {
        strings: vec![b"a".to_vec(), vec![0xff]],
        ..attr(A::Strings as i32)
    });
    assert!(matches!(
        strings.attr_strings("mode"),
        Err(OnnxError::Attribute { .. })
    ));
}
