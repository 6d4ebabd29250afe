//! One virtio-blk request (virtio 1.2, 5.2.6): a 16-byte header the device reads, the data,
//! and a status byte the device writes last. Requests are served synchronously on the device
//! thread with positioned reads and writes on the disk file, as Firecracker's sync engine does.

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use virtio_bindings::bindings::virtio_blk::{
    VIRTIO_BLK_ID_BYTES, VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK, VIRTIO_BLK_S_UNSUPP, VIRTIO_BLK_T_FLUSH, VIRTIO_BLK_T_GET_ID,
    VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT,
};
use vm_memory::{ByteValued, GuestMemoryMmap, Le32, Le64};

use crate::devices::virtio::queue::{Chain, ChainShape};

pub const SECTOR_SIZE: u64 = 512;
/// Data moves between the disk and guest memory through a buffer of this size, so memory stays
/// bounded whatever length a request claims.
const COPY_CHUNK: usize = 128 << 10;

#[repr(C)]
#[derive(Clone, Copy, Default, Debug)]
struct Header {
    request_type: Le32,
    _reserved: Le32,
    sector: Le64,
}

// SAFETY: plain little-endian integers, no padding (4 + 4 + 8 bytes).
unsafe impl ByteValued for Header {}

/// A request the device cannot answer with a status byte: the chain has no room for it or no
/// header. The device treats it like a corrupt chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Malformed {
    NoHeader { readable: u32 },
    NoStatusByte,
    /// The chain changed under the device after it was checked.
    Memory,
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Malformed::NoHeader { readable } => write!(f, "request of {readable} readable bytes has no 16-byte header"),
            Malformed::NoStatusByte => write!(f, "request has no writable status byte"),
            Malformed::Memory => write!(f, "request buffers became unusable while in use"),
        }
    }
}

/// What a disk served: counters the device thread adds to and anyone may read (the benchmark
/// checks with them that a guest's reads reached the device rather than its page cache).
#[derive(Debug, Default)]
pub struct BlockMetrics {
    /// Bytes of successful IN requests.
    pub read_bytes: AtomicU64,
    /// Successful IN requests.
    pub reads: AtomicU64,
    /// Bytes of successful OUT requests.
    pub write_bytes: AtomicU64,
    /// Requests answered with IOERR or UNSUPP.
    pub errors: AtomicU64,
}

impl BlockMetrics {
    /// (read bytes, reads, write bytes, errors), each read on its own.
    pub fn snapshot(&self) -> (u64, u64, u64, u64) {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        (get(&self.read_bytes), get(&self.reads), get(&self.write_bytes), get(&self.errors))
    }
}

/// The disk a request runs against.
pub struct Disk {
    pub file: File,
    pub read_only: bool,
    /// Size in sectors; a partial last sector of the file is not part of the disk.
    pub sectors: u64,
    pub id: [u8; VIRTIO_BLK_ID_BYTES as usize],
    pub metrics: Arc<BlockMetrics>,
}

/// What an I/O failed on, for the status byte: a request the guest got wrong and one the host
/// could not carry out both answer IOERR, but the host's is worth a log line.
enum Failure {
    Guest,
    Host(io::Error),
}

