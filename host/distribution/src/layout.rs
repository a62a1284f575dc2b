//! The CNCF WebAssembly OCI artifact layout: what `push` writes and what
//! `pull` accepts.
//!
//! An OCI image manifest (`application/vnd.oci.image.manifest.v1+json`)
//! whose config has the media type `application/vnd.wasm.config.v0+json`
//! and whose one layer is the component itself, `application/wasm`. The
//! config is JSON: `created` (RFC 3339), `author` (optional),
//! `architecture` `"wasm"`, `os` `"wasip2"` (a component), `layerDigests`
//! (the layers' digests, in manifest order) and `component` (`exports`,
//! `imports`: the component's top-level interface names).
//!
//! A signature sidecar travels as the manifest annotation
//! [`SIGNATURE_ANNOTATION`], its bytes in standard base64: the manifest is
//! content-addressed, so the signature is covered by the manifest digest
//! and arrives in the same request, and the layout keeps its one layer.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::Error;

/// The manifest's media type: an OCI image manifest.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// An OCI image index (a multi-platform list): refused, with a message.
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// The config media type of a wasm artifact.
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// The media type of the one layer: the component's bytes.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// The config's `architecture`.
pub const WASM_ARCHITECTURE: &str = "wasm";
/// The config's `os` for a component (`wasip1` is a core module).
pub const COMPONENT_OS: &str = "wasip2";
/// The manifest annotation carrying a signature sidecar, base64.
pub const SIGNATURE_ANNOTATION: &str = "dev.sandgraph.signature";
/// The standard annotation naming the artifact: the graph's name.
pub const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";

const MIB: usize = 1024 * 1024;
/// Largest component pushed or pulled: the runtime's loader refuses larger
/// ones anyway (its own `MAX_COMPONENT_BYTES`), so nothing larger is
/// worth a download. Checked against the manifest before a byte of the
/// layer is fetched, and again while it streams.
pub const MAX_COMPONENT_BYTES: usize = 64 * MIB;
/// Largest manifest read. Ours is well under 1 KiB plus the signature
/// annotation (base64 of at most [`MAX_SIGNATURE_BYTES`]); the bound stops
/// a hostile registry from feeding an unbounded document to the parser.
pub const MAX_MANIFEST_BYTES: usize = 256 * 1024;
/// Largest config blob read: a few hundred bytes of fields plus the
/// component's import and export names.
pub const MAX_CONFIG_BYTES: usize = 256 * 1024;
/// Largest signature carried. A sidecar is a small JSON document; this
/// is the signing side's own bound on the file (sandgraph-artifact's
/// `MAX_SIGNATURE_FILE`).
pub const MAX_SIGNATURE_BYTES: usize = 64 * 1024;
/// Most names kept in the config's `component.exports`/`imports`: a graph
/// imports a few dozen interfaces; the cap keeps the config under
/// [`MAX_CONFIG_BYTES`] whatever the component says.
pub const MAX_INTERFACE_NAMES: usize = 256;
/// Longest interface name kept in the config; longer ones are skipped.
pub const MAX_INTERFACE_NAME_BYTES: usize = 256;

/// `sha256:<hex>` of `bytes`, the OCI digest form.
pub(crate) fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Checks that `digest` is `sha256:` and 64 lowercase hex digits, the only
/// algorithm this client computes and so the only one it can verify.
pub(crate) fn check_digest(digest: &str, what: &str) -> Result<(), Error> {
    let ok = digest.strip_prefix("sha256:").is_some_and(|h| {
        h.len() == 64
            && h.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    });
    if ok {
        Ok(())
    } else {
        Err(Error::Layout(format!(
            "{what} digest {:?} is not sha256:<64 lowercase hex digits>",
            crate::excerpt(digest)
        )))
    }
}

/// A content descriptor of the manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The blob's media type.
    pub media_type: String,
    /// `sha256:<hex>` of the blob.
    pub digest: String,
    /// The blob's size in bytes.
    pub size: u64,
    /// OCI annotations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// An OCI image manifest, as far as this layout reads it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// The manifest's media type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The config blob.
    pub config: Descriptor,
    /// The layers: one component layer.
    pub layers: Vec<Descriptor>,
    /// OCI annotations (the signature travels in one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<BTreeMap<String, String>>,
}

