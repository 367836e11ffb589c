//! Memory-backed disks: ext4 file systems, each on a loop device of its own over an image file
//! in a tmpfs. They give files block devices of their own, with no seek and no disk latency,
//! for experiments whose files the paper spread over separate disks (paper 004's tables lay on
//! 16).
//!
//! [`MemoryDisks`] owns the set: it makes the images, attaches them (`losetup`, direct I/O
//! asked for), makes the file systems (`mkfs.ext4`) and mounts them, and on drop (on error,
//! on a panic's unwinding, or by [`MemoryDisks::close`]) unmounts, detaches and deletes
//! everything it made. The tools do the work; a tool that fails is an error with its exit
//! status and its standard error. Attaching and mounting need root (`CAP_SYS_ADMIN`).
//!
//! A process killed while its disks are up runs no destructor: its disks stay mounted and
//! attached. The next set made in the same backing directory takes them down first
//! ([`sweep_stale`]): every `zcio-disks-<pid>-<n>` directory whose process has ended.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Where images go unless told otherwise: the tmpfs every Linux system mounts.
pub const DEFAULT_BACKING: &str = "/dev/shm";

/// `statfs` type of tmpfs.
const TMPFS_MAGIC: u64 = 0x0102_1994;

/// Smallest disk made: room for ext4's journal and tables.
pub const MIN_BYTES: u64 = 16 << 20;

/// A step of setting up or taking down the disks that failed, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{step}: {detail}")]
pub struct DiskError {
    /// What was being done (`losetup --find --show --direct-io=on /dev/shm/...`).
    pub step: String,
    /// Why it failed: the tool's exit status and standard error, or the system's error.
    pub detail: String,
}

fn err(step: impl Into<String>, detail: impl ToString) -> DiskError {
    DiskError {
        step: step.into(),
        detail: detail.to_string(),
    }
}

