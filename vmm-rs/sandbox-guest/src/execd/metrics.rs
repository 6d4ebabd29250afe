//! `/metrics` and `/metrics/watch`: CPU count and use, memory total and use. CPU use needs two
//! readings of `/proc/stat`, so a sampler task takes one every second and the routes report
//! the latest.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::output::{event, sse_response};
use crate::http::{self, Resp};

#[derive(Clone)]
pub struct Sampler {
    cpu_used_pct: Arc<Mutex<f64>>,
}

/// (busy, total) jiffies from the aggregate `cpu` line of `/proc/stat`.
fn cpu_times(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
    let total: u64 = fields.iter().take(8).sum();
    // idle + iowait are not busy.
    let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

fn read_cpu() -> Option<(u64, u64)> {
    cpu_times(&std::fs::read_to_string("/proc/stat").ok()?)
}

/// (total, available) memory in KiB from `/proc/meminfo`.
fn mem_kib(meminfo: &str) -> (u64, u64) {
    let field = |name: &str| {
        meminfo
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
    };
    (field("MemTotal:"), field("MemAvailable:"))
}

impl Sampler {
    pub fn start() -> Self {
        let sampler = Sampler { cpu_used_pct: Arc::new(Mutex::new(0.0)) };
        let shared = sampler.cpu_used_pct.clone();
        tokio::spawn(async move {
            let mut last = read_cpu();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let now = read_cpu();
                if let (Some((b0, t0)), Some((b1, t1))) = (last, now) {
                    if t1 > t0 {
                        *shared.lock().unwrap() = (b1 - b0) as f64 * 100.0 / (t1 - t0) as f64;
                    }
                }
                last = now;
            }
        });
        sampler
    }

    pub fn snapshot(&self) -> Value {
        let (total, available) = mem_kib(&std::fs::read_to_string("/proc/meminfo").unwrap_or_default());
        let pct = *self.cpu_used_pct.lock().unwrap();
        json!({
            "cpu_count": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            "cpu_used_pct": (pct * 100.0).round() / 100.0,
            "mem_total_mib": total / 1024,
            "mem_used_mib": total.saturating_sub(available) / 1024,
            "timestamp": http::now_ms(),
        })
    }
}

/// The same snapshot as an event stream, one event a second, until the client goes away.
pub fn watch(sampler: Sampler) -> Resp {
    let (tx, body) = http::channel_body(2);
    tokio::spawn(async move {
        loop {
            let mut snap = sampler.snapshot();
            snap["type"] = json!("metrics");
            if tx.send(event(snap)).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    });
    sse_response(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_files() {
        let (busy, total) = cpu_times("cpu  10 0 5 80 5 0 0 0 0 0\ncpu0 1 2 3 4\n").unwrap();
        assert_eq!((busy, total), (15, 100));
        assert_eq!(mem_kib("MemTotal:  2048 kB\nMemFree: 1 kB\nMemAvailable:  1024 kB\n"), (2048, 1024));
    }
}
