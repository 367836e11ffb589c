//! Kernel I/O modules: files (buffered and `O_DIRECT`), pipes, and Unix, TCP and UDP sockets
//! (DESIGN.md §3).
//!
//! These modules complete an output inside the system call (the kernel copies the data into the
//! page cache or a socket buffer, or DMAs it for `O_DIRECT`), so output integrity holds for every
//! semantics without protecting pages; what differs is the copies zcio adds (copy semantics
//! copies into a system buffer first). Inputs use the same staging, swapping and region steps as
//! the memory network. `MSG_ZEROCOPY` is not used: on loopback the kernel copies anyway (it
//! reports `SO_EE_CODE_ZEROCOPY_COPIED`), which the path string says.

use crate::datagram::{Datagrams, UdpWindow};
use crate::error::{GenieError, Result};
use crate::passing::{BouncePool, InputBuffers, Source};
use crate::path::{DataPath, Write};
use crate::profile::Profile;
use crate::region::{Region, RegionCache, RegionState, mark};
use crate::semantics::{Accounting, Allocation, Fallback, InputBuffering, Semantics};
use crate::waits::{Wait, Waits};
use rustix::event::{PollFd, PollFlags};
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

/// The I/O modules.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ModuleKind {
    /// The memory network between two processes ([`crate::memnet`]).
    Memnet,
    /// A file (O_DIRECT where the buffer and file system allow).
    File,
    /// A Unix stream socket pair.
    Unix,
    /// A TCP connection over loopback.
    Tcp,
    /// UDP datagrams over loopback (messages cut into datagrams of at most 60 KiB).
    Udp,
    /// A pipe.
    Pipe,
}

impl ModuleKind {
    /// All modules.
    pub const ALL: [ModuleKind; 6] = [
        ModuleKind::Memnet,
        ModuleKind::File,
        ModuleKind::Unix,
        ModuleKind::Tcp,
        ModuleKind::Udp,
        ModuleKind::Pipe,
    ];

    /// Name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ModuleKind::Memnet => "memnet",
            ModuleKind::File => "file",
            ModuleKind::Unix => "unix",
            ModuleKind::Tcp => "tcp",
            ModuleKind::Udp => "udp",
            ModuleKind::Pipe => "pipe",
        }
    }
}

zcio_vm::display_by_name!(ModuleKind);

impl std::str::FromStr for ModuleKind {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        ModuleKind::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!("unknown module `{s}` (one of: memnet, file, unix, tcp, udp, pipe)")
            })
    }
}

/// `O_DIRECT` alignment of a file, from `statx(STATX_DIOALIGN)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirectAlign {
    /// Alignment of user buffers.
    pub mem: usize,
    /// Alignment of file offsets and lengths.
    pub offset: usize,
}

/// Probe `O_DIRECT` support for files at `path`: `Err(reason)` when unsupported.
pub fn direct_align(path: &Path) -> std::result::Result<DirectAlign, String> {
    use rustix::fs::{AtFlags, CWD, StatxFlags, statx};
    let st = statx(CWD, path, AtFlags::empty(), StatxFlags::DIOALIGN)
        .map_err(|e| format!("statx(STATX_DIOALIGN): {e}"))?;
    if st.stx_mask & StatxFlags::DIOALIGN.bits() == 0 || st.stx_dio_mem_align == 0 {
        return Err(format!(
            "the file system of {} does not support O_DIRECT",
            path.display()
        ));
    }
    Ok(DirectAlign {
        mem: st.stx_dio_mem_align as usize,
        offset: st.stx_dio_offset_align as usize,
    })
}

/// One end of a kernel I/O module: both directions for a file, one direction for sockets and
/// pipes (each side of [`pair`]).
pub struct StreamEnd {
    kind: ModuleKind,
    fd: OwnedFd,
    direct: Option<(OwnedFd, DirectAlign)>,
    direct_reason: Option<String>,
    write_pos: u64,
    read_pos: u64,
    pool: BouncePool,
    inputs: InputBuffers,
    /// Regions whose data went out, kept for reuse by inputs.
    pub regions: RegionCache,
    profile: Arc<Profile>,
    fallback: Fallback,
    next_ticket: u64,
    /// Why inputs are refused: an input failed partway through a message.
    broken_in: Option<String>,
    /// Why outputs are refused: an output failed partway through a message.
    broken_out: Option<String>,
    /// The UDP module's framing and credit window.
    udp: Option<Datagrams>,
    /// How the wait for a message's first bytes ends besides their arrival.
    waits: Waits,
}