/// The `component` field of the config.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ComponentInfo {
    /// The interfaces the component exports.
    pub exports: Vec<String>,
    /// The interfaces it imports.
    pub imports: Vec<String>,
}

/// The config blob, `application/vnd.wasm.config.v0+json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WasmConfig {
    /// RFC 3339 time of the build.
    pub created: String,
    /// Who made it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    /// Always `wasm`.
    pub architecture: String,
    /// `wasip2`.
    pub os: String,
    /// The digests of the layers, in order.
    pub layer_digests: Vec<String>,
    /// What the component exports and imports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub component: Option<ComponentInfo>,
}

/// What to push: the component and what travels with it.
#[derive(Debug, Clone, Default)]
pub struct Artifact {
    /// The component's bytes (the one layer).
    pub component: Vec<u8>,
    /// The signature sidecar's bytes, opaque; carried as
    /// [`SIGNATURE_ANNOTATION`].
    pub signature: Option<Vec<u8>>,
    /// The component's top-level export and import names, for the config.
    pub interfaces: ComponentInfo,
    /// The graph's name, for [`TITLE_ANNOTATION`].
    pub title: Option<String>,
    /// The config's `author`.
    pub author: Option<String>,
    /// The config's `created`, RFC 3339; now when `None`.
    pub created: Option<String>,
}

/// The blobs and manifest of an artifact, serialized, with their digests.
#[derive(Debug, Clone)]
pub struct Built {
    /// The config blob.
    pub config: Vec<u8>,
    /// Its digest.
    pub config_digest: String,
    /// The component layer's digest.
    pub layer_digest: String,
    /// The manifest.
    pub manifest: Vec<u8>,
    /// Its digest: what a pull by digest names.
    pub manifest_digest: String,
}

/// Keeps the interface names that fit the bounds.
fn bounded_names(names: &[String]) -> Vec<String> {
    names
        .iter()
        .filter(|n| n.len() <= MAX_INTERFACE_NAME_BYTES)
        .take(MAX_INTERFACE_NAMES)
        .cloned()
        .collect()
}

/// Serializes the artifact's config and manifest, checking every bound the
/// pulling side checks, so nothing is pushed that `pull` would refuse.
pub fn build(artifact: &Artifact) -> Result<Built, Error> {
    if artifact.component.len() > MAX_COMPONENT_BYTES {
        return Err(Error::TooLarge(format!(
            "the component is {} bytes, more than the {MAX_COMPONENT_BYTES} a graph component may be",
            artifact.component.len()
        )));
    }
    let layer_digest = sha256_digest(&artifact.component);
    let config = WasmConfig {
        created: artifact.created.clone().unwrap_or_else(|| {
            chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
        }),
        author: artifact.author.clone(),
        architecture: WASM_ARCHITECTURE.into(),
        os: COMPONENT_OS.into(),
        layer_digests: vec![layer_digest.clone()],
        component: Some(ComponentInfo {
            exports: bounded_names(&artifact.interfaces.exports),
            imports: bounded_names(&artifact.interfaces.imports),
        }),
    };
    let config = serde_json::to_vec(&config).map_err(|e| Error::Layout(e.to_string()))?;
    if config.len() > MAX_CONFIG_BYTES {
        return Err(Error::TooLarge(format!(
            "the config is {} bytes, more than {MAX_CONFIG_BYTES}",
            config.len()
        )));
    }
    let config_digest = sha256_digest(&config);
    let mut annotations = BTreeMap::new();
    if let Some(title) = &artifact.title {
        annotations.insert(TITLE_ANNOTATION.to_string(), title.clone());
    }
    if let Some(sig) = &artifact.signature {
        if sig.len() > MAX_SIGNATURE_BYTES {
            return Err(Error::TooLarge(format!(
                "the signature is {} bytes, more than the {MAX_SIGNATURE_BYTES} a signature may be",
                sig.len()
            )));
        }
        annotations.insert(
            SIGNATURE_ANNOTATION.to_string(),
            base64::engine::general_purpose::STANDARD.encode(sig),
        );
    }
    let manifest = Manifest {
        schema_version: 2,
        media_type: Some(MANIFEST_MEDIA_TYPE.into()),
        config: Descriptor {
            media_type: WASM_CONFIG_MEDIA_TYPE.into(),
            digest: config_digest.clone(),
            size: config.len() as u64,
            annotations: None,
        },
        layers: vec![Descriptor {
            media_type: WASM_LAYER_MEDIA_TYPE.into(),
            digest: layer_digest.clone(),
            size: artifact.component.len() as u64,
            annotations: None,
        }],
        annotations: (!annotations.is_empty()).then_some(annotations),
    };
    let manifest = serde_json::to_vec(&manifest).map_err(|e| Error::Layout(e.to_string()))?;
    if manifest.len() > MAX_MANIFEST_BYTES {
        return Err(Error::TooLarge(format!(
            "the manifest is {} bytes, more than {MAX_MANIFEST_BYTES}",
            manifest.len()
        )));
    }
    Ok(Built {
        manifest_digest: sha256_digest(&manifest),
        config,
        config_digest,
        layer_digest,
        manifest,
    })
}

