//! The machine a report ran on: CPU, memory, caches, kernel, THP and userfaultfd features, and
//! the versions of the compiler and of zcio.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// What the report's numbers were measured on.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Machine {
    /// CPU model name (`/proc/cpuinfo`).
    pub cpu_model: String,
    /// Logical CPUs online.
    pub logical_cpus: usize,
    /// Total memory (bytes).
    pub memory_bytes: u64,
    /// Cache sizes of CPU 0 by level and type, e.g. "L2 unified: 1024K".
    pub caches: Vec<String>,
    /// Kernel release and version (`uname -rv`).
    pub kernel: String,
    /// Transparent huge pages: the `enabled`, `defrag` and `shmem_enabled` settings.
    pub thp: String,
    /// Page size (bytes).
    pub page_size: usize,
    /// Kernel features zcio probed and the mechanisms it chose (see `zcio probe`).
    pub features: serde_json::Value,
    /// `rustc -V` of the build.
    pub rustc: String,
    /// zcio's version and source revision.
    pub zcio: String,
}

fn read(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn caches() -> Vec<String> {
    let mut v = Vec::new();
    for i in 0..8 {
        let d = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        if !Path::new(&d).exists() {
            break;
        }
        v.push(format!(
            "L{} {}: {}",
            read(&format!("{d}/level")),
            read(&format!("{d}/type")).to_lowercase(),
            read(&format!("{d}/size"))
        ));
    }
    v
}

impl Machine {
    /// Describe this machine; `dir` is where file experiments run (for the O_DIRECT probe).
    pub fn this(dir: &Path) -> Machine {
        let cpuinfo = read("/proc/cpuinfo");
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let memory_bytes = read("/proc/meminfo")
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|k| k.parse::<u64>().ok())
            .map_or(0, |k| k * 1024);
        let u = rustix::system::uname();
        let kernel = format!(
            "{} {}",
            u.release().to_string_lossy(),
            u.version().to_string_lossy()
        );
        let thp = format!(
            "enabled: {}; defrag: {}; shmem_enabled: {}",
            read("/sys/kernel/mm/transparent_hugepage/enabled"),
            read("/sys/kernel/mm/transparent_hugepage/defrag"),
            read(zcio_vm::shmem::SHMEM_ENABLED)
        );
        let features =
            serde_json::to_value(zcio_genie::probe::probe(dir)).unwrap_or(serde_json::Value::Null);
        Machine {
            cpu_model,
            logical_cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes,
            caches: caches(),
            kernel,
            thp,
            page_size: zcio_vm::page_size(),
            features,
            rustc: env!("ZCIO_RUSTC_VERSION").into(),
            zcio: format!("{} ({})", env!("CARGO_PKG_VERSION"), env!("ZCIO_GIT_REV")),
        }
    }

    /// Whether the probe found the feature `id` here (`None` where it did not probe it: a
    /// `results.json` from an older zcio).
    pub fn has_feature(&self, id: &str) -> Option<bool> {
        self.features["features"]
            .as_array()?
            .iter()
            .find(|f| f["id"] == id)?["available"]
            .as_bool()
    }

    /// The size of cache level `level` in bytes, if known (from entries like "32768K").
    pub fn cache_bytes(&self, level: u32) -> Option<usize> {
        cache_bytes(&self.caches, level)
    }
}

/// The size of this CPU's cache level `level` in bytes, if the kernel says.
pub fn this_cache_bytes(level: u32) -> Option<usize> {
    cache_bytes(&caches(), level)
}

fn cache_bytes(caches: &[String], level: u32) -> Option<usize> {
    let l = format!("L{level} ");
    caches
        .iter()
        .filter(|c| c.starts_with(&l) && !c.contains("instruction"))
        .filter_map(|c| c.rsplit(": ").next())
        .filter_map(|s| {
            let s = s.trim();
            let (num, mul) = match s.chars().last()? {
                'K' => (&s[..s.len() - 1], 1024),
                'M' => (&s[..s.len() - 1], 1024 * 1024),
                _ => (s, 1),
            };
            num.parse::<usize>().ok().map(|n| n * mul)
        })
        .max()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feature_is_known_only_where_the_probe_recorded_it() {
        let mut m = Machine::this(Path::new("."));
        m.features = serde_json::json!({"features": [
            {"id": "procmap-query", "available": false},
            {"id": "uffd-wp", "available": true},
        ]});
        assert_eq!(m.has_feature("procmap-query"), Some(false));
        assert_eq!(m.has_feature("uffd-wp"), Some(true));
        assert_eq!(m.has_feature("warp-drive"), None);
        m.features = serde_json::Value::Null;
        assert_eq!(m.has_feature("uffd-wp"), None);
    }
}
