//! A thin, typed wrapper over Linux `userfaultfd`: the write-protect faults of TCOW and the
//! page moves (`UFFDIO_MOVE`, Linux 6.8) of page swapping.
//!
//! The ABI structures come from `linux-raw-sys`; `UFFDIO_MOVE`'s ioctl number is not in it yet and
//! is computed here from `_IOWR(0xAA, 0x05, struct uffdio_move)`.

use crate::error::{Result, VmError};
use crate::page::RawRange;
use linux_raw_sys::general as uapi;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `_IOWR(UFFDIO, _UFFDIO_MOVE, struct uffdio_move)`.
const UFFDIO_MOVE: u32 = (3 << 30)
    | ((std::mem::size_of::<uapi::uffdio_move>() as u32) << 16)
    | (0xAA << 8)
    | uapi::_UFFDIO_MOVE;
/// `_IO(USERFAULTFD_IOC, 0x00)` on `/dev/userfaultfd`.
const USERFAULTFD_IOC_NEW: u32 = 0xAA << 8;

/// `UFFDIO_MOVE_MODE_DONTWAKE`.
const MOVE_MODE_DONTWAKE: u64 = 1;
/// `UFFDIO_MOVE_MODE_ALLOW_SRC_HOLES`.
const MOVE_MODE_ALLOW_SRC_HOLES: u64 = 2;

/// Every userfaultfd ioctl goes through here: `request` on `fd` with `arg` (a pointer to the
/// structure the request reads and writes, or a value the request takes as is), the error named
/// `op` with the errno. Returns what the ioctl returned.
///
/// # Safety
///
/// `arg` must be what `request` expects (a pointer to a live, exclusive structure of its type,
/// or its by-value argument), and what the request does to memory must be covered by the
/// caller's own contract (each caller says why it is).
unsafe fn execute(
    fd: BorrowedFd<'_>,
    request: u32,
    op: &'static str,
    arg: *mut libc::c_void,
) -> Result<i32> {
    // SAFETY: the caller vouches for `arg` and the request's effect.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, arg) };
    if rc < 0 {
        return Err(VmError::last_os(op));
    }
    Ok(rc)
}

/// A request of `linux_raw_sys::ioctl` with its name, as [`ioctl`] takes it.
macro_rules! request {
    ($name:ident) => {
        (linux_raw_sys::ioctl::$name, stringify!($name))
    };
}

/// One userfaultfd ioctl on a structure: `request` (its number and name) on `fd` with `arg`,
/// through [`execute`].
///
/// # Safety
///
/// `T` must be the structure `request` reads and writes, and what the request does to memory
/// must be covered by the caller's own contract (each caller says why it is).
unsafe fn ioctl<T>(fd: &OwnedFd, (request, op): (u32, &'static str), arg: &mut T) -> Result<()> {
    // SAFETY: `arg` is a live, exclusive `T` for the call; the caller vouches for `T` and the
    // request's effect.
    unsafe { execute(fd.as_fd(), request, op, std::ptr::from_mut(arg).cast()) }.map(drop)
}

bitflags::bitflags! {
    /// Features negotiated with `UFFDIO_API`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub struct Features: u64 {
        /// Write-protect faults (`UFFD_FEATURE_PAGEFAULT_FLAG_WP`).
        const WP = uapi::UFFD_FEATURE_PAGEFAULT_FLAG_WP as u64;
        /// Unmap events.
        const EVENT_UNMAP = uapi::UFFD_FEATURE_EVENT_UNMAP as u64;
        /// mremap events.
        const EVENT_REMAP = uapi::UFFD_FEATURE_EVENT_REMAP as u64;
        /// Write-protect unpopulated PTEs too.
        const WP_UNPOPULATED = uapi::UFFD_FEATURE_WP_UNPOPULATED as u64;
        /// Kernel-resolved write-protect faults (dirty tracking).
        const WP_ASYNC = uapi::UFFD_FEATURE_WP_ASYNC as u64;
        /// `UFFDIO_MOVE`.
        const MOVE = uapi::UFFD_FEATURE_MOVE as u64;
        /// Write-protect on shmem/hugetlbfs.
        const WP_SHMEM = uapi::UFFD_FEATURE_WP_HUGETLBFS_SHMEM as u64;
        /// Faulting thread id in messages.
        const THREAD_ID = uapi::UFFD_FEATURE_THREAD_ID as u64;
    }
}

/// Registration modes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegisterMode {
    /// Faults on missing pages are reported.
    pub missing: bool,
    /// Write-protect faults are reported.
    pub wp: bool,
}

