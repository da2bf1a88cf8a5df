//! Decoding of Kubernetes protobuf request bodies (`k8s\0` + `runtime.Unknown`) into JSON,
//! for the kinds kubectl's imperative commands send that way (`kubectl create namespace`,
//! `create configmap`, `create secret`, `create serviceaccount`, `create deployment`,
//! `create service`, `run`). Field numbers are those of k8s.io/api's `generated.proto`.
//! Responses are always JSON (clients accept it); other kinds get 415.

use base64::Engine;
use serde_json::{Map, Value};

/// How one field is decoded.
#[derive(Clone, Copy)]
enum Ty {
    Str,
    /// A scalar integer dropped when zero (`omitempty` non-pointer fields).
    Int,
    /// An integer kept even when zero (pointer or non-`omitempty` fields).
    IntKeep,
    Bool,
    BoolKeep,
    Msg(&'static [F]),
    MapStr,
    MapBytes,
    MapQuantity,
    IntOrString,
}

/// One field of a message: number, JSON name, type, repeated.
#[derive(Clone, Copy)]
struct F(u32, &'static str, Ty, bool);

const fn f(n: u32, name: &'static str, ty: Ty) -> F {
    F(n, name, ty, false)
}
const fn rep(n: u32, name: &'static str, ty: Ty) -> F {
    F(n, name, ty, true)
}

use Ty::*;

const OWNER_REF: &[F] = &[
    f(5, "apiVersion", Str),
    f(1, "kind", Str),
    f(3, "name", Str),
    f(4, "uid", Str),
    f(6, "controller", BoolKeep),
    f(7, "blockOwnerDeletion", BoolKeep),
];
const OBJECT_META: &[F] = &[
    f(1, "name", Str),
    f(2, "generateName", Str),
    f(3, "namespace", Str),
    f(6, "resourceVersion", Str),
    f(11, "labels", MapStr),
    f(12, "annotations", MapStr),
    rep(13, "ownerReferences", Msg(OWNER_REF)),
    rep(14, "finalizers", Str),
];
const SELECTOR_REQ: &[F] = &[
    f(1, "key", Str),
    f(2, "operator", Str),
    rep(3, "values", Str),
];
const LABEL_SELECTOR: &[F] = &[
    f(1, "matchLabels", MapStr),
    rep(2, "matchExpressions", Msg(SELECTOR_REQ)),
];
const LOCAL_REF: &[F] = &[f(1, "name", Str)];
const OBJECT_REF: &[F] = &[
    f(1, "kind", Str),
    f(2, "namespace", Str),
    f(3, "name", Str),
    f(4, "uid", Str),
    f(5, "apiVersion", Str),
    f(6, "resourceVersion", Str),
    f(7, "fieldPath", Str),
];
const CONTAINER_PORT: &[F] = &[
    f(1, "name", Str),
    f(2, "hostPort", Int),
    f(3, "containerPort", IntKeep),
    f(4, "protocol", Str),
    f(5, "hostIP", Str),
];
const FIELD_SELECTOR: &[F] = &[f(1, "apiVersion", Str), f(2, "fieldPath", Str)];
const ENV_SOURCE: &[F] = &[f(1, "fieldRef", Msg(FIELD_SELECTOR))];
const ENV_VAR: &[F] = &[
    f(1, "name", Str),
    f(2, "value", Str),
    f(3, "valueFrom", Msg(ENV_SOURCE)),
];
const RESOURCES: &[F] = &[f(1, "limits", MapQuantity), f(2, "requests", MapQuantity)];
const VOLUME_MOUNT: &[F] = &[
    f(1, "name", Str),
    f(2, "readOnly", Bool),
    f(3, "mountPath", Str),
    f(4, "subPath", Str),
];
const CONTAINER: &[F] = &[
    f(1, "name", Str),
    f(2, "image", Str),
    rep(3, "command", Str),
    rep(4, "args", Str),
    f(5, "workingDir", Str),
    rep(6, "ports", Msg(CONTAINER_PORT)),
    rep(7, "env", Msg(ENV_VAR)),
    // Always serialised by the Go types, even when empty.
    f(8, "resources", Msg(RESOURCES)),
    rep(9, "volumeMounts", Msg(VOLUME_MOUNT)),
    f(13, "terminationMessagePath", Str),
    f(20, "terminationMessagePolicy", Str),
    f(14, "imagePullPolicy", Str),
    f(16, "stdin", Bool),
    f(17, "stdinOnce", Bool),
    f(18, "tty", Bool),
];
const TOLERATION: &[F] = &[
    f(1, "key", Str),
    f(2, "operator", Str),
    f(3, "value", Str),
    f(4, "effect", Str),
    f(5, "tolerationSeconds", IntKeep),
];
const POD_SPEC: &[F] = &[
    rep(20, "initContainers", Msg(CONTAINER)),
    rep(2, "containers", Msg(CONTAINER)),
    f(3, "restartPolicy", Str),
    f(4, "terminationGracePeriodSeconds", IntKeep),
    f(5, "activeDeadlineSeconds", IntKeep),
    f(6, "dnsPolicy", Str),
    f(7, "nodeSelector", MapStr),
    f(8, "serviceAccountName", Str),
    f(9, "serviceAccount", Str),
    f(21, "automountServiceAccountToken", BoolKeep),
    f(10, "nodeName", Str),
    f(11, "hostNetwork", Bool),
    rep(15, "imagePullSecrets", Msg(LOCAL_REF)),
    f(16, "hostname", Str),
    f(17, "subdomain", Str),
    f(19, "schedulerName", Str),
    rep(22, "tolerations", Msg(TOLERATION)),
    f(24, "priorityClassName", Str),
    f(25, "priority", IntKeep),
    f(30, "enableServiceLinks", BoolKeep),
    f(31, "preemptionPolicy", Str),
];
const POD_TEMPLATE: &[F] = &[
    f(1, "metadata", Msg(OBJECT_META)),
    f(2, "spec", Msg(POD_SPEC)),
];
const ROLLING_UPDATE: &[F] = &[
    f(1, "maxUnavailable", IntOrString),
    f(2, "maxSurge", IntOrString),
];
const STRATEGY: &[F] = &[
    f(1, "type", Str),
    f(2, "rollingUpdate", Msg(ROLLING_UPDATE)),
];
const DEPLOYMENT_SPEC: &[F] = &[
    f(1, "replicas", IntKeep),
    f(2, "selector", Msg(LABEL_SELECTOR)),
    f(3, "template", Msg(POD_TEMPLATE)),
    f(4, "strategy", Msg(STRATEGY)),
    f(5, "minReadySeconds", Int),
    f(6, "revisionHistoryLimit", IntKeep),
    f(7, "paused", Bool),
    f(9, "progressDeadlineSeconds", IntKeep),
];
const SERVICE_PORT: &[F] = &[
    f(1, "name", Str),
    f(2, "protocol", Str),
    f(6, "appProtocol", Str),
    f(3, "port", IntKeep),
    f(4, "targetPort", IntOrString),
    f(5, "nodePort", Int),
];
const SERVICE_SPEC: &[F] = &[
    rep(1, "ports", Msg(SERVICE_PORT)),
    f(2, "selector", MapStr),
    f(3, "clusterIP", Str),
    rep(18, "clusterIPs", Str),
    f(4, "type", Str),
    rep(5, "externalIPs", Str),
    f(7, "sessionAffinity", Str),
    f(10, "externalName", Str),
    f(11, "externalTrafficPolicy", Str),
    rep(19, "ipFamilies", Str),
    f(17, "ipFamilyPolicy", Str),
    f(22, "internalTrafficPolicy", Str),
];
const NAMESPACE_SPEC: &[F] = &[rep(1, "finalizers", Str)];

/// The top-level schema of each supported `(apiVersion, kind)`.
fn schema(api_version: &str, kind: &str) -> Option<&'static [F]> {
    const META: F = f(1, "metadata", Msg(OBJECT_META));
    static NAMESPACE: &[F] = &[META, f(2, "spec", Msg(NAMESPACE_SPEC))];
    static CONFIG_MAP: &[F] = &[
        META,
        f(2, "data", MapStr),
        f(3, "binaryData", MapBytes),
        f(4, "immutable", BoolKeep),
    ];
    static SECRET: &[F] = &[
        META,
        f(2, "data", MapBytes),
        f(3, "type", Str),
        f(4, "stringData", MapStr),
        f(5, "immutable", BoolKeep),
    ];
    static SERVICE_ACCOUNT: &[F] = &[
        META,
        rep(2, "secrets", Msg(OBJECT_REF)),
        rep(3, "imagePullSecrets", Msg(LOCAL_REF)),
        f(4, "automountServiceAccountToken", BoolKeep),
    ];
    static POD: &[F] = &[META, f(2, "spec", Msg(POD_SPEC))];
    static SERVICE: &[F] = &[META, f(2, "spec", Msg(SERVICE_SPEC))];
    static DEPLOYMENT: &[F] = &[META, f(2, "spec", Msg(DEPLOYMENT_SPEC))];
    match (api_version, kind) {
        ("v1", "Namespace") => Some(NAMESPACE),
        ("v1", "ConfigMap") => Some(CONFIG_MAP),
        ("v1", "Secret") => Some(SECRET),
        ("v1", "ServiceAccount") => Some(SERVICE_ACCOUNT),
        ("v1", "Pod") => Some(POD),
        ("v1", "Service") => Some(SERVICE),
        ("apps/v1", "Deployment") => Some(DEPLOYMENT),
        _ => None,
    }
}

/// A protobuf reader over one message's bytes.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn varint(&mut self) -> Option<u64> {
        let mut out = 0u64;
        for shift in (0..64).step_by(7) {
            let (&b, rest) = self.buf.split_first()?;
            self.buf = rest;
            out |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Some(out);
            }
        }
        None
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let len = usize::try_from(self.varint()?).ok()?;
        if len > self.buf.len() {
            return None;
        }
        let (b, rest) = self.buf.split_at(len);
        self.buf = rest;
        Some(b)
    }

    /// Next (field number, wire type) and the value as varint or bytes; fixed-width values are skipped.
    fn next(&mut self) -> Option<Option<(u32, Wire<'a>)>> {
        if self.buf.is_empty() {
            return Some(None);
        }
        let key = self.varint()?;
        let num = u32::try_from(key >> 3).ok()?;
        let wire = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            2 => Wire::Bytes(self.bytes()?),
            1 => {
                self.buf = self.buf.get(8..)?;
                Wire::Skipped
            }
            5 => {
                self.buf = self.buf.get(4..)?;
                Wire::Skipped
            }
            _ => return None,
        };
        Some(Some((num, wire)))
    }
}

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Skipped,
}

