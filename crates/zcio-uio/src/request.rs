//! The request record (the paper's Table I): 64 bytes carrying everything a request needs, so
//! the layer keeps no per-connection state. Remote information (what the device does) and
//! local information (where the data goes and whom to tell) travel together; the completion
//! brings the same record back with its status filled in.
//!
//! | bytes | field | Table I |
//! |---|---|---|
//! | 0 | `opcode` | command |
//! | 1 | `flags` | arguments and flags |
//! | 2–3 | `handler` | notification handler |
//! | 4–7 | `target` | capability (a slot of the layer's file table) |
//! | 8–15 | `offset` | arguments |
//! | 16–23 | `buffer` | buffer (address) |
//! | 24–27 | `length` | length |
//! | 28–31 | `status` | return status |
//! | 32–39 | `argument` | request argument |
//! | 40–47 | `notify` | notification buffer (an application value returned with the record) |
//! | 48–51 | `context` | context ID (set by the layer: the issuing thread's notification queue) |
//! | 52–63 | reserved, zero | |

/// What a request does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Opcode {
    /// Read from the target into the buffer.
    Read = 1,
    /// Write the buffer to the target.
    Write = 2,
}

impl Opcode {
    /// The opcode of a raw byte, if it is one.
    pub fn from_raw(b: u8) -> Option<Opcode> {
        match b {
            1 => Some(Opcode::Read),
            2 => Some(Opcode::Write),
            _ => None,
        }
    }
}

/// A handler's name in a layer ([`crate::Uio::handler`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HandlerId(pub u16);

/// A target's name in a layer: its slot in the layer's file table (the capability).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Target(pub u32);

/// Flag: deliver the completion on a handler thread ([`crate::Uio::serve_handlers`]) instead
/// of the issuing thread, which then need not poll or wait for it (and may even have ended).
pub const ASYNC: u8 = 1;

/// Every flag defined.
pub const FLAGS: u8 = ASYNC;

/// Status of a request not completed yet.
pub const PENDING: i32 = i32::MIN;

/// The 64-byte request record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, align(64))]
pub struct Request {
    /// [`Opcode`] as a byte (a record from elsewhere may hold any byte).
    pub opcode: u8,
    /// Flags: [`ASYNC`] or none (any other bit is refused).
    pub flags: u8,
    /// The handler to call on completion.
    pub handler: u16,
    /// The target: a slot of the layer's file table.
    pub target: u32,
    /// Byte offset in the target.
    pub offset: u64,
    /// Address of the data in the application's buffer.
    pub buffer: u64,
    /// Bytes to transfer.
    pub length: u32,
    /// Bytes transferred, or a negative errno; [`PENDING`] until completion.
    pub status: i32,
    /// The application's argument for the handler.
    pub argument: u64,
    /// The application's notification value, returned with the record.
    pub notify: u64,
    /// The issuing thread's notification queue (set by the layer on submission).
    pub context: u32,
    /// Zero.
    pub reserved: [u8; 12],
}

/// Bytes of a record.
pub const RECORD: usize = 64;

const _: () = assert!(std::mem::size_of::<Request>() == RECORD);

impl Request {
    /// A request of `length` bytes at `offset` of `target`, on the buffer at `buffer`,
    /// completing to `handler` with `argument`.
    pub fn new(
        opcode: Opcode,
        target: Target,
        offset: u64,
        buffer: usize,
        length: u32,
        handler: HandlerId,
        argument: u64,
    ) -> Request {
        Request {
            opcode: opcode as u8,
            flags: 0,
            handler: handler.0,
            target: target.0,
            offset,
            buffer: buffer as u64,
            length,
            status: PENDING,
            argument,
            notify: 0,
            context: 0,
            reserved: [0; 12],
        }
    }

    /// The same request, its completion delivered on a handler thread ([`ASYNC`]).
    pub fn asynchronous(mut self) -> Request {
        self.flags |= ASYNC;
        self
    }

    /// Whether its completion goes to a handler thread ([`ASYNC`]).
    pub fn is_async(&self) -> bool {
        self.flags & ASYNC != 0
    }

    /// The record as its 64 bytes (little-endian fields, in the table's order).
    pub fn to_bytes(&self) -> [u8; RECORD] {
        let mut b = [0u8; RECORD];
        b[0] = self.opcode;
        b[1] = self.flags;
        b[2..4].copy_from_slice(&self.handler.to_le_bytes());
        b[4..8].copy_from_slice(&self.target.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.buffer.to_le_bytes());
        b[24..28].copy_from_slice(&self.length.to_le_bytes());
        b[28..32].copy_from_slice(&self.status.to_le_bytes());
        b[32..40].copy_from_slice(&self.argument.to_le_bytes());
        b[40..48].copy_from_slice(&self.notify.to_le_bytes());
        b[48..52].copy_from_slice(&self.context.to_le_bytes());
        b[52..64].copy_from_slice(&self.reserved);
        b
    }

    /// A record from its 64 bytes; any bytes make a record (the layer checks it on submission).
    pub fn from_bytes(b: &[u8; RECORD]) -> Request {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Request {
            opcode: b[0],
            flags: b[1],
            handler: u16_at(2),
            target: u32_at(4),
            offset: u64_at(8),
            buffer: u64_at(16),
            length: u32_at(24),
            status: u32_at(28) as i32,
            argument: u64_at(32),
            notify: u64_at(40),
            context: u32_at(48),
            reserved: b[52..64].try_into().expect("12 bytes"),
        }
    }
}