zcio_vm::debug_summary!(StreamEnd, |s| kind: s.kind, direct: s.direct.is_some());

fn io_err(op: &'static str) -> impl Fn(std::io::Error) -> GenieError {
    move |e| GenieError::io(op, e)
}

/// A connected sender and receiver for a socket or pipe module.
pub fn pair(kind: ModuleKind) -> Result<(StreamEnd, StreamEnd)> {
    let (a, b) = pair_fds(kind)?;
    Ok((
        StreamEnd::new(kind, a, None, None).ready()?,
        StreamEnd::new(kind, b, None, None).ready()?,
    ))
}

/// The descriptors of a connected socket or pipe module: (sending end, receiving end), to hand
/// one of them to another process.
pub fn pair_fds(kind: ModuleKind) -> Result<(OwnedFd, OwnedFd)> {
    let (a, b): (OwnedFd, OwnedFd) = match kind {
        ModuleKind::Unix => {
            let (a, b) = std::os::unix::net::UnixStream::pair().map_err(io_err("socketpair"))?;
            (a.into(), b.into())
        }
        ModuleKind::Tcp => {
            let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(io_err("bind(tcp)"))?;
            let a = std::net::TcpStream::connect(l.local_addr().map_err(io_err("getsockname"))?)
                .map_err(io_err("connect(tcp)"))?;
            let (b, _) = l.accept().map_err(io_err("accept(tcp)"))?;
            a.set_nodelay(true).map_err(io_err("TCP_NODELAY"))?;
            (a.into(), b.into())
        }
        ModuleKind::Udp => {
            let a = std::net::UdpSocket::bind("127.0.0.1:0").map_err(io_err("bind(udp)"))?;
            let b = std::net::UdpSocket::bind("127.0.0.1:0").map_err(io_err("bind(udp)"))?;
            a.connect(b.local_addr().map_err(io_err("getsockname"))?)
                .map_err(io_err("connect(udp)"))?;
            b.connect(a.local_addr().map_err(io_err("getsockname"))?)
                .map_err(io_err("connect(udp)"))?;
            // Each end sizes its receive buffer when it is made (crate::datagram).
            (a.into(), b.into())
        }
        ModuleKind::Pipe => {
            let p = zcio_vm::wire::Pipe::new(zcio_vm::wire::pipe_max_size())?;
            (p.tx, p.rx)
        }
        ModuleKind::File | ModuleKind::Memnet => {
            return Err(GenieError::arg(
                "module",
                format!(
                    "{kind} is not a socket or pipe module (use StreamEnd::file or memnet::pair)"
                ),
            ));
        }
    };
    Ok((a, b))
}