impl RegisterMode {
    fn bits(self) -> u64 {
        let mut m = 0;
        if self.missing {
            m |= uapi::UFFDIO_REGISTER_MODE_MISSING as u64;
        }
        if self.wp {
            m |= uapi::UFFDIO_REGISTER_MODE_WP as u64;
        }
        m
    }
}

/// An event read from the userfaultfd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A thread faulted on a registered range.
    PageFault {
        /// Faulting address (page-aligned by the kernel unless EXACT_ADDRESS).
        addr: usize,
        /// A write access.
        write: bool,
        /// A write-protect fault (the page was present and write-protected).
        wp: bool,
    },
    /// A registered range was unmapped.
    Unmap {
        /// Start.
        start: usize,
        /// End.
        end: usize,
    },
    /// A registered range was moved by `mremap`.
    Remap {
        /// Old start.
        from: usize,
        /// New start.
        to: usize,
        /// Length.
        len: usize,
    },
    /// A registered range was zapped by `madvise`.
    Remove {
        /// Start.
        start: usize,
        /// End.
        end: usize,
    },
    /// Something else (fork events are not requested).
    Other(u8),
}

/// Outcome of a move that stopped early.
#[derive(Debug)]
pub struct MoveError {
    /// Bytes moved before the failure.
    pub moved: usize,
    /// The errno.
    pub errno: i32,
}

/// The requests [`Userfaultfd::range_ioctl`] makes.
#[derive(Debug, Clone, Copy)]
enum RangeOp {
    Unregister,
    Wake,
}

/// The `uffdio_range` of `r`.
fn uffd_range(r: RawRange) -> uapi::uffdio_range {
    uapi::uffdio_range {
        start: r.addr as u64,
        len: r.len as u64,
    }
}

/// A userfaultfd, closed on drop (which also drops every registration).
#[derive(Debug)]
pub struct Userfaultfd {
    fd: OwnedFd,
    features: Features,
}

impl Userfaultfd {
    /// Open a userfaultfd and negotiate `wanted` features (the subset the kernel offers).
    ///
    /// Tries the `userfaultfd(2)` system call first, then `/dev/userfaultfd` (which works without
    /// `CAP_SYS_PTRACE` when `vm.unprivileged_userfaultfd` is 0 and the device is accessible).
    pub fn open(wanted: Features) -> Result<Userfaultfd> {
        let fd = Self::new_fd()?;
        // Probe what is offered with a throwaway fd: UFFDIO_API may be called only once per fd.
        let offered = {
            let probe = Self::new_fd()?;
            Self::api(&probe, Features::empty())?
        };
        let features = Self::api(&fd, wanted.intersection(offered))?;
        Ok(Userfaultfd { fd, features })
    }

    /// The features the kernel offers to a new userfaultfd, without keeping one open.
    pub fn probe() -> Result<Features> {
        let fd = Self::new_fd()?;
        Self::api(&fd, Features::empty())
    }

    fn new_fd() -> Result<OwnedFd> {
        use rustix::mm::UserfaultfdFlags;
        // SAFETY: creating a userfaultfd has no effect on memory until ranges are registered with it.
        match unsafe {
            rustix::mm::userfaultfd(UserfaultfdFlags::CLOEXEC | UserfaultfdFlags::NONBLOCK)
        } {
            Ok(fd) => Ok(fd),
            Err(sys_err) => {
                let dev = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open("/dev/userfaultfd")
                    .map_err(|e| VmError::Unsupported {
                        feature: "userfaultfd",
                        reason: format!("userfaultfd(2): {sys_err}; /dev/userfaultfd: {e}"),
                    })?;
                let flags = (libc::O_CLOEXEC | libc::O_NONBLOCK) as usize;
                // SAFETY: USERFAULTFD_IOC_NEW takes the open flags by value and returns a new fd.
                let rc = unsafe {
                    execute(
                        dev.as_fd(),
                        USERFAULTFD_IOC_NEW,
                        "USERFAULTFD_IOC_NEW",
                        std::ptr::without_provenance_mut(flags),
                    )
                }
                .map_err(|e| {
                    let ioc = e.errno().map_or_else(
                        || e.to_string(),
                        |n| std::io::Error::from_raw_os_error(n).to_string(),
                    );
                    VmError::Unsupported {
                        feature: "userfaultfd",
                        reason: format!("userfaultfd(2): {sys_err}; USERFAULTFD_IOC_NEW: {ioc}"),
                    }
                })?;
                // SAFETY: the ioctl returned a new file descriptor that we now own.
                Ok(unsafe { OwnedFd::from_raw_fd(rc) })
            }
        }
    }