/// The layer and config of a manifest that passed `check_manifest`.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The config blob's descriptor.
    pub config: Descriptor,
    /// The component layer's descriptor.
    pub layer: Descriptor,
    /// The decoded signature annotation, if any.
    pub signature: Option<Vec<u8>>,
}

const NOT_OURS: &str = "it is not a wasm component artifact (the CNCF wasm OCI layout: \
     config application/vnd.wasm.config.v0+json, one application/wasm layer); \
     push one with `sandgraph push`";

/// Checks that `bytes` is a manifest in this layout and returns the parts
/// to fetch; every refusal names what was wrong.
pub(crate) fn check_manifest(bytes: &[u8], reference: &str) -> Result<Checked, Error> {
    let value: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| {
        Error::Layout(format!(
            "the manifest of {reference} is not JSON ({e}): {NOT_OURS}"
        ))
    })?;
    let media_type = value.get("mediaType").and_then(|m| m.as_str());
    if value.get("manifests").is_some() || media_type == Some(INDEX_MEDIA_TYPE) {
        return Err(Error::Layout(format!(
            "{reference} is an image index (a list of manifests), not a single manifest: {NOT_OURS}"
        )));
    }
    if let Some(m) = media_type
        && m != MANIFEST_MEDIA_TYPE
    {
        return Err(Error::Layout(format!(
            "the manifest of {reference} has media type {:?}, not {MANIFEST_MEDIA_TYPE}: {NOT_OURS}",
            crate::excerpt(m)
        )));
    }
    let manifest: Manifest = serde_json::from_value(value).map_err(|e| {
        Error::Layout(format!(
            "the manifest of {reference} is malformed ({e}): {NOT_OURS}"
        ))
    })?;
    if manifest.schema_version != 2 {
        return Err(Error::Layout(format!(
            "the manifest of {reference} has schemaVersion {}, not 2",
            manifest.schema_version
        )));
    }
    if manifest.config.media_type != WASM_CONFIG_MEDIA_TYPE {
        return Err(Error::Layout(format!(
            "the manifest of {reference} has config media type {:?}: {NOT_OURS}",
            crate::excerpt(&manifest.config.media_type)
        )));
    }
    let [layer] = manifest.layers.as_slice() else {
        return Err(Error::Layout(format!(
            "the manifest of {reference} has {} layers, not one: {NOT_OURS}",
            manifest.layers.len()
        )));
    };
    if layer.media_type != WASM_LAYER_MEDIA_TYPE {
        return Err(Error::Layout(format!(
            "the layer of {reference} has media type {:?}, not {WASM_LAYER_MEDIA_TYPE}: {NOT_OURS}",
            crate::excerpt(&layer.media_type)
        )));
    }
    check_digest(&manifest.config.digest, "the config")?;
    check_digest(&layer.digest, "the layer")?;
    if manifest.config.size > MAX_CONFIG_BYTES as u64 {
        return Err(Error::TooLarge(format!(
            "the config of {reference} is {} bytes, more than {MAX_CONFIG_BYTES}",
            manifest.config.size
        )));
    }
    if layer.size > MAX_COMPONENT_BYTES as u64 {
        return Err(Error::TooLarge(format!(
            "the component of {reference} is {} bytes, more than the {MAX_COMPONENT_BYTES} a graph component may be",
            layer.size
        )));
    }
    let signature = match manifest
        .annotations
        .as_ref()
        .and_then(|a| a.get(SIGNATURE_ANNOTATION))
    {
        None => None,
        Some(text) => Some(decode_signature(text, reference)?),
    };
    Ok(Checked {
        config: manifest.config.clone(),
        layer: layer.clone(),
        signature,
    })
}