/// Check that `fd` is the kind of descriptor `kind` works on.
fn check_kind(kind: ModuleKind, fd: &OwnedFd) -> Result<()> {
    use rustix::fs::FileType;
    use rustix::net::{AddressFamily, SocketType, sockopt};
    let st = rustix::fs::fstat(fd).map_err(|e| GenieError::io("fstat(descriptor)", e))?;
    let ft = FileType::from_raw_mode(st.st_mode);
    let socket = |family: &[AddressFamily], ty: SocketType| -> std::result::Result<(), String> {
        if ft != FileType::Socket {
            return Err(format!("a {ft:?}, not a socket"));
        }
        let t = sockopt::socket_type(fd).map_err(|e| e.to_string())?;
        let f = sockopt::socket_domain(fd).map_err(|e| e.to_string())?;
        if t != ty || !family.contains(&f) {
            let tn = match t {
                SocketType::STREAM => "stream".to_string(),
                SocketType::DGRAM => "datagram".to_string(),
                SocketType::SEQPACKET => "seqpacket".to_string(),
                other => format!("type {}", other.as_raw()),
            };
            let fam = match f {
                AddressFamily::UNIX => "Unix".to_string(),
                AddressFamily::INET => "IPv4".to_string(),
                AddressFamily::INET6 => "IPv6".to_string(),
                other => format!("family {}", other.as_raw()),
            };
            return Err(format!("a {fam} {tn} socket"));
        }
        Ok(())
    };
    let ip = [AddressFamily::INET, AddressFamily::INET6];
    let r = match kind {
        ModuleKind::Pipe if ft == FileType::Fifo => Ok(()),
        ModuleKind::Pipe => Err(format!("a {ft:?}, not a pipe")),
        ModuleKind::File if ft == FileType::RegularFile => Ok(()),
        ModuleKind::File => Err(format!("a {ft:?}, not a regular file")),
        ModuleKind::Unix => socket(&[AddressFamily::UNIX], SocketType::STREAM),
        ModuleKind::Tcp => socket(&ip, SocketType::STREAM),
        ModuleKind::Udp => socket(&ip, SocketType::DGRAM),
        ModuleKind::Memnet => Err("the memory network is joined with MemnetEndpoint::join".into()),
    };
    r.map_err(|what| {
        GenieError::arg(
            "fd",
            format!("the {kind} module needs its own kind of descriptor; this one is {what}"),
        )
    })
}

impl StreamEnd {
    fn new(
        kind: ModuleKind,
        fd: OwnedFd,
        direct: Option<(OwnedFd, DirectAlign)>,
        direct_reason: Option<String>,
    ) -> StreamEnd {
        StreamEnd {
            kind,
            fd,
            direct,
            direct_reason,
            write_pos: 0,
            read_pos: 0,
            pool: BouncePool::default(),
            inputs: InputBuffers::default(),
            regions: RegionCache::default(),
            profile: Profile::current(),
            fallback: Fallback::Allow,
            next_ticket: 1,
            broken_in: None,
            broken_out: None,
            udp: None,
            waits: Waits::default(),
        }
    }

    /// This end, with the UDP module's window set up where it is a UDP end.
    fn ready(mut self) -> Result<StreamEnd> {
        if self.kind == ModuleKind::Udp {
            self.udp = Some(Datagrams::new(self.fd.as_fd())?);
        }
        Ok(self)
    }

    /// Refuse every later input, for `e`: a layer above lost its place in the stream.
    pub(crate) fn break_input(&mut self, e: &GenieError) {
        self.broken_in = Some(e.to_string());
    }

    /// Wrap an existing descriptor (a socket or pipe end the caller set up). The descriptor
    /// must be of the module's kind: a pipe (FIFO) for `pipe`, a Unix stream socket for `unix`,
    /// a TCP (stream) or UDP (datagram) IP socket for `tcp` and `udp`, a regular file for `file`.
    pub fn from_fd(kind: ModuleKind, fd: OwnedFd) -> Result<StreamEnd> {
        check_kind(kind, &fd)?;
        StreamEnd::new(kind, fd, None, None).ready()
    }

    /// Open (create, truncate) a file for output and input. Outputs append from offset 0;
    /// inputs read from offset 0. `O_DIRECT` is used for aligned transfers where the file system
    /// supports it.
    pub fn file(path: &Path) -> Result<StreamEnd> {
        use rustix::fs::{Mode, OFlags, open};
        let flags = OFlags::RDWR | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC;
        let fd = open(path, flags, Mode::from_raw_mode(0o600))
            .map_err(|e| GenieError::io("open(file)", e))?;
        let (direct, reason) = match direct_align(path) {
            Ok(a) => match open(
                path,
                OFlags::RDWR | OFlags::DIRECT | OFlags::CLOEXEC,
                Mode::empty(),
            ) {
                Ok(d) => (Some((d, a)), None),
                Err(e) => (None, Some(format!("open(O_DIRECT): {e}"))),
            },
            Err(r) => (None, Some(r)),
        };
        Ok(StreamEnd::new(ModuleKind::File, fd, direct, reason))
    }

    /// The module.
    pub fn kind(&self) -> ModuleKind {
        self.kind
    }

