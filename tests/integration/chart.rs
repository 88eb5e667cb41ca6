//! The Helm chart and the kustomize manifests, validated offline by `tests/helm/validate.sh`:
//! Helm's own code (helm-python-sdk) lints and renders the chart for every
//! `tests/helm/values-*.yaml`, kubernetes-validate checks every object strictly, and bad
//! values must be refused. See the script for what it needs (python3, kubectl).

use std::path::Path;
use std::process::Command;

#[test]
fn helm_chart_and_kustomize_manifests_validate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = root.join("tests/helm/validate.sh");
    let output = Command::new("bash")
        .arg(&script)
        .current_dir(root)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{} failed ({}):\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        script.display(),
        output.status
    );
}