fn string(b: &[u8]) -> Option<String> {
    String::from_utf8(b.to_vec()).ok()
}

/// A map entry message: key = 1, value = 2 (value bytes returned raw).
fn map_entry(b: &[u8]) -> Option<(String, &[u8])> {
    let mut r = Reader { buf: b };
    let (mut key, mut value) = (String::new(), &b[..0]);
    while let Some((num, w)) = r.next()? {
        match (num, w) {
            (1, Wire::Bytes(k)) => key = string(k)?,
            (2, Wire::Bytes(v)) => value = v,
            _ => {}
        }
    }
    Some((key, value))
}

/// `resource.Quantity` is a message with its string form in field 1.
fn quantity(b: &[u8]) -> Option<String> {
    let mut r = Reader { buf: b };
    let mut out = String::new();
    while let Some((num, w)) = r.next()? {
        if let (1, Wire::Bytes(s)) = (num, w) {
            out = string(s)?;
        }
    }
    Some(out)
}

fn int_or_string(b: &[u8]) -> Option<Value> {
    let mut r = Reader { buf: b };
    let (mut ty, mut int, mut s) = (0u64, 0i64, String::new());
    while let Some((num, w)) = r.next()? {
        match (num, w) {
            (1, Wire::Varint(v)) => ty = v,
            (2, Wire::Varint(v)) => int = v as i64,
            (3, Wire::Bytes(v)) => s = string(v)?,
            _ => {}
        }
    }
    Some(if ty == 1 {
        Value::String(s)
    } else {
        Value::from(int as i32)
    })
}