    /// The receive window of a UDP end: its socket buffer, the datagrams its peer may send
    /// ahead, and why the buffer is smaller than zcio asked, if it is.
    pub fn udp_window(&self) -> Option<&UdpWindow> {
        self.udp.as_ref().map(Datagrams::window)
    }

    /// Messages a UDP end found lost on the way ([`GenieError::MessageLost`]); 0 elsewhere.
    pub fn lost_messages(&self) -> u64 {
        self.udp.as_ref().map_or(0, Datagrams::lost)
    }

    /// Why `O_DIRECT` is not in use, for a file module without it.
    pub fn direct_unavailable(&self) -> Option<&str> {
        self.direct_reason.as_deref()
    }

    /// Preferred alignment and length granularity of input buffers (paper 000, §5.2).
    pub fn preferred_alignment(&self) -> (usize, usize) {
        match &self.direct {
            Some((_, a)) => (
                a.mem.max(zcio_vm::page_size()),
                a.offset.max(zcio_vm::page_size()),
            ),
            None => (zcio_vm::page_size(), 1),
        }
    }

    /// Let the wait for a message's first bytes end after a time or at a signal ([`Waits`]);
    /// such an end takes nothing. (A file's input does not wait.)
    pub fn set_waits(&mut self, w: Waits) {
        self.waits = w;
    }

    /// Wait, as [`StreamEnd::set_waits`] allows, until the module has bytes to read (or its
    /// peer's end to report). The UDP module waits in its own reading, past the datagrams of
    /// its own protocol.
    fn wait_first_bytes(&self, w: Wait) -> Result<()> {
        if matches!(self.kind, ModuleKind::File | ModuleKind::Udp) || self.waits == Waits::default()
        {
            return Ok(());
        }
        loop {
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            w.poll(&mut fds, None, "waiting for a message")?;
            if !fds[0].revents().is_empty() {
                return Ok(());
            }
        }
    }

    /// Choose what happens when a semantics' mechanism cannot be used here ([`Fallback`]).
    pub fn set_fallback(&mut self, f: Fallback) {
        self.fallback = f;
    }

    /// Under [`Fallback::Refuse`], refuse a non-copy semantics on a path where the data would be
    /// copied in bulk anyway: a socket or pipe (the kernel copies; on loopback even
    /// `MSG_ZEROCOPY` sends are copied), or a file without `O_DIRECT` for this buffer.
    fn refuse_copying_path(&self, sem: Semantics, addr: usize, len: usize, pos: u64) -> Result<()> {
        if self.fallback == Fallback::Allow || sem == Semantics::Copy {
            return Ok(());
        }
        let reason = match self.kind {
            ModuleKind::File if self.direct_fits(addr, len, pos).is_some() => return Ok(()),
            ModuleKind::File => match &self.direct_reason {
                Some(r) => format!("O_DIRECT is unavailable ({r}): the page cache copies"),
                None => "the buffer, its length or the file offset is not aligned for O_DIRECT: the page cache would copy".to_string(),
            },
            ModuleKind::Pipe | ModuleKind::Unix => {
                "the kernel copies data written to pipes and Unix sockets".to_string()
            }
            ModuleKind::Tcp | ModuleKind::Udp => {
                let z = crate::zerocopy::loopback();
                format!(
                    "the kernel copies socket data here (MSG_ZEROCOPY probe on loopback: {})",
                    z.detail
                )
            }
            ModuleKind::Memnet => return Ok(()),
        };
        Err(GenieError::Unsupported {
            semantics: sem,
            module: self.kind.name(),
            reason,
        })
    }

    /// Use another calibration profile for this end's thresholds.
    pub fn set_profile(&mut self, p: Arc<Profile>) {
        self.profile = p;
    }

    fn check_len(len: usize) -> Result<()> {
        if len == 0 {
            return Err(GenieError::arg(
                "buf",
                "length 0: a transfer carries at least one byte",
            ));
        }
        if len > crate::memnet::MAX_MESSAGE {
            return Err(GenieError::arg(
                "buf",
                format!(
                    "length {len} exceeds the largest transfer, {} bytes",
                    crate::memnet::MAX_MESSAGE
                ),
            ));
        }
        Ok(())
    }

