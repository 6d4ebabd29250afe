//! virtio-vsock packets (virtio 1.2, 5.10.6) as the muxer reads and writes them. The framing
//! over descriptor chains, including a header and its data in one descriptor (which Linux 6.2
//! and later, and 6.1.63 and later, send), is virtio-vsock's `VsockPacket`; the rules of what
//! a guest may send are here.

use std::fmt;

use virtio_vsock::packet::VsockPacket;

/// A packet in guest memory (`GuestMemoryMmap` has no dirty bitmap).
pub type Packet<'a> = VsockPacket<'a, ()>;

/// The host's CID: every connection's other end.
pub const HOST_CID: u64 = 2;
/// The guest's CID (the start configuration does not choose it: every sandbox is alone).
pub const GUEST_CID: u64 = 3;

pub const TYPE_STREAM: u16 = 1;

pub const OP_REQUEST: u16 = 1;
pub const OP_RESPONSE: u16 = 2;
pub const OP_RST: u16 = 3;
pub const OP_SHUTDOWN: u16 = 4;
pub const OP_RW: u16 = 5;
pub const OP_CREDIT_UPDATE: u16 = 6;
pub const OP_CREDIT_REQUEST: u16 = 7;

/// SHUTDOWN flags: the sender will receive no more, will send no more.
pub const SHUTDOWN_RCV: u32 = 1;
pub const SHUTDOWN_SEND: u32 = 2;

/// Largest data a packet carries either way (the Linux driver's VIRTIO_VSOCK_MAX_PKT_BUF_SIZE).
pub const MAX_PKT_DATA: u32 = 64 << 10;

/// Why a packet from the guest is refused. None of these breaks the device: the packet is
/// dropped, and answered with RST where there is a connection to reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not from the guest's CID or not to the host's: nothing else exists here.
    WrongCid { src: u64, dst: u64 },
    /// Only stream sockets are offered (no SEQPACKET feature).
    WrongType(u16),
    UnknownOp(u16),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Refusal::WrongCid { src, dst } => write!(f, "packet from CID {src} to CID {dst}"),
            Refusal::WrongType(t) => write!(f, "socket type {t} is not a stream"),
            Refusal::UnknownOp(op) => write!(f, "unknown operation {op}"),
        }
    }
}

/// Checks what a guest may send; the muxer then only sees stream packets between the two CIDs.
pub fn check_from_guest(pkt: &Packet<'_>) -> Result<(), Refusal> {
    if pkt.src_cid() != GUEST_CID || pkt.dst_cid() != HOST_CID {
        return Err(Refusal::WrongCid { src: pkt.src_cid(), dst: pkt.dst_cid() });
    }
    if pkt.type_() != TYPE_STREAM {
        return Err(Refusal::WrongType(pkt.type_()));
    }
    if !(OP_REQUEST..=OP_CREDIT_REQUEST).contains(&pkt.op()) {
        return Err(Refusal::UnknownOp(pkt.op()));
    }
    Ok(())
}

/// Fills the header of a packet for the guest from the host's port `src_port` to the guest's
/// `dst_port`, with the sender's credit (`buf_alloc`, `fwd_cnt`); `len` is its data length.
#[allow(clippy::too_many_arguments)]
pub fn set_header(pkt: &mut Packet<'_>, src_port: u32, dst_port: u32, op: u16, flags: u32, len: u32, buf_alloc: u32, fwd_cnt: u32) {
    pkt.set_src_cid(HOST_CID)
        .set_dst_cid(GUEST_CID)
        .set_src_port(src_port)
        .set_dst_port(dst_port)
        .set_type(TYPE_STREAM)
        .set_op(op)
        .set_flags(flags)
        .set_len(len)
        .set_buf_alloc(buf_alloc)
        .set_fwd_cnt(fwd_cnt);
}

/// Packets over host buffers, for the muxer's and the parser's tests.
#[cfg(test)]
pub mod testing {
    use super::*;
    use virtio_vsock::packet::PKT_HEADER_SIZE;

    /// A header and data buffer a test packet lives in.
    pub struct Buffers {
        pub header: [u8; PKT_HEADER_SIZE],
        pub data: Vec<u8>,
    }

    impl Buffers {
        pub fn new(data_len: usize) -> Self {
            Buffers { header: [0; PKT_HEADER_SIZE], data: vec![0; data_len] }
        }

        pub fn packet(&mut self) -> Packet<'_> {
            let data = if self.data.is_empty() { None } else { Some(&mut self.data[..]) };
            // SAFETY: both buffers outlive the packet, which borrows them mutably.
            unsafe { VsockPacket::new(&mut self.header, data) }.expect("a header-sized buffer")
        }
    }

    /// A packet from the guest's `src_port` to the host's `dst_port`.
    #[allow(clippy::too_many_arguments)]
    pub fn from_guest<'a>(b: &'a mut Buffers, src_port: u32, dst_port: u32, op: u16, flags: u32, data: &[u8], buf_alloc: u32, fwd_cnt: u32) -> Packet<'a> {
        b.data.truncate(0);
        b.data.extend_from_slice(data);
        let mut pkt = b.packet();
        pkt.set_src_cid(GUEST_CID)
            .set_dst_cid(HOST_CID)
            .set_src_port(src_port)
            .set_dst_port(dst_port)
            .set_type(TYPE_STREAM)
            .set_op(op)
            .set_flags(flags)
            .set_len(data.len() as u32)
            .set_buf_alloc(buf_alloc)
            .set_fwd_cnt(fwd_cnt);
        pkt
    }
}