fn message(b: &[u8], schema: &'static [F]) -> Option<Map<String, Value>> {
    let mut r = Reader { buf: b };
    let mut out = Map::new();
    while let Some((num, w)) = r.next()? {
        let Some(F(_, name, ty, repeated)) = schema.iter().find(|x| x.0 == num).copied() else {
            continue;
        };
        let value = match (ty, w) {
            (Str, Wire::Bytes(s)) => Value::String(string(s)?),
            (Int | IntKeep, Wire::Varint(v)) => Value::from(v as i64),
            (Bool | BoolKeep, Wire::Varint(v)) => Value::Bool(v != 0),
            (Msg(inner), Wire::Bytes(s)) => Value::Object(message(s, inner)?),
            (IntOrString, Wire::Bytes(s)) => int_or_string(s)?,
            (MapStr | MapBytes | MapQuantity, Wire::Bytes(s)) => {
                let (k, v) = map_entry(s)?;
                let v = match ty {
                    MapStr => Value::String(string(v)?),
                    MapBytes => Value::String(base64::engine::general_purpose::STANDARD.encode(v)),
                    _ => Value::String(quantity(v)?),
                };
                let entry = out
                    .entry(name.to_string())
                    .or_insert_with(|| Value::Object(Map::new()));
                if let Some(m) = entry.as_object_mut() {
                    m.insert(k, v);
                }
                continue;
            }
            _ => continue,
        };
        // Zero values of non-pointer `omitempty` fields are not part of the JSON form.
        let zero = match (&ty, &value) {
            (Str, Value::String(s)) => s.is_empty(),
            (Int, v) => v.as_i64() == Some(0),
            (Bool, Value::Bool(b)) => !b,
            _ => false,
        };
        if repeated {
            let entry = out
                .entry(name.to_string())
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Some(a) = entry.as_array_mut() {
                a.push(value);
            }
        } else if !zero {
            out.insert(name.to_string(), value);
        }
    }
    Some(out)
}