    fn direct_for(&self, buf: &[u8], pos: u64) -> Option<BorrowedFd<'_>> {
        self.direct_fits(buf.as_ptr() as usize, buf.len(), pos)
    }

    fn direct_fits(&self, addr: usize, len: usize, pos: u64) -> Option<BorrowedFd<'_>> {
        let (fd, a) = self.direct.as_ref()?;
        let ok = addr % a.mem == 0 && len % a.offset == 0 && pos as usize % a.offset == 0;
        ok.then(|| fd.as_fd())
    }

    /// Write all of `buf`; returns (kernel copied bytes, how it was written). A stream whose
    /// write failed partway (the receiver would find part of a message) refuses later outputs;
    /// a file's write offset does not move on a failure, so the next output writes there again.
    fn put(&mut self, buf: &[u8]) -> Result<(Option<u64>, Write)> {
        GenieError::refuse_broken(&self.broken_out, "output")?;
        let r = self.put_inner(buf);
        // A datagram module's messages are framed: the receiver finds a message cut short.
        if let Err(e) = &r
            && !matches!(self.kind, ModuleKind::File | ModuleKind::Udp)
        {
            self.broken_out = Some(e.to_string());
        }
        r
    }

    fn put_inner(&mut self, buf: &[u8]) -> Result<(Option<u64>, Write)> {
        let len = buf.len();
        match self.kind {
            ModuleKind::File => {
                let (fd, kernel, path) = match self.direct_for(buf, self.write_pos) {
                    Some(d) => (d, 0, Write::PwriteDirect),
                    None => {
                        let why = self
                            .direct_reason
                            .clone()
                            .unwrap_or_else(|| "buffer or length not aligned for O_DIRECT".into());
                        (self.fd.as_fd(), len as u64, Write::PwriteBuffered(why))
                    }
                };
                let mut off = 0;
                while off < len {
                    match rustix::io::pwrite(fd, &buf[off..], self.write_pos + off as u64) {
                        Ok(0) => {
                            return Err(GenieError::io("pwrite", std::io::ErrorKind::WriteZero));
                        }
                        Ok(n) => off += n,
                        Err(rustix::io::Errno::INTR) => {}
                        Err(e) => return Err(GenieError::io("pwrite", e)),
                    }
                }
                self.write_pos += len as u64;
                Ok((Some(kernel), path))
            }
            ModuleKind::Udp => {
                let udp = self.udp.as_mut().expect("a UDP end has its datagrams");
                udp.send_message(self.fd.as_fd(), buf)?;
                Ok((Some(len as u64), Write::SendUdp))
            }
            _ => {
                zcio_vm::wire::write_all(self.fd.as_fd(), buf)
                    .map_err(|e| GenieError::from_wire(e, "output"))?;
                let how = match self.kind {
                    ModuleKind::Tcp => Write::SendTcp,
                    ModuleKind::Unix => Write::SendUnix,
                    _ => Write::WritePipe,
                };
                Ok((Some(len as u64), how))
            }
        }
    }

    /// Output an application buffer under `sem`. Completes before returning.
    pub fn send(&mut self, sem: Semantics, buf: &[u8]) -> Result<Accounting> {
        Self::check_len(buf.len())?;
        if sem.allocation() == Allocation::System {
            return Err(GenieError::arg(
                "semantics",
                format!("{sem} passes regions: use send_region"),
            ));
        }
        self.refuse_copying_path(sem, buf.as_ptr() as usize, buf.len(), self.write_pos)?;
        let len = buf.len();
        if sem == Semantics::Copy {
            let mut b = self.pool.get(len)?;
            crate::breakdown::time(crate::breakdown::Op::Copyin, || {
                b.as_mut_slice()[..len].copy_from_slice(buf)
            });
            let r = self.put(&b.as_slice()[..len]);
            self.pool.put(b);
            let (kernel, path) = r?;
            return Ok(Accounting {
                granule: None,
                cpu_copied_bytes: len as u64,
                kernel_copied_bytes: kernel,
                swapped_bytes: 0,
                path: DataPath::Bounce(path),
            });
        }
        let (kernel, path) = self.put(buf)?;
        Ok(Accounting {
            granule: None,
            cpu_copied_bytes: 0,
            kernel_copied_bytes: kernel,
            swapped_bytes: 0,
            path: DataPath::Kernel(path),
        })
    }

    /// Output a region under a move-family semantics; the region is then deallocated (move) or
    /// cached for inputs (emulated move hidden, weak moves mapped).
    pub fn send_region(&mut self, sem: Semantics, mut region: Region) -> Result<Accounting> {
        if sem.allocation() != Allocation::System {
            return Err(GenieError::arg(
                "semantics",
                format!("{sem} passes application buffers: use send"),
            ));
        }
        self.refuse_copying_path(sem, region.range().addr, region.len(), self.write_pos)?;
        mark(&mut region, RegionState::MovingOut);
        let (kernel, path) = self.put(region.as_slice())?;
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        let unmapped = sem == Semantics::Move;
        if unmapped {
            drop(region);
        } else {
            self.regions.keep(region, sem, ticket)?;
            self.regions.completed(ticket);
        }
        Ok(Accounting {
            granule: None,
            cpu_copied_bytes: 0,
            kernel_copied_bytes: kernel,
            swapped_bytes: 0,
            path: DataPath::StreamRegionOut {
                write: path,
                unmapped,
            },
        })
    }

    /// Input exactly `buf.len()` bytes into the application buffer under `sem`.
    pub fn recv(
        &mut self,
        sem: Semantics,
        buf: &mut [u8],
        buffering: InputBuffering,
    ) -> Result<Accounting> {
        Self::check_len(buf.len())?;
        GenieError::refuse_broken(&self.broken_in, "input")?;
        crate::passing::check_writable(buf)?;
        self.refuse_copying_path(sem, buf.as_ptr() as usize, buf.len(), self.read_pos)?;
        let profile = self.profile.clone();
        let wait = self.waits.start();
        self.wait_first_bytes(wait)?;
        let (mut src, inputs) = self.source(wait);
        let acc = crate::breakdown::in_phase(crate::breakdown::Phase::Input, || {
            inputs.input_app(sem, buf, buffering, &mut src, &profile)
        });
        let (pos, touched) = (src.pos, src.touched);
        self.end_input(pos, touched, acc)
    }

    /// The module's input side from the current read offset, and the input buffers.
    fn source(&mut self, wait: Wait) -> (EndSource<'_>, &mut InputBuffers) {
        let mut src = EndSource::new(
            self.kind,
            &self.fd,
            &self.direct,
            self.udp.as_mut(),
            self.read_pos,
        );
        src.wait = wait;
        (src, &mut self.inputs)
    }

    /// The end of an input that read through `src`: the file offset moves on a success only
    /// (a failed input of a file consumes nothing: the next one reads the same bytes); a
    /// stream that failed after its read began has lost its place in the message and
    /// refuses every later input; a datagram module's messages are framed, so it goes on.
    fn end_input<T>(&mut self, pos: u64, touched: bool, r: Result<T>) -> Result<T> {
        match &r {
            Ok(_) => self.read_pos = pos,
            Err(e) if touched && !matches!(self.kind, ModuleKind::File | ModuleKind::Udp) => {
                self.broken_in = Some(e.to_string());
            }
            Err(_) => {}
        }
        r
    }

    /// Input `len` bytes into a system-allocated region (move family).
    pub fn recv_region(&mut self, sem: Semantics, len: usize) -> Result<(Region, Accounting)> {
        Self::check_len(len)?;
        if sem.allocation() != Allocation::System {
            return Err(GenieError::arg(
                "semantics",
                format!("{sem} fills application buffers: use recv"),
            ));
        }
        GenieError::refuse_broken(&self.broken_in, "input")?;
        // Regions are page-aligned: only the length and the file offset decide.
        self.refuse_copying_path(sem, 0, len, self.read_pos)?;
        let mut region = if sem == Semantics::Move {
            Region::alloc(len)?
        } else {
            self.regions.take(len, sem)?
        };
        let wait = self.waits.start();
        self.wait_first_bytes(wait)?;
        let (mut src, _) = self.source(wait);
        let r = src.read_exact(region.as_mut_slice());
        let (pos, touched, kernel) = (src.pos, src.touched, src.kernel_copies(len));
        self.end_input(pos, touched, r)?;
        mark(&mut region, RegionState::MovedIn);
        Ok((
            region,
            Accounting {
                granule: None,
                cpu_copied_bytes: 0,
                kernel_copied_bytes: kernel,
                swapped_bytes: 0,
                path: DataPath::RegionIn { huge: false },
            },
        ))
    }
}