/// Run `tool` with `args`, no input: its standard output, or an error with its exit status and
/// standard error.
fn tool(tool: &str, args: &[&str]) -> Result<String, DiskError> {
    let step = format!("{tool} {}", args.join(" "));
    let out = Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| err(&step, format!("cannot run {tool}: {e}")))?;
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        return Err(err(
            step,
            format!("{}: {}", out.status, stderr.trim().replace('\n', "; ")),
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// One disk of a set.
#[derive(Debug)]
pub struct MemoryDisk {
    image: PathBuf,
    device: Option<PathBuf>,
    mount: PathBuf,
    mounted: bool,
    direct_io: bool,
}

impl MemoryDisk {
    /// The loop device (`/dev/loopN`).
    pub fn device(&self) -> &Path {
        self.device.as_deref().unwrap_or(Path::new(""))
    }

    /// The image file it reads and writes, in the tmpfs.
    pub fn image(&self) -> &Path {
        &self.image
    }

    /// Where its file system is mounted.
    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// Whether the loop driver reads and writes the image with direct I/O (the kernel's
    /// `/sys/block/loopN/loop/dio`), rather than through the page cache of the image's file
    /// system.
    pub fn direct_io(&self) -> bool {
        self.direct_io
    }
}

/// ext4 file systems on loop devices over image files in a tmpfs, mounted; all of it
/// unmounted, detached and deleted when dropped.
#[derive(Debug)]
pub struct MemoryDisks {
    root: PathBuf,
    made_root: bool,
    bytes: u64,
    disks: Vec<MemoryDisk>,
}

impl MemoryDisks {
    /// `count` disks of `bytes` each (at least [`MIN_BYTES`]), their images in a directory of
    /// their own in `backing`, which must be a tmpfs, mounted `noatime` (a scan writes
    /// nothing). On an error everything made so far is taken down again.
    pub fn new(count: usize, bytes: u64, backing: &Path) -> Result<MemoryDisks, DiskError> {
        MemoryDisks::with_options(count, bytes, backing, "noatime")
    }

    /// [`MemoryDisks::new`], the file systems mounted with `mount_options` (`mount -o`; none
    /// if empty).
    pub fn with_options(
        count: usize,
        bytes: u64,
        backing: &Path,
        mount_options: &str,
    ) -> Result<MemoryDisks, DiskError> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let st = rustix::fs::statfs(backing)
            .map_err(|e| err(format!("the backing directory {}", backing.display()), e))?;
        if st.f_type as u64 != TMPFS_MAGIC {
            return Err(err(
                format!("the backing directory {}", backing.display()),
                format!(
                    "not a tmpfs (file system type {:#x}): disks there would not be memory-backed",
                    st.f_type as u64
                ),
            ));
        }
        for f in sweep_stale(backing).1 {
            eprintln!("zcio: memory-backed disks left by an ended process: {f}");
        }
        let root = backing.join(format!(
            "{ROOT_PREFIX}{}-{}",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        // From here on, dropping `set` takes down whatever was made.
        let mut set = MemoryDisks {
            root,
            made_root: false,
            bytes: bytes.max(MIN_BYTES),
            disks: Vec::new(),
        };
        std::fs::create_dir(&set.root)
            .map_err(|e| err(format!("creating {}", set.root.display()), e))?;
        set.made_root = true;
        for k in 0..count {
            set.add(k, mount_options)?;
        }
        Ok(set)
    }

    /// Make, attach, format and mount disk `k`.
    fn add(&mut self, k: usize, mount_options: &str) -> Result<(), DiskError> {
        let image = self.root.join(format!("{k}.img"));
        let mount = self.root.join(k.to_string());
        std::fs::File::create(&image)
            .and_then(|f| f.set_len(self.bytes))
            .map_err(|e| err(format!("creating the image {}", image.display()), e))?;
        self.disks.push(MemoryDisk {
            image,
            device: None,
            mount,
            mounted: false,
            direct_io: false,
        });
        let d = self.disks.last_mut().expect("just pushed");
        let device = PathBuf::from(attach(&d.image)?);
        d.device = Some(device.clone());
        d.direct_io = device
            .file_name()
            .map(|n| Path::new("/sys/block").join(n).join("loop/dio"))
            .and_then(|p| std::fs::read_to_string(p).ok())
            .is_some_and(|s| s.trim() == "1");
        let dev = device.to_string_lossy();
        // Inode tables and journal written now, not by a kernel thread during the runs.
        tool(
            "mkfs.ext4",
            &[
                "-q",
                "-b",
                "4096",
                "-E",
                "lazy_itable_init=0,lazy_journal_init=0",
                &dev,
            ],
        )?;
        std::fs::create_dir(&d.mount)
            .map_err(|e| err(format!("creating {}", d.mount.display()), e))?;
        let at = d.mount.to_string_lossy();
        let mut args = vec!["-t", "ext4"];
        if !mount_options.is_empty() {
            args.extend(["-o", mount_options]);
        }
        args.extend([&*dev, &*at]);
        tool("mount", &args)?;
        d.mounted = true;
        Ok(())
    }

    /// The set another process left in `root` (its images `<k>.img`, their mount points
    /// `<k>`), as far as it is still mounted (`mounted`: the mount points now) and attached,
    /// for [`MemoryDisks::take_down`].
    fn left_in(root: PathBuf, mounted: &[PathBuf]) -> MemoryDisks {
        let mut disks = Vec::new();
        for k in 0usize.. {
            let image = root.join(format!("{k}.img"));
            let mount = root.join(k.to_string());
            if !image.exists() && !mount.exists() {
                break;
            }
            let mut devices = devices_of(&image);
            let is_mounted = mounted.contains(&mount);
            // Each device attached to the image is one disk to take down; the first carries
            // the mount (a set attaches each image once).
            let first = devices.pop();
            for d in devices {
                disks.push(MemoryDisk {
                    image: image.clone(),
                    device: Some(d),
                    mount: mount.clone(),
                    mounted: false,
                    direct_io: false,
                });
            }
            disks.push(MemoryDisk {
                image,
                device: first,
                mount,
                mounted: is_mounted,
                direct_io: false,
            });
        }
        MemoryDisks {
            root,
            made_root: true,
            bytes: 0,
            disks,
        }
    }

    /// The disks, in order.
    pub fn disks(&self) -> &[MemoryDisk] {
        &self.disks
    }

    /// Where each disk's file system is mounted, in order.
    pub fn mounts(&self) -> Vec<PathBuf> {
        self.disks.iter().map(|d| d.mount.clone()).collect()
    }

    /// The directory in the tmpfs that holds the images and the mount points.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Bytes of each disk.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Unmount, detach and delete everything, saying what could not be.
    pub fn close(mut self) -> Result<(), DiskError> {
        let failed = self.take_down();
        match failed.is_empty() {
            true => Ok(()),
            false => Err(err(
                "taking the memory-backed disks down",
                failed.join("; "),
            )),
        }
    }

    /// Unmount, detach and delete what is still there: what failed, if anything.
    fn take_down(&mut self) -> Vec<String> {
        let mut failed = Vec::new();
        for d in self.disks.iter_mut().rev() {
            if d.mounted {
                match retry_busy(|| tool("umount", &[&d.mount.to_string_lossy()])) {
                    Ok(_) => d.mounted = false,
                    Err(e) => failed.push(e.to_string()),
                }
            }
            // A device still mounted stays attached: detaching it would only mark it to go
            // when it is unmounted.
            if let (Some(dev), false) = (&d.device, d.mounted) {
                match retry_busy(|| tool("losetup", &["-d", &dev.to_string_lossy()])) {
                    Ok(_) => d.device = None,
                    Err(e) => failed.push(e.to_string()),
                }
            }
        }
        let all_down = self.disks.iter().all(|d| !d.mounted && d.device.is_none());
        if self.made_root && all_down {
            match std::fs::remove_dir_all(&self.root) {
                Ok(()) => self.made_root = false,
                Err(e) => failed.push(format!("removing {}: {e}", self.root.display())),
            }
        }
        failed
    }
}

impl Drop for MemoryDisks {
    fn drop(&mut self) {
        for f in self.take_down() {
            eprintln!("zcio: memory-backed disks: {f}");
        }
    }
}

/// The prefix of the directory each set of disks lives in: `zcio-disks-<pid>-<n>`.
const ROOT_PREFIX: &str = "zcio-disks-";

/// Take down the disks that processes left in `backing` when they ended without taking them
/// down (a process killed by a signal runs no destructor): every `zcio-disks-<pid>-<n>`
/// directory whose process is gone is unmounted, detached and deleted. Returns the
/// directories taken down and what could not be.
pub fn sweep_stale(backing: &Path) -> (Vec<PathBuf>, Vec<String>) {
    let (mut swept, mut failed) = (Vec::new(), Vec::new());
    let Ok(dir) = std::fs::read_dir(backing) else {
        return (swept, failed);
    };
    let mounted = mount_points();
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(ROOT_PREFIX)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists() {
            continue;
        }
        let mut set = MemoryDisks::left_in(e.path(), &mounted);
        let f = set.take_down();
        if f.is_empty() {
            swept.push(e.path());
        }
        failed.extend(f);
    }
    (swept, failed)
}

/// This process's view of the mount points (`/proc/self/mountinfo`'s fifth field, with the
/// kernel's octal escapes of spaces and the like undone).
fn mount_points() -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| {
            let mut out = String::new();
            let mut rest = p;
            while let Some(i) = rest.find('\\') {
                out.push_str(&rest[..i]);
                match u8::from_str_radix(rest.get(i + 1..i + 4).unwrap_or(""), 8) {
                    Ok(b) => {
                        out.push(b as char);
                        rest = &rest[i + 4..];
                    }
                    Err(_) => {
                        out.push('\\');
                        rest = &rest[i + 1..];
                    }
                }
            }
            out.push_str(rest);
            PathBuf::from(out)
        })
        .collect()
}