/// Decodes a `k8s\0` protobuf body. `Err` carries the (apiVersion, kind) when the kind is
/// not one the emulator can decode.
pub fn decode(body: &[u8]) -> Result<Value, String> {
    let rest = body
        .strip_prefix(b"k8s\0")
        .ok_or("not a protobuf envelope")?;
    let mut r = Reader { buf: rest };
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &rest[..0]);
    while let Some((num, w)) = r.next().ok_or("malformed protobuf envelope")? {
        match (num, w) {
            (1, Wire::Bytes(tm)) => {
                let mut t = Reader { buf: tm };
                while let Some((n, w)) = t.next().ok_or("malformed type meta")? {
                    match (n, w) {
                        (1, Wire::Bytes(v)) => api_version = string(v).unwrap_or_default(),
                        (2, Wire::Bytes(v)) => kind = string(v).unwrap_or_default(),
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(b)) => raw = b,
            _ => {}
        }
    }
    let schema =
        schema(&api_version, &kind).ok_or_else(|| format!("{api_version}, Kind={kind}"))?;
    let mut obj = message(raw, schema).ok_or("malformed protobuf object")?;
    obj.insert("apiVersion".into(), Value::String(api_version));
    obj.insert("kind".into(), Value::String(kind));
    Ok(Value::Object(obj))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(num: u32, wire: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![((num << 3) | u32::from(wire)) as u8];
        if wire == 2 {
            out.push(payload.len() as u8);
        }
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn decodes_a_namespace_envelope() {
        let meta = field(1, 2, b"team");
        let ns = field(1, 2, &meta);
        let type_meta = [field(1, 2, b"v1"), field(2, 2, b"Namespace")].concat();
        let unknown = [field(1, 2, &type_meta), field(2, 2, &ns)].concat();
        let body = [b"k8s\0".as_slice(), &unknown].concat();
        let v = decode(&body).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team"}})
        );
    }
}