struct EndSource<'a> {
    end_kind: ModuleKind,
    fd: BorrowedFd<'a>,
    direct: Option<(BorrowedFd<'a>, DirectAlign)>,
    pos: u64,
    direct_bytes: usize,
    /// Whether a read from the module began (a stream may then be partway through a message).
    touched: bool,
    udp: Option<&'a mut Datagrams>,
    /// The call's wait for its first bytes (the UDP module's).
    wait: Wait,
}

impl<'a> EndSource<'a> {
    /// The input side of the module `fd` (with its `O_DIRECT` descriptor, if any, or its
    /// datagrams' state), reading from `pos` on.
    fn new(
        kind: ModuleKind,
        fd: &'a OwnedFd,
        direct: &'a Option<(OwnedFd, DirectAlign)>,
        udp: Option<&'a mut Datagrams>,
        pos: u64,
    ) -> EndSource<'a> {
        EndSource {
            end_kind: kind,
            fd: fd.as_fd(),
            direct: direct.as_ref().map(|(f, a)| (f.as_fd(), *a)),
            pos,
            direct_bytes: 0,
            touched: false,
            udp,
            wait: Wait::FOREVER,
        }
    }
}

impl Source for EndSource<'_> {
    fn read_exact(&mut self, buf: &mut [u8]) -> Result<()> {
        let len = buf.len();
        self.touched = true;
        match self.end_kind {
            ModuleKind::File => {
                let fd = match self.direct {
                    Some((d, a))
                        if (buf.as_ptr() as usize) % a.mem == 0
                            && len % a.offset == 0
                            && self.pos as usize % a.offset == 0 =>
                    {
                        self.direct_bytes += len;
                        d
                    }
                    _ => self.fd,
                };
                let mut off = 0;
                while off < len {
                    match rustix::io::pread(fd, &mut buf[off..], self.pos + off as u64) {
                        Ok(0) => {
                            return Err(GenieError::Truncated {
                                expected: len,
                                got: off,
                            });
                        }
                        Ok(n) => off += n,
                        Err(rustix::io::Errno::INTR) => {}
                        Err(e) => return Err(GenieError::io("pread", e)),
                    }
                }
                self.pos += len as u64;
                Ok(())
            }
            ModuleKind::Udp => {
                let udp = self.udp.as_mut().expect("a UDP end has its datagrams");
                udp.recv_message(self.fd, buf, self.wait)
            }
            _ => zcio_vm::wire::read_exact(self.fd, buf)
                .map_err(|e| GenieError::from_wire(e, "input")),
        }
    }

    fn wait_whole(&mut self, _len: usize) -> Result<bool> {
        // Kernel socket buffers and files are not held whole here: use staging.
        Ok(false)
    }

    fn kernel_copies(&self, len: usize) -> Option<u64> {
        Some(len.saturating_sub(self.direct_bytes) as u64)
    }

    fn direct_ok(&self, buf: &[u8]) -> bool {
        match (self.end_kind, self.direct) {
            (ModuleKind::File, Some((_, a))) => {
                (buf.as_ptr() as usize) % a.mem == 0 && buf.len() % a.offset == 0
            }
            _ => true,
        }
    }
}

/// The module's descriptor: readable when input is there (or the peer has gone), for `poll`,
/// `epoll` or an async runtime's reactor.
impl std::os::fd::AsFd for StreamEnd {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The descriptor of [`std::os::fd::AsFd`], for reactors that take a raw one.
impl std::os::fd::AsRawFd for StreamEnd {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        std::os::fd::AsRawFd::as_raw_fd(&self.fd)
    }
}