impl Disk {
    /// Runs the request in `chain`; returns the number of bytes written into the chain (data
    /// and status), which goes into the used ring.
    pub fn execute(&self, mem: &GuestMemoryMmap, chain: Chain<'_>, shape: ChainShape) -> Result<u32, Malformed> {
        if shape.writable == 0 {
            return Err(Malformed::NoStatusByte);
        }
        if (shape.readable as usize) < std::mem::size_of::<Header>() {
            return Err(Malformed::NoHeader { readable: shape.readable });
        }
        let mut reader = chain.clone().reader(mem).map_err(|_| Malformed::Memory)?;
        let mut writer = chain.writer(mem).map_err(|_| Malformed::Memory)?;
        let mut status_part = writer.split_at(shape.writable as usize - 1).map_err(|_| Malformed::Memory)?;
        let header: Header = reader.read_obj().map_err(|_| Malformed::Memory)?;
        let sector = header.sector.to_native();
        let (status, data_written) = match header.request_type.to_native() {
            VIRTIO_BLK_T_IN => {
                let len = writer.available_bytes() as u64;
                match self.range(sector, len).and_then(|offset| self.read_into(offset, len, &mut writer)) {
                    Ok(()) => {
                        self.metrics.read_bytes.fetch_add(len, Ordering::Relaxed);
                        self.metrics.reads.fetch_add(1, Ordering::Relaxed);
                        (VIRTIO_BLK_S_OK, len as u32)
                    }
                    Err(failure) => (self.ioerr(failure, "read", sector), writer.bytes_written() as u32),
                }
            }
            VIRTIO_BLK_T_OUT if self.read_only => (VIRTIO_BLK_S_IOERR, 0),
            VIRTIO_BLK_T_OUT => {
                let len = reader.available_bytes() as u64;
                match self.range(sector, len).and_then(|offset| self.write_from(offset, len, &mut reader)) {
                    Ok(()) => {
                        self.metrics.write_bytes.fetch_add(len, Ordering::Relaxed);
                        (VIRTIO_BLK_S_OK, 0)
                    }
                    Err(failure) => (self.ioerr(failure, "write", sector), 0),
                }
            }
            VIRTIO_BLK_T_FLUSH if self.read_only => (VIRTIO_BLK_S_OK, 0),
            VIRTIO_BLK_T_FLUSH => match self.file.sync_data() {
                Ok(()) => (VIRTIO_BLK_S_OK, 0),
                Err(e) => (self.ioerr(Failure::Host(e), "flush", 0), 0),
            },
            VIRTIO_BLK_T_GET_ID => {
                let n = writer.available_bytes().min(self.id.len());
                match writer.write_all(&self.id[..n]) {
                    Ok(()) => (VIRTIO_BLK_S_OK, n as u32),
                    Err(_) => return Err(Malformed::Memory),
                }
            }
            _ => (VIRTIO_BLK_S_UNSUPP, 0),
        };
        if status != VIRTIO_BLK_S_OK {
            self.metrics.errors.fetch_add(1, Ordering::Relaxed);
        }
        status_part.write_all(&[status as u8]).map_err(|_| Malformed::Memory)?;
        Ok(data_written + 1)
    }

    /// The byte offset of `len` bytes from `sector`, if they are whole sectors inside the disk.
    fn range(&self, sector: u64, len: u64) -> Result<u64, Failure> {
        if len % SECTOR_SIZE != 0 {
            return Err(Failure::Guest);
        }
        let end = sector.checked_add(len / SECTOR_SIZE).ok_or(Failure::Guest)?;
        if end > self.sectors {
            return Err(Failure::Guest);
        }
        Ok(sector * SECTOR_SIZE)
    }

    fn read_into(&self, mut offset: u64, len: u64, writer: &mut impl Write) -> Result<(), Failure> {
        let mut buf = vec![0u8; COPY_CHUNK.min(len as usize)];
        let mut left = len;
        while left > 0 {
            let n = (left as usize).min(buf.len());
            self.file.read_exact_at(&mut buf[..n], offset).map_err(Failure::Host)?;
            writer.write_all(&buf[..n]).map_err(|_| Failure::Guest)?;
            offset += n as u64;
            left -= n as u64;
        }
        Ok(())
    }

    fn write_from(&self, mut offset: u64, len: u64, reader: &mut impl Read) -> Result<(), Failure> {
        let mut buf = vec![0u8; COPY_CHUNK.min(len as usize)];
        let mut left = len;
        while left > 0 {
            let n = (left as usize).min(buf.len());
            reader.read_exact(&mut buf[..n]).map_err(|_| Failure::Guest)?;
            self.file.write_all_at(&buf[..n], offset).map_err(Failure::Host)?;
            offset += n as u64;
            left -= n as u64;
        }
        Ok(())
    }

    fn ioerr(&self, failure: Failure, op: &str, sector: u64) -> u32 {
        if let Failure::Host(e) = failure {
            eprintln!("sandbox-vmm: virtio-blk: {op} at sector {sector}: {e}");
        }
        VIRTIO_BLK_S_IOERR
    }
}