    fn api(fd: &OwnedFd, features: Features) -> Result<Features> {
        let mut api = uapi::uffdio_api {
            api: uapi::UFFD_API as u64,
            features: features.bits(),
            ioctls: 0,
        };
        // SAFETY: UFFDIO_API reads and writes exactly one uffdio_api; it touches no memory.
        unsafe { ioctl(fd, request!(UFFDIO_API), &mut api)? };
        Ok(Features::from_bits_truncate(api.features))
    }

    /// Negotiated features.
    pub fn features(&self) -> Features {
        self.features
    }

    /// The raw fd (for polling).
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Register a page-aligned range.
    pub fn register(&self, r: RawRange, mode: RegisterMode) -> Result<()> {
        r.check_pages("registered range")?;
        let mut reg = uapi::uffdio_register {
            range: uffd_range(r),
            mode: mode.bits(),
            ioctls: 0,
        };
        // SAFETY: UFFDIO_REGISTER reads and writes one uffdio_register; it changes only VMA flags.
        unsafe { ioctl(&self.fd, request!(UFFDIO_REGISTER), &mut reg) }
    }

    /// Unregister a page-aligned range.
    pub fn unregister(&self, r: RawRange) -> Result<()> {
        self.range_ioctl(r, RangeOp::Unregister)
    }

    /// A request whose argument is the range alone.
    fn range_ioctl(&self, r: RawRange, op: RangeOp) -> Result<()> {
        let request = match op {
            RangeOp::Unregister => request!(UFFDIO_UNREGISTER),
            RangeOp::Wake => request!(UFFDIO_WAKE),
        };
        let mut range = uffd_range(r);
        // SAFETY: UFFDIO_UNREGISTER and UFFDIO_WAKE each read one uffdio_range; the first changes
        // only VMA flags, the second only wakes waiters.
        unsafe { ioctl(&self.fd, request, &mut range) }
    }

    /// Write-protect (`protect = true`) or unprotect a registered range. Unprotecting wakes the
    /// threads that faulted on it unless `dontwake`.
    pub fn writeprotect(&self, r: RawRange, protect: bool, dontwake: bool) -> Result<()> {
        let mut mode = 0u64;
        if protect {
            mode |= 1u64 /* UFFDIO_WRITEPROTECT_MODE_WP */;
        }
        if dontwake {
            mode |= 2u64 /* UFFDIO_WRITEPROTECT_MODE_DONTWAKE */;
        }
        let mut wp = uapi::uffdio_writeprotect {
            range: uffd_range(r),
            mode,
        };
        // SAFETY: UFFDIO_WRITEPROTECT reads one uffdio_writeprotect; it changes only PTE write bits.
        unsafe { ioctl(&self.fd, request!(UFFDIO_WRITEPROTECT), &mut wp) }
    }

    /// Move the pages of `src` to `dst` (equal, page-aligned, `dst` registered and empty).
    ///
    /// Returns the bytes moved; on failure, how far it got and the errno, so that the caller can
    /// handle the offending page (`EBUSY`: pinned or shared; `EEXIST`: destination populated;
    /// `ENOENT`: hole in the source) and continue.
    ///
    /// # Safety
    ///
    /// The move replaces what `dst` shows with what `src` showed and leaves `src` empty (reading as
    /// zeros, or faulting to this userfaultfd if registered for missing pages). The caller must own
    /// both ranges for writing, or the move must be content-preserving from every reader's point of
    /// view (as when TCOW moves a page out and installs a copy in one handler step).
    pub unsafe fn move_pages(
        &self,
        dst: usize,
        src: usize,
        len: usize,
        allow_src_holes: bool,
        dontwake: bool,
    ) -> std::result::Result<usize, MoveError> {
        let mut done = 0usize;
        while done < len {
            let mut mode = 0;
            if allow_src_holes {
                mode |= MOVE_MODE_ALLOW_SRC_HOLES;
            }
            if dontwake {
                mode |= MOVE_MODE_DONTWAKE;
            }
            let mut mv = uapi::uffdio_move {
                dst: (dst + done) as u64,
                src: (src + done) as u64,
                len: (len - done) as u64,
                mode,
                move_: 0,
            };
            // SAFETY: UFFDIO_MOVE reads and writes one uffdio_move; the memory effect is the caller's contract.
            let r = unsafe { ioctl(&self.fd, (UFFDIO_MOVE, "UFFDIO_MOVE"), &mut mv) };
            let moved = if mv.move_ > 0 { mv.move_ as usize } else { 0 };
            done += moved;
            if let Err(e) = r {
                let errno = e.errno().unwrap_or(0);
                // EAGAIN included: it means the address space is changing (an unmap event is
                // pending delivery to *this* userfaultfd's reader), and retrying here from the
                // handler thread would wait for itself. Callers fall back (copy or sleep-on-write).
                return Err(MoveError { moved: done, errno });
            }
        }
        Ok(done)
    }

