//! The control channel to the host, in `control-frame` frames: the guest's hello, the host's
//! config frame, and the guest's reports after it (`ready`, `failed`, `exited`).

use std::collections::BTreeMap;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Deserialize;
use serde_json::json;

use super::{vsock, Control};

/// What the host sends in its `config` frame.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    #[serde(rename = "type")]
    pub kind: String,
    pub version: u32,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub execd_token: Option<String>,
    #[serde(default)]
    pub egress_token: Option<String>,
    #[serde(default)]
    pub cwd: Option<String>,
}

// Written by hand so that a `{:?}` of the frame never shows the access tokens or the values of
// the workload's environment (which may carry credentials); the variable names are kept.
impl std::fmt::Debug for HostConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostConfig")
            .field("kind", &self.kind)
            .field("version", &self.version)
            .field("env", &self.env.keys().collect::<Vec<_>>())
            .field("execd_token", &self.execd_token.as_ref().map(|_| "<redacted>"))
            .field("egress_token", &self.egress_token.as_ref().map(|_| "<redacted>"))
            .field("cwd", &self.cwd)
            .finish()
    }
}

/// Where the reports go; None when the configuration came from a file (`--control file:`).
pub type ControlStream = Option<Arc<Mutex<StdUnixStream>>>;

/// Says hello and returns the host's configuration, and the stream for later reports.
pub fn exchange_config(control: &Control) -> Result<(HostConfig, ControlStream), String> {
    let mut stream = match control {
        Control::Unix(path) => StdUnixStream::connect(path).map_err(|e| format!("--control unix:{}: {e}", path.display()))?,
        Control::Vsock { cid, port } => vsock::connect(*cid, *port).map_err(|e| format!("--control vsock:{cid}:{port}: {e}"))?,
        Control::File(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| format!("--control file:{}: {e}", path.display()))?;
            let value = serde_json::from_str(&text).map_err(|e| format!("--control file:{}: {e}", path.display()))?;
            return Ok((parse_config(value)?, None));
        }
    };
    let hello = json!({"type": "hello", "version": 1, "bootstrap": concat!("sandbox-guest ", env!("CARGO_PKG_VERSION"))});
    control_frame::write_frame(&mut stream, &hello, control_frame::DEFAULT_MAX_FRAME).map_err(|e| format!("control channel: {e}"))?;
    let config = receive_config(&mut stream)?;
    Ok((config, Some(Arc::new(Mutex::new(stream)))))
}

pub fn send(stream: &ControlStream, value: serde_json::Value) {
    let Some(stream) = stream else { return };
    let mut s = stream.lock().unwrap();
    if let Err(e) = control_frame::write_frame(&mut *s, &value, control_frame::DEFAULT_MAX_FRAME) {
        eprintln!("sandbox-guest bootstrap: control channel: {e}");
    }
}

fn receive_config(stream: &mut StdUnixStream) -> Result<HostConfig, String> {
    stream.set_read_timeout(Some(Duration::from_secs(30))).map_err(|e| e.to_string())?;
    let mut reader = control_frame::FrameReader::new(stream.try_clone().map_err(|e| e.to_string())?, control_frame::DEFAULT_MAX_FRAME);
    let frame = reader.read_frame().map_err(|e| format!("control channel: {e}"))?.ok_or("control channel closed before the config frame")?;
    let config = parse_config(frame)?;
    stream.set_read_timeout(None).map_err(|e| e.to_string())?;
    Ok(config)
}

fn parse_config(frame: serde_json::Value) -> Result<HostConfig, String> {
    let config: HostConfig = serde_json::from_value(frame).map_err(|e| format!("control channel: bad config frame: {e}"))?;
    if config.kind != "config" || config.version != 1 {
        return Err(format!("control channel: expected a version 1 config frame, got type '{}' version {}", config.kind, config.version));
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_frame_rejects_unknown_fields() {
        let ok: HostConfig = serde_json::from_value(json!({"type": "config", "version": 1, "env": {"A": "envsecret"}, "execd_token": "tokensecret"})).unwrap();
        assert_eq!(ok.env["A"], "envsecret");
        // Debug output keeps the variable names but neither the token nor the values.
        let shown = format!("{ok:?}");
        assert!(shown.contains("\"A\"") && !shown.contains("secret") && shown.contains("<redacted>"), "{shown}");
        assert!(serde_json::from_value::<HostConfig>(json!({"type": "config", "version": 1, "tokens": {}})).is_err());
    }
}
