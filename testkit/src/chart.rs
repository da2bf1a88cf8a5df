//! Renders the Helm chart in `deploy/helm/modelplane` with the pinned helm
//! (`scripts/install-helm.sh`), into one JSON value per object.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

/// The chart's directory.
pub fn chart_dir() -> PathBuf {
    crate::repository_root().join("deploy/helm/modelplane")
}

/// The values file that switches every optional part on.
pub const EVERYTHING: &str = "ci/everything-values.yaml";

/// helm: `HELM` when set (the test command exports it), else installed now.
pub fn helm() -> PathBuf {
    if let Some(path) = std::env::var_os("HELM") {
        return path.into();
    }
    let script = crate::repository_root().join("scripts/install-helm.sh");
    let out = Command::new(&script)
        .output()
        .expect("running scripts/install-helm.sh");
    assert!(
        out.status.success(),
        "scripts/install-helm.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().into()
}

/// Runs `helm template` as release `modelplane` in `modelplane-system`; the values files
/// are relative to the chart. Err: helm's message.
pub fn try_render(values: &[&str], set: &[&str]) -> Result<Vec<Value>, String> {
    let dir = chart_dir();
    let mut cmd = Command::new(helm());
    cmd.args(["template", "modelplane", "."])
        .args(["--namespace", "modelplane-system"])
        .current_dir(&dir);
    for file in values {
        cmd.args(["--values", file]);
    }
    for s in set {
        cmd.args(["--set", s]);
    }
    let out = cmd.output().expect("running helm");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("helm's output is not YAML: {e}\n{text}"));
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

pub fn render(values: &[&str]) -> Vec<Value> {
    try_render(values, &[]).unwrap_or_else(|e| panic!("helm template {values:?} failed: {e}"))
}

/// The one rendered object of `kind` named `name`.
pub fn object<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}