    /// Atomically install a copy of `src`'s bytes as new pages at the empty, registered `dst`.
    ///
    /// # Safety
    ///
    /// `dst` must be a registered range of this process whose pages are missing; `src` must be
    /// readable for `len` bytes.
    pub unsafe fn copy(&self, dst: usize, src: usize, len: usize, wp: bool) -> Result<usize> {
        let mut cp = uapi::uffdio_copy {
            dst: dst as u64,
            src: src as u64,
            len: len as u64,
            mode: if wp {
                uapi::UFFDIO_COPY_MODE_WP as u64
            } else {
                0
            },
            copy: 0,
        };
        // SAFETY: UFFDIO_COPY reads and writes one uffdio_copy; the memory effect is the caller's contract.
        unsafe { ioctl(&self.fd, request!(UFFDIO_COPY), &mut cp)? };
        Ok(cp.copy.max(0) as usize)
    }

    /// Map the zero page at the empty, registered `dst` (resolves a missing-page fault).
    pub fn zeropage(&self, r: RawRange) -> Result<()> {
        let mut z = uapi::uffdio_zeropage {
            range: uffd_range(r),
            mode: 0,
            zeropage: 0,
        };
        // SAFETY: UFFDIO_ZEROPAGE reads and writes one uffdio_zeropage and only fills missing
        // pages with zeros; it never replaces a page.
        unsafe { ioctl(&self.fd, request!(UFFDIO_ZEROPAGE), &mut z) }
    }

    /// Wake threads waiting on faults in a range.
    pub fn wake(&self, r: RawRange) -> Result<()> {
        self.range_ioctl(r, RangeOp::Wake)
    }

    /// Read pending events without blocking (empty when none).
    pub fn read_events(&self, out: &mut Vec<Event>) -> Result<()> {
        const N: usize = 32;
        let mut msgs: [std::mem::MaybeUninit<uapi::uffd_msg>; N] =
            [const { std::mem::MaybeUninit::uninit() }; N];
        let sz = std::mem::size_of::<uapi::uffd_msg>();
        // SAFETY: read() writes at most N*sz bytes into the array, which is that long.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), msgs.as_mut_ptr().cast(), N * sz) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EAGAIN) {
                return Ok(());
            }
            return Err(VmError::sys("read(userfaultfd)", e));
        }
        for m in msgs.iter().take(n as usize / sz) {
            // SAFETY: the kernel filled the first n/sz messages completely.
            let m = unsafe { m.assume_init_read() };
            out.push(decode(&m));
        }
        Ok(())
    }
}

fn decode(m: &uapi::uffd_msg) -> Event {
    let event = m.event as u32;
    // SAFETY: the union member read matches the event type, as the uAPI defines.
    unsafe {
        match event {
            uapi::UFFD_EVENT_PAGEFAULT => {
                let pf = m.arg.pagefault;
                let flags = pf.flags;
                Event::PageFault {
                    addr: pf.address as usize,
                    write: flags & uapi::UFFD_PAGEFAULT_FLAG_WRITE as u64 != 0,
                    wp: flags & uapi::UFFD_PAGEFAULT_FLAG_WP as u64 != 0,
                }
            }
            uapi::UFFD_EVENT_UNMAP => {
                let r = m.arg.remove;
                Event::Unmap {
                    start: r.start as usize,
                    end: r.end as usize,
                }
            }
            uapi::UFFD_EVENT_REMOVE => {
                let r = m.arg.remove;
                Event::Remove {
                    start: r.start as usize,
                    end: r.end as usize,
                }
            }
            uapi::UFFD_EVENT_REMAP => {
                let r = m.arg.remap;
                Event::Remap {
                    from: r.from as usize,
                    to: r.to as usize,
                    len: r.len as usize,
                }
            }
            other => Event::Other(other as u8),
        }
    }
}
