#![allow(dead_code)]
//! The test driver `rkt-csi-hostpath` as the CSI tests run it (tests/csi.rs, tests/csi_volumes.rs):
//! started beside an Env's rkubelet, registering through its `plugins_registry`, stopped with
//! SIGTERM (it removes its sockets) when dropped.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use crate::common::Env;

pub const DRIVER: &str = "hostpath.csi.rkubelet.test";

pub struct Driver {
    child: Option<Child>,
    pub log: PathBuf,
    pub state: PathBuf,
    endpoint: PathBuf,
    registration: PathBuf,
    args: Vec<String>,
    runs: u32,
}

impl Driver {
    pub fn start(env: &Env, node_id: &str, extra: &[&str]) -> Driver {
        let mut args = vec![
            "--node-id".to_string(),
            node_id.to_string(),
            "--driver-name".to_string(),
            DRIVER.to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        let mut d = Driver {
            child: None,
            log: env.dir.join("csi-driver.log"),
            state: env.dir.join("csi-volumes"),
            endpoint: env.root.join(format!("plugins/{DRIVER}/csi.sock")),
            registration: env.root.join(format!("plugins_registry/{DRIVER}-reg.sock")),
            args,
            runs: 0,
        };
        d.restart();
        d
    }

    /// Starts the driver (again, after [`Driver::stop`]); its log is appended to.
    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "driver already running");
        self.runs += 1;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_rkt-csi-hostpath"))
            .arg("--endpoint")
            .arg(&self.endpoint)
            .arg("--registration")
            .arg(&self.registration)
            .arg("--state-dir")
            .arg(&self.state)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The logged calls of `rpc` (e.g. `NodeStageVolume`), one line each.
    pub fn calls(&self, rpc: &str) -> Vec<String> {
        let prefix = format!("{rpc} ");
        self.log()
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .map(String::from)
            .collect()
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = c.wait();
        }
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.state);
    }
}

/// The driver's CSIDriver object.
pub fn csi_driver_object(attach_required: bool, modes: &str) -> String {
    format!(
        r#"apiVersion: storage.k8s.io/v1
kind: CSIDriver
metadata: {{name: {DRIVER}}}
spec:
  attachRequired: {attach_required}
  podInfoOnMount: true
  volumeLifecycleModes: [{modes}]
"#
    )
}

/// A PV with a `csi:` source and the secrets it names, and its claim `name`.
pub fn csi_pv_and_claim(name: &str, handle: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Secret
metadata: {{name: stage-secret, namespace: default}}
stringData: {{stage-key: s1}}
---
apiVersion: v1
kind: Secret
metadata: {{name: publish-secret, namespace: default}}
stringData: {{publish-key: p1}}
---
apiVersion: v1
kind: PersistentVolume
metadata: {{name: pv-{name}}}
spec:
  capacity: {{storage: 1Gi}}
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: ""
  csi:
    driver: {DRIVER}
    volumeHandle: {handle}
    volumeAttributes: {{tier: gold}}
    nodeStageSecretRef: {{name: stage-secret, namespace: default}}
    nodePublishSecretRef: {{name: publish-secret, namespace: default}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {{name: {name}, namespace: default}}
spec:
  accessModes: [ReadWriteOnce]
  storageClassName: ""
  volumeName: pv-{name}
  resources: {{requests: {{storage: 1Gi}}}}
"#
    )
}