/// The loop devices attached to `image` now (`losetup -j`).
fn devices_of(image: &Path) -> Vec<PathBuf> {
    tool("losetup", &["-j", &image.to_string_lossy()])
        .map(|out| {
            out.lines()
                .filter_map(|l| l.split(':').next())
                .filter(|d| d.starts_with("/dev/"))
                .map(PathBuf::from)
                .collect()
        })
        .unwrap_or_default()
}

/// `f` again, a few times, while it fails for a busy device (another process attaching at the
/// same time, a file system not yet let go).
fn retry_busy<T>(mut f: impl FnMut() -> Result<T, DiskError>) -> Result<T, DiskError> {
    let mut tries = 0;
    loop {
        match f() {
            Err(e) if tries < 5 && e.detail.to_lowercase().contains("busy") => {
                tries += 1;
                std::thread::sleep(Duration::from_millis(20 << tries));
            }
            r => return r,
        }
    }
}

/// Attach `image` to a free loop device with direct I/O, or without where the driver refuses
/// it: the device.
fn attach(image: &Path) -> Result<String, DiskError> {
    let img = image.to_string_lossy();
    retry_busy(|| tool("losetup", &["--find", "--show", "--direct-io=on", &img])).or_else(
        |direct| {
            retry_busy(|| tool("losetup", &["--find", "--show", &img])).map_err(|e| {
                // The same refusal twice is said once; a different one, both.
                let direct_said = direct.detail.replace(" --direct-io=on", "");
                if e.detail == direct_said || e.detail == direct.detail {
                    direct
                } else {
                    err(e.step, format!("{} (with direct I/O: {direct})", e.detail))
                }
            })
        },
    )
}