fn decode_signature(text: &str, reference: &str) -> Result<Vec<u8>, Error> {
    // base64 is 4 characters per 3 bytes: bound the text before decoding.
    if text.len() > MAX_SIGNATURE_BYTES.div_ceil(3) * 4 {
        return Err(Error::TooLarge(format!(
            "the {SIGNATURE_ANNOTATION} annotation of {reference} is {} characters, more than a \
             {MAX_SIGNATURE_BYTES}-byte signature takes",
            text.len()
        )));
    }
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .map_err(|e| {
            Error::Layout(format!(
                "the {SIGNATURE_ANNOTATION} annotation of {reference} is not base64: {e}"
            ))
        })
}

/// Checks the config blob against the manifest: the wasm component fields
/// and `layerDigests` naming the layer.
pub(crate) fn check_config(
    bytes: &[u8],
    layer: &Descriptor,
    reference: &str,
) -> Result<WasmConfig, Error> {
    let config: WasmConfig = serde_json::from_slice(bytes).map_err(|e| {
        Error::Layout(format!(
            "the config of {reference} is not a wasm config ({e}): {NOT_OURS}"
        ))
    })?;
    if config.architecture != WASM_ARCHITECTURE {
        return Err(Error::Layout(format!(
            "the config of {reference} has architecture {:?}, not {WASM_ARCHITECTURE:?}",
            crate::excerpt(&config.architecture)
        )));
    }
    if config.os != COMPONENT_OS {
        return Err(Error::Layout(format!(
            "the config of {reference} has os {:?}, not {COMPONENT_OS:?}: a graph is a component, \
             not a core module",
            crate::excerpt(&config.os)
        )));
    }
    if config.layer_digests != [layer.digest.as_str()] {
        return Err(Error::Layout(format!(
            "the config of {reference} lists layerDigests {:?}, but the manifest's layer is {}",
            config
                .layer_digests
                .iter()
                .take(4)
                .map(|d| crate::excerpt(d))
                .collect::<Vec<_>>(),
            layer.digest
        )));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn artifact() -> Artifact {
        Artifact {
            component: b"\0asm\x0d\0\x01\0".to_vec(),
            signature: Some(b"{\"sig\":1}".to_vec()),
            interfaces: ComponentInfo {
                exports: vec!["sandgraph:graph/graph@0.2.0".into()],
                imports: vec!["sandgraph:graph/host@0.2.0".into()],
            },
            title: Some("echo".into()),
            author: None,
            created: Some("2026-01-01T00:00:00Z".into()),
        }
    }

    #[test]
    fn a_built_manifest_passes_its_own_checks() {
        let a = artifact();
        let built = build(&a).unwrap();
        assert_eq!(built.manifest_digest, sha256_digest(&built.manifest));
        let checked = check_manifest(&built.manifest, "r").unwrap();
        assert_eq!(checked.layer.digest, sha256_digest(&a.component));
        assert_eq!(checked.layer.size, a.component.len() as u64);
        assert_eq!(checked.signature, a.signature);
        let config = check_config(&built.config, &checked.layer, "r").unwrap();
        assert_eq!(config.component.unwrap(), a.interfaces);
        let v: serde_json::Value = serde_json::from_slice(&built.config).unwrap();
        assert_eq!(v["architecture"], "wasm");
        assert_eq!(v["os"], "wasip2");
        assert_eq!(v["layerDigests"][0], checked.layer.digest.as_str());
        assert!(v.get("author").is_none());
    }

    #[test]
    fn the_same_artifact_builds_the_same_manifest() {
        let a = artifact();
        assert_eq!(build(&a).unwrap().manifest, build(&a).unwrap().manifest);
    }

    fn manifest_with(edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
        let mut v: serde_json::Value =
            serde_json::from_slice(&build(&artifact()).unwrap().manifest).unwrap();
        edit(&mut v);
        serde_json::to_vec(&v).unwrap()
    }

    fn refusal(bytes: &[u8]) -> String {
        check_manifest(bytes, "reg/x:1").unwrap_err().to_string()
    }

    #[test]
    fn other_layouts_are_refused_with_what_was_wrong() {
        let docker = manifest_with(|v| {
            v["config"]["mediaType"] = "application/vnd.oci.image.config.v1+json".into()
        });
        assert!(
            refusal(&docker).contains("config media type"),
            "{}",
            refusal(&docker)
        );
        let two = manifest_with(|v| {
            let l = v["layers"][0].clone();
            v["layers"].as_array_mut().unwrap().push(l);
        });
        assert!(refusal(&two).contains("2 layers"));
        let tar = manifest_with(|v| {
            v["layers"][0]["mediaType"] = "application/vnd.oci.image.layer.v1.tar".into()
        });
        assert!(refusal(&tar).contains("layer of reg/x:1 has media type"));
        let index = br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#;
        assert!(refusal(index).contains("image index"));
        assert!(refusal(b"<html>").contains("not JSON"));
        let md5 = manifest_with(|v| v["layers"][0]["digest"] = "md5:abc".into());
        assert!(refusal(&md5).contains("not sha256"));
        let v1 = manifest_with(|v| v["schemaVersion"] = 1.into());
        assert!(refusal(&v1).contains("schemaVersion 1"));
    }

    #[test]
    fn sizes_are_bounded_before_anything_is_fetched() {
        let huge = manifest_with(|v| v["layers"][0]["size"] = (1u64 << 40).into());
        assert!(matches!(
            check_manifest(&huge, "r"),
            Err(Error::TooLarge(_))
        ));
        let big_config = manifest_with(|v| v["config"]["size"] = (10u64 << 20).into());
        assert!(matches!(
            check_manifest(&big_config, "r"),
            Err(Error::TooLarge(_))
        ));
        let long_sig = "A".repeat(MAX_SIGNATURE_BYTES * 2);
        let sig = manifest_with(|v| v["annotations"][SIGNATURE_ANNOTATION] = long_sig.into());
        assert!(matches!(check_manifest(&sig, "r"), Err(Error::TooLarge(_))));
        let bad_sig = manifest_with(|v| v["annotations"][SIGNATURE_ANNOTATION] = "%%".into());
        assert!(refusal(&bad_sig).contains("not base64"));
    }

    #[test]
    fn build_refuses_what_pull_would_refuse() {
        let mut a = artifact();
        a.signature = Some(vec![0; MAX_SIGNATURE_BYTES + 1]);
        assert!(matches!(build(&a), Err(Error::TooLarge(_))));
        let mut a = artifact();
        a.signature = Some(vec![7; MAX_SIGNATURE_BYTES]);
        let built = build(&a).unwrap();
        assert!(built.manifest.len() <= MAX_MANIFEST_BYTES);
        assert_eq!(
            check_manifest(&built.manifest, "r").unwrap().signature,
            a.signature
        );
        let mut a = artifact();
        a.interfaces.imports = vec!["x".repeat(MAX_INTERFACE_NAME_BYTES); 10_000];
        let built = build(&a).unwrap();
        assert!(built.config.len() <= MAX_CONFIG_BYTES);
    }

    #[test]
    fn a_config_that_does_not_match_is_refused() {
        let built = build(&artifact()).unwrap();
        let layer = check_manifest(&built.manifest, "r").unwrap().layer;
        let edit = |f: &dyn Fn(&mut serde_json::Value)| {
            let mut v: serde_json::Value = serde_json::from_slice(&built.config).unwrap();
            f(&mut v);
            check_config(&serde_json::to_vec(&v).unwrap(), &layer, "r")
                .unwrap_err()
                .to_string()
        };
        assert!(edit(&|v| v["os"] = "wasip1".into()).contains("core module"));
        assert!(edit(&|v| v["architecture"] = "amd64".into()).contains("architecture"));
        assert!(edit(&|v| v["layerDigests"] = serde_json::json!([])).contains("layerDigests"));
        assert!(check_config(b"{}", &layer, "r").is_err());
    }
}