/// Whether memory-backed disks can be had here: one made, used and taken down in `backing`.
/// What was found, or why not.
pub fn probe(backing: &Path) -> Result<String, String> {
    let root = rustix::process::geteuid().is_root();
    let made = MemoryDisks::new(1, MIN_BYTES, backing).map_err(|e| {
        format!(
            "{e}{}",
            if root {
                ""
            } else {
                " (not root: attaching and mounting need CAP_SYS_ADMIN)"
            }
        )
    })?;
    let direct = made.disks().first().is_some_and(MemoryDisk::direct_io);
    made.close().map_err(|e| e.to_string())?;
    Ok(format!(
        "ext4 on a loop device over an image in {} made, mounted and taken down (loop direct I/O {})",
        backing.display(),
        if direct { "on" } else { "off" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backing_directory_that_is_not_there_or_not_tmpfs_is_refused_before_anything_is_made() {
        let e = MemoryDisks::new(2, MIN_BYTES, Path::new("/nonexistent/zcio-backing")).unwrap_err();
        assert!(e.step.contains("/nonexistent/zcio-backing"), "{e}");
        assert!(e.detail.contains("No such file"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        if rustix::fs::statfs(dir.path()).unwrap().f_type as u64 != TMPFS_MAGIC {
            let e = MemoryDisks::new(1, MIN_BYTES, dir.path()).unwrap_err();
            assert!(e.detail.contains("not a tmpfs"), "{e}");
            assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        }
    }

    #[test]
    fn a_failing_tool_is_an_error_with_its_status_and_stderr() {
        let e = tool("sh", &["-c", "echo oops >&2; exit 3"]).unwrap_err();
        assert!(e.step.starts_with("sh -c"), "{e}");
        assert!(e.detail.contains("3") && e.detail.contains("oops"), "{e}");
        let e = tool("zcio-no-such-tool", &[]).unwrap_err();
        assert!(e.detail.contains("cannot run zcio-no-such-tool"), "{e}");
        assert_eq!(tool("sh", &["-c", "echo hi"]).unwrap(), "hi");
    }
}
